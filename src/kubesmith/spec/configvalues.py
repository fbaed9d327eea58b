"""extraConfig values a component's own validation refuses at its start (the kubelet's
pkg/kubelet/apis/config/validation, kube-proxy's and kube-scheduler's config validation): enumerations,
ranges, resource quantities, eviction thresholds, and the few rules across fields that kubesmith's
defaults make reachable. Only what the binary refuses is refused; a field not named here is left to it.
The kubelet's flags set the same fields of its configuration (and win over the file), so its extraArgs
are read as the fields they set and pass the same checks (kubelet_flag_fields).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterator
from typing import Any

from kubesmith.durations import go_duration_ns
from kubesmith.spec.effective import CONFIG_TYPES, Finding, go_bool, go_strings, value_at
from kubesmith.spec.flagtypes import QUANTITY, go_ip, quantity_problem
from kubesmith.spec.errors import yaml_text
from kubesmith.spec.types import go_int

ENUMS: dict[str, dict[tuple[str, ...], tuple[str, ...]]] = {
    "kubelet": {
        ("hairpinMode",): ("promiscuous-bridge", "hairpin-veth", "none"),
        ("topologyManagerPolicy",): ("none", "best-effort", "restricted", "single-numa-node"),
        ("topologyManagerScope",): ("container", "pod"),
        ("cpuManagerPolicy",): ("none", "static"),
        ("memoryManagerPolicy",): ("None", "Static"),
        ("configMapAndSecretChangeDetectionStrategy",): ("Get", "Cache", "Watch"),
        ("logging", "format"): ("text", "json"),
        # "" is the default (NoSwap); UnlimitedSwap is 1.28's and 1.29's
        ("memorySwap", "swapBehavior"): ("", "NoSwap", "LimitedSwap", "UnlimitedSwap"),
    },
    # component-base's logsapi: the formats registered in the Kubernetes binaries; kube-proxy v1.36.2:
    # 'DetectLocalMode: Unsupported value: "bogus"'
    # (mode: checks._apiserver_values)
    "proxy": {("logging", "format"): ("text", "json"),
              ("detectLocalMode",): ("", "ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix")},
}
# (lowest, highest) an integer field takes; None: no bound
RANGES: dict[str, dict[tuple[str, ...], tuple[int | None, int | None]]] = {
    "kubelet": {
        ("nodeStatusMaxImages",): (-1, None), ("containerLogMaxFiles",): (2, None), ("oomScoreAdj",): (-1000, 1000),
        ("maxParallelImagePulls",): (1, None), ("imageGCHighThresholdPercent",): (0, 100),
        ("imageGCLowThresholdPercent",): (0, 100), ("podsPerCore",): (0, None), ("eventRecordQPS",): (0, None),
        ("eventBurst",): (0, None), ("registryPullQPS",): (0, None), ("registryBurst",): (0, None),
        ("containerLogMaxWorkers",): (1, None), ("maxOpenFiles",): (0, None), ("kubeAPIQPS",): (0, None),
        ("kubeAPIBurst",): (0, None), ("nodeLeaseDurationSeconds",): (1, None),
    },
    "proxy": {("conntrack", "maxPerCore"): (0, None), ("conntrack", "min"): (0, None),
              ("oomScoreAdj",): (-1000, 1000)},
    "scheduler": {("percentageOfNodesToScore",): (0, 100), ("parallelism",): (1, None),
                  ("podInitialBackoffSeconds",): (1, None)},
}
_BINARY = {"kubelet": "the kubelet", "proxy": "kube-proxy", "scheduler": "kube-scheduler"}
_RESERVED = ("systemReserved", "kubeReserved")
_EVICTION = ("evictionHard", "evictionSoft", "evictionMinimumReclaim")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# kubelet flags whose KubeletConfiguration field is not their name in camelCase (the rest are: hairpin-mode
# is hairpinMode, kube-api-qps kubeAPIQPS); the image GC thresholds are the kubelet module's own check, and
# --logging-format every binary's (effective.FLAG_CHOICES)
_KUBELET_FLAG_FIELDS: dict[str, tuple[str, ...]] = {
    "event-qps": ("eventRecordQPS",), "registry-qps": ("registryPullQPS",), "pod-max-pids": ("podPidsLimit",),
    "contention-profiling": ("enableContentionProfiling",),
}
_CAMEL = {field.lower(): field for field in CONFIG_TYPES["kubelet"]}


def kubelet_flag_fields(flags: dict[str, Any],
                        kind_of: Callable[[str], str | None]) -> dict[tuple[str, ...], tuple[str, Any]]:
    """The KubeletConfiguration fields the kubelet's `flags` set, each with its flag and the value as the
    field holds it (a value its flag's type refuses is left out: the flag check names it). `kind_of` gives
    a flag's type (the registry's), which says how a map flag separates its pairs."""
    fields: dict[tuple[str, ...], tuple[str, Any]] = {}
    for flag, value in flags.items():
        path = _KUBELET_FLAG_FIELDS.get(str(flag)) or \
            ((_CAMEL[key],) if (key := str(flag).replace("-", "")) in _CAMEL else None)
        if path is None or isinstance(value, (dict, list)):
            continue
        kind = CONFIG_TYPES["kubelet"].get(path[0], "str") if len(path) == 1 else "str"
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        converted = _as_field(kind, text, "<" if kind_of(str(flag)) == "langleSeparatedMapStringString" else "=")
        if converted is not None:
            fields[path] = (str(flag), converted)
    return fields


def _as_field(kind: str, text: str, separator: str) -> Any:
    """`text` of a flag as its configuration field of JSON kind `kind` holds it, or None when it cannot."""
    if kind == "int":
        return go_int(text, "int32")
    if kind == "bool":
        return go_bool(text)
    if kind == "strings":
        return go_strings(text)
    if kind == "map":
        pairs = [item.split(separator, 1) for item in text.split(",") if item]
        return {key.strip(): value.strip() for key, value in pairs} if all(len(p) == 2 for p in pairs) else None
    return text


def config_value_findings(components: Any, kind_of: Callable[[str], str | None] = lambda flag: None) \
        -> Iterator[Finding]:
    """Every extraConfig value kubelet, kube-proxy or kube-scheduler refuses at its start, and every kubelet
    flag that sets such a value (located at the flag), `kind_of` giving a kubelet flag's type."""
    from_flags = kubelet_flag_fields(components.kubelet.extra_args, kind_of)
    kubelet = dict(components.kubelet.extra_config)
    for path, (_, value) in from_flags.items():
        kubelet = _with(kubelet, path, value)
    configs = {"kubelet": kubelet, "proxy": components.proxy.extra_config,
               "scheduler": components.scheduler.extra_config}
    flags = {path: flag for path, (flag, _) in from_flags.items()}
    for loc, message, severity in _config_values(components, configs):
        path = next((path for path in flags if loc[:3] == _loc("kubelet")[:3] and
                     tuple(loc[4:4 + len(path)]) == path), None)
        if path is None:
            yield loc, message, severity
        else:
            yield (("spec", "components", "kubelet", "extraArgs", flags[path]),
                   f"--{flags[path]} sets the kubelet's {'.'.join(path)}: {message}", severity)


