"""extraConfig values a component's own validation refuses at its start (the kubelet's
pkg/kubelet/apis/config/validation, kube-proxy's and kube-scheduler's config validation): enumerations,
ranges, resource quantities, eviction thresholds, and the few rules across fields that kubesmith's
defaults make reachable. Only what the binary refuses is refused; a field not named here is left to it.
The kubelet's flags set the same fields of its configuration (and win over the file), so its extraArgs
are read as the fields they set and pass the same checks (kubelet_flag_fields).
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from kubesmith.durations import go_duration_ns
from kubesmith.spec.effective import (CONFIG_TYPES, SHORTEST_PERIOD, SHORTEST_PERIOD_NS, Finding, go_bool,
                                      go_strings, resolv_conf_problem, toml_keys, toml_type_findings, toml_value_at,
                                      value_at)
from kubesmith.spec.flagtypes import QUANTITY, go_ip, quantity_problem, quantity_value
from kubesmith.vocabulary.errors import yaml_text
from kubesmith.spec.managed import MANAGED_CONFIG, config_field, containerd_written
from kubesmith.spec.paths import TYPED_CONFIG_DIRECTORIES
from kubesmith.vocabulary.types import canonical_ip, go_int

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
# (lowest, highest) an integer field takes; None: no bound. The component refuses to start with another value,
# unless a third item says what it does instead
RANGES: dict[str, dict[tuple[str, ...], tuple[int | None, int | None] | tuple[int | None, int | None, str]]] = {
    "kubelet": {
        ("nodeStatusMaxImages",): (-1, None), ("containerLogMaxFiles",): (2, None), ("oomScoreAdj",): (-1000, 1000),
        ("maxParallelImagePulls",): (1, None), ("imageGCHighThresholdPercent",): (0, 100),
        ("imageGCLowThresholdPercent",): (0, 100), ("podsPerCore",): (0, None), ("eventRecordQPS",): (0, None),
        ("eventBurst",): (0, None), ("registryPullQPS",): (0, None), ("registryBurst",): (0, None),
        ("containerLogMaxWorkers",): (1, None), ("maxOpenFiles",): (0, None), ("kubeAPIQPS",): (0, None),
        ("kubeAPIBurst",): (0, None), ("nodeLeaseDurationSeconds",): (1, None),
    },
    # component-base's ValidateClientConnectionConfiguration: "burst: Invalid value: -1: must be non-negative"
    # (kube-proxy and kube-scheduler v1.36.2 stop on it; a negative qps only turns the rate limit off)
    "proxy": {("conntrack", "maxPerCore"): (0, None), ("conntrack", "min"): (0, None),
              ("oomScoreAdj",): (-1000, 1000), ("clientConnection", "burst"): (0, None),
              # "MasqueradeBit: Invalid value: 33: must be within the range [0, 31]"
              ("iptables", "masqueradeBit"): (0, 31)},
    "scheduler": {("percentageOfNodesToScore",): (0, 100), ("parallelism",): (1, None),
                  ("podInitialBackoffSeconds",): (1, None), ("clientConnection", "burst"): (0, None)},
    # containerd 1.6.20 starts with a value outside these. services/server/server_linux.go: sys.SetOOMScore refuses a score
    # outside the kernel's oom_score_adj range, and containerd only logs "failed to change OOM score";
    # services/server/server.go passes a message size to gRPC only "if config.GRPC.MaxRecvMsgSize > 0", so
    # 0 or below is gRPC's own limit (4 MiB received), not containerd's default of 16 MiB
    "containerRuntime": {
        ("oom_score",): (-1000, 1000, "containerd logs 'failed to change OOM score' and runs at the score it had"),
        ("grpc", "max_recv_message_size"): (1, None, "at 0 or below containerd keeps gRPC's own limit of 4 MiB, not "
                                                     "its default of 16 MiB; leave it out for that"),
        ("grpc", "max_send_message_size"): (1, None, "at 0 or below containerd keeps gRPC's own limit, not its "
                                                     "default of 16 MiB; leave it out for that"),
    },
}
_BINARY = {"kubelet": "the kubelet", "proxy": "kube-proxy", "scheduler": "kube-scheduler",
           "containerRuntime": "containerd"}
_RESERVED = ("systemReserved", "kubeReserved")
# what a reservation may name (cmd/kubelet/app parseResourceList: cpu, memory, ephemeral-storage, pid)
_RESERVABLE = ("cpu", "memory", "ephemeral-storage", "pid")
# the largest amount a resource.Quantity's MilliValue (an int64 of thousandths) holds
_MOST_RESERVED = Decimal((1 << 63) - 1) / 1000
# cgroups the kubelet reads from the hierarchy's root (its flags --cgroup-root, --kube-reserved-cgroup...)
_CGROUPS = ("cgroupRoot", "kubeReservedCgroup", "systemReservedCgroup")
_EVICTION = ("evictionHard", "evictionSoft", "evictionMinimumReclaim")


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


# kubelet flags whose KubeletConfiguration field is not their name in camelCase (the rest are: hairpin-mode
# is hairpinMode, kube-api-qps kubeAPIQPS); the image GC thresholds are the kubelet module's own check, and
# --logging-format every binary's (effective.FLAG_CHOICES)
_KUBELET_FLAG_FIELDS: dict[str, tuple[str, ...]] = {
    "event-qps": ("eventRecordQPS",), "registry-qps": ("registryPullQPS",), "pod-max-pids": ("podPidsLimit",),
    "contention-profiling": ("enableContentionProfiling",), "reserved-cpus": ("reservedSystemCPUs",),
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
    if kind in ("map", "strmap"):
        pairs = [item.split(separator, 1) for item in text.split(",") if item]
        return {key.strip(): value.strip() for key, value in pairs} if all(len(p) == 2 for p in pairs) else None
    return text


def config_value_findings(components: Any, minor: str,
                          kind_of: Callable[[str], str | None] = lambda flag: None) -> Iterator[Finding]:
    """Every extraConfig value kubelet, kube-proxy or kube-scheduler refuses at its start (or that leaves
    it without a working function), and every kubelet flag that sets such a value (located at the flag),
    `kind_of` giving a kubelet flag's type; `minor` the release (the scheduler plugins it has)."""
    from_flags = kubelet_flag_fields(components.kubelet.extra_args, kind_of)
    kubelet = dict(components.kubelet.extra_config)
    for path, (_, value) in from_flags.items():
        kubelet = _with(kubelet, path, value)
    configs = {"kubelet": kubelet, "proxy": components.proxy.extra_config,
               "scheduler": components.scheduler.extra_config,
               "containerRuntime": components.container_runtime.extra_config}
    flags = {path: flag for path, (flag, _) in from_flags.items()}
    for loc, message, severity in _config_values(components, configs, minor):
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


