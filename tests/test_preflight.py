"""Preflight: each check against a real fault made on this machine, and `--ignore-preflight`.

The host is this machine seen from a network namespace the module creates (its own addresses, its
own ports, and `net.ipv4.ip_forward` set to 0 by the fixture, which `run` must find and refuse; a new
namespace inherits the machine's value, 1 wherever containers run or the machine routes): every
`kubesmith run` here stops at preflight, so nothing starts. The observation is the real one
(`OBSERVE_COMMAND` in the namespace, or over a real sshd for the clock); the checks are evaluated on it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from k8s_support import OLDER_RELEASE, older_binaries
from k8s_support import real_binaries as find_real_binaries
from sshd_fixture import LocalSshd, start_sshd

from kubesmith.backends import preflight
from kubesmith.backends.apply import observed_plan
from kubesmith.ca.tokens import new_token
from kubesmith.cli import cli
from kubesmith.modules.pod_network import KERNEL_MODULES, SYSCTLS
from kubesmith.vocabulary.environment import (OBSERVE_COMMAND, OBSERVED_MODULES, OBSERVED_SYSCTLS, HostFacts, Sysctl,
                                        parse_facts, parse_observation)
from kubesmith.plan.evaluate import evaluate
from kubesmith.vocabulary.model import Plan
from kubesmith.spec.load import load_spec_file
from kubesmith.transport.ssh import SshOptions, SshTransport
from kubesmith.versions.registry import load_registry

CLI = [sys.executable, "-c", "import sys; from kubesmith.cli import main; sys.argv[0] = 'kubesmith'; main()"]
ADDRESS = "10.213.98.2"
HOST = "pf"
FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


@cache
def real_binaries() -> Path:
    return find_real_binaries()


@pytest.fixture(scope="module")
def netns() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespace, tmpfs, swap)")
    name = f"ks-pf-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        for args in (["link", "set", "lo", "up"], ["link", "add", "kspf0", "type", "bridge"],
                     ["addr", "add", f"{ADDRESS}/24", "dev", "kspf0"], ["link", "set", "kspf0", "up"]):
            subprocess.run(["ip", "-n", name, *args], check=True)
        subprocess.run(["ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv4.ip_forward=0"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)


def inside(netns: str, *argv: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nsenter", f"--net=/run/netns/{netns}", *argv], capture_output=True, text=True,
                          timeout=120, **kwargs)


def write_spec(directory: Path, address: str = ADDRESS, components: dict[str, Any] | None = None,
               hosts: list[dict[str, Any]] | None = None, ssh: dict[str, Any] | None = None,
               name: str = "cluster.yaml") -> Path:
    spec: dict[str, Any] = {"kubernetesVersion": "1.36.2",
                            "hosts": hosts or [{"name": HOST, "address": address,
                                                "roles": ["control-plane", "etcd", "node"]}]}
    if components:
        spec["components"] = components
    if ssh:
        spec["ssh"] = ssh
    path = directory / name
    path.write_text(yaml.safe_dump({"apiVersion": "kubesmith.io/v1alpha1", "kind": "Cluster",
                                    "metadata": {"name": "pf"}, "spec": spec}, sort_keys=False))
    return path


def observed(netns: str, spec: Path) -> Plan:
    """The plan for the host as the namespace shows it: the real observation, run there."""
    output = inside(netns, "sh", "-c", OBSERVE_COMMAND, check=True).stdout
    return evaluate(load_spec_file(spec).cluster, load_registry(), {HOST: parse_observation(output, time.time())})


def failures(plan: Plan, check: str, **inputs: Any) -> list[preflight.Failure]:
    found = preflight.evaluate(preflight.Inputs(plan, **inputs), [h.name for h in plan.hosts])
    return [failure for failure in found if failure.check == check]


@contextmanager
def listener(netns: str, port: int) -> Iterator[int]:
    """A real socket listening on `port` in the namespace; yields its pid."""
    process = subprocess.Popen(
        ["nsenter", f"--net=/run/netns/{netns}", sys.executable, "-c",
         f"import socket, sys; s = socket.socket(); s.bind(('0.0.0.0', {port})); s.listen(); print('ready', flush=True); "
         "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        yield process.pid
    finally:
        process.communicate(timeout=10)


@contextmanager
def small_tmpfs(where: Path, size: str = "16m") -> Iterator[Path]:
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "kspf", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def binaries_with_an_older(directory: Path, wrong: str = "kube-apiserver") -> Path:
    """The real binaries, but `wrong` is the previous release's real one."""
    directory.mkdir()
    for entry in real_binaries().iterdir():
        (directory / entry.name).symlink_to(entry)
    (directory / wrong).unlink()
    (directory / wrong).symlink_to(older_binaries() / wrong)
    (directory / wrong).chmod(0o755)
    return directory


