"""The `lab_hosts` fixture: N lab hosts (systemd-nspawn, real systemd + sshd) for one test session.

Usage::

    @pytest.mark.lab
    def test_something(lab_hosts: LabHosts) -> None:
        h1 = lab_hosts.names[0]                               # "h1"; lab_hosts.address("h1") == "10.213.0.11"
        lab_hosts.ssh(h1, "systemctl is-system-running")      # real ssh, strict host keys -> CompletedProcess
        lab_hosts.ssh(h1, ["cat", "/etc/hostname"])           # a list is shell-quoted for the remote shell
        lab_hosts.exec(h1, ["systemctl", "daemon-reload"])    # nsenter into the host, no ssh involved
        lab_hosts.copy_to(h1, Path("unit.service"), "/etc/systemd/system/unit.service")   # scp
        with lab_hosts.connect("10.213.0.11", 22) as sock:    # TCP from inside the lab network
            ...                                              # (wrap with ssl as usual)
        lab_hosts.reboot(h1)                                  # in-guest reboot, returns when running again

`ssh`/`exec` raise CalledProcessError on a non-zero exit unless `check=False`; output is text.
`lab_hosts.ssh_config` is the file for other SSH clients (`ssh -F`, asyncssh/paramiko via ProxyCommand).

The lab is session scoped and torn down in a finally, whatever happened; teardown then
verifies that no namespace, mount, cgroup or process of the lab is left (and fails if one is).
It has its own state dir and network namespace (`ks-test-<pytest pid>`), so it never touches a lab
the user brought up by hand or another test session's; stale ones from killed runs are removed first. Host count:
KUBESMITH_LAB_TEST_HOSTS (default 4: examples/lab.yaml's h1..h3, plus h4 that joins as a node in
test_join_lab). Skipped only when not root or systemd-nspawn is missing.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from kubesmith.lab import access, host, lifecycle, netns
from kubesmith.lab.config import LabConfig, LabHost
from kubesmith.lab.errors import quiet
from kubesmith.lab.procs import ProcessRecord

Command = str | Sequence[str]


@dataclass(frozen=True)
class LabHosts:
    """A running lab, as handed to tests (see the module docstring for examples)."""

    config: LabConfig
    hosts: tuple[LabHost, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts)

    @property
    def ssh_config(self) -> Path:
        return self.config.ssh_config

    def address(self, name: str) -> str:
        return next(h.address for h in self.hosts if h.name == name)

    def ssh(self, name: str, command: Command, *, check: bool = True, timeout: float = 120,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run command on host name over real ssh (a str goes to the remote shell as is)."""
        remote = command if isinstance(command, str) else shlex.join(command)
        return subprocess.run(access.ssh_argv(self.config, name, [remote]), input=input, capture_output=True,
                              text=True, timeout=timeout, check=check)

    def exec(self, name: str, command: Command, *, check: bool = True, timeout: float = 120,
             input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run command inside host name via nsenter (a str runs under `sh -c`)."""
        argv = ["sh", "-c", command] if isinstance(command, str) else list(command)
        return subprocess.run(access.exec_argv(self.config, name, argv), input=input, capture_output=True,
                              text=True, timeout=timeout, check=check)

    def copy_to(self, name: str, local_path: Path | str, remote_path: str) -> None:
        """scp a local file to remote_path on host name."""
        subprocess.run(access.scp_argv(self.config, name, str(local_path), remote_path), capture_output=True,
                       text=True, timeout=120, check=True)

    def connect(self, address: str, port: int, timeout: float = 10.0) -> socket.socket:
        """A TCP socket to address:port made from inside the lab network namespace."""
        return netns.connect(self.config.netns_path, address, port, timeout)

    def reboot(self, name: str) -> None:
        access.reboot(self.config, name, quiet)


DEFAULT_HOSTS = 4
TEST_STATE_ROOT = Path("/var/lib/kubesmith")
TEST_STATE_PREFIX = "test-lab-"


def lab_config_for_tests(tag: str = "") -> LabConfig:
    """A lab of this pytest process's own (several sessions may run at once on one machine):
    state dir and namespace carry our PID; the image cache is shared."""
    name = f"{os.getpid()}{'-' + tag if tag else ''}"
    return _test_config(name)


def _test_config(name: str) -> LabConfig:
    base = LabConfig.from_env()
    return LabConfig(state_dir=TEST_STATE_ROOT / f"{TEST_STATE_PREFIX}{name}", cache_dir=base.cache_dir,
                     netns=f"ks-test-{name}", boot_timeout=base.boot_timeout, nspawn_args=base.nspawn_args)


def remove_stale_test_labs() -> None:
    """Take down test labs whose pytest process is gone (killed runs); never another live session's."""
    for state_dir in TEST_STATE_ROOT.glob(f"{TEST_STATE_PREFIX}*"):
        name = state_dir.name.removeprefix(TEST_STATE_PREFIX)
        owner = name.partition("-")[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            lifecycle.down(_test_config(name), quiet)


def skip_unless_lab_possible() -> None:
    if os.geteuid() != 0:
        pytest.skip("lab hosts need root")
    if shutil.which("systemd-nspawn") is None:
        pytest.skip("lab hosts need systemd-nspawn (apt-get install systemd-container)")


@dataclass(frozen=True)
class Remains:
    """What a lab left behind after down: names of things, empty when clean."""

    items: tuple[str, ...]


def down_and_check(config: LabConfig, names: list[str], supervisors: list[ProcessRecord]) -> Remains:
    """down, then list every namespace, mount, cgroup, directory and process that survived it."""
    try:
        lifecycle.down(config, quiet)
    finally:
        left = lifecycle.leftovers(config, names)
        left += [f"process {p.pid}" for p in supervisors if p.alive()]
    return Remains(tuple(left))


def running_supervisors(config: LabConfig, names: Sequence[str]) -> list[ProcessRecord]:
    """The processes `up` started (supervisors; nspawn and the guests are their descendants)."""
    records = [host.supervisor(config, n) for n in names]
    records += [host.nspawn(config, n) for n in names]
    records += [host.leader(config, n) for n in names]
    return [r for r in records if r is not None]


@pytest.fixture(scope="session")
def lab_hosts() -> Iterator[LabHosts]:
    skip_unless_lab_possible()
    config = lab_config_for_tests()
    count = int(os.environ.get("KUBESMITH_LAB_TEST_HOSTS", str(DEFAULT_HOSTS)))
    remove_stale_test_labs()
    names = [h.name for h in config.hosts(count)]
    processes: list[ProcessRecord] = []
    try:
        hosts = lifecycle.up(config, count, quiet)
        processes = running_supervisors(config, names)
        yield LabHosts(config=config, hosts=hosts)
    finally:
        processes += running_supervisors(config, names)  # the leaders may have changed (reboots)
        remains = down_and_check(config, names, processes)
        assert not remains.items, f"lab down left: {remains.items}"