def _config_values(components: Any, configs: dict[str, dict[str, Any]], minor: str) -> Iterator[Finding]:
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
        for path, (low, high, *instead) in bounds.items():
            found = config_field(section, configs[section], path)  # containerd's keys as go-toml matches them
            number = _int(found[1]) if found else None
            if found and number is not None and ((low is not None and number < low) or
                                                 (high is not None and number > high)):
                span = f"{low} to {high}" if low is not None and high is not None else f"{low} or more"
                field = ".".join(path)
                message = f"{_BINARY[section]} refuses {field}: {number} (it takes {span})" if not instead else \
                    f"{_BINARY[section]} takes {field} {'from ' if high is not None else ''}{span}, not {number}: " \
                    f"{instead[0]}"
                yield _loc(section, *found[0]), message, "error"
    yield from _periods(configs)
    yield from _kubelet(configs["kubelet"], components.kubelet.extra_args)
    yield from _kubelet_lists(configs["kubelet"])
    yield from _logging_verbosity(configs)
    yield from _node_monitor(configs["kubelet"], components.controller_manager.extra_args)
    yield from _scheduler(configs["scheduler"], SCHEDULER_PLUGINS.get(minor))
    yield from _leader_election(configs["scheduler"], components.scheduler.leader_elect)
    yield from _proxy(configs["proxy"], components.proxy.mode)
    yield from _containerd(components.container_runtime.extra_config, components.container_runtime.socket)


CRI_PLUGIN = "io.containerd.grpc.v1.cri"


def _containerd(config: dict[str, Any], socket: str) -> Iterator[Finding]:
    """containerd settings that stop it (a field of the wrong TOML type, a log level logrus lacks), or leave
    the kubelet without its runtime: the CRI plugin disabled, a snapshotter it lacks or disabled, the ttrpc
    server put on the socket where the kubelet speaks gRPC (keys matched as containerd matches them). Managed
    fields and the directories typed options set have their own checks."""
    checked = {*MANAGED_CONFIG["containerRuntime"],
               *(path for section, path, _ in TYPED_CONFIG_DIRECTORIES if section == "containerRuntime")}
    for keys, problem in toml_type_findings(config, containerd_written(), skip=frozenset(checked)):
        yield ("spec", "components", "containerRuntime", "extraConfig", *keys), problem, "error"
    disabled = config_field("containerRuntime", config, ("disabled_plugins",))
    for index, plugin in enumerate(disabled[1] if disabled and isinstance(disabled[1], list) else ()):
        if plugin == CRI_PLUGIN:
            yield (("spec", "components", "containerRuntime", "extraConfig", *disabled[0], index), f"{CRI_PLUGIN} "
                   "is containerd's CRI, the API the kubelet runs every pod through: disabled, no pod would start",
                   "error")
    yield from _snapshotter(config, disabled)
    yield from _required_plugins(config, disabled)
    port = config_field("containerRuntime", config, ("plugins", CRI_PLUGIN, "stream_server_port"))
    if port and isinstance(port[1], str) and not (port[1].isascii() and port[1].isdigit() and int(port[1]) <= 65535):
        # 'Failed to run CRI service" error="stream server error: listen tcp: address 99999: invalid port' (fatal)
        yield (_runtime_loc(*port[0]), f"stream_server_port {port[1]!r} is no port from 0 to 65535: containerd's CRI "
               "stream server cannot listen, and containerd exits", "error")
    yield from _runtimes(config)
    ttrpc = config_field("containerRuntime", config, ("ttrpc", "address"))
    if ttrpc and ttrpc[1] == socket:
        yield (("spec", "components", "containerRuntime", "extraConfig", *ttrpc[0]), f"{socket} is containerd's "
               "gRPC socket (spec.components.containerRuntime.socket), where the kubelet dials the CRI: its ttrpc "
               "server needs another path (empty: the socket's path with .ttrpc)", "error")
    level = config_field("containerRuntime", config, ("debug", "level"))
    if level and isinstance(level[1], str) and level[1] and level[1].lower() not in _LOG_LEVELS:
        yield (_runtime_loc(*level[0]), f"containerd takes debug.level as one of {', '.join(_LOG_LEVELS)}, not "
               f"{level[1]!r}: it refuses to start ('not a valid logrus Level')", "error")
    yield from _containerd_weakenings(config)


