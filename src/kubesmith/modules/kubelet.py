"""kubelet: runs pods on every host with the `node` role.

Configured through a KubeletConfiguration file (flags only for what has no config field).
Webhook authentication and authorization, no read-only port, no anonymous access.

The node's name is the spec's host name, always: its certificates say `system:node:<name>`, and
NodeRestriction lets a kubelet touch only the Node of that name, so kubesmith passes the name
(`--hostname-override`) rather than letting the kubelet take the operating system's host name.
CIS 4.2.7 (manual) asks not to set that flag; here it states the identity instead of changing it.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from kubesmith import layout
from kubesmith.modules.api_load_balancer import SERVICE as API_LB
from kubesmith.modules.apiserver import STRONG_CIPHERS
from kubesmith.modules.base import (COMMON_FLAGS, CONFIG, DOCUMENT, PKI, CisRule, ComponentOptions, Managed, Module,
                                    NoOption, OptionProblem, Trial, effective_gates, render_flags)
from kubesmith.modules.container_runtime import runtime_endpoint
from kubesmith.modules.kubeconfigs import api_gate, kubeconfig_file
from kubesmith.durations import go_duration_ns, go_duration_problem, go_seconds
from kubesmith.modules.merge import deep_merge
from kubesmith.pki.certlist import authority, certificate
from kubesmith.vocabulary.facts import Contribution, HostContext
from kubesmith.vocabulary.model import File, Probe, Service
from kubesmith.vocabulary.types import (MAX_SERVERS, MAX_TAINTS, AbsolutePath, ExtraConfig, GoDuration, IPAddress, Port,
                                  StreamingIdleTimeout, Taint, Text, at_most, go_int, split_taint, taint_problem)

KUBELET_CIPHERS = tuple(name for name in STRONG_CIPHERS if name.startswith("TLS_ECDHE_"))


DnsServers = Annotated[list[IPAddress], at_most(MAX_SERVERS, "DNS servers", "a pod's resolver reads 3")]


class KubeletOptions(ComponentOptions):
    port: Port = Field(default=10250, description="HTTPS port of the kubelet API.")
    healthz_port: Port = Field(default=10248, description="Plain-HTTP health port on 127.0.0.1.")
    root_dir: AbsolutePath = Field(default=f"{layout.LIB}/kubelet", description="Kubelet state directory.")
    max_pods: int = Field(default=110, ge=1, description="Maximum pods per node.")
    pod_pids_limit: int = Field(default=4096, ge=-1, description="Maximum processes per pod (CIS 4.2.13).")
    container_runtime_endpoint: Text | None = Field(
        default=None, description="CRI socket of the container runtime; default: spec.components.containerRuntime.socket.",
        json_schema_extra={"x-derived-from": "spec.components.containerRuntime.socket"})
    cgroup_driver: str | None = Field(default=None, pattern="^(systemd|cgroupfs)$", description="Cgroup driver, "
                                      "shared with containerd; default: systemd where systemd is PID 1, else cgroupfs.",
                                      json_schema_extra={"x-derived-from": "the host's init system"})
    cluster_dns: DnsServers | None = Field(
        default=None, min_length=1, description="DNS servers for pods (at least one: an empty list would be read as "
        "the default); default: spec.network.dnsServiceIp.",
        json_schema_extra={"x-derived-from": "spec.network.dnsServiceIp"})
    cluster_domain: Text | None = Field(default=None, description="DNS domain for pods; default: "
                                       "spec.network.dnsDomain.",
                                       json_schema_extra={"x-derived-from": "spec.network.dnsDomain"})
    register_with_taints: Annotated[list[Taint], at_most(MAX_TAINTS, "taints", "a node needs a few")] = Field(
        default=[], description="Taints (key=value:Effect) set at registration.")
    seccomp_default: bool = Field(default=True, description="Run pods with the RuntimeDefault seccomp profile.")
    protect_kernel_defaults: bool = Field(default=False,
                                          description="Fail when kernel tunables differ from the kubelet's needs.")
    streaming_connection_idle_timeout: StreamingIdleTimeout = Field(
        default="4h", description="Idle timeout of exec/attach/port-forward streams (at least 1m).")
    shutdown_grace_period: GoDuration = Field(
        default="30s", description="Graceful node shutdown where systemd is PID 1: on a reboot the kubelet holds "
        "it at most this long (a logind inhibitor) to stop the pods, so Services stop sending to them before the "
        "host goes (0s: off). Pods stopped so end Failed; their controllers replace them.")
    shutdown_grace_period_critical_pods: GoDuration = Field(
        default="15s", description="The part of shutdownGracePeriod kept for critical pods (CoreDNS), stopped last: "
        "more than CoreDNS's lame-duck time, so it leaves its Service before it stops answering. Unset, it is "
        "15s or shutdownGracePeriod when that is shorter.")
    extra_config: ExtraConfig = Field(default={}, description="Merged into the KubeletConfiguration document.")


def critical_pods_grace(options: KubeletOptions) -> str:
    """The critical pods' share of the shutdown delay. Left at its default, it is clamped to the whole
    (shutdownGracePeriod: 10s gives 10s; 0s, off, gives 0s): the kubelet refuses a share longer than the
    whole, and that conflict would be kubesmith's own. Set by the user, it is taken as written (check())."""
    share = options.shutdown_grace_period_critical_pods
    if "shutdown_grace_period_critical_pods" in options.model_fields_set:
        return share
    grace = options.shutdown_grace_period
    return grace if go_duration_ns(grace) < go_duration_ns(share) else share

