"""Every certificate of a cluster as one declarative list (as kubeadm's certlist.go).

An entry says which CA signs it, its subject, usages, which SANs it carries, which hosts
receive it and who owns its key. Modules name the entries they use; the plan turns the
entries that apply to a host into `CertificateRequest`s with concrete names and SANs.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import TYPE_CHECKING

from kubesmith import layout
from kubesmith.vocabulary.model import CertificateAuthority, CertificateRequest

if TYPE_CHECKING:
    from kubesmith.vocabulary.facts import ClusterFacts, HostFacts

SERVER = ("digital signature", "key encipherment", "server auth")
CLIENT = ("digital signature", "key encipherment", "client auth")
PEER = ("digital signature", "key encipherment", "server auth", "client auth")


class Sans(Enum):
    """Which subject alternative names a certificate carries."""

    NONE = "none"
    HOST = "host"  # host name, host address, localhost, 127.0.0.1, ::1 (etcd; kubeadm's getAltNames)
    APISERVER = "apiserver"  # everything clients use to reach the API (kubeadm's GetAPIServerAltNames)
    LOOPBACK = "loopback"  # components bound to 127.0.0.1: localhost, 127.0.0.1, host name
    NODE = "node"  # kubelet serving: host name and address


@dataclass(frozen=True, slots=True)
class AuthoritySpec:
    name: str
    common_name: str
    cert_file: str  # relative to the PKI directory
    key_file: str
    description: str


@dataclass(frozen=True, slots=True)
class CertSpec:
    name: str
    ca: str
    common_name: str  # "{host}" is replaced by the host name
    organizations: tuple[str, ...]
    usages: tuple[str, ...]
    sans: Sans
    file: str  # relative to the PKI directory, without .crt/.key
    owner: str
    description: str
    node_scope: bool = False  # a node's own identity: the CA service signs it for the node's token and agent

    @property
    def cert_path(self) -> str:
        return layout.pki_path(f"{self.file}.crt")

    @property
    def key_path(self) -> str:
        return layout.pki_path(f"{self.file}.key")

    @property
    def per_host(self) -> bool:
        """Whether hosts get different certificates (subject or SANs name the host)."""
        return self.sans is not Sans.NONE or "{host}" in self.common_name

    def request(self, cluster: ClusterFacts, host: HostFacts) -> CertificateRequest:
        dns, ips = san_lists(self.sans, cluster, host)
        return CertificateRequest(
            name=self.name,
            ca=self.ca,
            common_name=self.common_name.format(host=host.name),
            organizations=self.organizations,
            usages=self.usages,
            dns_names=dns,
            ip_addresses=ips,
            cert_path=self.cert_path,
            key_path=self.key_path,
            owner=self.owner,
            group=self.owner,
        )


# admin.conf's group, bound to cluster-admin by a ClusterRoleBinding of that name (as kubeadm 1.29+
# binds kubeadm:cluster-admins): revocable, where system:masters (super-admin.conf only) is not
CLUSTER_ADMINS = "kubesmith:cluster-admins"

AUTHORITIES: tuple[AuthoritySpec, ...] = (
    AuthoritySpec("kubernetes-ca", "kubernetes-ca", "ca.crt", "ca.key",
                  "signs API server, component and node certificates; verifies client certificates"),
    AuthoritySpec("etcd-ca", "etcd-ca", "etcd/ca.crt", "etcd/ca.key",
                  "signs etcd server, peer and client certificates"),
    AuthoritySpec("front-proxy-ca", "front-proxy-ca", "front-proxy-ca.crt", "front-proxy-ca.key",
                  "signs the aggregation layer's front-proxy client certificate"),
)

CERTIFICATES: tuple[CertSpec, ...] = (
    CertSpec("etcd-server", "etcd-ca", "{host}", (), PEER, Sans.HOST, "etcd/server", "etcd",
             "etcd serving certificate (client auth kept for etcd's gRPC gateway)"),
    CertSpec("etcd-peer", "etcd-ca", "{host}", (), PEER, Sans.HOST, "etcd/peer", "etcd",
             "etcd member-to-member TLS"),
    CertSpec("etcd-healthcheck-client", "etcd-ca", "kube-etcd-healthcheck-client", (), CLIENT, Sans.NONE,
             "etcd/healthcheck-client", "root", "probes etcd health (kubesmith wait/status)"),
    CertSpec("apiserver-etcd-client", "etcd-ca", "kube-apiserver-etcd-client", (), CLIENT, Sans.NONE,
             "apiserver-etcd-client", "kube-apiserver", "the API server's client identity towards etcd"),
    CertSpec("apiserver", "kubernetes-ca", "kube-apiserver", (), SERVER, Sans.APISERVER, "apiserver",
             "kube-apiserver", "API server serving certificate"),
    CertSpec("apiserver-kubelet-client", "kubernetes-ca", "kube-apiserver-kubelet-client", ("system:masters",),
             CLIENT, Sans.NONE, "apiserver-kubelet-client", "kube-apiserver",
             "the API server's client identity towards kubelets (logs, exec)"),
    CertSpec("front-proxy-client", "front-proxy-ca", "front-proxy-client", (), CLIENT, Sans.NONE,
             "front-proxy-client", "kube-apiserver", "aggregation layer requests to extension API servers"),
    CertSpec("kube-healthcheck-client", "kubernetes-ca", "kubesmith:healthcheck", (), CLIENT, Sans.NONE,
             "healthcheck-client", "root", "probes the API's /readyz (kubesmith wait/status)"),
    CertSpec("admin", "kubernetes-ca", "kubernetes-admin", (CLUSTER_ADMINS,), CLIENT, Sans.NONE,
             "admin", "root", "cluster administrator (admin.conf, root-only): cluster-admin through a "
             "ClusterRoleBinding of its group, which can be deleted"),
    CertSpec("super-admin", "kubernetes-ca", "kubernetes-super-admin", ("system:masters",), CLIENT, Sans.NONE,
             "super-admin", "root", "break-glass administrator (super-admin.conf, root-only): system:masters, "
             "whose rights no RBAC change takes away"),
    CertSpec("controller-manager-client", "kubernetes-ca", "system:kube-controller-manager", (), CLIENT,
             Sans.NONE, "controller-manager-client", "kube-controller-manager",
             "controller-manager's identity towards the API"),
    CertSpec("controller-manager-serving", "kubernetes-ca", "kube-controller-manager", (), SERVER,
             Sans.LOOPBACK, "controller-manager-serving", "kube-controller-manager",
             "controller-manager's secure port (127.0.0.1:10257)"),
    CertSpec("scheduler-client", "kubernetes-ca", "system:kube-scheduler", (), CLIENT, Sans.NONE,
             "scheduler-client", "kube-scheduler", "scheduler's identity towards the API"),
    CertSpec("scheduler-serving", "kubernetes-ca", "kube-scheduler", (), SERVER, Sans.LOOPBACK,
             "scheduler-serving", "kube-scheduler", "scheduler's secure port (127.0.0.1:10259)"),
    CertSpec("kubelet-client", "kubernetes-ca", "system:node:{host}", ("system:nodes",), CLIENT, Sans.NONE,
             "kubelet-client", "root", "kubelet's node identity (Node authorizer, NodeRestriction)", node_scope=True),
    CertSpec("kubelet-serving", "kubernetes-ca", "system:node:{host}", ("system:nodes",), SERVER, Sans.NODE,
             "kubelet-serving", "root", "kubelet's HTTPS endpoint (port 10250)", node_scope=True),
    CertSpec("kube-proxy-client", "kubernetes-ca", "system:kube-proxy", (), CLIENT, Sans.NONE,
             "kube-proxy-client", "root", "kube-proxy's identity towards the API", node_scope=True),
    CertSpec("api-lb-client", "kubernetes-ca", "kubesmith:api-lb", (), CLIENT, Sans.NONE, "api-lb-client", "root",
             "the node-local load balancer's health checks (GET /readyz); no RBAC rights beyond that",
             node_scope=True),
    CertSpec("ca-service-serving", "kubernetes-ca", "kubesmith-ca-service", (), SERVER, Sans.HOST,
             "ca-service/serving", "root", "HTTPS certificate of `kubesmith ca serve` (join, renewal)"),
    CertSpec("agent-client", "kubernetes-ca", "kubesmith:agent:{host}", ("kubesmith:agents",), CLIENT, Sans.NONE,
             "agent-client", "root", "the host's agent towards the CA service (mTLS renewal); no RBAC rights",
             node_scope=True),
)

_BY_NAME = {spec.name: spec for spec in CERTIFICATES}
NODE_SCOPED: tuple[str, ...] = tuple(spec.name for spec in CERTIFICATES if spec.node_scope)
_AUTHORITY_BY_NAME = {spec.name: spec for spec in AUTHORITIES}


def certificate(name: str) -> CertSpec:
    return _BY_NAME[name]


def authority(name: str) -> AuthoritySpec:
    return _AUTHORITY_BY_NAME[name]


def authority_plan(spec: AuthoritySpec, key_holders: tuple[str, ...]) -> CertificateAuthority:
    return CertificateAuthority(
        name=spec.name,
        common_name=spec.common_name,
        cert_path=layout.pki_path(spec.cert_file),
        key_path=layout.pki_path(spec.key_file),
        key_holders=key_holders,
    )


# The names every API server certificate carries, whatever the cluster (kubeadm's too): a node or host
# of one of these names would get a kubelet serving certificate from the same CA for the API server's name
APISERVER_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")


def apiserver_name_problem(name: str) -> str | None:
    """Why a host or node may not be called `name`, one of APISERVER_NAMES, or None."""
    if name in APISERVER_NAMES:
        return (f"{name!r} names the cluster's API server (every API server certificate carries it): a node of "
                "that name would hold a certificate for it from the same CA; a node may not take it")
    return None


def san_lists(policy: Sans, cluster: ClusterFacts, host: HostFacts) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(DNS names, IP addresses) for a SAN policy, sorted and without duplicates."""
    if policy is Sans.NONE:
        return (), ()
    if policy is Sans.HOST:
        names = [host.name, "localhost"]
        ips = [host.address, "127.0.0.1", "::1"]
    elif policy is Sans.LOOPBACK:
        names = [host.name, "localhost"]
        ips = ["127.0.0.1"]
    elif policy is Sans.NODE:
        names = [host.name]
        ips = [host.address]
    else:
        # this host's own name and address, not its peers': a host added later changes no other
        # host's certificate (and restarts no other API server), as kubeadm does
        names = [*APISERVER_NAMES, f"kubernetes.default.svc.{cluster.dns_domain}", host.name]
        ips = ["127.0.0.1", cluster.api_service_ip, host.address]
        for extra in (cluster.api_endpoint_host, *cluster.apiserver_extra_sans):
            (ips if is_ip(extra) else names).append(extra)
    return tuple(sorted(set(names))), tuple(sorted(set(ips), key=_ip_sort_key))


@cache
def is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


@cache  # the same few addresses recur on every host of a cluster
def _ip_sort_key(value: str) -> tuple[int, int]:
    address = ipaddress.ip_address(value)
    return address.version, int(address)
