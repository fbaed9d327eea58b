"""Preflight: before `apply`, `run` or `join` changes anything, is each host fit for its part?

The checks are data (a name, what it verifies, and a pure function of the host's plan and what was
seen of it); what was seen is the one observation the plan already makes of each host
(`plan.environment.OBSERVE_COMMAND`: over SSH for `apply`, here for `run` and `join`), so checking
costs no further round trip and every check is unit-testable with an observed value. All failures
of all hosts are reported together, each naming the host, the check, what is wrong and how to fix
it; `--ignore-preflight NAME,...` (or `all`) skips checks, as kubeadm's flag does.

The host name is not checked: the node's name is the spec's host name whatever the operating
system calls the machine (`--hostname-override`, see modules/kubelet.py), so a differing host name
breaks nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic.alias_generators import to_camel

from kubesmith import layout
from kubesmith.binaries import release_problems
from kubesmith.modules.container_runtime import CONFIG_PATH as CONTAINERD_CONFIG
from kubesmith.modules.pod_network import CNI_CONFIG, NETWORK_CONFIG
from kubesmith.node.network import NetworkSettings, sysctl_advice
from kubesmith.pki.issue import BACKDATE
from kubesmith.vocabulary.environment import HOST_PYTHON, HostFacts, Listener, observe_command
from kubesmith.vocabulary.model import HostPlan, Plan, Service

if TYPE_CHECKING:
    from kubesmith.spec.model import Cluster

MAX_CLOCK_OFFSET = 60.0  # seconds between a host's clock and this machine's
MIB = 1024
# free space each service's data directory needs, MiB: etcd's database (its default quota is 2 GiB,
# a new cluster's a few MiB), the kubelet's pods and logs, containerd's images (the kubelet evicts
# pods once its file system is 85-90% full); what is not listed keeps a few small files
MIN_FREE_MIB = {"etcd": 1024, "kubelet": 2048, "containerd": 4096}
MIN_FREE_DEFAULT_MIB = 64
KUBELET_CONFIG = layout.config_path("kubelet.yaml")
HERE = "this machine"  # where the binaries apply ships are checked
# The oldest python3 kubesmith's runtime on a host runs on: its own code uses dataclass(slots=True), and
# the dependencies it ships (click 8.2+, tenacity 9.1+, aiohttp 3.13+) have left 3.9 behind.
MIN_HOST_PYTHON = (3, 10)
# The distribution package of each program the hosts' components need (Debian's and Fedora's names agree)
PACKAGES = {"containerd": "containerd", "containerd-shim-runc-v2": "containerd", "runc": "runc",
            "haproxy": "haproxy", "keepalived": "keepalived", "python3": "python3", "iptables": "iptables",
            "nft": "nftables"}
CNI_PACKAGE = "containernetworking-plugins"
LOOPBACK_PLUGIN = "loopback"  # containerd runs it for every pod itself, whatever the network configuration
# Package managers by /etc/os-release's ID or ID_LIKE word, first match wins
INSTALLERS = (({"debian", "ubuntu"}, "apt-get install -y"), ({"fedora", "rhel", "centos"}, "dnf install -y"))


class PreflightError(Exception):
    """Some host is not fit for its part; `failures` says where and why. Nothing was changed."""

    def __init__(self, failures: Sequence[Failure]) -> None:
        super().__init__(f"{len(failures)} preflight check{'s' if len(failures) != 1 else ''} failed")
        self.failures = tuple(failures)


@dataclass(frozen=True, slots=True)
class Finding:
    problem: str
    fix: str
    where: str | None = None  # another place than the host (the binaries on this machine)


@dataclass(frozen=True, slots=True)
class Failure:
    host: str
    check: str
    problem: str
    fix: str

    def __str__(self) -> str:
        return f"{self.host}: {self.check}: {self.problem}; fix: {self.fix}"


@dataclass(frozen=True, slots=True)
class Inputs:
    """What the checks read besides each host's plan and facts."""

    plan: Plan
    binary_problems: Mapping[str, str] = field(default_factory=dict)  # by binary name (binaries.release_problems)
    binaries_where: str | None = HERE  # None: on each host itself (`run`, `join`, which run kubesmith there)
    place: Callable[[str], str] = str  # where a host path really is (`run` re-roots data directories)


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    what: str
    evaluate: Callable[[HostPlan, HostFacts, Inputs], list[Finding]]


