"""Ports: one listener per port on each host, none below 1024 for an unprivileged unit, none in the
NodePort range on a node.

The table below is every TCP port kubesmith's units listen on (the `ports` of the plan's services, and
HAProxy's), with the option that sets it and the hosts that run its unit; tests/test_hostile_ports.py
checks it against the plan, so a new listener cannot be left out. Ports are compared whatever the bind
addresses, as preflight does: 127.0.0.1:P and 0.0.0.0:P cannot both be bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kubesmith.modules import MODULES
from kubesmith.modules.proxy import metrics_port
from kubesmith.vocabulary.facts import HostFacts
from kubesmith.vocabulary.errors import LocPart
from kubesmith.spec.model import Cluster, Components, Host
from kubesmith.vocabulary.types import port_range_bounds

Finding = tuple[tuple[LocPart, ...], str, str]

# What the listeners' units run as: these run as their own user (HAProxy as a dynamic one) with no ambient
# capability (modules/*.py: Service.user, Service.capabilities), so the kernel refuses them a port below 1024
UNPRIVILEGED = {"apiserver": "kube-apiserver", "controller_manager": "kube-controller-manager",
                "scheduler": "kube-scheduler", "etcd": "etcd", "api_load_balancer": "a dynamic user (HAProxy)"}
DEFAULT_NODE_PORTS = "30000-32767"


@dataclass(frozen=True, slots=True)
class Listener:
    component: str  # module key, or "ssh" for the hosts' sshd
    field: str  # option field (snake case) that sets the port
    what: str  # what listens there, for messages
    port: Callable[[object], int | None]  # the port, from the component's options (None: no listener)


def _field(name: str) -> Callable[[object], int | None]:
    return lambda options: getattr(options, name)


LISTENERS = (
    Listener("ssh", "port", "sshd, kubesmith's way in", _field("port")),
    Listener("apiserver", "secure_port", "the API server", _field("secure_port")),
    Listener("etcd", "client_port", "etcd's client port", _field("client_port")),
    Listener("etcd", "peer_port", "etcd's peer port", _field("peer_port")),
    Listener("etcd", "metrics_port", "etcd's metrics port", _field("metrics_port")),
    Listener("kubelet", "port", "the kubelet API", _field("port")),
    Listener("kubelet", "healthz_port", "the kubelet's health port", _field("healthz_port")),
    Listener("controller_manager", "secure_port", "the controller manager", _field("secure_port")),
    Listener("scheduler", "secure_port", "the scheduler", _field("secure_port")),
    Listener("proxy", "healthz_port", "kube-proxy's health port", _field("healthz_port")),
    Listener("proxy", "metrics_bind_address", "kube-proxy's metrics port",
             lambda options: metrics_port(options.metrics_bind_address)),  # type: ignore[attr-defined]
    Listener("container_runtime", "metrics_port", "containerd's metrics port", _field("metrics_port")),
    Listener("ca_service", "port", "kubesmith's CA service", _field("port")),
    Listener("api_load_balancer", "port", "the local API load balancer (HAProxy)", _field("port")),
    Listener("api_load_balancer", "monitor_port", "the local API load balancer's monitor", _field("monitor_port")),
)


@dataclass(frozen=True, slots=True)
class Bound:
    """One listener on one host, with its port and where it is set."""

    listener: Listener
    port: int
    loc: tuple[LocPart, ...]
    user_set: bool  # written in the cluster file (not a default)

    @property
    def option(self) -> str:
        return ".".join(str(part) for part in self.loc)


def _options(cluster: Cluster, component: str) -> object:
    return cluster.spec.ssh if component == "ssh" else getattr(cluster.spec.components, component)


def _loc(cluster: Cluster, listener: Listener) -> tuple[LocPart, ...]:
    options = _options(cluster, listener.component)
    field = type(options).model_fields[listener.field]  # type: ignore[attr-defined]
    if listener.component == "ssh":
        return ("spec", "ssh", field.alias or listener.field)
    section = Components.model_fields[listener.component].alias or listener.component
    return ("spec", "components", section, field.alias or listener.field)


def _runs(cluster: Cluster, component: str, host: Host) -> bool:
    """Whether `component`'s listener runs on `host` (as the plan decides: modules/*.py)."""
    if component == "ssh":
        return True
    module = next(module for module in MODULES if module.key == component)
    if not module.applies(HostFacts(name=host.name, address=host.address, roles=frozenset(host.roles))):
        return False
    options = getattr(cluster.spec.components, component)
    if component == "api_load_balancer":
        return options.enabled and cluster.spec.control_plane_endpoint is None
    return getattr(options, "enabled", True)