# logrus.ParseLevel, which containerd 1.6.20 reads debug.level with (case-insensitive)
_LOG_LEVELS = ("panic", "fatal", "error", "warn", "warning", "info", "debug", "trace")


# the snapshotters Debian's containerd 1.6.20 builds in (cmd/containerd/builtins*_linux.go; `containerd config
# default` lists each plugin); a proxy plugin of type snapshot adds its own name
SNAPSHOTTERS = ("overlayfs", "native", "btrfs", "zfs", "devmapper", "aufs")
_SNAPSHOT_PLUGIN = "io.containerd.snapshotter.v1"


def _snapshotter(config: dict[str, Any], disabled: tuple[tuple[str, ...], Any] | None) -> Iterator[Finding]:
    """The CRI's snapshotter is one containerd has, and is not disabled: else the CRI plugin fails to load
    (pkg/cri/server/service.go: 'failed to find snapshotter "bogus"'), and the kubelet has no runtime."""
    found = config_field("containerRuntime", config, ("plugins", CRI_PLUGIN, "containerd", "snapshotter"))
    name = found[1] if found else "overlayfs"
    if not isinstance(name, str):
        return  # the type check names it
    proxies = config_field("containerRuntime", config, ("proxy_plugins",))
    proxied = [key for key, plugin in (proxies[1].items() if proxies and isinstance(proxies[1], dict) else ())
               if (kind := toml_value_at(plugin, {}, ("type",))) and kind[1] in ("snapshot", _SNAPSHOT_PLUGIN)]
    if found and name not in (*SNAPSHOTTERS, *proxied):
        close = difflib.get_close_matches(name, SNAPSHOTTERS, n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]!r}?" if close else f" (it has {', '.join(SNAPSHOTTERS)}, and proxy plugins)"
        yield (_runtime_loc(*found[0]), f"containerd has no snapshotter {name!r}: its CRI would not load, and no pod "
               f"would start{hint}", "error")
    items = disabled[1] if disabled and isinstance(disabled[1], list) else []
    if f"{_SNAPSHOT_PLUGIN}.{name}" in items:
        index = items.index(f"{_SNAPSHOT_PLUGIN}.{name}")
        yield (_runtime_loc(*disabled[0], index), f"{name} is the CRI's snapshotter"
               f"{'' if found else ' (containerd default)'}: disabled, its CRI would not load, and no pod would "
               "start", "error")


# Every plugin Debian's containerd 1.6.20 registers (`ctr plugins ls` of a running daemon; aufs, btrfs, zfs
# and devmapper load only where the host supports them): "required plugin [X] not included" stops it otherwise
CONTAINERD_PLUGINS = frozenset({
    "io.containerd.content.v1.content", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.native",
    "io.containerd.snapshotter.v1.overlayfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.metadata.v1.bolt",
    "io.containerd.differ.v1.walking", "io.containerd.event.v1.exchange", "io.containerd.gc.v1.scheduler",
    "io.containerd.service.v1.introspection-service", "io.containerd.service.v1.containers-service",
    "io.containerd.service.v1.content-service", "io.containerd.service.v1.diff-service",
    "io.containerd.service.v1.images-service", "io.containerd.service.v1.leases-service",
    "io.containerd.service.v1.namespaces-service", "io.containerd.service.v1.snapshots-service",
    "io.containerd.runtime.v1.linux", "io.containerd.runtime.v2.task", "io.containerd.monitor.v1.cgroups",
    "io.containerd.service.v1.tasks-service", "io.containerd.grpc.v1.introspection",
    "io.containerd.internal.v1.restart", "io.containerd.grpc.v1.containers", "io.containerd.grpc.v1.content",
    "io.containerd.grpc.v1.diff", "io.containerd.grpc.v1.events", "io.containerd.grpc.v1.healthcheck",
    "io.containerd.grpc.v1.images", "io.containerd.grpc.v1.leases", "io.containerd.grpc.v1.namespaces",
    "io.containerd.internal.v1.opt", "io.containerd.grpc.v1.snapshots", "io.containerd.grpc.v1.tasks",
    "io.containerd.grpc.v1.version", CRI_PLUGIN,
})