def _ports(host: HostPlan, facts: HostFacts, inputs: Inputs) -> list[Finding]:
    """A port held by the service's own unit (a re-apply) is fine; anything else holds it against it."""
    if "ss" in facts.missing and any(service.ports for service in host.services):
        return [_unseen("ss", "which ports are taken", "iproute2", "ports")]
    found = []
    for service in host.services:
        for port in service.ports:
            holders = {(item.pid, item.process, item.unit): item for item in facts.listeners
                       if item.port == port and item.unit != f"{service.name}.service"}
            if holders:
                found.append(Finding(
                    f"port {port} ({service.name}) is held by {', '.join(map(_holder, holders.values()))}",
                    f"stop that, or give {service.name} another port (spec.components.{to_camel(service.component)})"))
    return found


def _unseen(tool: str, what: str, package: str, check: str) -> Finding:
    return Finding(f"cannot see {what}: `{tool}` is not installed", f"install {package} (or skip the check: "
                   f"--ignore-preflight {check})")


def _holder(listener: Listener) -> str:
    if not listener.process:
        return f"a process on {listener.address or '*'} this user may not see (root sees which)"
    unit = f", {listener.unit}" if listener.unit else ""
    return f"{listener.process} (pid {listener.pid}{unit})"


def _swap(host: HostPlan, facts: HostFacts, inputs: Inputs) -> list[Finding]:
    kubelet = _document(host, KUBELET_CONFIG)
    if kubelet is None or not facts.swaps or kubelet.get("failSwapOn", True) is False:
        return []
    return [Finding(f"swap is on ({', '.join(facts.swaps)}) and the kubelet refuses to start with swap "
                    "(failSwapOn)",
                    "`swapoff -a` and remove the swap from /etc/fstab, or let the kubelet run with it: "
                    "spec.components.kubelet.extraConfig: {failSwapOn: false}")]


def _sysctls(host: HostPlan, facts: HostFacts, inputs: Inputs) -> list[Finding]:
    """Where `network up` sets the sysctls itself (hosts: `--set-sysctls`, and sysctl.d) they must be
    settable; where it only checks them (`run`), they must hold already."""
    document = _document(host, NETWORK_CONFIG)
    if document is None:
        return []
    settings = NetworkSettings.from_document(document)
    network = next((s for s in host.services if s.name == "kubesmith-network"), None)
    sets_them = network is not None and "--set-sysctls" in network.argv
    wrong = [(name, seen, wanted) for name, wanted in settings.sysctls
             if (seen := facts.sysctl(name)) is not None and seen.value != wanted]
    if not sets_them:
        if not wrong:
            return []
        listed, fix = sysctl_advice([(name, seen.value, wanted) for name, seen, wanted in wrong], settings.modules)
        return [Finding(f"{listed}: pods need them, and `run` changes no setting of this machine", fix)]
    found = []
    unloadable = sorted(set(settings.modules) - set(facts.modules))
    missing = [name for name, seen, _ in wrong if seen.value is None]
    if missing and unloadable:
        found.append(Finding(f"{', '.join(missing)} does not exist and the kernel module {', '.join(unloadable)} "
                             "cannot be loaded", f"install the kernel's modules and kmod, so that "
                             f"`modprobe {' '.join(unloadable)}` works (or load it on the container's host)"))
    stuck = [(name, seen.value, wanted) for name, seen, wanted in wrong if seen.value is not None and not seen.writable]
    if stuck:
        listed, fix = sysctl_advice(stuck, ())
        found.append(Finding(f"{listed}, and /proc/sys is read-only here: apply cannot set them",
                             f"set them where this host's network is made (its container's host): {fix}"))
    return found


def _cgroups(host: HostPlan, facts: HostFacts, inputs: Inputs) -> list[Finding]:
    kubelet = _document(host, KUBELET_CONFIG)
    if kubelet is None:
        return []
    environment = host.environment
    found = []
    driver = kubelet.get("cgroupDriver", "cgroupfs")
    if driver != environment.cgroup_driver:
        init = "systemd is PID 1" if environment.init_system == "systemd" else "systemd is not running"
        found.append(Finding(f"the kubelet's cgroupDriver is {driver}, but {init} here: the host's needs "
                             f"{environment.cgroup_driver}",
                             "remove spec.components.kubelet.cgroupDriver (kubesmith picks the host's)"))
    containerd = _document(host, CONTAINERD_CONFIG)
    systemd_cgroup = _find_key(containerd, "SystemdCgroup") if containerd is not None else None
    if systemd_cgroup is not None and systemd_cgroup != (driver == "systemd"):
        found.append(Finding(f"containerd's SystemdCgroup is {str(systemd_cgroup).lower()} while the kubelet's "
                             f"cgroupDriver is {driver}: pods would not start",
                             "let both follow the host (remove the override from "
                             "spec.components.containerRuntime.extraConfig or kubelet.cgroupDriver)"))
    if environment.cgroup_version == 1 and kubelet.get("failCgroupV1", True) is not False:
        found.append(Finding("the host has cgroup v1 and the kubelet refuses it (failCgroupV1)",
                             "boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1), or drop the failCgroupV1 "
                             "override from spec.components.kubelet.extraConfig"))
    return found


