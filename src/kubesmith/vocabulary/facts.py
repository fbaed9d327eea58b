"""What a module reads and what it gives back: the cluster's and one host's facts, and a contribution.

These live with the plan, below the modules: every module builds on them and the plan collects
what they return. The spec document itself is typed only for checkers (`TYPE_CHECKING`): it is
built from the modules' options, so it sits above them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from kubesmith.vocabulary.environment import ASSUMED, HostEnvironment
from kubesmith.vocabulary.membership import Bootstrap
from kubesmith.vocabulary.model import File, Service, Target, User
from kubesmith.urls import url_host

if TYPE_CHECKING:
    from kubesmith.spec.model import Cluster
    from kubesmith.versions.registry import VersionRegistry

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class HostFacts:
    name: str
    address: str
    roles: frozenset[str]
    labels: tuple[tuple[str, str], ...] = ()
    environment: HostEnvironment = ASSUMED
    pod_cidr: str | None = None  # the node's pod range (node hosts with kubesmith's pod network)


@dataclass(frozen=True, slots=True)
class SnapshotSchedule:
    """etcd members' periodic snapshots (spec.components.etcd.snapshots), as their agents take them."""

    interval: float  # seconds
    keep: int
    directory: str


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """Cluster-wide values derived once from the spec; every module reads these, none recomputes them."""

    name: str
    version: str  # 1.28.7
    minor: str  # 1.28
    api_endpoint_host: str
    api_endpoint_port: int
    api_service_ip: str  # first address of the service CIDR
    dns_service_ip: str  # tenth address of the service CIDR
    dns_domain: str
    cluster_cidr: str
    service_cidr: str
    feature_gates: tuple[tuple[str, bool], ...]
    control_plane: tuple[HostFacts, ...]
    etcd_members: tuple[HostFacts, ...]
    nodes: tuple[HostFacts, ...]
    etcd_client_port: int
    apiserver_extra_sans: tuple[str, ...]
    hosts: tuple[HostFacts, ...]  # every host, in the spec's order
    api_port: int  # where each API server listens (on its host's address)
    # the port on 127.0.0.1 where a host without an API server reaches the API through its node-local load
    # balancer; None when that balancer does not run (turned off, or the endpoint is an external one)
    local_api_port: int | None
    vip: str | None  # the address the control-plane hosts share (spec.controlPlaneVIP)
    ca_service_port: int  # the CA service's HTTPS port on each control-plane host
    renew_fraction: float  # of a certificate's life, after which it is renewed (spec.pki)
    certificate_validity_days: int  # of the certificates kubesmith issues (spec.pki)
    pod_network: bool  # kubesmith gives pods their network (and each node its range)
    node_cidr_mask_size: int  # prefix length of each node's pod range
    container_runtime: bool  # kubesmith runs containerd on the nodes
    runtime_endpoint: str  # the CRI endpoint of the nodes' container runtime (unix://...)
    etcd_snapshots: SnapshotSchedule | None  # None: the members take no periodic snapshots
    config_trials: tuple[tuple[str, float], ...]  # each component's default trial length (Module.trial), by service
    etcd_bootstrap: tuple[tuple[str, Bootstrap], ...] = ()  # each member's first start (plan.membership)
    removed_keys: tuple[tuple[str, str], ...] = ()  # keys of removed hosts (`sha256:<hex>`, host): never renewed

    def bootstrap_of(self, member: str) -> Bootstrap:
        return dict(self.etcd_bootstrap)[member]

    @property
    def api_endpoint(self) -> str:
        return f"{url_host(self.api_endpoint_host)}:{self.api_endpoint_port}"

    @property
    def api_url(self) -> str:
        return f"https://{self.api_endpoint}"

    def etcd_client_url(self, member: HostFacts) -> str:
        return f"https://{url_host(member.address)}:{self.etcd_client_port}"

    def etcd_servers_for(self, host: HostFacts) -> tuple[HostFacts, ...]:
        """The etcd members a host's API server talks to: its own member when it has one (kubeadm's
        stacked model: a member added or removed changes no other API server's flags), else all."""
        return (host,) if "etcd" in host.roles else self.etcd_members


@dataclass(frozen=True, slots=True)
class HostContext:
    spec: Cluster
    cluster: ClusterFacts
    host: HostFacts
    registry: VersionRegistry
    memo: dict[Any, Any] = field(default_factory=dict)  # shared by every host of one evaluation

    def shared(self, key: Any, build: Callable[[], T]) -> T:
        """A value that is the same for every host, built once per evaluation (1,000 nodes: one
        kubelet configuration document, not a thousand identical ones)."""
        if key not in self.memo:
            self.memo[key] = build()
        return self.memo[key]  # type: ignore[no-any-return]


@dataclass(slots=True)
class Contribution:
    """A module's part of one host's plan."""

    services: list[Service] = field(default_factory=list)
    files: list[File] = field(default_factory=list)
    certificates: list[str] = field(default_factory=list)  # names from pki.certlist
    users: list[User] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
