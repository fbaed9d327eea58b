"""`kubesmith lab`: real hosts (systemd-nspawn + systemd + sshd) on a private network, and a clean down."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kubesmith.lab import cgroups, host, lifecycle
from kubesmith.lab.config import LabConfig
from kubesmith.lab.errors import LabNotPossible, quiet, require_tools
from kubesmith.lab.sshkeys import keygen, known_hosts_line
from conftest import kubesmith_process
from lab_fixture import LabHosts, down_and_check, lab_config_for_tests, running_supervisors, skip_unless_lab_possible

lab = pytest.mark.lab


@lab
def test_every_host_answers_ssh_with_its_own_name(lab_hosts: LabHosts) -> None:
    assert lab_hosts.names == tuple(f"h{i}" for i in range(1, len(lab_hosts.hosts) + 1))
    assert lab_hosts.names[:3] == ("h1", "h2", "h3")  # at least examples/lab.yaml's hosts
    config_text = lab_hosts.ssh_config.read_text()
    assert "StrictHostKeyChecking yes" in config_text and "GlobalKnownHostsFile /dev/null" in config_text
    for name in lab_hosts.names:
        result = lab_hosts.ssh(name, "hostname; systemctl is-system-running; ip -4 -br addr show host0")
        hostname, state, addresses = result.stdout.splitlines()
        assert hostname == name
        assert state in ("running", "degraded")
        assert f"{lab_hosts.address(name)}/24" in addresses


@lab
def test_hosts_reach_each_other_on_the_lab_network(lab_hosts: LabHosts) -> None:
    for source in lab_hosts.names:
        for target in lab_hosts.names:
            if target != source:
                lab_hosts.ssh(source, f"nc -z -w 5 {lab_hosts.address(target)} 22 && getent hosts {target}")


@lab
def test_wrong_host_key_is_refused(lab_hosts: LabHosts, tmp_path: Path) -> None:
    impostor = keygen(tmp_path / "impostor", "impostor")
    wrong = tmp_path / "known_hosts"
    wrong.write_text(known_hosts_line(lab_hosts.hosts[0], impostor) + "\n")
    result = subprocess.run(["ssh", "-F", str(lab_hosts.ssh_config), "-o", f"UserKnownHostsFile={wrong}",
                             "-o", "LogLevel=ERROR", "h1", "true"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 255
    assert "Host key verification failed" in result.stderr or "IDENTIFICATION HAS CHANGED" in result.stderr
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    unknown = subprocess.run(["ssh", "-F", str(lab_hosts.ssh_config), "-o", f"UserKnownHostsFile={empty}", "h2",
                              "true"], capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 255 and "Host key verification failed" in unknown.stderr


@lab
def test_exec_copy_and_connect(lab_hosts: LabHosts, tmp_path: Path) -> None:
    assert lab_hosts.exec("h2", ["hostname"]).stdout.strip() == "h2"
    payload = tmp_path / "payload.txt"
    payload.write_text("from the test\n")
    lab_hosts.copy_to("h2", payload, "/root/payload.txt")
    assert lab_hosts.exec("h2", "cat /root/payload.txt").stdout == "from the test\n"
    assert lab_hosts.ssh("h2", ["python3", "-c", "print(6 * 7)"]).stdout.strip() == "42"
    with lab_hosts.connect(lab_hosts.address("h1"), 22) as sock:
        assert sock.recv(64).startswith(b"SSH-2.0-")


@lab
def test_each_host_has_its_own_cgroup_in_every_hierarchy_and_may_write_to_it(lab_hosts: LabHosts) -> None:
    """Own cgroups keep hosts apart (nspawn --keep-unit would share /payload); writable controller
    mounts inside let runc run pods there (nspawn mounts them read-only)."""
    for name in lab_hosts.names:
        own = lab_hosts.config.cgroup_name(name)
        leader = host.leader(lab_hosts.config, name)
        assert leader is not None
        memberships = {line.split(":", 2)[1]: line.split(":", 2)[2]
                       for line in Path(f"/proc/{leader.pid}/cgroup").read_text().splitlines()}
        assert len(memberships) >= 2
        assert all(path.startswith(f"/{own}") for path in memberships.values()), (name, memberships)
        assert all(cgroup.is_dir() for cgroup in cgroups.host_cgroups(own))
        mounts = [line.split() for line in lab_hosts.exec(name, "cat /proc/self/mounts").stdout.splitlines()]
        hierarchies = [fields for fields in mounts if fields[2] in ("cgroup", "cgroup2")]
        assert hierarchies and all("rw" in fields[3].split(",") for fields in hierarchies), (name, hierarchies)


@lab
def test_down_leaves_nothing_and_is_idempotent() -> None:
    skip_unless_lab_possible()
    config = lab_config_for_tests("down-check")
    names = ["h1", "h2"]
    processes = []
    try:
        lifecycle.up(config, 2, quiet)
        processes = running_supervisors(config, names)
        assert len(processes) == 6  # supervisor, nspawn and systemd per host
        assert any(str(config.state_dir) in line for line in Path("/proc/self/mountinfo").read_text().splitlines())
    finally:
        remains = down_and_check(config, names, processes)
    assert remains.items == ()
    netns_list = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert config.netns not in netns_list.split()
    assert str(config.state_dir) not in Path("/proc/self/mountinfo").read_text()
    assert not [c for n in names for c in cgroups.host_cgroups(config.cgroup_name(n)) if c.exists()]
    assert not [p for p in processes if p.alive()]
    lifecycle.down(config, quiet)  # again: nothing to do, no error


def test_lab_commands_fail_with_one_line_when_no_lab_is_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBESMITH_LAB_STATE", str(tmp_path / "state"))
    for args in (["lab", "status"], ["lab", "ssh", "h1", "true"], ["lab", "exec", "h1", "true"]):
        result = kubesmith_process(*args)
        assert result.returncode != 0
        assert result.stderr.strip().splitlines() == [
            f"error: no lab is up (nothing in {tmp_path / 'state'}); run `kubesmith lab up N`"]


def test_missing_tool_names_the_apt_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(LabNotPossible, match=r"systemd-nspawn not found: install it with `apt-get install -y "
                                             r"systemd-container`"):
        require_tools(["systemd-nspawn"])


def test_config_from_env_overrides_paths() -> None:
    config = LabConfig.from_env({"KUBESMITH_LAB_STATE": "/s", "KUBESMITH_LAB_CACHE": "/c",
                                 "KUBESMITH_LAB_NETNS": "n"})
    assert (config.ssh_config, config.rootfs, config.netns_path) == (Path("/s/ssh_config"), Path("/c/rootfs"),
                                                                    Path("/run/netns/n"))
    assert config.hosts(2)[1].address == "10.213.0.12"


def test_a_rebuilt_image_leaves_the_old_one_to_labs_that_are_up(tmp_path: Path) -> None:
    """A changed package list rebuilds the cached image (the stamp holds the list); a lab that is up keeps
    its overlays' lower directory, so the old image moves aside and goes only once no lab uses the cache."""
    from kubesmith.lab import rootfs

    cache = tmp_path / "cache"
    (cache / "rootfs" / "etc").mkdir(parents=True)
    mounts = tmp_path / "mounts"
    mounts.write_text(f"h1 /x/h1/root overlay rw,lowerdir={cache}/rootfs,upperdir=/x/h1/upper 0 0\n")
    rootfs._retire(cache / "rootfs", mounts)
    [retired] = cache.glob("rootfs.old.*")
    assert (retired / "etc").is_dir() and not (cache / "rootfs").exists()
    (cache / "rootfs").mkdir()
    rootfs._retire(cache / "rootfs", mounts)
    assert len(list(cache.glob("rootfs.old.*"))) == 2  # a lab still runs from this cache: both kept
    mounts.write_text("")
    (cache / "rootfs").mkdir()
    rootfs._retire(cache / "rootfs", mounts)
    assert len(list(cache.glob("rootfs.old.*"))) == 1  # the earlier two went; the one just retired stays
    assert rootfs.wanted_stamp("bookworm")["packages"] == list(rootfs.PACKAGES)
    assert {"haproxy", "keepalived"} <= set(rootfs.PACKAGES)