def test_the_observation_reads_the_pod_networks_sysctls_and_modules() -> None:
    assert set(SYSCTLS) == set(OBSERVED_SYSCTLS) and set(KERNEL_MODULES) == set(OBSERVED_MODULES)


def test_a_port_held_by_another_process_fails_and_free_passes(netns: str, tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    with listener(netns, 6443) as pid:
        (failure,) = failures(observed(netns, spec), "ports")
    assert failure.host == HOST and "port 6443 (kube-apiserver)" in failure.problem
    assert f"pid {pid}" in failure.problem and "python" in failure.problem
    assert "spec.components.apiserver" in failure.fix
    assert failures(observed(netns, spec), "ports") == []


def test_a_port_held_by_the_components_own_unit_passes(tmp_path: Path) -> None:
    """A re-apply finds its own components listening: the unit in the listener's cgroup says whose."""
    plan = evaluate(load_spec_file(write_spec(tmp_path)).cluster, load_registry())
    seen = "listen=0.0.0.0:6443 users:((\"kube-apiserver\",pid=7,fd=3))\nunit=7 {unit}\n"
    for unit, expected in (("kube-apiserver.service", 0), ("nginx.service", 1)):
        facts = parse_facts(seen.format(unit=unit), 0.0)
        host = plan.hosts[0]
        found = preflight.CHECKS[0].evaluate(host, facts, preflight.Inputs(plan))
        assert len(found) == expected, (unit, found)
    assert "nginx.service" in found[0].problem


def observed_through_ss(tmp_path: Path, first: str, later: str) -> tuple[str, int]:
    """OBSERVE_COMMAND's output with a stand-in `ss` that answers `first` on its first call and `later`
    after, and how many times it was called. Why a stand-in: the races it shows (a unit restarting
    while or just after the real `ss` runs) happen only by chance, never on demand."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (bin_dir / "ss").write_text(
        "#!/bin/sh\n"
        f"echo x >> {calls}\n"
        f"if [ $(wc -l < {calls}) -eq 1 ]; then echo {shlex.quote(first)}; else echo {shlex.quote(later)}; fi\n")
    (bin_dir / "ss").chmod(0o755)
    output = subprocess.run(["sh", "-c", OBSERVE_COMMAND], capture_output=True, text=True, check=True,
                            env={"PATH": f"{bin_dir}:{os.environ['PATH']}"}).stdout
    return output, calls.read_text().count("x")


def test_a_listener_caught_without_its_process_is_listed_again(tmp_path: Path) -> None:
    """A unit restarting while `ss` runs shows its socket without its process (ss reads the processes
    first): root lists again rather than fail the port against "a process it may not see" (it failed a
    re-apply after a reboot once in CI)."""
    output, calls = observed_through_ss(tmp_path, "LISTEN 0 4096 *:6443 *:*",
                                        'LISTEN 0 4096 *:6443 *:* users:(("kube-apiserver",pid=1,fd=3))')
    assert calls == 2
    (seen,) = parse_facts(output, 0.0).listeners
    assert (seen.port, seen.process, seen.pid) == (6443, "kube-apiserver", 1)


def test_a_listener_whose_process_is_gone_before_its_unit_is_read_is_listed_again(tmp_path: Path) -> None:
    """A component restarting just after `ss` ran shows its port held by a pid that is gone before its
    unit is read: its own port would look held by a stranger (a converging apply right after a fault
    once failed so on kube-proxy's port). Root lists again and names the process that holds it now."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    held = 'LISTEN 0 4096 *:10256 *:* users:(("kube-proxy",pid={},fd=3))'
    output, calls = observed_through_ss(tmp_path, held.format(gone.pid), held.format(1))
    assert calls == 2
    (seen,) = parse_facts(output, 0.0).listeners
    assert (seen.port, seen.process, seen.pid) == (10256, "kube-proxy", 1)


def test_a_missing_tool_is_a_failure_not_a_silent_pass(tmp_path: Path) -> None:
    """Without `ss`, `ip` or `df` the host's ports, addresses or free space are unknown: say so."""
    plan = evaluate(load_spec_file(write_spec(tmp_path)).cluster, load_registry())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "awk", "sed", "grep", "sort", "cut", "cat", "date", "tail", "timeout", "ip"):  # no ss, no df
        (bin_dir / tool).symlink_to(subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True,
                                                   text=True, check=True).stdout.strip())
    output = subprocess.run([str(bin_dir / "sh"), "-c", OBSERVE_COMMAND], capture_output=True, text=True,
                            env={"PATH": str(bin_dir)}, check=True).stdout
    facts = parse_facts(output, 0.0)
    assert set(facts.missing) == {"ss", "df"} and not facts.listeners and not facts.free_space
    found = {check.name: check.evaluate(plan.hosts[0], facts, preflight.Inputs(plan)) for check in preflight.CHECKS}
    assert "`ss` is not installed" in found["ports"][0].problem and "iproute2" in found["ports"][0].fix
    assert "`df` is not installed" in found["disk-space"][0].problem
    assert all("not installed" not in finding.problem for finding in found["address"])  # ip is there