def _address(host: HostPlan, facts: HostFacts, inputs: Inputs) -> list[Finding]:
    if "ip" in facts.missing:
        return [_unseen("ip", "the host's addresses", "iproute2", "address")]
    if not facts.addresses or host.address in facts.addresses:
        return []
    index = [h.name for h in inputs.plan.hosts].index(host.name)
    own = ", ".join(a for a in facts.addresses if not a.startswith(("127.", "::1", "fe80:"))) or "none but loopback"
    return [Finding(f"{host.address} (the cluster file's address) is not an address of this host (it has {own})",
                    f"set spec.hosts[{index}].address to one of its own addresses, or add {host.address} to "
                    "one of its interfaces")]


def _binary_version(host: HostPlan, facts: HostFacts, inputs: Inputs) -> list[Finding]:
    needed = {service.binary.rsplit("/", 1)[-1] for service in host.services}
    return [Finding(problem, f"use the {inputs.plan.kubernetes_version} release's binaries "
                             "(`kubesmith binaries fetch`), or change spec.kubernetesVersion", inputs.binaries_where)
            for name, problem in sorted(inputs.binary_problems.items()) if name in needed]


def _disk_space(host: HostPlan, facts: HostFacts, inputs: Inputs) -> list[Finding]:
    """Each file system must hold what the data directories on it need together."""
    if "df" in facts.missing:
        return [_unseen("df", "the free space", "coreutils", "disk-space")]
    needs: dict[str, list[tuple[str, int]]] = {}
    free: dict[str, int] = {}
    for service in host.services:
        if not service.state_directory:
            continue
        path = inputs.place(service.state_directory)
        seen = facts.free_kib(path)
        if seen is None:
            continue
        mount, available = seen
        free[mount] = available
        needs.setdefault(mount, []).append((path, MIN_FREE_MIB.get(service.name, MIN_FREE_DEFAULT_MIB)))
    found = []
    for mount, wanted in needs.items():
        total = sum(mib for _, mib in wanted)
        if free[mount] < total * MIB:
            paths = ", ".join(path for path, _ in wanted)
            found.append(Finding(f"{free[mount] // MIB} MiB free on {mount}, which holds {paths}: they need "
                                 f"{total} MiB", f"free space on {mount}, or move the data directories to a "
                                 "larger file system (the components' dataDir/rootDir options)"))
    return found


def _clock(host: HostPlan, facts: HostFacts, inputs: Inputs) -> list[Finding]:
    offset = facts.clock_offset
    if offset is None or abs(offset) <= MAX_CLOCK_OFFSET:
        return []
    side = "behind" if offset < 0 else "ahead of"
    why = (f": certificates issued here (valid from {BACKDATE.seconds // 60} minutes before their issue) are "
           "not yet valid there" if -offset > BACKDATE.total_seconds() else
           ": certificates, tokens and leader leases assume one time")
    return [Finding(f"its clock is {abs(offset):.0f} s {side} this machine's (at most {MAX_CLOCK_OFFSET:.0f} s)"
                    f"{why}", "synchronise both clocks (`timedatectl set-ntp true`, chrony or systemd-timesyncd)")]


@dataclass(frozen=True, slots=True)
class Missing:
    """A program a host's component needs and lacks: what to call it, and the package that has it."""

    program: str  # as the problem names it: a path, a name, or "CNI plugins bridge, portmap in /usr/lib/cni"
    package: str


def _packages(host: HostPlan, facts: HostFacts, inputs: Inputs) -> list[Finding]:
    """The distribution's programs the host's components run (apply does not ship them), all missing
    ones in one finding whose fix installs them; and CNI plugins in another directory than configured."""
    needed = needed_programs(host, inputs)
    missing = [item for program, package in needed if (item := _missing_program(program, package, facts)) is not None]
    found = []
    cni = _cni_plugins(host, facts)
    if isinstance(cni, Finding):
        found.append(cni)
    elif cni is not None:
        missing.append(cni)
    if missing:
        found.insert(0, Finding(f"not installed: {', '.join(item.program for item in missing)}",
                                install_command(facts.distribution, missing)))
    old = _old_python(facts) if any(program == HOST_PYTHON for program, _ in needed) else None
    return found + ([old] if old else [])