_TOKEN_WEBHOOK = "kubesmith's kubelet configuration (always on: the kubelet checks bearer tokens with the API server)"
_PROBED = "its readiness probe's address (127.0.0.1: the endpoint is plain HTTP without authentication, so it " \
    "stays on loopback)"
# a node with the node role is one the cluster schedules onto and reaches: kubesmith waits for it to register
# and be Ready, and the API server dials its kubelet's port for logs, exec, port-forward and metrics
_REGISTERS = NoOption("the kubelet would never register its Node: nothing is scheduled there, and kubesmith waits "
                      "for every node to register and be Ready; a host without workloads takes no node role")
_SERVES = NoOption("the kubelet would serve no API on its port: the API server's logs, exec, port-forward and "
                   "metrics through it would fail; a host without workloads takes no node role")
# a URL the kubelet would fetch pods from and run unadmitted (privileged, hostPath...), over plain HTTP too
_STATIC_URL = NoOption("kubesmith runs no static pods from a URL: the kubelet would run whatever that server hands "
                       "it, past authorization and admission; deploy workloads through the API (spec.addons)")


def _zero_duration(value: Any) -> bool:
    """0 as Go reads it (`0`, `0s`, `0h0m`, `-0.0s`...); an unreadable duration is not: the duration check of
    each route (typed option, extraConfig field, flag) names it, as the one error of that value."""
    try:
        return go_duration_ns(str(value)) == 0
    except ValueError:
        return False


