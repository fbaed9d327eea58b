"""The cluster spec (interface of the whole tool): typed, documented, strict.

Component options are not defined here: each module declares its own, and
`Components` is assembled from the module list, so a new component is one new file.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, ValidationInfo, create_model, field_validator

from kubesmith.modules import MODULES
from kubesmith.vocabulary.types import (MAX_ADDONS, MAX_HOSTS, MAX_LABELS, MAX_NAMES, Cidr, CisId, DnsLabel, DnsName,
                                  FeatureGates, HostPort, IPAddress, LabelKey, LabelValue, LocalPath, ReleaseVersion,
                                  StrictModel, Text, at_most, derived)

API_VERSION = "kubesmith.io/v1alpha1"
Role = Literal["control-plane", "etcd", "node"]
LABELS_WHY = "labels say a few things about a node or a cluster"
KeyAlgorithm = Literal["ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-3072", "rsa-4096"]


class Metadata(StrictModel):
    name: DnsLabel = Field(description="Cluster name: names the kubeconfig context, etcd cluster token and PKI state.")
    labels: Annotated[dict[str, str], at_most(MAX_LABELS, "labels", LABELS_WHY)] = Field(
        default={}, description="Free-form labels for your own tooling.")


class Network(StrictModel):
    cluster_cidr: Cidr = Field(default="10.200.0.0/16", description="Pod address range of the whole cluster.")
    service_cidr: Cidr = Field(default="10.32.0.0/16",
                               description="Service (cluster IP) range; its first address is the API service IP.")
    dns_domain: DnsName = Field(default="cluster.local", description="Cluster DNS domain for services and pods.")
    dns_service_ip: IPAddress | None = Field(
        default=None, description="Cluster DNS service IP given to kubelets; default: 10th address of serviceCidr.",
        json_schema_extra=derived("tenth address of spec.network.serviceCidr"))


class Host(StrictModel):
    name: DnsLabel = Field(description="Host name (a DNS label, at most 63): also the Kubernetes node name, its "
                           "kubernetes.io/hostname label and the etcd member name.")
    address: IPAddress = Field(description="Address other hosts and kubesmith reach this host on.")
    roles: Annotated[list[Role], Field(min_length=1)] = Field(
        description="What the host runs: control-plane (API server, controller-manager, scheduler), "
                    "etcd (an etcd member), node (kubelet and kube-proxy).")
    labels: Annotated[dict[LabelKey, LabelValue], at_most(MAX_LABELS, "labels", LABELS_WHY)] = Field(
        default={}, description="Node labels the kubelet registers with.")
    pod_cidr: Cidr | None = Field(
        default=None, description="This node's pod range, inside spec.network.clusterCidr; default: the lowest "
        "free range of spec.components.podNetwork.nodeCidrMaskSize, in host order.",
        json_schema_extra=derived("spec.network.clusterCidr, in host order"))

    @field_validator("roles")
    @classmethod
    def _unique_roles(cls, roles: list[str]) -> list[str]:
        counts = Counter(roles)  # linear: a list of 100,000 roles made count() per role take minutes
        duplicates = sorted(role for role, count in counts.items() if count > 1)
        if duplicates:
            raise ValueError(f"role {duplicates[0]!r} is listed twice")
        return roles


class Pki(StrictModel):
    key_algorithm: KeyAlgorithm = Field(default="ecdsa-p256",
                                        description="Key type of every CA and leaf key (RSA keys are ~400x slower).")
    certificate_validity_days: int = Field(default=365, ge=1, le=3650, description="Lifetime of leaf certificates.")
    ca_validity_days: int = Field(default=3650, ge=1, le=36500, description="Lifetime of CA certificates.")
    renew_fraction: float = Field(default=2 / 3, gt=0, lt=1,
                                  description="Renew a certificate once it has used this fraction of its lifetime.")

    @field_validator("ca_validity_days")
    @classmethod
    def _ca_outlives_leaves(cls, days: int, info: ValidationInfo) -> int:
        """A leaf cannot outlive the CA that signs it: kubesmith would cut every leaf to the CA's end, so
        certificateValidityDays would not hold, and the whole cluster would stop trusting itself the day the
        CA expires."""
        leaf = info.data.get("certificate_validity_days")
        if isinstance(leaf, int) and days < leaf:
            raise ValueError(f"{days} day{'s' * (days != 1)} is shorter than certificateValidityDays ({leaf}): a "
                             "certificate cannot outlive the CA that signs it; give the CA the longer life")
        return days


class Ssh(StrictModel):
    user: Text = Field(default="root", description="User kubesmith logs in as: root (it writes /etc and starts "
                                                  "units over SFTP and SSH; it does not use sudo).")
    port: int = Field(default=22, ge=1, le=65535, description="SSH port of every host.")
    config_file: LocalPath | None = Field(default=None, description="OpenSSH client config to use (ProxyCommand, ...); "
                                    "default: none, or the lab's when every host is a lab host.")
    known_hosts_file: LocalPath | None = Field(default=None, description="known_hosts with every host's key; "
                                         "default: ~/.ssh/known_hosts. Unknown keys are always refused.")
    identity_file: LocalPath | None = Field(default=None, description="Private key to log in with; default: ssh's usual.")
    connect_retry_seconds: float = Field(
        default=30, ge=0, le=3600, description="How long a host that refuses or does not answer is tried again "
        "(a rebooting host refuses for a while) before it is named unreachable; 0 tries once.")
    relay_fanout: int | None = Field(
        default=None, ge=0, le=16, description="Hosts pass the release (Kubernetes binaries, image archives, "
        "kubesmith's runtime) on to this many others at once, over SSH with a key made for the apply, so it leaves "
        "this machine once rather than once per host; every file is checked against its sha256 before it is "
        "placed (docs/fleet.md). 0: every host gets it from this machine. Default: 2 when an apply works on more "
        "than 8 hosts (on 9 hosts with 100-200 Mbit/s links it was 1.3x faster and sent a quarter of the bytes), "
        "else 0.", json_schema_extra={"x-derived-from": "the number of hosts in the apply"})
    max_parallel_hosts: int = Field(
        default=256, ge=1, le=1000, description="The most hosts this machine works on at once in the heavy "
        "per-host steps of apply and plan: connecting (at most 16 attempts at once in any case), looking at and "
        "inspecting a host (hashing its files), uploading, unpacking, enabling units and recording the manifest; "
        "the other hosts wait their turn (the default, 256, is every host of most clusters at once). Starting "
        "and waiting for targets, trials, drains and etcd joins are not bounded: a host's start waits for others "
        "(etcd quorum, API servers), which a bound smaller than the cluster would deadlock. Lower it when this "
        "machine's CPU, memory or link is the limit; not sshd's MaxSessions (channels per connection).")


class Rollout(StrictModel):
    max_unavailable: int = Field(
        default=1, ge=1, le=1000, description="Node-only hosts apply restarts at once when it changes a running "
        "cluster; control-plane and etcd hosts always go one at a time, each healthy (and, with "
        "components.agent.keepConfigs, through its trial) before the next begins.")


class Security(StrictModel):
    allow_insecure: Annotated[list[CisId], at_most(MAX_NAMES, "CIS ids", "kubesmith guards 18 checks")] = Field(
        default=[], description="CIS Kubernetes Benchmark checks (ids such as \"1.2.15\") this cluster knowingly "
        "fails: a setting that weakens a secure default (profiling, anonymous access, a kubelet read-only port...) "
        "is an error unless its check is listed here; validate and plan still name it.")


def _components_model() -> type[StrictModel]:
    fields: dict[str, Any] = {
        module.key: (module.options, Field(default_factory=module.options, description=module.title))
        for module in MODULES
    }
    return create_model("Components", __base__=StrictModel, **fields)


Components = _components_model()


class ClusterSpec(StrictModel):
    kubernetes_version: ReleaseVersion = Field(description="Kubernetes release to run, for example 1.28.7.")
    control_plane_endpoint: HostPort | None = Field(
        default=None, description="HOST:PORT clients use for the API; set a load balancer for HA.",
        json_schema_extra=derived("first control-plane host's address and spec.components.apiserver.securePort"))
    control_plane_vip: IPAddress | None = Field(
        default=None, alias="controlPlaneVIP", description="A virtual IP the control-plane hosts share (keepalived, "
        "VRRP; see components.controlPlaneVip): the API endpoint for operators and anything outside the cluster, "
        "moved within seconds when its holder or its API server dies. An address on the hosts' network that no "
        "host has.")
    feature_gates: FeatureGates = Field(default={}, description="Feature gates for every component (each may override).")
    network: Network = Field(default_factory=Network, description="Cluster address ranges and DNS.")
    hosts: Annotated[list[Host], Field(min_length=1), at_most(MAX_HOSTS, "hosts", "twice the 5,000 nodes "
                                                              "Kubernetes supports in one cluster")] = Field(
        description="The machines of the cluster.")
    pki: Pki = Field(default_factory=Pki, description="Certificate authority and key settings.")
    ssh: Ssh = Field(default_factory=Ssh, description="How kubesmith reaches the hosts (apply, status).")
    security: Security = Field(default_factory=Security, description="Knowing exceptions to secure defaults.")
    rollout: Rollout = Field(default_factory=Rollout, description="How apply rolls a change over running hosts.")
    components: Components = Field(default_factory=Components,  # type: ignore[valid-type]
                                   description="Per-component options.")
    addons: Annotated[list[str], at_most(MAX_ADDONS, "add-on entries", "an entry may name a directory of "
                                                               "manifests")] = Field(
        default=[], description="Add-on manifests kubesmith keeps applied (server-side apply): files or directories "
        "(their *.yaml, *.yml and *.json), relative to the cluster file. Per object, the label "
        "addonmanager.kubernetes.io/mode says Reconcile (the default: kubesmith's state wins; deleted when "
        "removed from here) or EnsureExists (created once, then yours).")
    _addon_manifests: tuple[tuple[str, list[dict[str, Any]]], ...] = PrivateAttr(default=())

    @property
    def addon_manifests(self) -> tuple[tuple[str, list[dict[str, Any]]], ...]:
        """(add-on name, its objects) per `addons` entry, as the loader read and checked them."""
        return self._addon_manifests


class Cluster(StrictModel):
    api_version: Literal["kubesmith.io/v1alpha1"] = Field(description="Spec format version.")
    kind: Literal["Cluster"] = Field(description="Document kind.")
    metadata: Metadata = Field(description="Cluster identity.")
    spec: ClusterSpec = Field(description="Desired state of the cluster.")

    @property
    def minor(self) -> str:
        major, minor, _ = self.spec.kubernetes_version.split(".")
        return f"{major}.{minor}"

    @property
    def control_plane_hosts(self) -> list[Host]:
        return [host for host in self.spec.hosts if "control-plane" in host.roles]

    @property
    def etcd_hosts(self) -> list[Host]:
        return [host for host in self.spec.hosts if "etcd" in host.roles]


def nth_address(cidr: str, index: int) -> str:
    network = ipaddress.ip_network(cidr)
    return str(network.network_address + index)
