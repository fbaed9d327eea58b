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
from urllib.parse import urlsplit

from kubesmith.durations import go_duration_ns
from kubesmith.spec.effective import Finding, resolv_conf_problem, toml_type_findings, toml_value_at, value_at
from kubesmith.spec.errors import yaml_text
from kubesmith.spec.managed import MANAGED_CONFIG, config_field, containerd_written
from kubesmith.spec.paths import TYPED_CONFIG_DIRECTORIES

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
    """Duplicate profile names and enabled plugins the release lacks (both stop kube-scheduler); an extender
    reached without TLS or without checking its certificate (it receives every pod and node the scheduler
    considers, and its answers place pods). A plugin the release lacks under `disabled` or `pluginConfig` is
    a warning: kube-scheduler v1.36.2 starts and ignores it, so what was meant for a plugin reaches none."""
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
        if plugins is not None:
            yield from _scheduler_plugins(profile, index, plugins)
    extenders = config.get("extenders")
    for index, extender in enumerate(extenders if isinstance(extenders, list) else ()):
        url = extender.get("urlPrefix") if isinstance(extender, dict) else None
        if isinstance(url, str) and not url.startswith("https://"):
            yield (_loc("scheduler", "extenders", index, "urlPrefix"), f"{yaml_text(url)} is no https:// URL: "
                   "kube-scheduler would send the extender every pod and node it considers, and take its answers, "
                   "without TLS", "error")
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