class KubeletModule(Module):
    key = "kubelet"
    position = 80
    title = "kubelet node agent"
    options = KubeletOptions
    roles = frozenset({"node"})
    binary = "kubelet"
    trial = Trial("kubelet", 60.0, rank=3)
    # Bind addresses and ports: kubesmith's probes, firewall notes and port checks follow the typed ports, so
    # `port` and `healthzPort` are managed. `healthzBindAddress` is 127.0.0.1, where its probe dials: the
    # endpoint is plain HTTP without authentication, so widening it to 0.0.0.0 would serve it to the network,
    # and any other address would break the probe; it is managed, not merely checked for the unspecified
    # address, because no value but kubesmith's own works. `address` (the authenticated API, 0.0.0.0 already,
    # as the API server must reach it) stays the operator's: narrowing it to one interface is legitimate.
    managed = Managed(
        flags=COMMON_FLAGS | {
            "config": CONFIG, "kubeconfig": PKI, "hostname-override": "spec.hosts[].name",
            "node-ip": "spec.hosts[].address", "root-dir": "rootDir", "node-labels": "spec.hosts[].labels",
            "client-ca-file": PKI, "tls-cert-file": PKI, "tls-private-key-file": PKI,
            "authentication-token-webhook": _TOKEN_WEBHOOK, "cluster-dns": "clusterDns",
            "port": "port", "healthz-port": "healthzPort", "healthz-bind-address": _PROBED,
            "cluster-domain": "spec.network.dnsDomain", "container-runtime-endpoint": "containerRuntimeEndpoint",
            "cgroup-driver": "cgroupDriver", "manifest-url": _STATIC_URL,
            "register-node": _REGISTERS, "enable-server": _SERVES,
        },
        harmless={"register-node": True, "enable-server": True},
        # the client CA, serving certificate and token webhook, the DNS server (clusterDns, which CoreDNS's
        # Service address follows)
        config=DOCUMENT | {
            ("authentication", "webhook", "enabled"): _TOKEN_WEBHOOK,
            ("authentication", "x509", "clientCAFile"): PKI, ("tlsCertFile",): PKI, ("tlsPrivateKeyFile",): PKI,
            ("clusterDNS",): "clusterDns", ("port",): "port", ("healthzPort",): "healthzPort",
            ("healthzBindAddress",): _PROBED, ("staticPodURL",): _STATIC_URL,
            ("clusterDomain",): "spec.network.dnsDomain", ("containerRuntimeEndpoint",): "containerRuntimeEndpoint",
            ("cgroupDriver",): "cgroupDriver", ("registerNode",): _REGISTERS,
            ("enableServer",): _SERVES,
        },
        same={("apiVersion",): "kubelet.config.k8s.io/v1beta1", ("kind",): "KubeletConfiguration",
              ("authentication", "webhook", "enabled"): True, ("healthzBindAddress",): "127.0.0.1",
              ("registerNode",): True, ("enableServer",): True},
    )
    cis_rules = (
        CisRule("4.2.1", "kubelet anonymous authentication off", flag="anonymous-auth", secure=False),
        CisRule("4.2.2", "kubelet authorization mode not AlwaysAllow", flag="authorization-mode",
                weak=lambda value: str(value) != "Webhook"),
        CisRule("4.2.4", "kubelet read-only port 0", flag="read-only-port", weak=lambda value: go_int(value) != 0),
        CisRule("4.2.5", "kubelet streaming connection idle timeout not 0", flag="streaming-connection-idle-timeout",
                weak=_zero_duration),
        CisRule("4.2.6", "kubelet makes its iptables utility chains", flag="make-iptables-util-chains", secure=True),
        CisRule("4.2.14", "kubelet seccomp default on", flag="seccomp-default", secure=True),
    )

    def check(self, spec: Any, options: KubeletOptions, registry: Any) -> list[OptionProblem]:
        # the kubelet's own validation: "shutdownGracePeriodCriticalPods ... must be <= shutdownGracePeriod"
        critical, grace = critical_pods_grace(options), options.shutdown_grace_period
        if go_duration_ns(critical) > go_duration_ns(grace):  # only as the user set it: a default is clamped
            return [OptionProblem(("shutdownGracePeriodCriticalPods",), f"{critical}"
                                  f" is longer than shutdownGracePeriod ({grace}), which it is a part of: the kubelet "
                                  "refuses it; set it no longer than shutdownGracePeriod")]
        return _image_gc_problems(options) + _taint_problems(options)

    def contribute(self, ctx: HostContext, options: KubeletOptions) -> Contribution:
        host = ctx.host
        serving = certificate("kubelet-serving")
        kubeconfig = kubeconfig_file(ctx, "kubelet", "kubelet-client", "root")
        config_path = layout.config_path("kubelet.yaml")
        ca_file = layout.pki_path(authority("kubernetes-ca").cert_file)
        config = ctx.shared(("kubelet-configuration", host.environment), lambda: File(
            path=config_path, mode=0o600, data=kubelet_configuration(ctx, options), format="yaml"))  # CIS 4.1.9
        labels = ",".join(f"{key}={value}" for key, value in host.labels)
        flags = {
            "config": config_path,
            "kubeconfig": kubeconfig.path,
            "hostname-override": host.name,
            "node-ip": host.address,
            "root-dir": options.root_dir,
            "node-labels": labels or None,
            "v": options.verbosity,
        }
        watched = (serving.cert_path, serving.key_path, kubeconfig.path)
        grace = shutdown_seconds(ctx, options)
        logind = [ctx.shared(("kubelet-logind", grace), lambda: File(
            LOGIND_DROP_IN, 0o644, content=f"[Login]\nInhibitDelayMaxSec={grace:g}\n"))] if grace else []
        # logind must allow the delay before the kubelet asks for it (node/logind.py says why)
        pre = (("ExecStartPre", f"-{layout.BIN}/kubesmith node shutdown-delay --seconds {grace:g}"),) if grace else ()
        service = Service(
            name="kubelet",
            component=self.key,
            description="Kubernetes node agent",
            binary="kubelet",
            argv=render_flags(flags, options.extra_args),
            user="root",
            group="root",
            wanted_by="node-online.target",
            after=("network-online.target", "containerd.service", "kube-apiserver.service", f"{API_LB}.service"),
            gates=(api_gate(ctx, "kubelet-client"),),
            readiness=Probe(kind="http", host="127.0.0.1", port=options.healthz_port, path="/healthz",
                            run_on=host.name),
            needs_files=(ca_file, config_path, *watched),
            watch_files=watched,
            state_directory=options.root_dir,
            ports=(options.port, options.healthz_port),
            hardening=False,
            unit_settings=pre,
        )
        return Contribution(
            services=[service],
            files=[kubeconfig, config, *logind],
            certificates=["kubelet-serving", "kubelet-client"],
        )


