"""The plan: the evaluated desired state of every host, as plain immutable data.

Everything downstream (render, systemd, apply, run, status) reads the plan; nothing
downstream re-derives policy. Its JSON (plan/jsonout.py) is byte-identical for the same spec.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from kubesmith.vocabulary.environment import ASSUMED, HostEnvironment
from kubesmith.urls import url_host

ProbeKind = Literal["https", "http", "tcp", "etcd", "dns"]
SourceKind = Literal["certificate", "private-key", "ca-certificate", "ca-private-key",
                     "service-account-key", "service-account-public-key", "kubeconfig", "encryption-config",
                     "sandbox-image", "image-archive", "coredns-image"]


@dataclass(frozen=True, slots=True)
class Probe:
    """How to tell that something is ready, and with which credentials (names refer to the PKI)."""

    kind: ProbeKind
    host: str  # address to connect to, as configured (127.0.0.1 for local-only components)
    port: int
    path: str = ""  # HTTP path for https probes
    ca: str | None = None  # CA name that must have signed the server certificate
    client_certificate: str | None = None  # certificate request name presented as client
    run_on: str | None = None  # host name the probe must run from (components bound to loopback)
    server_name: str | None = None  # TLS name to verify when `host` is an address without a SAN

    @property
    def url(self) -> str:
        scheme = "https" if self.kind in ("https", "etcd") else self.kind
        return f"{scheme}://{url_host(self.host)}:{self.port}{self.path}"


@dataclass(frozen=True, slots=True)
class Gate:
    """A dependency on another host: satisfied when any one of its probes succeeds."""

    description: str
    any_of: tuple[Probe, ...]


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    policy: Literal["on-failure", "always", "no"] = "on-failure"
    delay_seconds: float = 5.0
    max_delay_seconds: float = 60.0


@dataclass(frozen=True, slots=True)
class Service:
    """One long-running component on one host (a systemd unit, or a child of `kubesmith run`)."""

    name: str  # unit name without suffix: kube-apiserver
    component: str  # module key: apiserver
    description: str
    binary: str  # executable name, resolved by the backend: kube-apiserver
    argv: tuple[str, ...]  # arguments after the binary
    user: str
    group: str
    environment: tuple[tuple[str, str], ...] = ()
    wanted_by: str = "kubernetes.target"  # the target this service belongs to
    after: tuple[str, ...] = ()  # local ordering (unit names)
    requires: tuple[str, ...] = ()  # local hard dependencies
    gates: tuple[Gate, ...] = ()  # cross-host readiness gates, checked before start
    readiness: Probe | None = None  # what "ready" means for this service
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    needs_files: tuple[str, ...] = ()  # start only when these exist
    watch_files: tuple[str, ...] = ()  # restart when these change (certificates)
    state_directory: str | None = None  # owned data directory (etcd data, kubelet root)
    ports: tuple[int, ...] = ()  # TCP ports it listens on (preflight: free, or held by this service)
    capabilities: tuple[str, ...] = ()  # ambient capabilities for non-root users
    hardening: bool = True  # whether the component tolerates systemd sandboxing
    unit_settings: tuple[tuple[str, str], ...] = ()  # further [Service] settings it needs (Delegate=yes)
    tools: tuple[str, ...] = ()  # companion executables shipped beside the binary (etcdctl, etcdutl)
    oneshot: bool = False  # a step that runs to completion (ready once it exited 0), not a daemon
    holds_target: bool = True  # its target is active only while it is (Requisite=); False: only wanted, so a
    # step that fails (and is retried by its Restart=) never fails the start of the target it belongs to
    undo: tuple[str, ...] = ()  # the binary's arguments that undo its work: systemd runs them when a oneshot
    # stops (ExecStop=); `kubesmith run` after stopping any service, to leave the machine as it found it
    leave: tuple[str, ...] = ()  # `kubesmith run`'s undo when it differs (default `undo`): run leaves the
    # machine for good, while a unit's stop must spare what outlives it (the pods' network)
    reload: tuple[str, ...] = ()  # the binary's arguments that bring a running oneshot to changed files
    # without undoing its work first (ExecReload=; apply reloads rather than restarts what has one)
    credentials: tuple[tuple[str, str], ...] = ()  # (name, root-only file): handed over at each start
    # (systemd's LoadCredential=); its argv names them under layout.credential_path (plan/credentials.py)

    @property
    def run_undo(self) -> tuple[str, ...]:
        """What `kubesmith run` runs once it stopped this service: `leave`, else `undo` (may be empty)."""
        return self.leave or self.undo

    @property
    def flags(self) -> dict[str, str]:
        """`--name=value` arguments by name (a flag without a value is left out)."""
        return dict(argument[2:].split("=", 1) for argument in self.argv if argument.startswith("--") and "=" in argument)


@dataclass(frozen=True, slots=True)
class Target:
    """A synchronisation point: reached only when every service wanted by it is ready."""

    name: str  # kube-apiserver-online
    description: str
    after: tuple[str, ...] = ()
    wanted_by: str | None = "kubernetes.target"


@dataclass(frozen=True, slots=True)
class Source:
    """Content that a later stage produces (PKI, kubeconfig writer) rather than the plan itself."""

    kind: SourceKind
    name: str  # certificate/CA/kubeconfig/secret name
    options: tuple[tuple[str, str], ...] = ()  # kubeconfig: server, ca, user, certificate


@dataclass(frozen=True, slots=True)
class File:
    path: str
    mode: int
    owner: str = "root"
    group: str = "root"
    content: str | None = None  # literal text
    data: Any = None  # structured document, serialised at render time as `format`
    format: Literal["text", "yaml", "json", "toml"] = "text"
    source: Source | None = None  # produced later (certificates, keys, kubeconfigs)


@dataclass(frozen=True, slots=True)
class CertificateRequest:
    """One certificate to issue for one host (see `kubesmith.pki.certlist`)."""

    name: str  # unique per host: apiserver, kubelet-client, etcd-peer
    ca: str  # kubernetes-ca, etcd-ca, front-proxy-ca
    common_name: str
    organizations: tuple[str, ...]
    usages: tuple[str, ...]
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]
    cert_path: str
    key_path: str
    owner: str
    group: str


@dataclass(frozen=True, slots=True)
class User:
    name: str
    group: str
    home: str
    description: str


@dataclass(frozen=True, slots=True)
class HostPlan:
    name: str
    address: str
    roles: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    users: tuple[User, ...]
    services: tuple[Service, ...]
    targets: tuple[Target, ...]
    files: tuple[File, ...]
    certificates: tuple[CertificateRequest, ...]
    environment: HostEnvironment = ASSUMED  # observed facts, or what the plan assumed

    def service(self, name: str) -> Service:
        for service in self.services:
            if service.name == name:
                return service
        raise KeyError(name)

    def certificate(self, name: str) -> CertificateRequest:
        for request in self.certificates:
            if request.name == name:
                return request
        raise KeyError(name)


@dataclass(frozen=True, slots=True)
class CertificateAuthority:
    name: str
    common_name: str
    cert_path: str  # where the CA certificate lands on hosts
    key_path: str
    key_holders: tuple[str, ...]  # hosts that sign with this CA and so receive its key


@dataclass(frozen=True, slots=True)
class PkiSettings:
    key_algorithm: str
    certificate_validity_days: int
    ca_validity_days: int
    renew_fraction: float


@dataclass(frozen=True, slots=True)
class Plan:
    cluster: str
    kubernetes_version: str
    api_endpoint: str  # host:port clients use
    pki: PkiSettings
    authorities: tuple[CertificateAuthority, ...]
    hosts: tuple[HostPlan, ...]
    warnings: tuple[str, ...] = ()

    def host(self, name: str) -> HostPlan:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {"apiVersion": "kubesmith.io/v1alpha1", "kind": "Plan", **plain(self)}



def plain(value: Any) -> Any:
    """Dataclasses as dicts, tuples as lists, recursively: what `dataclasses.asdict` gives the JSON encoder,
    without its deep copies (the plan is immutable, so sharing its leaves is safe)."""
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value) if f.metadata.get("plan", True)}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value