def test_swap_fails_where_the_kubelet_refuses_it(netns: str, tmp_path: Path) -> None:
    """A real swap file's line of /proc/swaps, the swap on only while the kernel writes it: swap is
    machine-wide, and the lab hosts of the suite's other workers share this kernel (their preflight
    refused their applies while a slow observation kept it on, as a kubelet of another test would refuse
    to start). The observation reads that line through a /proc/swaps bound over in its own mount namespace."""
    swapfile = tmp_path / "swap"
    subprocess.run(["dd", "if=/dev/zero", f"of={swapfile}", "bs=1M", "count=8", "status=none"], check=True)
    swapfile.chmod(0o600)
    subprocess.run(["mkswap", str(swapfile)], check=True, capture_output=True)
    default = write_spec(tmp_path)
    allowed = write_spec(tmp_path, components={"kubelet": {"extraConfig": {"failSwapOn": False}}}, name="swap.yaml")
    captured = subprocess.run(["sh", "-c", 'swapon "$1" || exit 99; cat /proc/swaps; swapoff "$1"', "sh",
                               str(swapfile)], capture_output=True, text=True)
    if captured.returncode == 99:
        pytest.skip(f"swapon is not permitted here: {captured.stderr.strip()}")
    try:
        assert captured.returncode == 0 and str(swapfile) in captured.stdout, captured.stdout + captured.stderr
    finally:
        subprocess.run(["swapoff", str(swapfile)], capture_output=True)  # when the shell's own swapoff failed
    swaps = tmp_path / "swaps"
    swaps.write_text(captured.stdout)
    observe = f'mount --bind "$1" /proc/swaps || exit 1; {OBSERVE_COMMAND}'
    output = inside(netns, "unshare", "--mount", "sh", "-c", observe, "sh", str(swaps), check=True).stdout
    environment = {HOST: parse_observation(output, time.time())}
    plans = [evaluate(load_spec_file(spec).cluster, load_registry(), environment) for spec in (default, allowed)]
    (failure,) = failures(plans[0], "swap")
    assert str(swapfile) in failure.problem and "failSwapOn" in failure.problem and "swapoff" in failure.fix
    assert failures(plans[1], "swap") == []


def test_run_needs_the_sysctls_set_already(netns: str, tmp_path: Path) -> None:
    """The namespace's ip_forward is 0 (the fixture sets it): `run` (which sets no sysctl) must refuse it."""
    spec = write_spec(tmp_path)
    (failure,) = failures(observed(netns, spec), "sysctls")
    assert "net.ipv4.ip_forward is 0, needs 1" in failure.problem
    assert "sysctl -w net.ipv4.ip_forward=1" in failure.fix
    inside(netns, "sysctl", "-qw", "net.ipv4.ip_forward=1", check=True)
    try:
        assert failures(observed(netns, spec), "sysctls") == []
    finally:
        inside(netns, "sysctl", "-qw", "net.ipv4.ip_forward=0", check=True)


