"""extraConfig values a component's own validation refuses at its start (the kubelet's
pkg/kubelet/apis/config/validation, kube-proxy's and kube-scheduler's config validation): enumerations,
ranges, resource quantities, eviction thresholds, and the few rules across fields that kubesmith's
defaults make reachable. Only what the binary refuses is refused; a field not named here is left to it.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Iterator
from typing import Any

from kubesmith.durations import go_duration_ns
from kubesmith.spec.effective import Finding, resolv_conf_problem, value_at
from kubesmith.spec.errors import yaml_text
from kubesmith.spec.managed import config_field

ENUMS: dict[str, dict[tuple[str, ...], tuple[str, ...]]] = {
    "kubelet": {
        ("hairpinMode",): ("promiscuous-bridge", "hairpin-veth", "none"),
        ("topologyManagerPolicy",): ("none", "best-effort", "restricted", "single-numa-node"),
        ("topologyManagerScope",): ("container", "pod"),
        ("cpuManagerPolicy",): ("none", "static"),
        ("memoryManagerPolicy",): ("None", "Static"),
        ("configMapAndSecretChangeDetectionStrategy",): ("Get", "Cache", "Watch"),
    },
}
# (lowest, highest) an integer field takes; None: no bound
RANGES: dict[str, dict[tuple[str, ...], tuple[int | None, int | None]]] = {
    "kubelet": {
        ("nodeStatusMaxImages",): (-1, None), ("containerLogMaxFiles",): (2, None), ("oomScoreAdj",): (-1000, 1000),
        ("maxParallelImagePulls",): (1, None), ("imageGCHighThresholdPercent",): (0, 100),
        ("imageGCLowThresholdPercent",): (0, 100), ("podsPerCore",): (0, None), ("eventRecordQPS",): (0, None),
        ("eventBurst",): (0, None), ("registryPullQPS",): (0, None), ("registryBurst",): (0, None),
        ("containerLogMaxWorkers",): (1, None), ("maxOpenFiles",): (0, None),
    },
    "proxy": {("conntrack", "maxPerCore"): (0, None), ("conntrack", "min"): (0, None),
              ("oomScoreAdj",): (-1000, 1000)},
    "scheduler": {("percentageOfNodesToScore",): (0, 100), ("parallelism",): (1, None),
                  ("podInitialBackoffSeconds",): (1, None)},
}
# resource.Quantity's text: a signed decimal, then a binary (Ki...), decimal (n, u, m, k, M...) or exponent suffix
_QUANTITY = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?")
_BINARY = {"kubelet": "the kubelet", "proxy": "kube-proxy", "scheduler": "kube-scheduler"}
_RESERVED = ("systemReserved", "kubeReserved")
_EVICTION = ("evictionHard", "evictionSoft", "evictionMinimumReclaim")


def quantity_problem(value: Any) -> str | None:
    """Why the text `value` is no resource.Quantity, or None (other types: the number and type checks)."""
    if not isinstance(value, str) or _QUANTITY.fullmatch(value):
        return None
    return f"{yaml_text(value)} is no resource quantity (such as 500m, 1Gi or 2)"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# The plugins kube-scheduler registers (its in-tree registry, read from the v1.35.6 and v1.36.2 binaries by
# enabling each name in a profile, all alpha and beta gates on): "ScorePlugin "NoSuchPlugin" does not exist"
# stops it. Other releases are not checked.
_SCHEDULER_PLUGINS_135 = frozenset({
    "DefaultBinder", "DefaultPreemption", "DynamicResources", "GangScheduling", "ImageLocality", "InterPodAffinity",
    "NodeAffinity", "NodeDeclaredFeatures", "NodeName", "NodePorts", "NodeResourcesBalancedAllocation",
    "NodeResourcesFit", "NodeUnschedulable", "NodeVolumeLimits", "PodTopologySpread", "PrioritySort",
    "SchedulingGates", "TaintToleration", "VolumeBinding", "VolumeRestrictions", "VolumeZone",
})
SCHEDULER_PLUGINS: dict[str, frozenset[str]] = {"1.35": _SCHEDULER_PLUGINS_135,
                                                "1.36": _SCHEDULER_PLUGINS_135 | {"PodGroupPodsCount"}}
# The kernel's IPVS schedulers (net/netfilter/ipvs, ip_vs_<name>): kube-proxy v1.36.2 passes any name on
# unchecked, and the kernel refuses to create a virtual server with another, so no Service would work
IPVS_SCHEDULERS = ("rr", "wrr", "lc", "wlc", "fo", "ovf", "lblc", "lblcr", "dh", "sh", "mh", "sed", "nq", "twos")


def config_value_findings(components: Any, minor: str) -> Iterator[Finding]:
    """Every extraConfig value kubelet, kube-proxy or kube-scheduler refuses at its start (or that leaves
    it without a working function), located."""
    configs = {"kubelet": components.kubelet.extra_config, "proxy": components.proxy.extra_config,
               "scheduler": components.scheduler.extra_config}
    for section, fields in ENUMS.items():
        for path, allowed in fields.items():
            present, value = value_at(configs[section], path)
            if present and isinstance(value, str) and value not in allowed:
                yield (_loc(section, *path), f"{_BINARY[section]} takes {'.'.join(path)} as one of {', '.join(allowed)}, "
                       f"not {value!r}: it refuses to start", "error")
    for section, bounds in RANGES.items():
        for path, (low, high) in bounds.items():
            present, value = value_at(configs[section], path)
            number = _int(value) if present else None
            if number is not None and ((low is not None and number < low) or (high is not None and number > high)):
                span = f"{low} to {high}" if low is not None and high is not None else f"{low} or more"
                yield (_loc(section, *path), f"{_BINARY[section]} refuses {'.'.join(path)}: {number} (it takes {span})", "error")
    yield from _kubelet(configs["kubelet"], components.kubelet.extra_args)
    yield from _scheduler(configs["scheduler"], SCHEDULER_PLUGINS.get(minor))
    yield from _leader_election(configs["scheduler"], components.scheduler.leader_elect)
    yield from _proxy(configs["proxy"])
    yield from _containerd(components.container_runtime.extra_config, components.container_runtime.socket)


CRI_PLUGIN = "io.containerd.grpc.v1.cri"


def _containerd(config: dict[str, Any], socket: str) -> Iterator[Finding]:
    """containerd settings that leave the kubelet without its runtime: the CRI plugin disabled, or the ttrpc
    server put on the socket where the kubelet speaks gRPC (keys matched as containerd matches them)."""
    disabled = config_field("containerRuntime", config, ("disabled_plugins",))
    for index, plugin in enumerate(disabled[1] if disabled and isinstance(disabled[1], list) else ()):
        if plugin == CRI_PLUGIN:
            yield (("spec", "components", "containerRuntime", "extraConfig", *disabled[0], index), f"{CRI_PLUGIN} "
                   "is containerd's CRI, the API the kubelet runs every pod through: disabled, no pod would start",
                   "error")
    ttrpc = config_field("containerRuntime", config, ("ttrpc", "address"))
    if ttrpc and ttrpc[1] == socket:
        yield (("spec", "components", "containerRuntime", "extraConfig", *ttrpc[0]), f"{socket} is containerd's "
               "gRPC socket (spec.components.containerRuntime.socket), where the kubelet dials the CRI: its ttrpc "
               "server needs another path (empty: the socket's path with .ttrpc)", "error")


def _kubelet(config: dict[str, Any], flags: dict[str, Any]) -> Iterator[Finding]:
    if isinstance(config.get("resolvConf"), str) and (problem := resolv_conf_problem(config["resolvConf"])):
        yield _loc("kubelet", "resolvConf"), problem, "error"
    if "containerLogMaxSize" in config and isinstance(config["containerLogMaxSize"], str) and \
            (problem := quantity_problem(config["containerLogMaxSize"])):
        yield _loc("kubelet", "containerLogMaxSize"), f"the kubelet refuses containerLogMaxSize: {problem}", "error"
    for field in _RESERVED:
        reserved = config.get(field)
        for name, value in (reserved.items() if isinstance(reserved, dict) else ()):
            if problem := quantity_problem(value):
                yield _loc("kubelet", field, name), f"the kubelet refuses {field}.{name}: {problem}", "error"
    for field in _EVICTION:
        thresholds = config.get(field)
        for signal, value in (thresholds.items() if isinstance(thresholds, dict) else ()):
            if isinstance(value, str) and value.endswith("%"):
                try:
                    percent: float | None = float(value[:-1])
                except ValueError:
                    percent = None
                if percent is None or not 0 <= percent <= 100:
                    yield (_loc("kubelet", field, signal), f"the kubelet takes a percentage threshold in [0%, 100%], "
                           f"not {value!r}", "error")
            elif problem := quantity_problem(value):
                yield _loc("kubelet", field, signal), f"the kubelet refuses {field}.{signal}: {problem}", "error"
    # "grace period must be specified for the soft eviction threshold memory.available" (the kubelet's
    # eviction.ParseThresholdConfig): each soft threshold has its grace period
    soft, periods = config.get("evictionSoft"), config.get("evictionSoftGracePeriod")
    if isinstance(soft, dict) and "eviction-soft-grace-period" not in flags:
        for signal in soft:
            if not (isinstance(periods, dict) and signal in periods):
                yield (_loc("kubelet", "evictionSoft", signal), f"no evictionSoftGracePeriod for {signal}: the "
                       "kubelet refuses a soft eviction threshold without its grace period (set "
                       f"evictionSoftGracePeriod: {{{signal}: 1m30s}}, say)", "error")
    # "enforceNodeAllocatable (--enforce-node-allocatable) is not supported unless cgroupsPerQOS ... is turned
    # on": its default is [pods]; [none] enforces nothing (v1.36.2 starts with it)
    enforced = config.get("enforceNodeAllocatable", ["pods"])
    if config.get("cgroupsPerQOS") is False and isinstance(enforced, list) and \
            any(item != "none" for item in enforced):
        yield (_loc("kubelet", "cgroupsPerQOS"), "without cgroupsPerQOS the kubelet refuses to enforce node "
               "allocatable, which it does by default (enforceNodeAllocatable: [pods]); set enforceNodeAllocatable: "
               "[] as well", "error")
    if config.get("cpuManagerPolicy") == "static" and not _reserves_cpu(config, flags):
        yield (_loc("kubelet", "cpuManagerPolicy"), "the static CPU manager policy needs CPUs reserved for the "
               "system (reservedSystemCPUs, or a cpu in kubeReserved or systemReserved): the kubelet refuses to "
               "start without", "error")


def _reserves_cpu(config: dict[str, Any], flags: dict[str, Any]) -> bool:
    if config.get("reservedSystemCPUs") or any(flag in flags for flag in
                                               ("reserved-cpus", "kube-reserved", "system-reserved")):
        return True
    for field in _RESERVED:
        reserved = config.get(field)
        cpu = reserved.get("cpu") if isinstance(reserved, dict) else None
        match = _QUANTITY.fullmatch(str(cpu)) if cpu is not None and not isinstance(cpu, bool) else None
        if match and not str(cpu).startswith("-") and re.search(r"[1-9]", match.group(1)):
            return True
    return False


def _scheduler(config: dict[str, Any], plugins: frozenset[str] | None) -> Iterator[Finding]:
    """Duplicate profile names and plugins the release lacks (both stop kube-scheduler); an extender reached
    without TLS (it receives every pod and node the scheduler considers, and its answers place pods)."""
    profiles = config.get("profiles")
    seen: dict[str, int] = {}
    for index, profile in enumerate(profiles if isinstance(profiles, list) else ()):
        name = profile.get("schedulerName", "default-scheduler") if isinstance(profile, dict) else None
        if not isinstance(name, str):
            continue
        if name in seen:
            yield (_loc("scheduler", "profiles", index, "schedulerName"), f"profiles[{seen[name]}] already names "
                   f"{name!r}: kube-scheduler refuses duplicate scheduler names", "error")
        seen.setdefault(name, index)
        points = profile.get("plugins")
        for point, sets in (points.items() if isinstance(points, dict) and plugins is not None else ()):
            enabled = sets.get("enabled") if isinstance(sets, dict) else None
            for item, plugin in enumerate(enabled if isinstance(enabled, list) else ()):
                named = plugin.get("name") if isinstance(plugin, dict) else None
                if isinstance(named, str) and named not in plugins:
                    close = difflib.get_close_matches(named, sorted(plugins), n=1, cutoff=0.75)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    yield (_loc("scheduler", "profiles", index, "plugins", point, "enabled", item, "name"),
                           f"kube-scheduler has no plugin {named!r}: it refuses to start{hint}", "error")
    extenders = config.get("extenders")
    for index, extender in enumerate(extenders if isinstance(extenders, list) else ()):
        url = extender.get("urlPrefix") if isinstance(extender, dict) else None
        if isinstance(url, str) and not url.startswith("https://"):
            yield (_loc("scheduler", "extenders", index, "urlPrefix"), f"{yaml_text(url)} is no https:// URL: "
                   "kube-scheduler would send the extender every pod and node it considers, and take its answers, "
                   "without TLS", "error")


# kube-scheduler's leader election defaults (component-base LeaderElectionConfiguration) and client-go's
# leaderelection.JitterFactor
_LEASE = {"leaseDuration": "15s", "renewDeadline": "10s", "retryPeriod": "2s"}
_JITTER = 1.2


def _zero_duration(text: str) -> bool:
    try:
        return go_duration_ns(text) == 0
    except ValueError:
        return False


def _leader_election(config: dict[str, Any], leader_elect: bool) -> Iterator[Finding]:
    """kube-scheduler stops with "leaseDuration must be greater than renewDeadline", and client-go's elector
    with "renewDeadline must be greater than retryPeriod*JitterFactor"."""
    section = config.get("leaderElection")
    if not isinstance(section, dict) or section.get("leaderElect", leader_elect) is False:
        return
    # a zero duration is defaulted by the scheduler (SetDefaults), as a missing one is
    given = {field: section[field] for field in _LEASE if isinstance(section.get(field), str)
             and not _zero_duration(section[field])}
    try:
        lease, renew, retry = (go_duration_ns(given.get(field, default)) for field, default in _LEASE.items())
    except ValueError:
        return  # the duration check names it
    if lease <= renew:
        where = "renewDeadline" if "renewDeadline" in given else "leaseDuration"
        yield (_loc("scheduler", "leaderElection", where), f"leaseDuration ({given.get('leaseDuration', '15s')}) "
               f"must be greater than renewDeadline ({given.get('renewDeadline', '10s')}): kube-scheduler refuses "
               "to start", "error")
    elif renew <= _JITTER * retry:
        where = "retryPeriod" if "retryPeriod" in given else "renewDeadline"
        yield (_loc("scheduler", "leaderElection", where), f"renewDeadline ({given.get('renewDeadline', '10s')}) "
               f"must be greater than {_JITTER} x retryPeriod ({given.get('retryPeriod', '2s')}): kube-scheduler's "
               "leader election refuses to start", "error")


def _proxy(config: dict[str, Any]) -> Iterator[Finding]:
    """The IPVS scheduler the kernel has; kube-proxy v1.36.2: nodePortAddresses items "must be a valid CIDR",
    and "can't use both 'primary' and CIDRs"."""
    ipvs = config.get("ipvs")
    scheduler = ipvs.get("scheduler") if isinstance(ipvs, dict) else None
    if isinstance(scheduler, str) and scheduler not in ("", *IPVS_SCHEDULERS):
        yield (_loc("proxy", "ipvs", "scheduler"), f"the kernel has no IPVS scheduler {scheduler!r} (it has "
               f"{', '.join(IPVS_SCHEDULERS)}; empty is rr): it would refuse every Service kube-proxy programs",
               "error")
    items = config.get("nodePortAddresses")
    if not isinstance(items, list):
        return
    for index, item in enumerate(items):
        if item == "primary":
            if len(items) > 1:
                yield (_loc("proxy", "nodePortAddresses", index), "'primary' stands alone: kube-proxy refuses it "
                       "next to CIDRs", "error")
            continue
        try:
            ipaddress.ip_network(item, strict=False) if isinstance(item, str) and "/" in item else None
            valid = isinstance(item, str) and "/" in item
        except ValueError:
            valid = False
        if not valid:
            yield (_loc("proxy", "nodePortAddresses", index), f"{_shown(item)} is no CIDR (such as 10.0.0.0/8) "
                   "or 'primary': kube-proxy refuses to start", "error")


def _shown(value: Any) -> str:
    return yaml_text(value) if isinstance(value, str) else repr(value)


def _loc(section: str, *path: Any) -> tuple[Any, ...]:
    return ("spec", "components", section, "extraConfig", *path)