LOGIND_DROP_IN = "/etc/systemd/logind.conf.d/99-kubesmith-kubelet.conf"


def shutdown_seconds(ctx: HostContext, options: KubeletOptions) -> float:
    """The graceful shutdown delay this host's kubelet asks logind for: 0 without systemd."""
    if ctx.host.environment.init_system != "systemd":
        return 0.0
    return go_seconds(options.shutdown_grace_period)


# Lower and upper bounds the kubelet's own validation compares (pkg/kubelet/apis/config/validation):
# (lower's field, its flag, its default, upper's field, its flag, its default); a flag wins over the field
_IMAGE_GC_THRESHOLDS = ("imageGCLowThresholdPercent", "image-gc-low-threshold", 80,
                        "imageGCHighThresholdPercent", "image-gc-high-threshold", 85)


def _image_gc_problems(options: KubeletOptions) -> list[OptionProblem]:
    """The kubelet refuses to start when image garbage collection's low threshold is not below its high
    one ("imageGCLowThresholdPercent ... must be less than imageGCHighThresholdPercent"), or when a
    non-zero imageMaximumGCAge is not above imageMinimumGCAge."""
    low_field, low_flag, low_default, high_field, high_flag, high_default = _IMAGE_GC_THRESHOLDS
    low, low_loc = _int_setting(options, low_field, low_flag, low_default)
    high, high_loc = _int_setting(options, high_field, high_flag, high_default)
    problems: list[OptionProblem] = []
    if low is not None and high is not None and low >= high and (low_loc or high_loc):
        loc = low_loc or high_loc
        problems.append(OptionProblem(loc, f"the image garbage collection's low threshold ({low}%) is not below "
                                      f"its high threshold ({high}%): the kubelet refuses to start; set "
                                      f"{low_field} below {high_field}"))
    minimum = options.extra_config.get("imageMinimumGCAge", "2m")
    maximum = options.extra_config.get("imageMaximumGCAge")
    if isinstance(minimum, str) and isinstance(maximum, str) and not go_duration_problem(minimum) \
            and not go_duration_problem(maximum):
        if 0 != go_duration_ns(maximum) <= go_duration_ns(minimum):
            problems.append(OptionProblem(("extraConfig", "imageMaximumGCAge"), f"{maximum} is not longer than "
                                          f"imageMinimumGCAge ({minimum}): the kubelet refuses to start; set it "
                                          "longer, or 0s for no maximum"))
    return problems


def _int_setting(options: KubeletOptions, field: str, flag: str, default: int
                 ) -> tuple[int | None, tuple[str, ...] | None]:
    """(value, where the file sets it) of an integer setting: the flag, else the configuration field, else
    the default (where: None); value None when it is no integer (the type checks name that)."""
    if flag in options.extra_args:
        return go_int(options.extra_args[flag], "int32"), ("extraArgs", flag)
    if field in options.extra_config:
        value = options.extra_config[field]
        return (value if isinstance(value, int) and not isinstance(value, bool) else None), ("extraConfig", field)
    return default, None


