"""What a host is like underneath the plan: its init system, cgroup version and privileges.

Three settings depend on the machine rather than on the spec (measured with the real kubelet
1.36 and containerd 1.6): the cgroup driver must be `systemd` where systemd is PID 1 and
`cgroupfs` where it is not; a cgroup v1 host needs `failCgroupV1: false` or the kubelet refuses
to start; and where the runtime may not lower `oom_score_adj` (no CAP_SYS_RESOURCE) every pod
sandbox fails unless containerd restricts it. The plan takes these as observed facts (`run`
observes its own machine) and assumes an ordinary systemd host where nothing was observed.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

CAP_SYS_RESOURCE = 24


@dataclass(frozen=True, slots=True)
class HostEnvironment:
    init_system: Literal["systemd", "none"] = "systemd"
    cgroup_version: Literal[1, 2] = 2
    can_lower_oom_score: bool = True  # CAP_SYS_RESOURCE: runc may set a lower oom_score_adj
    cgroups_writable: bool = True  # False in a container that mounts the cgroup controllers read-only
    observed: bool = False  # False: the defaults above are assumptions, nothing was looked at

    @property
    def cgroup_driver(self) -> Literal["systemd", "cgroupfs"]:
        """The driver kubelet and containerd must share on this host."""
        return "systemd" if self.init_system == "systemd" else "cgroupfs"

    def describe(self) -> str:
        source = "observed" if self.observed else "assumed"
        oom = "" if self.can_lower_oom_score else ", no CAP_SYS_RESOURCE"
        cgroups = "" if self.cgroups_writable else ", read-only cgroups"
        return f"{source}: init {self.init_system}, cgroup v{self.cgroup_version}{oom}{cgroups}"


ASSUMED = HostEnvironment()


def observe_local(root: Path = Path("/")) -> HostEnvironment:
    """This machine's environment, read from /run, /sys and /proc (no privileges needed)."""
    systemd = (root / "run/systemd/system").is_dir()  # sd_booted(): systemd is PID 1
    mount = root / "sys/fs/cgroup"
    version = _cgroup_version(mount)
    return HostEnvironment(init_system="systemd" if systemd else "none", cgroup_version=version,
                           can_lower_oom_score=_has_capability(CAP_SYS_RESOURCE),
                           cgroups_writable=_writable(mount if version == 2 else mount / "memory"),
                           observed=True)


def _cgroup_version(mount: Path) -> Literal[1, 2]:
    return 2 if (mount / "cgroup.controllers").exists() else 1


def _writable(path: Path) -> bool:
    """Whether the file system at `path` is mounted read-write (a read-only mount refuses even root)."""
    try:
        return not os.statvfs(path).f_flag & os.ST_RDONLY
    except OSError:
        return False


def _has_capability(number: int) -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            return bool(int(line.split()[1], 16) >> number & 1)
    return os.geteuid() == 0


def local_host_name() -> str:
    """This machine's host name as a node name: the first label, lower case (names are DNS labels)."""
    return socket.gethostname().split(".")[0].lower()


def primary_address() -> str | None:
    """The source address of this machine's default route, or None without one.

    Connecting a UDP socket only asks the kernel for a route: no packet is sent."""
    for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            try:
                sock.connect((probe, 9))
            except OSError:
                continue
            return str(sock.getsockname()[0])
    return None