def _required_plugins(config: dict[str, Any], disabled: tuple[tuple[str, ...], Any] | None) -> Iterator[Finding]:
    """containerd 1.6.20 stops unless it loads every required plugin ("required plugin [X] not included")."""
    required = config_field("containerRuntime", config, ("required_plugins",))
    off = disabled[1] if disabled and isinstance(disabled[1], list) else []
    for index, plugin in enumerate(required[1] if required and isinstance(required[1], list) else ()):
        if not isinstance(plugin, str):
            continue  # the type check names it
        if plugin not in CONTAINERD_PLUGINS:
            close = difflib.get_close_matches(plugin, sorted(CONTAINERD_PLUGINS), n=1, cutoff=0.8)
            hint = f"; did you mean {close[0]!r}?" if close else " (a plugin is TYPE.ID, such as " \
                f"{CRI_PLUGIN})"
            yield (_runtime_loc(*required[0], index), f"containerd 1.6 has no plugin {plugin!r}, and refuses to start "
                   f"without each required plugin ('required plugin [{plugin}] not included'){hint}", "error")
        elif plugin in off:
            yield (_runtime_loc(*required[0], index), f"{plugin} is required and disabled (disabled_plugins): "
                   "containerd refuses to start without a required plugin", "error")


# runc's shim options (containerd 1.6 runtime/v2/runc/options.Options), which the CRI decodes with go-toml for
# every pod sandbox of a runc runtime: a field of another type fails each ("failed to generate runtime options")
_RUNC_OPTIONS = {**dict.fromkeys(("NoPivotRoot", "NoNewKeyring"), "bool"),
                 **dict.fromkeys(("ShimCgroup", "BinaryName", "Root", "CriuPath", "CriuImagePath", "CriuWorkPath"),
                                 "str"),
                 **dict.fromkeys(("IoUid", "IoGid"), "uint32")}
_RUNC_TYPES = ("io.containerd.runc.v2", "io.containerd.runc.v1")
_KINDS = {"bool": "a boolean (true or false)", "str": "a string", "uint32": "an integer from 0 to 4294967295"}


def _runtimes(config: dict[str, Any]) -> Iterator[Finding]:
    """Each CRI runtime's runtime_type names a shim containerd can find (io.containerd.NAME.VERSION, or an
    absolute path), kubesmith's runc runtime keeps a runc shim, and a runc runtime's options have runc's types;
    otherwise every pod of that runtime fails at its start (containerd itself starts)."""
    where = ("plugins", CRI_PLUGIN, "containerd", "runtimes")
    runtimes = config_field("containerRuntime", config, where)
    written = value_at(containerd_written(), where)[1] or {}
    default = value_at(containerd_written(), ("plugins", CRI_PLUGIN, "containerd", "default_runtime_name"))[1]
    for name, runtime in (runtimes[1].items() if runtimes and isinstance(runtimes[1], dict) else ()):
        own = written.get(name) if isinstance(written, dict) else None
        found = toml_value_at(runtime, own, ("runtime_type",))
        kind = found[1] if found else (own or {}).get("runtime_type") if isinstance(own, dict) else None
        if found and isinstance(kind, str) and (problem := _runtime_type_problem(kind, name == default)):
            yield _runtime_loc(*runtimes[0], name, *found[0]), f"{name}: {problem}", "error"
            continue
        options = toml_value_at(runtime, own, ("options",))
        if kind not in _RUNC_TYPES or not options or not isinstance(options[1], dict):
            continue
        for field, expected in _RUNC_OPTIONS.items():
            key = next((key for key in toml_keys(field) if key in options[1]), None)
            value = options[1].get(key) if key is not None else None
            if value is None:
                continue
            wrong = {"bool": not isinstance(value, bool), "str": not isinstance(value, str),
                     "uint32": not _json_uint32(value)}[expected]
            if wrong:
                yield (_runtime_loc(*runtimes[0], name, *options[0], key), f"runc reads its option {field} as "
                       f"{_KINDS[expected]}, not {_shown(value)}: containerd's CRI could not decode the options, and "
                       f"every pod of runtime {name} would fail to start", "error")


def _runtime_type_problem(kind: str, is_default: bool) -> str | None:
    """Why containerd 1.6 finds no shim for runtime_type `kind` (runtime/v2/manager.go resolveRuntimePath), or
    why kubesmith's default runtime would lose runc; None when fine."""
    if kind.startswith("/"):
        return None  # a shim binary by its path (containerd checks it exists when a pod starts)
    if "/" in kind or len(kind.split(".")) < 2 or not all(kind.split(".")):
        return f"runtime_type {kind!r} names no shim: containerd takes io.containerd.NAME.VERSION (it runs " \
            "containerd-shim-NAME-VERSION) or an absolute path, and every pod of this runtime would fail to start"
    if is_default and kind not in (*_RUNC_TYPES, "io.containerd.runtime.v1.linux"):
        return f"runtime_type {kind!r} is no runc shim, and this is the runtime every pod runs in (kubesmith's " \
            f"default_runtime_name), with runc's options: keep {_RUNC_TYPES[0]} and add a runtime of your own " \
            "(a RuntimeClass's handler) for another shim"
    return None


def _runtime_loc(*keys: Any) -> tuple[Any, ...]:
    return ("spec", "components", "containerRuntime", "extraConfig", *keys)


def _loopback(host: str) -> bool:
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower() == "localhost"


# containerd's debug and ttrpc sockets exist only with an address (containerd 1.6.20 cmd/containerd/command:
# the ttrpc socket without one is the gRPC socket's path with .ttrpc, with its uid and gid)
_SOCKET_OWNERS = {"debug": "it serves pprof and expvar (containerd's memory, registry credentials included, and "
                           "profiling that loads the node)",
                  "ttrpc": "it takes the task events containerd's shims forward, so whoever may open it could "
                           "report containers exited or started"}


