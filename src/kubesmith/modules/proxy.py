"""kube-proxy: service routing on every node, configured through KubeProxyConfiguration."""

from __future__ import annotations

import ipaddress
from typing import Any

from pydantic import Field

from kubesmith import layout
from kubesmith.modules.api_load_balancer import SERVICE as API_LB
from kubesmith.modules.base import (COMMON_FLAGS, CONFIG, DOCUMENT, MASTER, PKI, CisRule, ComponentOptions, Managed,
                                    Module, NoOption, OptionProblem, Trial, effective_gates, render_flags)
from kubesmith.modules.kubeconfigs import api_gate, kubeconfig_file
from kubesmith.modules.merge import deep_merge
from kubesmith.vocabulary.facts import Contribution, HostContext
from kubesmith.vocabulary.model import File, Probe, Service
from kubesmith.vocabulary.types import Cidr, ExtraConfig, Port, canonical_ip


class ProxyOptions(ComponentOptions):
    mode: str = Field(default="iptables", pattern="^(iptables|ipvs|nftables)$", description="Proxy mode.")
    cluster_cidr: Cidr | None = Field(default=None, description="Pod range; default: spec.network.clusterCidr.",
                                      json_schema_extra={"x-derived-from": "spec.network.clusterCidr"})
    healthz_port: Port = Field(default=10256, description="Plain-HTTP health port.")
    metrics_bind_address: str = Field(default="127.0.0.1:10249", description="Metrics endpoint (CIS: loopback).")
    extra_config: ExtraConfig = Field(default={}, description="Merged into the KubeProxyConfiguration document.")

_EXITS = NoOption("kube-proxy would clean up, initialise or write its configuration, and exit, instead of proxying")
# kube-proxy takes only its logging flags over the configuration file (copyLogsFromFlags; v1.36.2 starts with
# --proxy-mode=bogus or --conntrack-max-per-core=-5 next to --config)
_LOGGING_FLAGS = frozenset({"v", "vmodule", "logging-format", "log-flush-frequency", "log-json-info-buffer-size",
                            "log-json-split-stream", "log-text-info-buffer-size", "log-text-split-stream"})



def _metrics_off_loopback(value: Any) -> bool:
    """kube-proxy's metrics address off loopback. An empty one is its default, 127.0.0.1:10249 (kube-proxy
    v1.36 defaults "" from the configuration file and the flag alike; kubeadm's generated file writes "")."""
    if str(value) == "" or _bind_address_problem(str(value)) or _spelling_problem(str(value)):
        return False  # kube-proxy refuses it, or it is another spelling of an address: ProxyModule.check names it
    host = metrics_endpoint(str(value))[0]
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host != "localhost"


def _spelling_problem(value: str) -> str | None:
    """An address of the metrics endpoint in another text than its canonical one (`[::ffff:127.0.0.1]:10249`,
    `fe80::1%eth0`), or None."""
    host = metrics_endpoint(value)[0]
    try:
        ipaddress.ip_address(host.partition("%")[0])
        canonical_ip(host)
    except ValueError as error:
        return None if "%" not in host and "mapped" not in str(error) and "stands for" not in str(error) \
            else f"{str(error)} (metricsBindAddress; one address has one spelling here)"
    return None


class ProxyModule(Module):
    key = "proxy"
    position = 90
    title = "kube-proxy service routing"
    options = ProxyOptions
    roles = frozenset({"node"})
    binary = "kube-proxy"
    trial = Trial("kube-proxy", 30.0, rank=6)
    # healthzBindAddress (0.0.0.0:<healthzPort>, which its probe dials on the host's address) follows the typed
    # port; bindAddress stays the operator's: narrowing it to one interface is legitimate, and 0.0.0.0 widens
    # nothing
    managed = Managed(
        flags=COMMON_FLAGS | {"config": CONFIG, "hostname-override": "spec.hosts[].name",
                              "healthz-bind-address": "healthzPort", "master": MASTER,
                              **dict.fromkeys(("cleanup", "init-only", "write-config-to"), _EXITS)},
        config=DOCUMENT | {("clientConnection", "kubeconfig"): PKI, ("healthzBindAddress",): "healthzPort",
                           ("clusterCIDR",): "clusterCidr"},
        same={("apiVersion",): "kubeproxy.config.k8s.io/v1alpha1", ("kind",): "KubeProxyConfiguration"},
        ignored_with_config=lambda flag: flag not in _LOGGING_FLAGS,
    )
    cis_rules = (
        CisRule("4.3.1", "kube-proxy metrics bound to loopback", flag="metrics-bind-address",
                weak=_metrics_off_loopback),
    )

    def check(self, spec: Any, options: ProxyOptions, registry: Any) -> list[OptionProblem]:
        """kube-proxy's own validation: metricsBindAddress is HOST:PORT with a port up to 65535 (or empty: off)."""
        problems = []
        places = [(("metricsBindAddress",), options.metrics_bind_address)]
        # set in both places, extraConfig's is already one error (spec/effective.py: "sets what ... already sets")
        if "metrics_bind_address" not in options.model_fields_set:
            places.append((("extraConfig", "metricsBindAddress"), options.extra_config.get("metricsBindAddress")))
        for loc, value in places:
            if isinstance(value, str) and value and (problem := _bind_address_problem(value)
                                                     or _spelling_problem(value)):
                problems.append(OptionProblem(loc, problem))
        configured = options.extra_config.get("mode")
        if (configured or options.mode) == "nftables" and (problem := _nftables_problem(spec, options)):
            problems.append(OptionProblem(("extraConfig", "mode") if configured else ("mode",), problem))
        return problems

    def contribute(self, ctx: HostContext, options: ProxyOptions) -> Contribution:
        host = ctx.host
        kubeconfig = kubeconfig_file(ctx, "kube-proxy", "kube-proxy-client", "root")
        config_path = layout.config_path("kube-proxy.yaml")
        config = ctx.shared("kube-proxy-configuration", lambda: File(
            path=config_path, mode=0o644, data=proxy_configuration(ctx, options, kubeconfig.path), format="yaml"))
        flags = {"config": config_path, "hostname-override": host.name, "v": options.verbosity}
        service = Service(
            name="kube-proxy",
            component=self.key,
            description="Kubernetes service proxy",
            binary="kube-proxy",
            argv=render_flags(flags, options.extra_args),
            user="root",
            group="root",
            wanted_by="node-online.target",
            after=("network-online.target", "kubelet.service", f"{API_LB}.service"),  # node name: modules/kubelet.py
            gates=(api_gate(ctx, "kube-proxy-client"),),
            readiness=Probe(kind="http", host=host.address, port=options.healthz_port, path="/healthz"),
            needs_files=(config_path, kubeconfig.path),
            watch_files=(kubeconfig.path,),
            ports=tuple(port for port in (options.healthz_port, metrics_port(options.metrics_bind_address)) if port),
            hardening=False,
            undo=("--cleanup",),  # `kubesmith run` removes the rules when it stops; hosts keep them across restarts
        )
        return Contribution(
            services=[service],
            files=[kubeconfig, config],
            certificates=["kube-proxy-client"],
        )


