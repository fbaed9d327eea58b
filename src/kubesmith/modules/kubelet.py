"""kubelet: runs pods on every host with the `node` role.

Configured through a KubeletConfiguration file (flags only for what has no config field).
Webhook authentication and authorization, no read-only port, no anonymous access.

The node's name is the spec's host name, always: its certificates say `system:node:<name>`, and
NodeRestriction lets a kubelet touch only the Node of that name, so kubesmith passes the name
(`--hostname-override`) rather than letting the kubelet take the operating system's host name.
CIS 4.2.7 (manual) asks not to set that flag; here it states the identity instead of changing it.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from kubesmith import layout
from kubesmith.modules.api_load_balancer import SERVICE as API_LB
from kubesmith.modules.apiserver import STRONG_CIPHERS
from kubesmith.modules.base import ComponentOptions, Module, OptionProblem, effective_gates, render_flags
from kubesmith.modules.container_runtime import runtime_endpoint
from kubesmith.modules.kubeconfigs import api_gate, kubeconfig_file
from kubesmith.durations import go_duration_ns, go_seconds
from kubesmith.modules.merge import deep_merge
from kubesmith.pki.certlist import authority, certificate
from kubesmith.plan.facts import Contribution, HostContext
from kubesmith.plan.model import File, Probe, Service
from kubesmith.spec.types import AbsolutePath, ExtraConfig, GoDuration, IPAddress, Port

KUBELET_CIPHERS = tuple(name for name in STRONG_CIPHERS if name.startswith("TLS_ECDHE_"))


class KubeletOptions(ComponentOptions):
    port: Port = Field(default=10250, description="HTTPS port of the kubelet API.")
    healthz_port: Port = Field(default=10248, description="Plain-HTTP health port on 127.0.0.1.")
    root_dir: AbsolutePath = Field(default=f"{layout.LIB}/kubelet", description="Kubelet state directory.")
    max_pods: int = Field(default=110, ge=1, description="Maximum pods per node.")
    pod_pids_limit: int = Field(default=4096, ge=-1, description="Maximum processes per pod (CIS 4.2.13).")
    container_runtime_endpoint: str | None = Field(
        default=None, description="CRI socket of the container runtime; default: spec.components.containerRuntime.socket.",
        json_schema_extra={"x-derived-from": "spec.components.containerRuntime.socket"})
    cgroup_driver: str | None = Field(default=None, pattern="^(systemd|cgroupfs)$", description="Cgroup driver, "
                                      "shared with containerd; default: systemd where systemd is PID 1, else cgroupfs.",
                                      json_schema_extra={"x-derived-from": "the host's init system"})
    cluster_dns: list[IPAddress] | None = Field(default=None, description="DNS servers for pods; default: "
                                          "spec.network.dnsServiceIp.",
                                          json_schema_extra={"x-derived-from": "spec.network.dnsServiceIp"})
    cluster_domain: str | None = Field(default=None, description="DNS domain for pods; default: "
                                       "spec.network.dnsDomain.",
                                       json_schema_extra={"x-derived-from": "spec.network.dnsDomain"})
    register_with_taints: list[str] = Field(default=[], description="Taints (key=value:Effect) set at registration.")
    seccomp_default: bool = Field(default=True, description="Run pods with the RuntimeDefault seccomp profile.")
    protect_kernel_defaults: bool = Field(default=False,
                                          description="Fail when kernel tunables differ from the kubelet's needs.")
    streaming_connection_idle_timeout: GoDuration = Field(default="4h",
                                                   description="Idle timeout of exec/attach/port-forward streams.")
    shutdown_grace_period: GoDuration = Field(
        default="30s", description="Graceful node shutdown where systemd is PID 1: on a reboot the kubelet holds "
        "it at most this long (a logind inhibitor) to stop the pods, so Services stop sending to them before the "
        "host goes (0s: off). Pods stopped so end Failed; their controllers replace them.")
    shutdown_grace_period_critical_pods: GoDuration = Field(
        default="15s", description="The part of shutdownGracePeriod kept for critical pods (CoreDNS), stopped last: "
        "more than CoreDNS's lame-duck time, so it leaves its Service before it stops answering.")
    extra_config: ExtraConfig = Field(default={}, description="Merged into the KubeletConfiguration document.")


def critical_pods_grace(options: KubeletOptions) -> str:
    """The critical pods' share of the shutdown delay: none when the delay is off (`shutdownGracePeriod:
    0s`) and the share was left at its default, which the kubelet would refuse as longer than the whole."""
    field = "shutdown_grace_period_critical_pods"
    if go_duration_ns(options.shutdown_grace_period) == 0 and field not in options.model_fields_set:
        return "0s"
    return options.shutdown_grace_period_critical_pods


class KubeletModule(Module):
    key = "kubelet"
    title = "kubelet node agent"
    options = KubeletOptions
    roles = frozenset({"node"})
    binary = "kubelet"

    def check(self, spec: Any, options: KubeletOptions, registry: Any) -> list[OptionProblem]:
        # the kubelet's own validation: "shutdownGracePeriodCriticalPods ... must be <= shutdownGracePeriod"
        critical, grace = critical_pods_grace(options), options.shutdown_grace_period
        if go_duration_ns(critical) > go_duration_ns(grace):
            default = "shutdown_grace_period_critical_pods" not in options.model_fields_set
            return [OptionProblem(("shutdownGracePeriodCriticalPods",), f"{critical}{' (its default)' if default else ''}"
                                  f" is longer than shutdownGracePeriod ({grace}), which it is a part of: the kubelet "
                                  "refuses it; set it no longer than shutdownGracePeriod")]
        return []

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
    key_value, _, effect = text.partition(":")
    key, _, value = key_value.partition("=")
    return {"key": key, "value": value, "effect": effect or "NoSchedule"} if value else \
        {"key": key, "effect": effect or "NoSchedule"}