def _containerd_weakenings(config: dict[str, Any]) -> Iterator[Finding]:
    """containerd settings that weaken the node, refused outright (no CIS check names them, so
    spec.security.allowInsecure, which takes CIS ids, has no opt-out for them): sockets handed to other
    users, pprof on the network, images pulled without TLS or its verification, containers without
    AppArmor, exec and attach streams served off loopback without TLS."""
    for socket, what in _SOCKET_OWNERS.items():
        address = config_field("containerRuntime", config, (socket, "address"))
        if not address or not isinstance(address[1], str) or not address[1]:
            continue
        if socket == "debug" and not address[1].startswith("/") and \
                not _loopback(address[1].rpartition(":")[0] if ":" in address[1] else address[1]):
            yield (_runtime_loc(*address[0]), f"{address[1]!r} is a TCP address: containerd would serve pprof and "
                   "expvar there to anyone, without authentication; give a unix socket path (root's alone)", "error")
            continue
        owners = (config_field("containerRuntime", config, (socket, field)) for field in ("uid", "gid"))
        if owner := next((owner for owner in owners if owner and _int(owner[1]) not in (None, 0)), None):
            yield (_runtime_loc(*owner[0]), f"containerd's {socket} socket stays owned by root (uid and gid 0), "
                   f"as its API socket does: {what}", "error")
    cri = ("plugins", CRI_PLUGIN)
    apparmor = config_field("containerRuntime", config, (*cri, "disable_apparmor"))
    if apparmor and apparmor[1] is True:
        yield (_runtime_loc(*apparmor[0]), "containerd would run every container without AppArmor, those whose pod "
               "asks for runtime/default or a profile too; it uses AppArmor only where the host supports it, so a "
               "host without AppArmor needs no setting", "error")
    configs = config_field("containerRuntime", config, (*cri, "registry", "configs"))
    for host, registry in (configs[1].items() if configs and isinstance(configs[1], dict) else ()):
        skip = toml_value_at(registry, {}, ("tls", "insecure_skip_verify"))
        if skip and skip[1] is True:
            yield (_runtime_loc(*configs[0], host, *skip[0]), f"containerd would pull from {host} without checking "
                   "its certificate: anyone on the path could hand the nodes other images; give the registry's CA "
                   "in ca_file instead", "error")
    mirrors = config_field("containerRuntime", config, (*cri, "registry", "mirrors"))
    for host, mirror in (mirrors[1].items() if mirrors and isinstance(mirrors[1], dict) else ()):
        endpoints = toml_value_at(mirror, {}, ("endpoint",))
        for index, url in enumerate(endpoints[1] if endpoints and isinstance(endpoints[1], list) else ()):
            parts = urlsplit(url) if isinstance(url, str) else None
            if parts and parts.scheme.lower() == "http" and not _loopback(parts.hostname or ""):
                yield (_runtime_loc(*mirrors[0], host, *endpoints[0], index), f"{url} is plain HTTP: containerd "
                       f"would pull {host}'s images from it without TLS, and anyone on the path could swap them; "
                       "use https:// (a private CA goes in registry.configs.<host>.tls.ca_file)", "error")
    address = config_field("containerRuntime", config, (*cri, "stream_server_address"))
    tls = config_field("containerRuntime", config, (*cri, "enable_tls_streaming"))
    if address and isinstance(address[1], str) and not _loopback(address[1]) and not (tls and tls[1] is True):
        shown = repr(address[1]) if address[1] else "'' (the node's address)"
        yield (_runtime_loc(*address[0]), f"{shown} is off loopback: containerd would serve exec, attach and "
               "port-forward streams there without TLS (enable_tls_streaming is off), and anyone on the path could "
               "read them; the kubelet reaches them on 127.0.0.1, containerd's default", "error")


# The configuration fields of the flags spec.effective.POSITIVE_DURATION_FLAGS holds to SHORTEST_PERIOD: 0 is
# the field's default there (the component defaults it), and anything from 1ns to under 1s spins as a zero
# flag would (a kubelet at nodeStatusUpdateFrequency 1ns patches its Node without pause)
CONFIG_PERIODS: dict[str, tuple[tuple[str, ...], ...]] = {
    "kubelet": (("syncFrequency",), ("fileCheckFrequency",), ("httpCheckFrequency",), ("nodeStatusUpdateFrequency",),
                ("nodeStatusReportFrequency",), ("runtimeRequestTimeout",), ("cpuManagerReconcilePeriod",)),
    "proxy": (("iptables", "syncPeriod"), ("ipvs", "syncPeriod"), ("nftables", "syncPeriod"), ("configSyncPeriod",)),
}


def _periods(configs: dict[str, dict[str, Any]]) -> Iterator[Finding]:
    for section, paths in CONFIG_PERIODS.items():
        for path in paths:
            present, value = value_at(configs[section], path)
            try:
                nanoseconds = go_duration_ns(value) if present and isinstance(value, str) else None
            except ValueError:
                nanoseconds = None  # the duration check names it
            if nanoseconds is not None and 0 < nanoseconds < SHORTEST_PERIOD_NS:
                yield (_loc(section, *path), f"{'.'.join(path)}: {value!r} is shorter than {SHORTEST_PERIOD}, the "
                       f"shortest kubesmith takes for this period: {_BINARY[section]} would repeat its work without "
                       "pause, as at zero (0 is its default here)", "error")