def proxy_configuration(ctx: HostContext, options: ProxyOptions, kubeconfig: str) -> dict[str, Any]:
    """The KubeProxyConfiguration document: identical on every node."""
    cluster = ctx.cluster
    gates = effective_gates(ctx, "kube-proxy", options.feature_gates)
    document = deep_merge({
        "apiVersion": ctx.registry.config_api("KubeProxyConfiguration", cluster.minor),
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig},
        "mode": options.mode,
        "clusterCIDR": options.cluster_cidr or cluster.cluster_cidr,
        "bindAddress": "0.0.0.0",
        "healthzBindAddress": f"0.0.0.0:{options.healthz_port}",
        "metricsBindAddress": options.metrics_bind_address,
        # kubesmith owns the host's sysctls (sysctl.d on hosts; `run` only checks them), so kube-proxy
        # leaves conntrack limits as they are: it cannot write them outside the initial network namespace
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "featureGates": gates or None,
    }, options.extra_config)
    document = {key: value for key, value in document.items() if value is not None}
    return document


# kube-proxy's nftables mode: none in 1.28, behind the alpha NFTablesProxyMode gate (off) in 1.29 and 1.30,
# beta (on) from 1.31, GA from 1.33
NFTABLES_GATE = "NFTablesProxyMode"


def _nftables_problem(spec: Any, options: ProxyOptions) -> str | None:
    minor = tuple(int(part) for part in spec.minor.split("."))
    if minor < (1, 29):
        return f"kube-proxy {spec.minor} has no nftables mode (it came in 1.29): use iptables or ipvs"
    gates = {**spec.spec.feature_gates, **(options.feature_gates or {})}
    config_gates = options.extra_config.get("featureGates")
    if isinstance(config_gates, dict):
        gates.update(config_gates)
    enabled = gates.get(NFTABLES_GATE, minor >= (1, 31))
    if enabled is not True:
        return (f"kube-proxy {spec.minor} runs the nftables mode only with the {NFTABLES_GATE} feature gate on "
                f"(it is {'alpha and off by default' if minor < (1, 31) else 'turned off here'}): set featureGates: "
                f"{{{NFTABLES_GATE}: true}}, or use iptables")
    return None


DEFAULT_METRICS_PORT = 10249  # what kube-proxy appends to a metricsBindAddress that is an address alone


def _bare_address(value: str) -> bool:
    """An address without a port, which kube-proxy completes with its default port."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _bind_address_problem(value: str) -> str | None:
    if _bare_address(value):
        return None
    host, colon, port = value.rpartition(":")
    if not colon or not host or not port.isascii() or not port.isdigit() or int(port) > 65535:
        return (f"{value!r} is not HOST:PORT with a port from 0 to 65535: kube-proxy refuses its configuration "
                "(metricsBindAddress)")
    return None


def metrics_endpoint(bind_address: str) -> tuple[str, int | None]:
    """(host, port) kube-proxy serves its metrics on for a metricsBindAddress: an address alone gets
    DEFAULT_METRICS_PORT (proxyutil.AppendPortIfNeeded, `::1` too); else HOST:PORT, `[IPv6]:PORT`; the port
    None when the text names none (its own check names that)."""
    if _bare_address(bind_address):
        return bind_address, DEFAULT_METRICS_PORT
    host, colon, port = bind_address.rpartition(":")
    if not colon or bind_address.endswith("]"):  # `[::1]` alone, which kube-proxy refuses
        return bind_address.removeprefix("[").removesuffix("]"), None
    return host.removeprefix("[").removesuffix("]"), int(port) if port.isascii() and port.isdigit() else None


def metrics_port(bind_address: str) -> int | None:
    """The port kube-proxy's metrics take for a metricsBindAddress; None when none (port 0: metrics off)."""
    port = metrics_endpoint(bind_address)[1]
    return port if port and port <= 65535 else None


MODULE = ProxyModule()