def test_hosts_need_the_sysctls_settable(tmp_path: Path) -> None:
    """Where apply sets the sysctls itself (systemd hosts), a wrong value is fine if it can be written."""
    document = parse_observation("init=systemd\ncgroup=2\n", time.time())
    spec = load_spec_file(write_spec(tmp_path)).cluster
    cases = {
        "writable": ((Sysctl("net.ipv4.ip_forward", "0", True),), ("br_netfilter",), 0),
        "read-only": ((Sysctl("net.ipv4.ip_forward", "0", False),), ("br_netfilter",), 1),
        "no module": ((Sysctl("net.bridge.bridge-nf-call-iptables", None, False),), (), 1),
        "module loadable": ((Sysctl("net.bridge.bridge-nf-call-iptables", None, False),), ("br_netfilter",), 0),
    }
    for case, (sysctls, modules, expected) in cases.items():
        facts = HostFacts(sysctls=sysctls, modules=modules)
        plan = evaluate(spec, load_registry(), {HOST: document})
        found = preflight.CHECKS[2].evaluate(plan.hosts[0], facts, preflight.Inputs(plan))
        assert len(found) == expected, (case, found)


def test_cgroup_driver_and_version_follow_the_host(netns: str, tmp_path: Path) -> None:
    """This machine's init system and cgroup version, against settings that contradict them."""
    output = inside(netns, "sh", "-c", OBSERVE_COMMAND, check=True).stdout
    environment = parse_observation(output, time.time())
    other = "cgroupfs" if environment.cgroup_driver == "systemd" else "systemd"
    spec = write_spec(tmp_path, components={"kubelet": {"cgroupDriver": other,
                                                        "extraConfig": {"failCgroupV1": True}}})
    plan = evaluate(load_spec_file(spec).cluster, load_registry(), {HOST: environment})
    problems = [failure.problem for failure in failures(plan, "cgroups")]
    assert any(f"cgroupDriver is {other}" in problem for problem in problems), problems
    assert any("SystemdCgroup" in problem for problem in problems), problems  # containerd follows the host
    assert any("cgroup v1" in problem for problem in problems) == (environment.cgroup_version == 1), problems
    assert failures(observed(netns, write_spec(tmp_path)), "cgroups") == []


def test_an_address_the_host_does_not_have_fails(netns: str, tmp_path: Path) -> None:
    (failure,) = failures(observed(netns, write_spec(tmp_path, address="10.213.98.3")), "address")
    assert "10.213.98.3" in failure.problem and ADDRESS in failure.problem and "spec.hosts[0].address" in failure.fix
    assert failures(observed(netns, write_spec(tmp_path)), "address") == []


def test_too_little_space_under_the_data_directories_fails(netns: str, tmp_path: Path) -> None:
    plan = observed(netns, write_spec(tmp_path))
    with small_tmpfs(tmp_path / "small") as small:
        # the observation happens while the small file system is mounted; `run` puts data under its root
        plan = observed(netns, write_spec(tmp_path))
        (failure,) = failures(plan, "disk-space", place=lambda path: f"{small}{path}")
    assert f"on {small}" in failure.problem and f"{small}/var/lib/etcd" in failure.problem
    assert "MiB free" in failure.problem
    assert failures(plan, "disk-space", place=lambda path: f"{tmp_path}{path}") == []


def test_a_binary_of_another_release_fails(tmp_path: Path) -> None:
    plan = evaluate(load_spec_file(write_spec(tmp_path)).cluster, load_registry(),
                    {HOST: parse_observation("", time.time())})
    directory = binaries_with_an_older(tmp_path / "bin")
    paths = {entry.name: entry for entry in directory.iterdir()}
    problems = preflight.binary_problems(paths, plan, [HOST])
    assert list(problems) == ["kube-apiserver"] and OLDER_RELEASE in problems["kube-apiserver"]
    (failure,) = failures(plan, "binary-version", binary_problems=problems)
    assert failure.host == preflight.HERE and "kubesmith binaries fetch" in failure.fix
    assert preflight.binary_problems({e.name: e for e in real_binaries().iterdir()}, plan, [HOST]) == {}