def needed_programs(host: HostPlan, inputs: Inputs) -> list[tuple[str, str]]:
    """(path or name, package) of what the host's services run from the distribution: a binary given by
    its absolute path, runc and containerd's shim beside containerd, python3 where kubesmith's runtime
    is shipped to (`run` and `join` already run kubesmith where they check)."""
    needed: dict[str, str] = {}
    for service in host.services:
        if service.binary.startswith("/"):
            name = service.binary.rsplit("/", 1)[-1]
            needed[service.binary] = PACKAGES.get(name, name)
        if service.name == "containerd":
            needed.update({"runc": "runc", "containerd-shim-runc-v2": "containerd"})
        if service.name in ("kube-proxy", "kubesmith-network"):  # service rules; pods' masquerading
            tool = "nft" if _proxy_mode(host, service) == "nftables" else "iptables"
            needed[tool] = PACKAGES[tool]
        if service.binary == "kubesmith" and inputs.binaries_where is not None:
            needed[HOST_PYTHON] = "python3"
    return list(needed.items())


def _proxy_mode(host: HostPlan, service: Service) -> str:
    """kube-proxy's mode from its configuration file (the network unit masquerades with iptables)."""
    document = _document(host, service.flags.get("config", "")) if service.name == "kube-proxy" else None
    mode = document.get("mode") if document else None
    return mode if isinstance(mode, str) else "iptables"


def _missing_program(program: str, package: str, facts: HostFacts) -> Missing | None:
    """None when found, or when the observation did not look for it (nothing known, nothing claimed)."""
    return Missing(program, package) if facts.program(program) is None else None


def _cni_plugins(host: HostPlan, facts: HostFacts) -> Missing | Finding | None:
    """The CNI plugins containerd will look for in its configured directory: missing there (and in no
    other directory either: the package), or found only in another directory (the option)."""
    containerd = _document(host, CONTAINERD_CONFIG)
    directory = _find_key(containerd, "bin_dir") if containerd is not None else None
    if not isinstance(directory, str):
        return None
    network = _document(host, CNI_CONFIG) or {}
    wanted = sorted({LOOPBACK_PLUGIN, *(plugin.get("type") for plugin in network.get("plugins", ())
                                        if isinstance(plugin, dict) and isinstance(plugin.get("type"), str))})
    files = facts.cni_files(directory)
    if files is False:
        return None
    lacking = [name for name in wanted if name not in (files or ())]
    if not lacking:
        return None
    elsewhere = next((name for name, others in facts.cni_dirs
                      if name != directory and others and set(wanted) <= set(others)), None)
    if elsewhere is not None:
        return Finding(f"the CNI plugins are in {elsewhere}, not in {directory} where containerd looks",
                       f"set spec.components.containerRuntime.cniBinDir: {elsewhere}")
    return Missing(f"CNI plugins {', '.join(lacking)} in {directory}", CNI_PACKAGE)


def _old_python(facts: HostFacts) -> Finding | None:
    """HOST_PYTHON older than the runtime runs on (None: new enough, or its version not read)."""
    if facts.python is None:
        return None
    version = tuple(int(part) for part in facts.python.split("."))
    if version >= MIN_HOST_PYTHON:
        return None
    least = ".".join(map(str, MIN_HOST_PYTHON))
    return Finding(f"{HOST_PYTHON} is Python {facts.python}; kubesmith's runtime needs {least} or newer",
                   f"install python3 {least} or newer as {HOST_PYTHON} (Debian 12 and Ubuntu 22.04 have it, "
                   "as do later releases)")


def install_command(distribution: Sequence[str], missing: Sequence[Missing]) -> str:
    """The command that installs every missing package on this distribution (os-release's ID first,
    then ID_LIKE), or the programs to install where its package manager is not known."""
    packages = " ".join(dict.fromkeys(item.package for item in missing))
    for family, installer in INSTALLERS:
        if any(word in family for word in distribution):
            return f"`{installer} {packages}`"
    named = distribution[0] if distribution else "the host's distribution"
    return f"install {', '.join(item.program for item in missing)} with {named}'s package manager"


def observation_for(cluster: Cluster) -> str:
    """The observation that also looks where this spec puts the distribution's programs (a binary or
    CNI directory other than the modules' defaults)."""
    components = cluster.spec.components
    runtime = components.container_runtime
    return observe_command((runtime.binary, components.api_load_balancer.binary, components.control_plane_vip.binary),
                           (runtime.cni_bin_dir,))