def _with(document: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A copy of `document` with the field at `path` set to `value`."""
    inner = document.get(path[0]) if len(path) > 1 else None
    return {**document, path[0]: _with(inner if isinstance(inner, dict) else {}, path[1:], value)
            if len(path) > 1 else value}


def _config_values(components: Any, configs: dict[str, dict[str, Any]]) -> Iterator[Finding]:
    """The checks, on each component's configuration as it takes effect (`configs`: the kubelet's with its
    flags applied)."""
    for section, fields in ENUMS.items():
        for path, allowed in fields.items():
            present, value = value_at(configs[section], path)
            if present and isinstance(value, str) and value not in allowed:
                shown = ", ".join(item for item in allowed if item)  # "": the field's default
                yield (_loc(section, *path), f"{_BINARY[section]} takes {'.'.join(path)} as one of {shown}, "
                       f"not {value!r}: it refuses to start", "error")
    for section, bounds in RANGES.items():
        for path, (low, high) in bounds.items():
            present, value = value_at(configs[section], path)
            number = _int(value) if present else None
            if number is not None and ((low is not None and number < low) or (high is not None and number > high)):
                span = f"{low} to {high}" if low is not None and high is not None else f"{low} or more"
                yield (_loc(section, *path), f"{_BINARY[section]} refuses {'.'.join(path)}: {number} (it takes {span})", "error")
    yield from _kubelet(configs["kubelet"], components.kubelet.extra_args)
    yield from _node_monitor(configs["kubelet"], components.controller_manager.extra_args)
    yield from _scheduler(configs["scheduler"])
    yield from _leader_election(configs["scheduler"], components.scheduler.leader_elect)
    yield from _proxy(configs["proxy"], components.proxy.mode)


def _kubelet(config: dict[str, Any], flags: dict[str, Any]) -> Iterator[Finding]:
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
    # "maxParallelImagePulls ... cannot be larger than 1 unless SerializeImagePulls ... is set to false" (its
    # default is true)
    pulls = _int(config.get("maxParallelImagePulls"))
    if pulls is not None and pulls > 1 and config.get("serializeImagePulls", True) is not False:
        yield (_loc("kubelet", "maxParallelImagePulls"), f"maxParallelImagePulls {pulls} needs serializeImagePulls "
               "off, and the kubelet pulls one image at a time by default (serializeImagePulls true, or "
               "--serialize-image-pulls) and refuses both; set serializeImagePulls: false (no flag)", "error")
    yield from _enforced(config)
    # "containerLogMonitorInterval must be a positive time duration greater than or equal to 3s" (0: the default)
    interval = config.get("containerLogMonitorInterval")
    try:
        nanoseconds = go_duration_ns(interval) if isinstance(interval, str) else None
    except ValueError:
        nanoseconds = None  # the duration check names it
    if nanoseconds is not None and 0 < nanoseconds < 3 * 10**9:
        yield (_loc("kubelet", "containerLogMonitorInterval"), f"the kubelet refuses containerLogMonitorInterval "
               f"{interval}: it takes 3s or more (0 for its default, 10s)", "error")
    if config.get("cpuManagerPolicy") == "static" and not _reserves_cpu(config, flags):
        yield (_loc("kubelet", "cpuManagerPolicy"), "the static CPU manager policy needs CPUs reserved for the "
               "system (reservedSystemCPUs, or a cpu in kubeReserved or systemReserved): the kubelet refuses to "
               "start without", "error")


# The kubelet renews its node Lease every quarter of nodeLeaseDurationSeconds (default 40: every 10s,
# pkg/kubelet/nodelease's renewIntervalFraction 0.25); kube-controller-manager marks a node NotReady once its
# Lease is older than --node-monitor-grace-period (50s since 1.32, 40s before), and then evicts its pods
_LEASE_SECONDS, _RENEW_FRACTION, _GRACE_DEFAULT = 40, 0.25, "50s"


def _node_monitor(config: dict[str, Any], manager_flags: dict[str, Any]) -> Iterator[Finding]:
    """Nodes whose Lease is renewed less often than the controller manager waits for it flap NotReady,
    and lose their pods to taint-based eviction: the renew interval stays below the grace period."""
    lease = _int(config.get("nodeLeaseDurationSeconds", _LEASE_SECONDS))
    grace_text = manager_flags.get("node-monitor-grace-period", _GRACE_DEFAULT)
    try:
        grace = go_duration_ns(str(grace_text)) / 10**9
    except ValueError:
        return  # the flag check names it
    if lease is None or lease < 1 or lease * _RENEW_FRACTION < grace:
        return
    renew = f"{lease * _RENEW_FRACTION:g}s"
    if "node-monitor-grace-period" in manager_flags:
        yield (("spec", "components", "controllerManager", "extraArgs", "node-monitor-grace-period"),
               f"{grace_text} is not longer than the {renew} between the kubelets' Lease renewals (a quarter of "
               f"nodeLeaseDurationSeconds, {lease}): every node would flap NotReady and lose its pods to eviction",
               "error")
    else:
        yield (_loc("kubelet", "nodeLeaseDurationSeconds"), f"the kubelet would renew its Lease every {renew} (a "
               f"quarter of {lease}), not within kube-controller-manager's node-monitor-grace-period ({grace_text}): "
               "every node would flap NotReady and lose its pods to eviction; keep it under "
               f"{int(grace / _RENEW_FRACTION)} or raise node-monitor-grace-period", "error")


# what enforceNodeAllocatable may list, with the cgroup field each one needs (the kubelet's validation:
# 'systemReservedCgroup (--system-reserved-cgroup) must be specified when "system-reserved" contained in
# enforceNodeAllocatable'; the compressible forms arrived in 1.31, and older releases refuse them themselves)
_ENFORCED = {"pods": None, "none": None, "system-reserved": "systemReservedCgroup",
             "kube-reserved": "kubeReservedCgroup", "system-reserved-compressible": "systemReservedCgroup",
             "kube-reserved-compressible": "kubeReservedCgroup"}


def _enforced(config: dict[str, Any]) -> Iterator[Finding]:
    """Each enforceNodeAllocatable item is one the kubelet knows, with the cgroup it enforces on; none alone."""
    items = config.get("enforceNodeAllocatable")
    for index, item in enumerate(items if isinstance(items, list) else ()):
        if not isinstance(item, str):
            continue  # the type check names it
        if item not in _ENFORCED:
            yield (_loc("kubelet", "enforceNodeAllocatable", index), f"the kubelet enforces node allocatable on "
                   f"{', '.join(_ENFORCED)} only, not {item!r}: it refuses to start", "error")
        elif (cgroup := _ENFORCED[item]) and not config.get(cgroup):
            yield (_loc("kubelet", "enforceNodeAllocatable", index), f"enforcing {item} needs the cgroup it limits: "
                   f"set {cgroup} as well; the kubelet refuses to start without", "error")
        elif item == "none" and len(items) > 1:
            yield (_loc("kubelet", "enforceNodeAllocatable", index), "none stands alone: the kubelet refuses it "
                   "next to other enforcements", "error")


def _reserves_cpu(config: dict[str, Any], flags: dict[str, Any]) -> bool:
    if config.get("reservedSystemCPUs") or any(flag in flags for flag in
                                               ("reserved-cpus", "kube-reserved", "system-reserved")):
        return True
    for field in _RESERVED:
        reserved = config.get(field)
        cpu = reserved.get("cpu") if isinstance(reserved, dict) else None
        match = QUANTITY.fullmatch(str(cpu)) if cpu is not None and not isinstance(cpu, bool) else None
        if match and not str(cpu).startswith("-") and re.search(r"[1-9]", match.group(1)):
            return True
    return False


def _scheduler(config: dict[str, Any]) -> Iterator[Finding]:
    """kube-scheduler v1.36.2: "profiles[0].schedulerName: Required value", duplicate names; and an extender
    whose certificate it would not check."""
    profiles = config.get("profiles")
    seen: dict[str, int] = {}
    for index, profile in enumerate(profiles if isinstance(profiles, list) else ()):
        name = profile.get("schedulerName", "default-scheduler") if isinstance(profile, dict) else None
        if not isinstance(name, str):
            continue
        if not name:
            yield (_loc("scheduler", "profiles", index, "schedulerName"), "a profile needs a scheduler name: "
                   "kube-scheduler refuses an empty one", "error")
        elif name in seen:
            yield (_loc("scheduler", "profiles", index, "schedulerName"), f"profiles[{seen[name]}] already names "
                   f"{name!r}: kube-scheduler refuses duplicate scheduler names", "error")
        seen.setdefault(name, index)
    extenders = config.get("extenders")
    for index, extender in enumerate(extenders if isinstance(extenders, list) else ()):
        tls = extender.get("tlsConfig") if isinstance(extender, dict) else None
        if isinstance(tls, dict) and tls.get("insecure") is True:
            yield (_loc("scheduler", "extenders", index, "tlsConfig", "insecure"), "kube-scheduler would not check "
                   "the extender's certificate: whoever sits on the path reads the pods and nodes it sends and "
                   "decides where pods run; give tlsConfig.caFile or caData instead", "error")


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


# what a detectLocalMode needs set in detectLocal ('DetectLocalConfiguration.InterfaceName: Invalid value: "":
# must not be empty'), and each mode's periods with kube-proxy's defaults (v1alpha1 SetDefaults)
_DETECT_LOCAL = {"BridgeInterface": "bridgeInterface", "InterfaceNamePrefix": "interfaceNamePrefix"}
_SYNC_DEFAULTS = {"syncPeriod": "30s", "minSyncPeriod": "1s"}


def _proxy(config: dict[str, Any], typed_mode: str) -> Iterator[Finding]:
    """kube-proxy v1.36.2: nodePortAddresses items "must be a valid CIDR", and "can't use both 'primary' and
    CIDRs"; a detectLocalMode's interface; bindAddress "not a valid textual representation of an IP
    address"; the mode's "SyncPeriod ... must be greater than or equal to ... MinSyncPeriod"."""
    mode = config.get("detectLocalMode")
    if isinstance(mode, str) and mode in _DETECT_LOCAL:
        field = _DETECT_LOCAL[mode]
        detect = config.get("detectLocal")
        if not (isinstance(detect, dict) and detect.get(field)):
            yield (_loc("proxy", "detectLocalMode"), f"detectLocalMode {mode} needs detectLocal.{field}: kube-proxy "
                   "refuses to start without", "error")
    bind = config.get("bindAddress")
    if isinstance(bind, str) and not go_ip(bind):
        yield _loc("proxy", "bindAddress"), f"{bind!r} is no IP address: kube-proxy refuses to start", "error"
    section = config.get("mode") or typed_mode
    periods = config.get(section) if isinstance(section, str) else None
    given = {field: periods[field] for field in _SYNC_DEFAULTS
             if isinstance(periods, dict) and isinstance(periods.get(field), str)}
    try:  # a zero syncPeriod is defaulted (v1.36.2 starts with iptables.syncPeriod: 0s)
        sync = go_duration_ns(given.get("syncPeriod", "30s")) or go_duration_ns("30s")
        minimum = go_duration_ns(given.get("minSyncPeriod", "1s"))
    except ValueError:
        sync = minimum = 0  # the duration check names it
    if minimum > sync:
        field = "minSyncPeriod" if "minSyncPeriod" in given else "syncPeriod"
        yield (_loc("proxy", section, field), f"{section}.minSyncPeriod ({given.get('minSyncPeriod', '1s')}) is "
               f"longer than {section}.syncPeriod ({given.get('syncPeriod', '30s')}): kube-proxy refuses to start",
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