@pytest.fixture(scope="module")
def late_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSshd]:
    """A real sshd whose sessions run ten minutes behind (libfaketime, preloaded for that key's sessions):
    the kernel's clock is shared by every process here, so only a faked clock can lag."""
    if not FAKETIME.exists():
        pytest.skip("needs Debian's faketime (.ci/install.sh)")
    options = f'environment="LD_PRELOAD={FAKETIME}",environment="FAKETIME=-10m"'
    with start_sshd(tmp_path_factory.mktemp("late-sshd"), "PermitUserEnvironment LD_PRELOAD,FAKETIME\n",
                    options) as sshd:
        yield sshd


NODE_ADDRESS = "198.51.100.8"  # a documentation address: w1 is this machine, reached through a relay
ELSEWHERE = "198.51.100.7"  # the control plane of these specs: never reached (see _relay_to)


def _node_spec(directory: Path, sshd: LocalSshd, components: dict[str, Any] | None = None) -> Path:
    """A cluster whose node w1 is this machine, reached over the given sshd (the control plane is elsewhere).
    A host's address may not be loopback, so w1 has an address of its own and the SSH config relays it to
    the local sshd, as a jump host would."""
    known_hosts, config = _relay_to(directory, sshd)
    return write_spec(directory, hosts=[{"name": "cp", "address": ELSEWHERE, "roles": ["control-plane", "etcd"]},
                                        {"name": "w1", "address": NODE_ADDRESS, "roles": ["node"]}],
                      components=components,
                      ssh={"port": sshd.port, "knownHostsFile": str(known_hosts), "configFile": str(config),
                           "identityFile": str(sshd.identity),
                           # cp is never reached: `apply --hosts w1` tries it once, not for 30 s
                           "connectRetrySeconds": 0})


def _relay_to(directory: Path, sshd: LocalSshd) -> tuple[Path, Path]:
    """known_hosts naming w1's address, and an SSH config whose ProxyCommand reaches the local sshd."""
    known_hosts = directory / "known_hosts"
    known_hosts.write_text(f"[{NODE_ADDRESS}]:{sshd.port} {sshd.host_key_pub.read_text()}")
    relay = ("import socket; from kubesmith.lab.proxy import relay; "
             "relay(socket.create_connection(('127.0.0.1', %p)), 0, 1)")
    config = directory / "ssh_config"
    # the control plane's address is never dialled: its "proxy" fails at once, so nothing leaves this machine
    config.write_text(f"Host {NODE_ADDRESS}\n  ProxyCommand {sys.executable} -c \"{relay}\"\n"
                      f"Host {ELSEWHERE}\n  ProxyCommand {shutil.which('false')}\n")
    return known_hosts, config


def _over_ssh(sshd: LocalSshd, spec: Path) -> Plan:
    known_hosts, config = _relay_to(spec.parent, sshd)
    options = SshOptions(port=sshd.port, known_hosts=known_hosts, identity_files=(sshd.identity,),
                         config_file=config)

    async def observe() -> Plan:
        async with SshTransport(options) as transport:
            return await observed_plan(transport, load_spec_file(spec).cluster, load_registry(), ["w1"])

    return asyncio.run(observe())


def test_a_host_whose_clock_is_behind_fails(late_sshd: LocalSshd, local_sshd: LocalSshd, tmp_path: Path) -> None:
    (failure,) = failures(_over_ssh(late_sshd, _node_spec(tmp_path, late_sshd)), "clock")
    assert failure.host == "w1" and " s behind this machine's" in failure.problem
    assert "not yet valid" in failure.problem and "ntp" in failure.fix.lower()
    seconds = int(failure.problem.split("clock is ")[1].split(" s ")[0])
    assert 590 <= seconds <= 610
    assert failures(_over_ssh(local_sshd, _node_spec(tmp_path, local_sshd)), "clock") == []


