"""What a host is like underneath the plan: its init system, cgroup version and privileges.

Three settings depend on the machine rather than on the spec (measured with the real kubelet
1.36 and containerd 1.6): the cgroup driver must be `systemd` where systemd is PID 1 and
`cgroupfs` where it is not; a cgroup v1 host needs `failCgroupV1: false` or the kubelet refuses
to start; and where the runtime may not lower `oom_score_adj` (no CAP_SYS_RESOURCE) every pod
sandbox fails unless containerd restricts it. The plan takes these as observed facts (`run`
observes its own machine) and assumes an ordinary systemd host where nothing was observed.
"""

from __future__ import annotations

import socket
import subprocess
from dataclasses import dataclass
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


# What kubesmith reads of a host, as one shell command: over SSH on hosts (apply and the live plan,
# before kubesmith is installed there), and here by `run` and `join`. One `key=value` per line.
OBSERVE_COMMAND = (
    "if [ -d /run/systemd/system ]; then echo init=systemd; else echo init=none; fi; "  # sd_booted()
    "if [ -e /sys/fs/cgroup/cgroup.controllers ]; then echo cgroup=2; else echo cgroup=1; fi; "
    "sed -n 's/^CapBnd:[[:space:]]*/capbnd=/p' /proc/self/status; "
    "awk '$5 == \"/sys/fs/cgroup\" || $5 == \"/sys/fs/cgroup/memory\" {print \"mount\" $5 \"=\" $6}' "
    "/proc/self/mountinfo"
)


def parse_observation(text: str) -> HostEnvironment:
    """The environment OBSERVE_COMMAND's output describes (a line it lacks leaves the assumption)."""
    facts = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    version: Literal[1, 2] = 2 if facts.get("cgroup", "2") == "2" else 1
    controllers = facts.get("mount/sys/fs/cgroup" if version == 2 else "mount/sys/fs/cgroup/memory", "rw")
    capabilities = int(facts.get("capbnd", "ffffffffff"), 16)
    return HostEnvironment(init_system="systemd" if facts.get("init") == "systemd" else "none",
                           cgroup_version=version, can_lower_oom_score=bool(capabilities >> CAP_SYS_RESOURCE & 1),
                           cgroups_writable="ro" not in controllers.split(","), observed=True)


def observe_local() -> HostEnvironment:
    """This machine's environment (no privileges needed)."""
    result = subprocess.run(["sh", "-c", OBSERVE_COMMAND], capture_output=True, text=True, timeout=30, check=False)
    return parse_observation(result.stdout)


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