# a sysctl name or prefix pattern as the kubelet's allowlist takes it (pkg/kubelet/sysctl: "sysctl %q must have
# at most 253 characters and match regex"); the kubelet refuses to start otherwise
# (pkg/apis/policy/validation IsValidSysctlPattern: a segment may end in *)
_SYSCTL_SEGMENT = r"([a-z0-9][-_a-z0-9]*)?[a-z0-9*]"
_SYSCTL_PATTERN = re.compile(rf"({_SYSCTL_SEGMENT}[\./])*{_SYSCTL_SEGMENT}")
_CPU_LIST = re.compile(r"[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*")


def _kubelet_lists(config: dict[str, Any]) -> Iterator[Finding]:
    """allowedUnsafeSysctls patterns and reservedSystemCPUs (a CPU list, as cpuset.Parse reads it)."""
    sysctls = config.get("allowedUnsafeSysctls")
    for index, item in enumerate(sysctls if isinstance(sysctls, list) else ()):
        if isinstance(item, str) and (len(item) > 253 or not _SYSCTL_PATTERN.fullmatch(item)):
            yield (_loc("kubelet", "allowedUnsafeSysctls", index), f"{_shown(item)} is no sysctl name or pattern "
                   "(such as net.core.somaxconn or net.ipv4.*; no value): the kubelet refuses to start", "error")
    cpus = config.get("reservedSystemCPUs")
    if isinstance(cpus, str) and cpus.strip() and not _cpu_list_ok(cpus.strip()):
        yield (_loc("kubelet", "reservedSystemCPUs"), f"{_shown(cpus)} is no CPU list (such as 0-1 or 0,2-3, each "
               "range low to high): the kubelet refuses to start", "error")


def _cpu_list_ok(text: str) -> bool:
    if not _CPU_LIST.fullmatch(text):
        return False
    for item in text.split(","):
        low, _, high = item.partition("-")
        if high and int(low) > int(high):
            return False
    return True


def _json_uint32(value: Any) -> bool:
    """A JSON number a Go uint32 field decodes: an integer in range, not a boolean and not a string."""
    return isinstance(value, int) and go_int(value, "uint32") is not None


def _logging_verbosity(configs: dict[str, dict[str, Any]]) -> Iterator[Finding]:
    """logging.verbosity is a uint32: "cannot unmarshal number -1 into Go struct field ... verbosity"."""
    for section in ("kubelet", "proxy"):
        present, value = value_at(configs[section], ("logging", "verbosity"))
        if present and value is not None and not _json_uint32(value):
            yield (_loc(section, "logging", "verbosity"), f"{_BINARY[section]} reads logging.verbosity as a whole "
                   f"number from 0 to 4294967295, not {_shown(value)}: it refuses to start", "error")


def _kubelet(config: dict[str, Any], flags: dict[str, Any]) -> Iterator[Finding]:
    if isinstance(config.get("resolvConf"), str) and (problem := resolv_conf_problem(config["resolvConf"])):
        yield _loc("kubelet", "resolvConf"), problem, "error"
    if "containerLogMaxSize" in config and isinstance(config["containerLogMaxSize"], str) and \
            (problem := quantity_problem(config["containerLogMaxSize"])):
        yield _loc("kubelet", "containerLogMaxSize"), f"the kubelet refuses containerLogMaxSize: {problem}", "error"
    for field in _RESERVED:
        reserved = config.get(field)
        for name, value in (reserved.items() if isinstance(reserved, dict) else ()):
            if isinstance(name, str) and name not in _RESERVABLE:
                # cmd/kubelet/app parseResourceList: 'cannot reserve "gpu" resource'
                yield (_loc("kubelet", field, name), f"the kubelet reserves {', '.join(_RESERVABLE)} only, not "
                       f"{name!r}: it refuses to start", "error")
            elif problem := quantity_problem(value):
                yield _loc("kubelet", field, name), f"the kubelet refuses {field}.{name}: {problem}", "error"
            elif isinstance(value, str) and value.strip().startswith("-"):
                # cmd/kubelet/app: "resource quantity for \"memory\" cannot be negative"
                yield (_loc("kubelet", field, name), f"the kubelet refuses {field}.{name} {_shown(value)}: a "
                       "reservation is not negative; it refuses to start", "error")
            elif isinstance(value, str) and (amount := quantity_value(value)) is not None and amount > _MOST_RESERVED:
                yield (_loc("kubelet", field, name), f"{field}.{name} {_shown(value)} is more than any node has "
                       f"(beyond 64 bits in thousandths, the most a quantity's MilliValue holds): the kubelet refuses "
                       "a reservation above the node's capacity ('invalid Node Allocatable configuration')", "error")
            elif value is None or (isinstance(value, str) and quantity_value(value) is None):
                # 'failed to parse quantity "1e2147483648"' (the exponent is an int32), or null, which JSON gives
                # the map as "" ("quantities must match the regular expression")
                yield (_loc("kubelet", field, name), f"the kubelet refuses {field}.{name}: "
                       f"{'null' if value is None else _shown(value)} is no resource quantity (such as 500m, 1Gi "
                       "or 2)", "error")
    for field in _CGROUPS:
        path = config.get(field)
        if isinstance(path, str) and path and not path.startswith("/"):
            # pkg/kubelet/cm ParseCgroupfsToCgroupName trims one leading "/": "kubepods" is "/kubepods"
            yield (_loc("kubelet", field), f"{field} {_shown(path)} is no absolute cgroup path: the kubelet reads it "
                   f"from the cgroup hierarchy's root; write {'/' + path!r} (one cgroup, one spelling)", "error")
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
            elif field != "evictionMinimumReclaim" and isinstance(value, str) and _not_positive(value):
                # pkg/kubelet/eviction/helpers.go: "eviction threshold memory.available must be positive: -1Mi"
                yield (_loc("kubelet", field, signal), f"the kubelet refuses {field}.{signal} {_shown(value)}: an "
                       "eviction threshold is above zero (a percentage such as 5% or a quantity such as 100Mi); "
                       "it refuses to start", "error")
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


