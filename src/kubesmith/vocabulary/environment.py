"""What a host is like underneath the plan: its init system, cgroup version and privileges.

Three settings depend on the machine rather than on the spec (measured with the real kubelet
1.36 and containerd 1.6): the cgroup driver must be `systemd` where systemd is PID 1 and
`cgroupfs` where it is not; a cgroup v1 host needs `failCgroupV1: false` or the kubelet refuses
to start; and where the runtime may not lower `oom_score_adj` (no CAP_SYS_RESOURCE) every pod
sandbox fails unless containerd restricts it. The plan takes these as observed facts (`run`
observes its own machine) and assumes an ordinary systemd host where nothing was observed.

Data and pure functions only (the plan's vocabulary): the command that looks at a host, and the
parsing of its answer. Running it here is `kubesmith.node.observe`; over SSH, `backends.apply`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from kubesmith import layout

CAP_SYS_RESOURCE = 24
# What preflight (backends/preflight.py) reads besides: the pod network's sysctls and kernel modules
# (modules/pod_network.py SYSCTLS and KERNEL_MODULES; a test keeps the lists equal).
OBSERVED_SYSCTLS = ("net.ipv4.ip_forward", "net.bridge.bridge-nf-call-iptables")
OBSERVED_MODULES = ("br_netfilter",)
# The programs the hosts' components need from the distribution (preflight's `packages` check), as the
# modules' defaults name them; apply adds the paths the spec sets instead (`observe_command`). A bare
# name is looked up in systemd's PATH for units: containerd finds runc and its shim that way.
HOST_PROGRAMS = ("/usr/bin/containerd", "containerd-shim-runc-v2", "runc", "/usr/sbin/haproxy",
                 "/usr/sbin/keepalived", "/usr/bin/python3", "iptables", "nft")
CNI_DIRS = ("/usr/lib/cni", "/opt/cni/bin")  # Debian's and Fedora's package, and the upstream tarball's
HOST_PYTHON = layout.HOST_PYTHON
UNIT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # systemd's PATH for services


@dataclass(frozen=True, slots=True)
class Listener:
    """A TCP socket listening on the host, and who holds it (as far as the observer may see)."""

    port: int
    address: str
    process: str = ""  # command name; "" when the observer may not see it (not root)
    pid: int | None = None
    unit: str = ""  # the systemd unit whose cgroup holds the process ("kube-apiserver.service"), or ""


@dataclass(frozen=True, slots=True)
class Sysctl:
    name: str
    value: str | None  # None: the key does not exist (its kernel module is not loaded)
    writable: bool


@dataclass(frozen=True, slots=True)
class HostFacts:
    """What preflight checks against, from the same observation as the environment (no second look)."""

    listeners: tuple[Listener, ...] = ()
    addresses: tuple[str, ...] = ()
    swaps: tuple[str, ...] = ()  # active swap devices and files (/proc/swaps)
    sysctls: tuple[Sysctl, ...] = ()
    modules: tuple[str, ...] = ()  # of OBSERVED_MODULES: those loaded, built in or loadable
    free_space: tuple[tuple[str, int], ...] = ()  # (mount point, KiB available) of every file system
    clock_offset: float | None = None  # the host's clock minus this machine's, seconds; None: not read
    missing: tuple[str, ...] = ()  # tools the host lacks, so what they show is unknown (ip, ss, df)
    programs: tuple[tuple[str, str | None], ...] = ()  # (path or name looked for, where found; None: nowhere)
    cni_dirs: tuple[tuple[str, tuple[str, ...] | None], ...] = ()  # (directory, its files; None: no such directory)
    python: str | None = None  # HOST_PYTHON's version ("3.11"); None: not there (or not looked at)
    distribution: tuple[str, ...] = ()  # /etc/os-release's ID, then its ID_LIKE words

    def program(self, wanted: str) -> str | None | bool:
        """Where `wanted` (a path, or a name in a unit's PATH) was found; None: not there; False: not looked for."""
        return next((found for name, found in self.programs if name == wanted), False)

    def cni_files(self, directory: str) -> tuple[str, ...] | None | bool:
        """The files in a CNI plugin directory; None: no such directory; False: not looked at."""
        return next((files for name, files in self.cni_dirs if name == directory), False)

    def sysctl(self, name: str) -> Sysctl | None:
        return next((item for item in self.sysctls if item.name == name), None)

    def free_kib(self, path: str) -> tuple[str, int] | None:
        """(mount point, KiB available) of the file system that holds `path`, existing or not yet."""
        mounts = [(mount, free) for mount, free in self.free_space
                  if path == mount or path.startswith(mount.rstrip("/") + "/")]
        return max(mounts, key=lambda item: len(item[0]), default=None)


NO_FACTS = HostFacts()


@dataclass(frozen=True, slots=True)
class HostEnvironment:
    init_system: Literal["systemd", "none"] = "systemd"
    cgroup_version: Literal[1, 2] = 2
    can_lower_oom_score: bool = True  # CAP_SYS_RESOURCE: runc may set a lower oom_score_adj
    cgroups_writable: bool = True  # False in a container that mounts the cgroup controllers read-only
    observed: bool = False  # False: the defaults above are assumptions, nothing was looked at
    # what preflight checks; not part of the plan (compared, hashed, written) since it changes by the second
    facts: HostFacts = field(default=NO_FACTS, compare=False, metadata={"plan": False})

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
# before kubesmith is installed there), and on this machine by `run` and `join` (node/observe.py).
# One `key=value` per line; the lines after the first four are preflight's. The clock is read last,
# nearest to the answer's arrival.
_SYSCTL_PATHS = " ".join(name.replace(".", "/") for name in OBSERVED_SYSCTLS)
_BASE = (
    "if [ -d /run/systemd/system ]; then echo init=systemd; else echo init=none; fi; "  # sd_booted()
    "if [ -e /sys/fs/cgroup/cgroup.controllers ]; then echo cgroup=2; else echo cgroup=1; fi; "
    "sed -n 's/^CapBnd:[[:space:]]*/capbnd=/p' /proc/self/status; "
    "awk '$5 == \"/sys/fs/cgroup\" || $5 == \"/sys/fs/cgroup/memory\" {print \"mount\" $5 \"=\" $6}' "
    "/proc/self/mountinfo; "
    "for t in ip ss df; do command -v $t >/dev/null 2>&1 || echo missing=$t; done; "
    "ip -o addr show 2>/dev/null | awk '{print \"address=\" $4}'; "
    "awk 'NR > 1 {print \"swap=\" $1}' /proc/swaps 2>/dev/null; "
    f"for s in {_SYSCTL_PATHS}; do f=/proc/sys/$s; "
    "if [ -r $f ]; then w=ro; [ -w $f ] && w=rw; echo \"sysctl=$s $w $(cat $f)\"; else echo \"sysctl=$s -\"; fi; done; "
    f"for m in {' '.join(OBSERVED_MODULES)}; do "
    "if [ -d /sys/module/$m ] || modprobe -n -q $m 2>/dev/null; then echo module=$m; fi; done; "
    "timeout 10 df -Pk 2>/dev/null | awk 'NR > 1 {m = $6; for (i = 7; i <= NF; i++) m = m \" \" $i; "
    "print \"df=\" $4 \" \" m}'; "
    # one listing for both: a component restarting between two would show a pid without its unit
    "listening=$(ss -Htlnp 2>/dev/null); "
    "listed_pids() { printf '%s\\n' \"$listening\" | grep -o 'pid=[0-9]*' | sort -u | cut -d= -f2; }; "
    # ss reads the processes' sockets before it lists the sockets: a unit that restarts in between (a
    # component crash-looping after a reboot) shows a listener without its process, which root would
    # otherwise see; one that restarts just after shows a process that is gone before its unit is read,
    # and its own port would look held by a stranger. List again a few times before calling either unknown.
    "for n in 1 2 3 4 5; do settled=1; "
    "printf '%s\\n' \"$listening\" | awk 'NF && !/users:/ {f = 1} END {exit !f}' "
    "&& [ \"$(id -u 2>/dev/null)\" = 0 ] && settled=0; "
    "for p in $(listed_pids); do [ -d /proc/$p ] || settled=0; done; "
    "[ $settled = 1 ] && break; sleep 0.2; listening=$(ss -Htlnp 2>/dev/null); done; "
    "printf '%s\\n' \"$listening\" | awk 'NF {print \"listen=\" $4 \" \" $6}'; "
    "for p in $(listed_pids); do "
    "echo \"unit=$p $(grep -E '^[0-9]+:(name=systemd)?:' /proc/$p/cgroup 2>/dev/null "  # systemd's hierarchy
    "| grep -o '[^/]*[.]service' | tail -n 1)\"; done; "
)


def _packages_probe(programs: Iterable[str], cni_dirs: Iterable[str]) -> str:
    """The shell lines that find the distribution, each program and each CNI plugin directory: a few
    builtins and one start of the host's python3, in the same command as the rest (no round trip)."""
    names = " ".join(shlex.quote(name) for name in dict.fromkeys(programs))
    dirs = " ".join(shlex.quote(name) for name in dict.fromkeys(cni_dirs))
    return (
        "awk -F= '$1 == \"ID\" || $1 == \"ID_LIKE\" {gsub(/[\"\\047]/, \"\", $2); "
        "print \"os_\" tolower($1) \"=\" tolower($2)}' /etc/os-release 2>/dev/null; "
        f"for p in {names}; do f=$(PATH={UNIT_PATH} command -v \"$p\" 2>/dev/null) && [ -x \"$f\" ] || f=-; "
        "printf 'program=%s\\t%s\\n' \"$p\" \"$f\"; done; "
        f"for d in {dirs}; do if [ -d \"$d\" ]; then printf 'cni=%s\\t%s\\n' \"$d\" \"$(ls -1 \"$d\" 2>/dev/null "
        "| tr '\\n' ' ')\"; else printf 'cni=%s\\t-\\n' \"$d\"; fi; done; "
        f"[ -x {HOST_PYTHON} ] && {HOST_PYTHON} -I -S -c 'import sys; print(\"python3=%d.%d\" % sys.version_info[:2])' "
        "2>/dev/null; "
    )


def observe_command(programs: Iterable[str] = (), cni_dirs: Iterable[str] = ()) -> str:
    """OBSERVE_COMMAND that also looks for `programs` and into `cni_dirs` (the paths a spec sets
    where the modules' defaults are not what the host has)."""
    return (_BASE + _packages_probe((*HOST_PROGRAMS, *programs), (*CNI_DIRS, *cni_dirs))
            + "echo clock=$(date +%s.%N)")


OBSERVE_COMMAND = observe_command()


def parse_observation(text: str, received: float) -> HostEnvironment:
    """The environment OBSERVE_COMMAND's output describes (a line it lacks leaves the assumption).

    `received`: this machine's clock (`time.time()`) when the output arrived, for the clock offset."""
    facts = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    version: Literal[1, 2] = 2 if facts.get("cgroup", "2") == "2" else 1
    controllers = facts.get("mount/sys/fs/cgroup" if version == 2 else "mount/sys/fs/cgroup/memory", "rw")
    capabilities = int(facts.get("capbnd", "ffffffffff"), 16)
    return HostEnvironment(init_system="systemd" if facts.get("init") == "systemd" else "none",
                           cgroup_version=version, can_lower_oom_score=bool(capabilities >> CAP_SYS_RESOURCE & 1),
                           cgroups_writable="ro" not in controllers.split(","), observed=True,
                           facts=parse_facts(text, received))


_USERS = re.compile(r'\("([^"]*)",pid=(\d+)')


def parse_facts(text: str, received: float) -> HostFacts:
    """Preflight's lines of OBSERVE_COMMAND's output (several lines may share a key)."""
    lines = [tuple(line.split("=", 1)) for line in text.splitlines() if "=" in line]
    values = {key: [value for k, value in lines if k == key] for key in {key for key, _ in lines}}
    units = dict(value.partition(" ")[::2] for value in values.get("unit", ()))
    clock = values.get("clock", [""])[-1]
    return HostFacts(
        listeners=tuple(filter(None, (_listener(value, units) for value in values.get("listen", ())))),
        addresses=tuple(dict.fromkeys(value.split("/")[0] for value in values.get("address", ()))),
        swaps=tuple(values.get("swap", ())),
        sysctls=tuple(_sysctl(value) for value in values.get("sysctl", ())),
        modules=tuple(values.get("module", ())),
        free_space=tuple((mount, int(free)) for free, _, mount in (v.partition(" ") for v in values.get("df", ()))
                         if free.isdigit()),
        clock_offset=float(clock) - received if re.fullmatch(r"\d+(\.\d+)?", clock) else None,
        missing=tuple(values.get("missing", ())),
        programs=tuple((name, None if found in ("-", "") else found)
                       for name, _, found in (value.partition("\t") for value in values.get("program", ()))),
        cni_dirs=tuple((name, None if files == "-" else tuple(files.split()))
                       for name, _, files in (value.partition("\t") for value in values.get("cni", ()))),
        python=next((v for v in values.get("python3", ()) if re.fullmatch(r"\d+\.\d+", v)), None),
        distribution=tuple(word for key in ("os_id", "os_id_like") for value in values.get(key, ())
                           for word in value.split()))


def _listener(value: str, units: dict[str, str]) -> Listener | None:
    local, _, users = value.partition(" ")
    address, _, port = local.rpartition(":")
    if not port.isdigit():
        return None
    found = _USERS.search(users)
    pid = found.group(2) if found else None
    return Listener(int(port), address.strip("[]").split("%")[0], found.group(1) if found else "",
                    int(pid) if pid else None, units.get(pid, "") if pid else "")


def _sysctl(value: str) -> Sysctl:
    path, _, rest = value.partition(" ")
    mode, _, current = rest.partition(" ")
    return Sysctl(path.replace("/", "."), current.strip() if mode != "-" else None, mode == "rw")