CHECKS: tuple[Check, ...] = (
    Check("ports", "the TCP ports the host's components listen on are free (or held by those components' "
                   "own units)", _ports),
    Check("swap", "no swap is on where the kubelet refuses to start with it (failSwapOn)", _swap),
    Check("sysctls", "net.ipv4.ip_forward and bridge netfilter as the pod network needs them: set (`run`), or "
                     "settable (hosts, where apply sets them)", _sysctls),
    Check("cgroups", "the kubelet's and containerd's cgroup driver suit the host's init system; cgroup v1 "
                     "only where the kubelet allows it", _cgroups),
    Check("address", "the cluster file's address of the host is one of its own", _address),
    Check("binary-version", "the Kubernetes binaries' `--version` is spec.kubernetesVersion's release",
          _binary_version),
    Check("disk-space", "free space under the components' data directories", _disk_space),
    Check("clock", f"the host's clock is within {MAX_CLOCK_OFFSET:.0f} s of this machine's", _clock),
    Check("packages", "the distribution's programs the host's components run are installed (containerd, runc, "
                      "the CNI plugins, haproxy, keepalived, iptables, python3); the fix is the install command", _packages),
)
NAMES = tuple(check.name for check in CHECKS)


def parse_ignored(text: str | None) -> frozenset[str]:
    """`--ignore-preflight NAME,...` (or `all`) as check names; ValueError names an unknown one."""
    names = frozenset(part.strip() for part in (text or "").split(",") if part.strip())
    if "all" in names:
        return frozenset(NAMES)
    unknown = sorted(names - set(NAMES))
    if unknown:
        raise ValueError(f"unknown preflight check {unknown[0]!r}; checks: {', '.join(NAMES)}, all")
    return names


def evaluate(inputs: Inputs, hosts: Iterable[str], ignored: frozenset[str] = frozenset()) -> list[Failure]:
    """Every failure of every selected host, in host then check order (pure: what was observed is in
    each host's plan). A host nothing was observed of (an image under `join --root`) is not checked."""
    failures: dict[tuple[str, str, str], Failure] = {}
    for name in hosts:
        host = inputs.plan.host(name)
        if not host.environment.observed:
            continue
        for check in CHECKS:
            if check.name in ignored:
                continue
            for finding in check.evaluate(host, host.environment.facts, inputs):
                where = finding.where or host.name
                failures.setdefault((where, check.name, finding.problem),
                                    Failure(where, check.name, finding.problem, finding.fix))
    return list(failures.values())


def require(plan: Plan, hosts: Sequence[str], binaries: Mapping[str, Path], ignored: frozenset[str] = frozenset(),
            binaries_where: str | None = HERE, place: Callable[[str], str] = str) -> None:
    """Check the selected hosts of an observed plan and the binaries they will run (`binaries`: where
    each is on this machine); raise PreflightError with every failure, or return when all are fit."""
    problems = {} if "binary-version" in ignored else binary_problems(binaries, plan, hosts)
    failures = evaluate(Inputs(plan, problems, binaries_where, place), hosts, ignored)
    if failures:
        raise PreflightError(failures)


def binary_problems(paths: Mapping[str, Path], plan: Plan, hosts: Iterable[str]) -> dict[str, str]:
    """The version problems of the binaries the selected hosts run (one process start each, at once)."""
    needed = {s.binary.rsplit("/", 1)[-1] for name in hosts for s in plan.host(name).services}
    return release_problems({name: path for name, path in paths.items() if name in needed}, plan.kubernetes_version)


def report_lines(failures: Sequence[Failure]) -> list[str]:
    """One `error:` line per failure (as validation prints the spec's), then the summary."""
    hosts = len({failure.host for failure in failures})
    return [f"error: {failure}" for failure in failures] + [
        f"{len(failures)} preflight failure{'s' if len(failures) != 1 else ''} on {hosts} "
        f"host{'s' if hosts != 1 else ''}; nothing was changed (skip a check with --ignore-preflight NAME)"]


def describe_checks() -> str:
    """The checks for a command's help: name and what it verifies, one per line."""
    return "\n".join(f"  {check.name:<15} {check.what}" for check in CHECKS)


def _document(host: HostPlan, path: str) -> dict[str, Any] | None:
    for file in host.files:
        if file.path == path and isinstance(file.data, dict):
            return file.data
    return None


def _find_key(document: Any, key: str) -> Any:
    """The first value of `key` anywhere in a nested document (containerd's runtime options)."""
    if isinstance(document, dict):
        if key in document:
            return document[key]
        for value in document.values():
            found = _find_key(value, key)
            if found is not None:
                return found
    return None
