"""Working with hosts of a running lab: status, exec, ssh, scp, reboot."""

from __future__ import annotations

import dataclasses
import subprocess
import time
from dataclasses import dataclass

from kubesmith.lab import host
from kubesmith.lab.config import LabConfig, LabHost
from kubesmith.lab.errors import LabError, NoLab, Progress
from kubesmith.lab.state import LabState


@dataclass(frozen=True, slots=True)
class HostStatus:
    name: str
    address: str
    state: str  # running, degraded, starting, booting, down, ...
    leader_pid: int | None


def lab_state(config: LabConfig) -> LabState:
    """The running lab as `up` recorded it, or a LabError saying there is none."""
    saved = LabState.load(config)
    if saved is None:
        raise NoLab(f"no lab is up (nothing in {config.state_dir}); run `kubesmith lab up N`")
    return saved


def resolve(config: LabConfig, name: str) -> tuple[LabConfig, LabHost]:
    """The lab config as brought up, and the host called name (or at that address)."""
    saved = lab_state(config)
    for lab_host in saved.hosts:
        if name in (lab_host.name, lab_host.address):
            return dataclasses.replace(config, netns=saved.netns, bridge=saved.bridge), lab_host
    raise LabError(f"no lab host {name!r}; hosts: {', '.join(h.name for h in saved.hosts)}")


def status(config: LabConfig) -> tuple[HostStatus, ...]:
    saved = lab_state(config)
    result = []
    for lab_host in saved.hosts:
        pid = host.leader(config, lab_host.name)
        result.append(HostStatus(name=lab_host.name, address=lab_host.address,
                                 state=host.system_state(config, lab_host.name),
                                 leader_pid=None if pid is None else pid.pid))
    return tuple(result)


def exec_argv(config: LabConfig, name: str, command: list[str]) -> list[str]:
    """argv that runs command inside host name (nsenter into its PID 1's namespaces)."""
    config, lab_host = resolve(config, name)
    pid = host.leader(config, lab_host.name)
    if pid is None:
        raise LabError(f"{lab_host.name} is not running (state {host.system_state(config, lab_host.name)})")
    return host.exec_argv(pid.pid, command or ["/bin/bash", "-l"])


def ssh_argv(config: LabConfig, name: str, command: list[str]) -> list[str]:
    """argv for the real ssh client with the lab's ssh_config (strict host-key checking)."""
    _, lab_host = resolve(config, name)
    return ["ssh", "-F", str(config.ssh_config), lab_host.name, *command]


def scp_argv(config: LabConfig, name: str, local: str, remote: str) -> list[str]:
    _, lab_host = resolve(config, name)
    return ["scp", "-q", "-F", str(config.ssh_config), local, f"{lab_host.name}:{remote}"]


def reboot(config: LabConfig, name: str, progress: Progress) -> str:
    """Reboot inside the host (nspawn exits 133, the supervisor boots it again); wait for the new boot."""
    config, lab_host = resolve(config, name)
    old = host.leader(config, lab_host.name)
    if old is None:
        raise LabError(f"{lab_host.name} is not running")
    started = time.monotonic()
    subprocess.run(host.exec_argv(old.pid, ["systemctl", "--no-block", "reboot"]), capture_output=True,
                   timeout=30, check=True)
    states = host.wait_running(config, [lab_host.name], config.boot_timeout, not_leader={lab_host.name: old.pid})
    progress(f"{lab_host.name}: {states[lab_host.name]} again after {time.monotonic() - started:.1f}s")
    return states[lab_host.name]