def _scheduler(config: dict[str, Any], plugins: frozenset[str] | None) -> Iterator[Finding]:
    """A profile without a name ("profiles[0].schedulerName: Required value"), duplicate profile names and
    enabled plugins the release lacks (all stop kube-scheduler v1.36.2); an extender reached without TLS or
    without checking its certificate (it receives every pod and node the scheduler considers, and its answers
    place pods). A plugin the release lacks under `disabled` or `pluginConfig` is a warning: kube-scheduler
    v1.36.2 starts and ignores it, so what was meant for a plugin reaches none."""
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
        if plugins is not None:
            yield from _scheduler_plugins(profile, index, plugins)
        yield from _score_weights(profile, index)
    extenders = config.get("extenders")
    for index, extender in enumerate(extenders if isinstance(extenders, list) else ()):
        url = extender.get("urlPrefix") if isinstance(extender, dict) else None
        if isinstance(url, str) and not url.startswith("https://"):
            yield (_loc("scheduler", "extenders", index, "urlPrefix"), f"{yaml_text(url)} is no https:// URL: "
                   "kube-scheduler would send the extender every pod and node it considers, and take its answers, "
                   "without TLS", "error")
        # "extenders[0].weight: Invalid value: 0: must have a positive weight applied to it" (a prioritizing one)
        weight = extender.get("weight", 0) if isinstance(extender, dict) else None
        if isinstance(extender, dict) and extender.get("prioritizeVerb") and _int(weight) is not None and weight <= 0:
            where = ("weight",) if "weight" in extender else ("prioritizeVerb",)
            given = f"not {weight}" if "weight" in extender else "and weight is unset (0)"
            yield (_loc("scheduler", "extenders", index, *where), f"an extender with a prioritizeVerb needs a weight "
                   f"of 1 or more, {given}: kube-scheduler refuses to start", "error")
        present, insecure = value_at(extender, ("tlsConfig", "insecure"))
        if present and insecure is True:
            yield (_loc("scheduler", "extenders", index, "tlsConfig", "insecure"), "kube-scheduler would not check "
                   "the extender's certificate: anyone on the path could read every pod and node it considers and "
                   "answer in its place; give the extender's CA in tlsConfig.caFile (or caData)", "error")