def host_listeners(cluster: Cluster, host: Host) -> Iterator[Bound]:
    for listener in LISTENERS:
        if not _runs(cluster, listener.component, host):
            continue
        options = _options(cluster, listener.component)
        port = listener.port(options)
        if port is not None:
            yield Bound(listener, port, _loc(cluster, listener),
                        listener.field in options.model_fields_set)  # type: ignore[attr-defined]


def endpoint_findings(cluster: Cluster) -> list[Finding]:
    """`controlPlaneEndpoint` on a cluster host's address names a port there, and only the API server serves
    the API on a host kubesmith runs: not a port another of its listeners holds (every kubeconfig would dial
    etcd, the kubelet, ...), nor one where nothing of kubesmith's listens (a worker's 6443, the node-local
    load balancer's 7443, which listens on 127.0.0.1 and not at all beside an endpoint). A load balancer of
    one's own is named by its own address, a VIP or a DNS name."""
    endpoint = cluster.spec.control_plane_endpoint
    if not endpoint:
        return []
    host_text, _, port_text = endpoint.rpartition(":")
    host_text = host_text.strip("[]")
    if not port_text.isdigit():
        return []
    port = int(port_text)
    where = ("spec", "controlPlaneEndpoint")
    for host in cluster.spec.hosts:
        if host.address != host_text:
            continue
        listeners = list(host_listeners(cluster, host))
        for bound in listeners:
            if bound.port == port and bound.listener.component != "apiserver":
                return [(where, f"{endpoint} is host {host.name}'s address on port {port}, where "
                         f"{bound.listener.what} listens ({bound.option}): every client would dial it instead "
                         "of the API server; use the API server's port or a load balancer's", "error")]
        api = next((bound for bound in listeners if bound.listener.component == "apiserver"), None)
        if api is None:
            return [(where, f"{endpoint} is host {host.name}'s address, and that host runs no API server (its roles: "
                     f"{', '.join(host.roles)}): every kubeconfig would dial nothing; name a control-plane host, "
                     "spec.controlPlaneVIP, or a load balancer by its own address or DNS name", "error")]
        if api.port != port:
            return [(where, f"{endpoint} is host {host.name}'s address on port {port}, where nothing kubesmith runs "
                     f"listens: its API server listens on {api.port} ({api.option}); use that port, or name a "
                     "load balancer by its own address or DNS name", "error")]
    return []


def port_findings(cluster: Cluster) -> list[Finding]:
    """One finding per option at most (the first problem, on the first host that has it): a port's clash
    with another listener, then its privilege, then the NodePort range."""
    findings: dict[tuple[LocPart, ...], Finding] = {}

    def add(loc: tuple[LocPart, ...], message: str) -> None:
        findings.setdefault(loc, (loc, message, "error"))

    apiserver = cluster.spec.components.apiserver
    text = apiserver.service_node_port_range
    low, high = port_range_bounds(text) or (0, -1)  # the type checked it: never the fallback
    range_loc = ("spec", "components", "apiserver",
                 type(apiserver).model_fields["service_node_port_range"].alias or "service_node_port_range")
    range_set = "service_node_port_range" in apiserver.model_fields_set
    done: set[frozenset[str]] = set()
    for host in cluster.spec.hosts:
        if frozenset(host.roles) in done:
            continue  # a host's listeners follow from its roles: the first host of each set names its problems
        done.add(frozenset(host.roles))
        owners: dict[int, Bound] = {}
        proxied = _runs(cluster, "proxy", host)
        for bound in host_listeners(cluster, host):
            listener = bound.listener
            first = owners.setdefault(bound.port, bound)
            if first is not bound:
                # located on the option the file sets (two defaults never clash)
                here, other = (bound, first) if bound.user_set or not first.user_set else (first, bound)
                add(here.loc, f"port {bound.port} is already taken on host {host.name} by "
                    f"{other.listener.what} ({other.option}): two listeners cannot bind one port; give each its own")
            if bound.port < 1024 and listener.component in UNPRIVILEGED:
                add(bound.loc, f"{bound.port} is below 1024: {listener.what} runs as "
                    f"{UNPRIVILEGED[listener.component]} without CAP_NET_BIND_SERVICE, and only a privileged "
                    "process may bind such a port; use a port from 1024 up")
            # NodePort rules live where kube-proxy runs: traffic to a node on a NodePort goes to the Service
            if proxied and low <= bound.port <= high:
                if bound.user_set or not range_set:
                    add(bound.loc, f"{bound.port} lies in the NodePort range {text} ({'.'.join(range_loc)}): a "
                        f"Service given that NodePort would take it from {listener.what} on every node; use a port "
                        "outside the range")
                else:
                    add(range_loc, f"{text} covers port {bound.port} of {listener.what} ({bound.option}) on host "
                        f"{host.name}: a Service given that NodePort would take it on every node; choose a range "
                        f"clear of the cluster's own ports (default {DEFAULT_NODE_PORTS})")
    return list(findings.values())
