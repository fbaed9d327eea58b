"""`kubesmith run` on this machine, inside a network namespace the test creates.

A control plane needs an address other hosts and pods can reach, never loopback, and the
components' fixed ports must not meet anything else on the machine. So each test session gets its
own network namespace with one address and a default route on a bridge that leads nowhere, and
runs `kubesmith`, `kubectl` and `etcdctl` in it (`nsenter --net`: unlike `ip netns exec` it keeps
the machine's /sys, whose cgroup mounts the kubelet needs). The namespace, and every mount, cgroup
and process a run leaves, are checked for and removed in a finally.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s_support import real_binaries

CLI = [sys.executable, "-c", "import sys; from kubesmith.cli import main; sys.argv[0] = 'kubesmith'; main()"]
ADDRESS = "10.213.97.2"
NODE = "ks-node-a"  # differs from any machine's host name: the spec's name must win


@dataclass(frozen=True)
class Netns:
    name: str

    @property
    def enter(self) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.name}"]

    def run(self, *argv: str, timeout: float = 120, check: bool = False,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.enter, *argv], capture_output=True, text=True, timeout=timeout, check=check,
                              env=env)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture(scope="session")
def run_netns() -> Iterator[Netns]:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespace, kubelet)")
    netns = Netns(f"ks-run-{os.getpid()}")
    _ip("netns", "add", netns.name)
    try:
        _ip("-n", netns.name, "link", "set", "lo", "up")
        _ip("-n", netns.name, "link", "add", "ksbr0", "type", "bridge")
        _ip("-n", netns.name, "addr", "add", f"{ADDRESS}/24", "dev", "ksbr0")
        _ip("-n", netns.name, "link", "set", "ksbr0", "up")
        _ip("-n", netns.name, "route", "add", "default", "via", ADDRESS.rsplit(".", 1)[0] + ".1")
        # what a node's pod network needs and `kubesmith run` checks but never sets (as sysctl.d would on a host)
        netns.run("sysctl", "-qw", "net.ipv4.ip_forward=1", check=True)
        yield netns
    finally:
        _ip("netns", "del", netns.name)
    assert not Path(f"/run/netns/{netns.name}").exists()


def init_spec(netns: Netns, directory: Path, name: str = "single", images: tuple[Path, ...] = ()) -> Path:
    """`kubesmith init`'s spec for this machine (inside the namespace), its host renamed to NODE; `images`
    are archives every apply (and run) imports on the node."""
    result = netns.run(*CLI, "init", "--name", name, check=True)
    document = yaml.safe_load(result.stdout)
    (host,) = document["spec"]["hosts"]
    assert host["address"] == ADDRESS
    host["name"] = NODE
    if images:
        document["spec"]["components"] = {"containerRuntime": {"images": [str(path) for path in images]}}
    path = directory / "cluster.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def short_state_dirs() -> Iterator[Callable[[], Path]]:
    """New short state directories, removed at the end of the session. containerd's socket lives
    under the state directory, and unix socket paths are limited to 107 bytes: pytest's are too long."""
    made: list[Path] = []

    def make() -> Path:
        made.append(Path(tempfile.mkdtemp(prefix="ks", dir="/tmp")))
        return made[-1]

    try:
        yield make
    finally:
        for directory in made:
            shutil.rmtree(directory, ignore_errors=True)
            (directory.parent / f"{directory.name}.log").unlink(missing_ok=True)


@dataclass
class Run:
    netns: Netns
    spec: Path
    state: Path
    process: subprocess.Popen[str]
    log: Path

    @property
    def root(self) -> Path:
        return self.state / "run" / NODE / "root"

    def kubeconfig(self, name: str) -> Path:
        return self.root / "etc/kubernetes" / f"{name}.conf"

    def kubectl(self, kubeconfig: str, *args: str, check: bool = False,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return self.netns.run("kubectl", "--kubeconfig", str(self.kubeconfig(kubeconfig)), *args, check=check,
                              timeout=timeout)

    def status(self) -> tuple[int, dict[str, Any]]:
        result = self.netns.run(*CLI, "status", str(self.spec), "--state-dir", str(self.state), "-o", "json",
                                timeout=60)
        return result.returncode, json.loads(result.stdout) if result.stdout.strip() else {}

    def services(self) -> dict[str, dict[str, Any]]:
        """The supervisor's record of each child: pid, restarts, reloads."""
        return json.loads((self.state / "run" / NODE / "run.json").read_text())["services"]

    def pids(self) -> dict[str, int | None]:
        return {name: entry["pid"] for name, entry in self.services().items()}

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM and wait (the supervisor stops every child in reverse order); SIGKILL the group on timeout."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            return self.process.wait()


def start_run(netns: Netns, spec: Path, state: Path, *options: str, binaries: Path | None = None,
              env: dict[str, str] | None = None) -> Run:
    log = state.parent / f"{state.name}.log"
    process = subprocess.Popen(
        [*netns.enter, *CLI, "run", str(spec), "--host", NODE, "--binaries", str(binaries or real_binaries()),
         "--state-dir", str(state), *options],
        stdout=log.open("w"), stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})},
        start_new_session=True)
    return Run(netns, spec, state, process, log)


def leftovers(run: Run) -> list[str]:
    """What a stopped run must not leave: processes of its children, mounts under its root, pod cgroups."""
    found = [f"mount {line.split()[1]}" for line in Path("/proc/self/mounts").read_text().splitlines()
             if line.split()[1].startswith(str(run.state))]
    found += [f"cgroup {path}" for path in Path("/sys/fs/cgroup").glob("*/kubepods")]
    found += [f"cgroup {path}" for path in Path("/sys/fs/cgroup").glob("kubepods")]
    state_file = run.state / "run" / NODE / "run.json"
    if state_file.exists():
        found += [f"process {name} {pid}" for name, pid in run.pids().items() if pid and _alive(pid)]
    found += [f"process {entry.name} (containerd shim)" for entry in Path("/proc").glob("[0-9]*")
              if str(run.state) in _text(entry / "cmdline").replace("\0", " ") and "containerd-shim" in
              _text(entry / "cmdline")]
    links = run.netns.run("ip", "-o", "link", "show", check=True).stdout
    found += [f"link {line.split(':')[1].strip()}" for line in links.splitlines()
              if "veth" in line or ": cni0" in line]
    rules = run.netns.run("iptables-save", check=True).stdout
    found += [f"iptables {line}" for line in rules.splitlines() if "KUBE" in line or "CNI-" in line]
    return found


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