def test_apply_stops_at_preflight_and_changes_nothing(late_sshd: LocalSshd, tmp_path: Path) -> None:
    """`kubesmith apply` over SSH: a lagging clock and a port another process holds, reported together."""
    with listener_here() as (port, pid):
        spec = _node_spec(tmp_path, late_sshd, components={"kubelet": {"port": port}})
        result = subprocess.run([*CLI, "apply", str(spec), "--hosts", "w1", "--binaries", str(real_binaries()),
                                 "--state-dir", str(tmp_path / "state")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 6, result.stderr
    lines = result.stderr.splitlines()
    assert any(line.startswith("error: w1: clock: its clock is") for line in lines), lines
    assert any(line.startswith(f"error: w1: ports: port {port} (kubelet)") and f"pid {pid}" in line
               for line in lines), lines
    assert "nothing was changed" in lines[-1]
    assert not (tmp_path / "state").exists()


@contextmanager
def listener_here() -> Iterator[tuple[int, int]]:
    """A real listening socket of this process on a free port: (port, pid)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1], os.getpid()


def _run(netns: str, spec: Path, *extra: str, binaries: Path, state: Path) -> subprocess.CompletedProcess[str]:
    return inside(netns, *CLI, "run", str(spec), "--host", HOST, "--binaries", str(binaries), "--state-dir",
                  str(state), *extra)


def test_run_reports_every_failure_at_once_and_starts_nothing(netns: str, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, address="10.213.98.3")
    binaries = binaries_with_an_older(tmp_path / "bin")
    with listener(netns, 6443), small_tmpfs(tmp_path / "small") as small:
        result = _run(netns, spec, binaries=binaries, state=small / "state")
        assert not (small / "state").exists()  # nothing rendered, nothing started
    assert result.returncode == 6, result.stderr
    lines = result.stderr.splitlines()
    checks = [line.split(": ")[2] for line in lines[:-1]]
    assert sorted(checks) == ["address", "binary-version", "disk-space", "ports", "sysctls"], lines
    assert all(line.startswith(f"error: {HOST}: ") and "; fix: " in line for line in lines[:-1]), lines
    assert lines[-1] == "error: 5 preflight failures on 1 host; nothing was changed (skip a check with " \
                        "--ignore-preflight NAME)"


def test_ignore_preflight_skips_the_named_checks(netns: str, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, address="10.213.98.3")
    with listener(netns, 6443):
        result = _run(netns, spec, "--ignore-preflight", "ports, address", binaries=real_binaries(),
                      state=tmp_path / "state")
    assert result.returncode == 6, result.stderr
    checks = [line.split(": ")[2] for line in result.stderr.splitlines()[:-1]]
    assert checks == ["sysctls"], result.stderr  # still stops: ip_forward is 0 in the namespace
    assert not (tmp_path / "state").exists()


def test_join_checks_this_machine_before_it_asks_for_anything(tmp_path: Path) -> None:
    """`join --spec` on this machine: a node address that is not this machine's stops it before the
    CA is asked (nothing listens at the server given: getting that far would be another error)."""
    spec = write_spec(tmp_path, hosts=[{"name": "cp", "address": "198.51.100.7", "roles": ["control-plane", "etcd"]},
                                       {"name": "w9", "address": "198.51.100.9", "roles": ["node"]}])
    result = CliRunner().invoke(cli, ["join", "--server", "https://127.0.0.1:9", "--token", new_token(),
                                      "--ca-hash", "sha256:" + "0" * 64, "--node", "w9", str(spec),
                                      "--no-wait"])
    assert result.exit_code == 6, result.output
    assert "error: w9: address: 198.51.100.9 (the cluster file's address) is not an address" in result.output
    assert "nothing was changed" in result.output


def test_an_unknown_check_name_is_a_usage_error(tmp_path: Path) -> None:
    spec = str(write_spec(tmp_path))
    for arguments in (["run", spec, "--host", HOST], ["apply", spec], ["join", "--server", "https://127.0.0.1:1",
                                                                         "--token", "x", "--ca-hash", "sha256:00"]):
        result = CliRunner().invoke(cli, [*arguments, "--ignore-preflight", "ports,swapp"])
        assert result.exit_code == 2, result.output
        assert "unknown preflight check 'swapp'" in result.output and "disk-space" in result.output


def test_apply_help_lists_every_check() -> None:
    text = CliRunner().invoke(cli, ["apply", "--help"]).output
    for check in preflight.CHECKS:
        assert f"{check.name} " in text and check.what.split()[0] in text
