"""Spec → Plan: derive cluster facts once, ask every module for each host's contribution."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import replace
from functools import partial

from kubesmith.durations import parse_duration
from kubesmith.gcpause import gc_paused
from kubesmith.modules import MODULES, TRIAL_SECONDS
from kubesmith.modules.cluster import ca_key_holders, common_contribution
from kubesmith.modules.etcd import EtcdSnapshotOptions
from kubesmith.modules.kubeconfigs import api_address
from kubesmith.modules.pod_network import pod_cidrs
from kubesmith.pki.certlist import AUTHORITIES, authority_plan, certificate
from kubesmith.plan import credentials
from kubesmith.vocabulary.environment import ASSUMED, HostEnvironment
from kubesmith.vocabulary.facts import ClusterFacts, Contribution, HostContext, HostFacts, SnapshotSchedule
from kubesmith.vocabulary.history import History
from kubesmith.vocabulary.membership import bootstraps
from kubesmith.vocabulary.model import CertificateRequest, File, HostPlan, PkiSettings, Plan, Service, Source
from kubesmith.spec.model import Cluster, nth_address
from kubesmith.urls import url_host
from kubesmith.versions.registry import VersionRegistry


class PlanError(Exception):
    """A module produced something the registry forbids: a bug in kubesmith, not in the spec."""


def cluster_facts(cluster: Cluster, hosts: tuple[HostFacts, ...] | None = None,
                  history: History | None = None) -> ClusterFacts:
    """`history`: what the state directory remembers (plan.history); none: a new cluster."""
    history = history or History()
    spec = cluster.spec
    components = spec.components
    hosts = hosts or host_facts(cluster)
    etcd_members = tuple(h for h in hosts if "etcd" in h.roles)
    addresses = {h.name: h.address for h in etcd_members}
    peer_port = components.etcd.peer_port
    control_plane = tuple(h for h in hosts if "control-plane" in h.roles)
    api_port = components.apiserver.secure_port
    if spec.control_plane_endpoint:
        endpoint_host, _, endpoint_port = spec.control_plane_endpoint.rpartition(":")
        endpoint = (endpoint_host.strip("[]"), int(endpoint_port))
    elif spec.control_plane_vip:
        endpoint = (spec.control_plane_vip, api_port)
    else:
        endpoint = (control_plane[0].address, api_port)
    return ClusterFacts(
        name=cluster.metadata.name,
        version=spec.kubernetes_version,
        minor=cluster.minor,
        api_endpoint_host=endpoint[0],
        api_endpoint_port=endpoint[1],
        api_service_ip=nth_address(spec.network.service_cidr, 1),
        dns_service_ip=spec.network.dns_service_ip or nth_address(spec.network.service_cidr, 10),
        dns_domain=spec.network.dns_domain,
        cluster_cidr=spec.network.cluster_cidr,
        service_cidr=spec.network.service_cidr,
        feature_gates=tuple(sorted(spec.feature_gates.items())),
        control_plane=control_plane,
        etcd_members=etcd_members,
        nodes=tuple(h for h in hosts if "node" in h.roles),
        etcd_client_port=components.etcd.client_port,
        apiserver_extra_sans=tuple(components.apiserver.extra_sans),
        hosts=hosts,
        api_port=api_port,
        local_api_port=(components.api_load_balancer.port
                        if components.api_load_balancer.enabled and not spec.control_plane_endpoint else None),
        vip=spec.control_plane_vip,
        ca_service_port=components.ca_service.port,
        renew_fraction=spec.pki.renew_fraction,
        certificate_validity_days=spec.pki.certificate_validity_days,
        pod_network=components.pod_network.enabled,
        node_cidr_mask_size=components.pod_network.node_cidr_mask_size,
        container_runtime=components.container_runtime.enabled,
        runtime_endpoint=f"unix://{components.container_runtime.socket}",
        etcd_snapshots=_snapshots(components.etcd.snapshots),
        config_trials=tuple(TRIAL_SECONDS.items()),
        etcd_bootstrap=tuple(bootstraps([h.name for h in etcd_members],
                                        lambda name: f"https://{url_host(addresses[name])}:{peer_port}",
                                        history.etcd).items()),
        removed_keys=tuple(sorted(history.removed_keys.items())),
    )


def _snapshots(snapshots: EtcdSnapshotOptions) -> SnapshotSchedule | None:
    if snapshots.interval is None:
        return None
    return SnapshotSchedule(parse_duration(snapshots.interval), snapshots.keep, snapshots.directory)


def host_facts(cluster: Cluster, environments: Mapping[str, HostEnvironment] | None = None
               ) -> tuple[HostFacts, ...]:
    """Each host's facts: the spec's, what was observed of it (the rest assumed), its pod range."""
    observed = environments or {}
    network = cluster.spec.components.pod_network
    ranges = pod_cidrs(cluster, network) if network.enabled else {}
    return tuple(HostFacts(name=host.name, address=host.address, roles=frozenset(host.roles),
                           labels=tuple(sorted(host.labels.items())), environment=observed.get(host.name, ASSUMED),
                           pod_cidr=ranges.get(host.name)) for host in cluster.spec.hosts)


def evaluate(cluster: Cluster, registry: VersionRegistry,
             environments: Mapping[str, HostEnvironment] | None = None,
             history: History | None = None) -> Plan:
    """The plan; `environments` holds what was observed of hosts (by name), the rest is assumed;
    `history`, what the state directory remembers of earlier applies (none: the cluster is new)."""
    plan, hosts = evaluate_lazily(cluster, registry, environments, history)
    with gc_paused():
        return replace(plan, hosts=tuple(hosts))


def evaluate_lazily(cluster: Cluster, registry: VersionRegistry,
                    environments: Mapping[str, HostEnvironment] | None = None,
                    history: History | None = None, only: Collection[str] | None = None
                    ) -> tuple[Plan, Iterator[HostPlan]]:
    """The plan without its hosts, and its hosts (those named in `only`, or all), each planned as it is
    asked for: `plan --offline` writes a host and lets it go, so its memory does not grow with the hosts
    (10,000 of them held at once were most of its 200 MB). What hosts share is built once either way."""
    hosts_facts = host_facts(cluster, environments)
    facts = cluster_facts(cluster, hosts_facts, history)
    memo: dict[object, object] = {}
    roles = [(host.name, frozenset(host.roles)) for host in cluster.spec.hosts]
    pki = cluster.spec.pki
    plan = Plan(
        cluster=facts.name,
        kubernetes_version=facts.version,
        api_endpoint=facts.api_endpoint,
        pki=PkiSettings(pki.key_algorithm, pki.certificate_validity_days, pki.ca_validity_days, pki.renew_fraction),
        authorities=tuple(authority_plan(ca, ca_key_holders(ca.name, roles)) for ca in AUTHORITIES),
        hosts=(),
    )
    return plan, (_host_plan(HostContext(cluster, facts, host, registry, memo)) for host in hosts_facts
                  if only is None or host.name in only)


def _host_plan(ctx: HostContext) -> HostPlan:
    components = ctx.spec.spec.components
    parts: list[Contribution] = []
    for module in MODULES:
        if module.applies(ctx.host):
            contribution = module.contribute(ctx, getattr(components, module.key))
            _check_flags(ctx, module.binary, contribution.services)
            parts.append(contribution)
    certificates = sorted({name for part in parts for name in part.certificates})
    targets = {service.wanted_by for part in parts for service in part.services}
    key = ("common", ctx.host.roles, tuple(certificates), frozenset(targets), api_address(ctx))
    parts.append(ctx.shared(key, lambda: common_contribution(ctx, certificates, targets)))
    certificates = sorted({name for part in parts for name in part.certificates})
    requests = tuple(_request(ctx, name) for name in certificates)
    files = [file for part in parts for file in part.files]
    for request in requests:
        files += ctx.shared(("certificate-files", request.name), partial(_certificate_files, request))
    services, files = credentials.hand_over((service for part in parts for service in part.services), files,
                                            ctx.memo)
    return HostPlan(
        name=ctx.host.name,
        address=ctx.host.address,
        roles=tuple(sorted(ctx.host.roles)),
        labels=ctx.host.labels,
        users=tuple(sorted({user.name: user for part in parts for user in part.users}.values(),
                           key=lambda user: user.name)),
        services=tuple(services),
        targets=tuple(target for part in parts for target in part.targets),
        files=_unique_files(files),
        certificates=requests,
        environment=ctx.host.environment,
    )


def _certificate_files(request: CertificateRequest) -> tuple[File, File]:
    """Where a certificate and its key land: the same paths and owners on every host that has it."""
    return (File(request.cert_path, 0o644, "root", "root", source=Source("certificate", request.name)),
            File(request.key_path, 0o600, request.owner, request.group, source=Source("private-key", request.name)))


def _request(ctx: HostContext, name: str) -> CertificateRequest:
    spec = certificate(name)
    if spec.per_host:
        return spec.request(ctx.cluster, ctx.host)
    return ctx.shared(("certificate", name), lambda: spec.request(ctx.cluster, ctx.host))


def _check_flags(ctx: HostContext, binary: str | None, services: list[Service]) -> None:
    if binary is None:
        return
    accepted = ctx.registry.flags(binary, ctx.cluster.minor)
    for service in services:
        for arg in service.argv:
            name = arg[2:].partition("=")[0]
            if name not in accepted:
                raise PlanError(f"{service.name} on {ctx.host.name}: --{name} is not accepted by "
                                f"{binary} {ctx.cluster.minor} (kubesmith bug)")


def _unique_files(files: list[File]) -> tuple[File, ...]:
    by_path: dict[str, File] = {}
    for file in files:
        previous = by_path.setdefault(file.path, file)
        if previous is not file and previous != file:
            raise PlanError(f"two modules want different content at {file.path} (kubesmith bug)")
    return tuple(by_path[path] for path in sorted(by_path))