def _scheduler_plugins(profile: dict[str, Any], index: int, plugins: frozenset[str]) -> Iterator[Finding]:
    """Plugins a profile names that the release lacks: enabled, an error (kube-scheduler: 'ScorePlugin
    "NoSuchPlugin" does not exist'); disabled or configured, a warning (it starts, and ignores them)."""
    named: list[tuple[tuple[Any, ...], Any, str]] = []
    points = profile.get("plugins")
    for point, sets in (points.items() if isinstance(points, dict) else ()):
        for kind in ("enabled", "disabled"):
            items = sets.get(kind) if isinstance(sets, dict) else None
            named += [(("plugins", point, kind, item, "name"), plugin.get("name"), kind)
                      for item, plugin in enumerate(items if isinstance(items, list) else ())
                      if isinstance(plugin, dict)]
    configs = profile.get("pluginConfig")
    named += [(("pluginConfig", item, "name"), entry.get("name"), "pluginConfig")
              for item, entry in enumerate(configs if isinstance(configs, list) else ()) if isinstance(entry, dict)]
    for loc, plugin, kind in named:
        if not isinstance(plugin, str) or plugin in plugins or (kind == "disabled" and plugin == "*"):
            continue
        close = difflib.get_close_matches(plugin, sorted(plugins), n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        if kind == "enabled":
            yield (_loc("scheduler", "profiles", index, *loc), f"kube-scheduler has no plugin {plugin!r}: it "
                   f"refuses to start{hint}", "error")
        else:
            what = "disables nothing" if kind == "disabled" else "configures nothing"
            yield (_loc("scheduler", "profiles", index, *loc), f"kube-scheduler has no plugin {plugin!r}: it "
                   f"ignores the name, so this {what}{hint}", "warning")


def _score_weights(profile: dict[str, Any], index: int) -> Iterator[Finding]:
    """Score weights kube-scheduler can use (a weight counts at the score and multiPoint extension points
    alone; 0, the default, reads as 1): an int32 ('json: cannot unmarshal number 2147483648 into Go struct field
    Plugin.profiles.plugins.score.enabled.weight of type int32'), and not negative. The v1.36.2 framework
    adds weight x 100 per plugin into an int64 and refuses to start with "total score of Score plugins
    could overflow" once the sum went below zero and another plugin follows; where none follows, the plugin
    scores backwards (the nodes it prefers lose). There is no upper bound below int32: it starts with 101."""
    points = profile.get("plugins")
    for point in ("score", "multiPoint"):
        sets = points.get(point) if isinstance(points, dict) else None
        items = sets.get("enabled") if isinstance(sets, dict) else None
        for item, plugin in enumerate(items if isinstance(items, list) else ()):
            weight = _int(plugin.get("weight")) if isinstance(plugin, dict) else None
            if weight is None or 0 <= weight < 1 << 31:
                continue  # absent, or not an integer (the type check names it)
            name = plugin.get("name")
            why = "its configuration decoder reads a weight as a 32-bit integer, and it refuses to start" \
                if weight > 0 else "it refuses to start ('total score of Score plugins could overflow') unless " \
                "the plugin comes last, where it would score backwards"
            yield (_loc("scheduler", "profiles", index, "plugins", point, "enabled", item, "weight"),
                   f"kube-scheduler takes a score weight from 0 (read as 1) to {(1 << 31) - 1}, not {weight} "
                   f"for {name if isinstance(name, str) else 'this plugin'}: {why}", "error")


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
    """The IPVS scheduler the kernel has; kube-proxy v1.36.2: nodePortAddresses items "must be a valid CIDR",
    and "can't use both 'primary' and CIDRs"; a detectLocalMode's interface; bindAddress "not a valid textual representation of an IP
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
    elif isinstance(bind, str) and bind:
        try:
            canonical_ip(bind)
        except ValueError as error:  # an IPv6 spelling of an IPv4 address: one address, one text
            yield _loc("proxy", "bindAddress"), f"{error} (one address has one spelling here)", "error"
    section = config.get("mode") or typed_mode
    periods = config.get(section) if isinstance(section, str) else None
    given = {field: periods[field] for field in _SYNC_DEFAULTS
             if isinstance(periods, dict) and isinstance(periods.get(field), str)}
    try:  # a zero syncPeriod is defaulted (v1.36.2 starts with iptables.syncPeriod: 0s)
        sync = go_duration_ns(given.get("syncPeriod", "30s")) or go_duration_ns("30s")
        minimum = go_duration_ns(given.get("minSyncPeriod", "1s"))
    except ValueError:
        sync = minimum = 0  # the duration check names it
    if sync < SHORTEST_PERIOD_NS and sync != go_duration_ns("30s"):
        sync = minimum = 0  # negative or under 1s: the duration and period checks name it
    if minimum > sync >= 0 and minimum >= 0:
        field = "minSyncPeriod" if "minSyncPeriod" in given else "syncPeriod"
        yield (_loc("proxy", section, field), f"{section}.minSyncPeriod ({given.get('minSyncPeriod', '1s')}) is "
               f"longer than {section}.syncPeriod ({given.get('syncPeriod', '30s')}): kube-proxy refuses to start",
               "error")
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
            network = ipaddress.ip_network(item, strict=False) if isinstance(item, str) and "/" in item else None
        except ValueError:
            network = None
        if network is None:
            yield (_loc("proxy", "nodePortAddresses", index), f"{_shown(item)} is no CIDR (such as 10.0.0.0/8) "
                   "or 'primary': kube-proxy refuses to start", "error")
        elif problem := _cidr_spelling_problem(item, network):
            yield (_loc("proxy", "nodePortAddresses", index), problem, "error")


def _cidr_spelling_problem(text: str, network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> str | None:
    """A CIDR of one canonical spelling (issue 32): no zone suffix (Go's net.ParseCIDR refuses it), no IPv4
    range written IPv4-mapped (::ffff:10.0.0.0/104 is 10.0.0.0/8)."""
    if "%" in text:
        return f"{text!r} has a zone suffix (%...): a range takes none, and kube-proxy refuses to start"
    mapped = network.network_address.ipv4_mapped if isinstance(network, ipaddress.IPv6Network) else None
    if mapped is not None and network.prefixlen >= 96:
        return (f"{text!r} is an IPv4-mapped IPv6 range: write {f'{mapped}/{network.prefixlen - 96}'!r} (an "
                "address has one spelling)")
    return None


def _not_positive(value: Any) -> bool:
    """A resource quantity (its text, or a number) of zero or below."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return value <= 0
    text = str(value).strip()
    if text.startswith("-"):
        return True
    digits = re.match(r"\+?([0-9]*\.?[0-9]*)", text)
    return bool(digits and digits.group(1).strip(".") and float(digits.group(1)) == 0)


def _shown(value: Any) -> str:
    return yaml_text(value) if isinstance(value, str) else repr(value)


def _loc(section: str, *path: Any) -> tuple[Any, ...]:
    return ("spec", "components", section, "extraConfig", *path)