def kubelet_configuration(ctx: HostContext, options: KubeletOptions) -> dict[str, Any]:
    """The KubeletConfiguration document: the same on every node of one environment (the host shows in
    flags only)."""
    cluster = ctx.cluster
    environment = ctx.host.environment
    serving = certificate("kubelet-serving")
    ca_file = layout.pki_path(authority("kubernetes-ca").cert_file)
    gates = effective_gates(ctx, "kubelet", options.feature_gates)
    document = deep_merge({
        "apiVersion": ctx.registry.config_api("KubeletConfiguration", cluster.minor),
        "kind": "KubeletConfiguration",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True, "cacheTTL": "2m0s"},
                           "x509": {"clientCAFile": ca_file}},
        "authorization": {"mode": "Webhook"},
        "address": "0.0.0.0",
        "port": options.port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": options.healthz_port,
        "tlsCertFile": serving.cert_path,
        "tlsPrivateKeyFile": serving.key_path,
        "tlsCipherSuites": list(KUBELET_CIPHERS),
        "tlsMinVersion": "VersionTLS12",
        "clusterDomain": options.cluster_domain or cluster.dns_domain,
        "clusterDNS": options.cluster_dns or [cluster.dns_service_ip],
        "cgroupDriver": options.cgroup_driver or environment.cgroup_driver,
        "failCgroupV1": False if environment.cgroup_version == 1 else None,
        # where the cgroup controllers are read-only (a container), the kubelet cannot make its
        # QoS and allocatable cgroups; it still runs and registers the node
        "cgroupsPerQOS": None if environment.cgroups_writable else False,
        "enforceNodeAllocatable": None if environment.cgroups_writable else [],
        "containerRuntimeEndpoint": options.container_runtime_endpoint or runtime_endpoint(ctx),
        "maxPods": options.max_pods,
        "podPidsLimit": options.pod_pids_limit,
        "seccompDefault": options.seccomp_default,
        "protectKernelDefaults": options.protect_kernel_defaults,
        "streamingConnectionIdleTimeout": options.streaming_connection_idle_timeout,
        "makeIPTablesUtilChains": True,
        "eventRecordQPS": 5,
        "serverTLSBootstrap": False,
        "registerWithTaints": [_taint(text) for text in options.register_with_taints] or None,
        "featureGates": gates or None,
        # graceful node shutdown needs logind, which only a systemd host has
        "shutdownGracePeriod": options.shutdown_grace_period if environment.init_system == "systemd" else None,
        "shutdownGracePeriodCriticalPods": critical_pods_grace(options)
        if environment.init_system == "systemd" else None,
    }, options.extra_config)
    document = {key: value for key, value in document.items() if value is not None}
    return document


def _taint(text: str) -> dict[str, str]:
    key, value, effect = split_taint(text)
    return {"key": key, "value": value, "effect": effect} if value else {"key": key, "effect": effect}


def _taint_problems(options: KubeletOptions) -> list[OptionProblem]:
    """registerWithTaints, typed or through extraConfig: the API server refuses a Node whose taints it
    does not validate (a bad key, value or effect, a key and effect twice), so the kubelet never registers."""
    problems: list[OptionProblem] = []
    seen: dict[tuple[str, str], str] = {}
    typed = [(("registerWithTaints", index), split_taint(text))
             for index, text in enumerate(options.register_with_taints)]
    flag = options.extra_args.get("register-with-taints")
    for text in flag.split(",") if isinstance(flag, str) else []:
        if problem := taint_problem(*split_taint(text)):
            return [OptionProblem(("extraArgs", "register-with-taints"), f"{text!r}: {problem}")]
        typed.append((("extraArgs", "register-with-taints"), split_taint(text)))
    configured = options.extra_config.get("registerWithTaints")
    items = [(("extraConfig", "registerWithTaints", index), item)
             for index, item in enumerate(configured if isinstance(configured, list) else [])]
    for loc, item in items:
        if not isinstance(item, dict):
            problems.append(OptionProblem(loc, "a taint is a mapping {key, value, effect}"))
            continue
        if problem := taint_problem(item.get("key"), item.get("value", ""), item.get("effect")):
            problems.append(OptionProblem(loc, problem))
            continue
        typed.append((loc, (item["key"], item.get("value", ""), item["effect"])))
    for loc, (key, _, effect) in typed:
        where = ".".join(str(part) if isinstance(part, str) else f"[{part}]" for part in loc).replace(".[", "[")
        if (key, effect) in seen:
            problems.append(OptionProblem(loc, f"the taint {key}:{effect} repeats {seen[key, effect]}: the API "
                                          "server refuses a key and effect twice, so the kubelet never registers"))
        seen.setdefault((key, effect), where)
    return problems


MODULE = KubeletModule()
