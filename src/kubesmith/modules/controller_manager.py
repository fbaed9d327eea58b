"""kube-controller-manager: reconciliation loops and the cluster signer, on control-plane hosts.

Bound to 127.0.0.1 (status probes it from its own host); it holds the kubernetes-ca key
because it signs kubelet CSRs, so that key is on control-plane hosts and nowhere else.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from pydantic import Field

from kubesmith import layout
from kubesmith.durations import go_duration_ns
from kubesmith.modules.base import (COMMON_FLAGS, MASTER, PKI, CisRule, ComponentOptions, Managed, Module,
                                    OptionProblem, Trial, effective_gates, feature_gates_flag, file_from, https_probe,
                                    render_flags, system_user)
from kubesmith.modules.kubeconfigs import api_gate, kubeconfig_file
from kubesmith.pki.certlist import authority, certificate
from kubesmith.vocabulary.facts import Contribution, HostContext
from kubesmith.vocabulary.model import Service
from kubesmith.vocabulary.types import Cidr, IPAddress, Port, SigningDuration


class ControllerManagerOptions(ComponentOptions):
    allocate_node_cidrs: bool | None = Field(
        default=None, description="Allocate a pod range to every Node object; default: off where kubesmith's pod "
        "network gives nodes their ranges (spec.components.podNetwork), on otherwise.",
        json_schema_extra={"x-derived-from": "spec.components.podNetwork.enabled"})
    bind_address: IPAddress = Field(default="127.0.0.1", description="Address of the secure port (CIS: 127.0.0.1).")
    secure_port: Port = Field(default=10257, description="HTTPS port for health and metrics.")
    cluster_cidr: Cidr | None = Field(default=None, description="Pod range; default: spec.network.clusterCidr.",
                                      json_schema_extra={"x-derived-from": "spec.network.clusterCidr"})
    node_cidr_mask_size: int | None = Field(
        default=None, ge=8, le=30, description="Prefix length of each node's pod range when allocating; default: "
        "spec.components.podNetwork.nodeCidrMaskSize.",
        json_schema_extra={"x-derived-from": "spec.components.podNetwork.nodeCidrMaskSize"})
    leader_elect: bool = Field(default=True, description="Elect a leader among control-plane hosts.")
    use_service_account_credentials: bool = Field(default=True,
                                                  description="Run each controller with its own service account.")
    terminated_pod_gc_threshold: int = Field(default=12500, ge=1, le=2**31 - 1,  # an int32 flag
                                             description="Terminated pods kept before garbage collection.")
    profiling: bool = Field(default=False, description="Serve /debug/pprof (CIS: off).")
    signing_duration: SigningDuration = Field(default="8760h", description="Lifetime of certificates signed for "
                                               "CSRs (at least 1h).")


class ControllerManagerModule(Module):
    key = "controller_manager"
    position = 30
    title = "Kubernetes controller manager"
    options = ControllerManagerOptions
    roles = frozenset({"control-plane"})
    binary = "kube-controller-manager"
    trial = Trial("kube-controller-manager", 30.0, rank=4)
    managed = Managed(flags=COMMON_FLAGS | {
        "allocate-node-cidrs": "allocateNodeCidrs", "cluster-cidr": "clusterCidr",
        "node-cidr-mask-size": "nodeCidrMaskSize", "service-cluster-ip-range": "spec.network.serviceCidr",
        "cluster-name": "metadata.name", "bind-address": "bindAddress", "secure-port": "securePort",
        "kubeconfig": PKI, "authentication-kubeconfig": PKI, "authorization-kubeconfig": PKI, "client-ca-file": PKI,
        "requestheader-client-ca-file": PKI, "root-ca-file": PKI, "cluster-signing-cert-file": PKI,
        "cluster-signing-key-file": PKI, "cluster-signing-duration": "signingDuration",
        "service-account-private-key-file": PKI, "use-service-account-credentials": "useServiceAccountCredentials",
        "controllers": "kubesmith (every controller, with bootstrapsigner and tokencleaner for joins)",
        "leader-elect": "leaderElect", "terminated-pod-gc-threshold": "terminatedPodGcThreshold",
        "profiling": "profiling", "tls-cert-file": PKI, "tls-private-key-file": PKI, "master": MASTER,
    })
    cis_rules = (
        CisRule("1.3.2", "controller-manager --profiling=false", ("profiling",), weak=lambda o: o.profiling),
        CisRule("1.3.7", "controller-manager --bind-address=127.0.0.1", ("bindAddress",),
                weak=lambda o: o.bind_address != "127.0.0.1"),
    )

    def check(self, spec: Any, options: ControllerManagerOptions, registry: Any) -> list[OptionProblem]:
        return _mask_problems(spec, options) + _leader_election_problems(options)

    def contribute(self, ctx: HostContext, options: ControllerManagerOptions) -> Contribution:
        cluster, host = ctx.cluster, ctx.host
        serving = certificate("controller-manager-serving")
        kubeconfig = kubeconfig_file(ctx, "controller-manager", "controller-manager-client", "kube-controller-manager")
        ca = authority("kubernetes-ca")
        ca_file, ca_key = layout.pki_path(ca.cert_file), layout.pki_path("controller-manager/ca.key")
        sa_key = layout.pki_path("controller-manager/sa.key")
        proxy_ca = layout.pki_path(authority("front-proxy-ca").cert_file)
        allocate = not cluster.pod_network if options.allocate_node_cidrs is None else options.allocate_node_cidrs
        flags = {
            "allocate-node-cidrs": allocate,
            "cluster-cidr": options.cluster_cidr or cluster.cluster_cidr,
            "node-cidr-mask-size": (options.node_cidr_mask_size or cluster.node_cidr_mask_size) if allocate else None,
            "service-cluster-ip-range": cluster.service_cidr,
            "cluster-name": cluster.name,
            "bind-address": options.bind_address,
            "secure-port": options.secure_port,
            "kubeconfig": kubeconfig.path,
            "authentication-kubeconfig": kubeconfig.path,
            "authorization-kubeconfig": kubeconfig.path,
            "client-ca-file": ca_file,
            "requestheader-client-ca-file": proxy_ca,
            "root-ca-file": ca_file,
            "cluster-signing-cert-file": ca_file,
            "cluster-signing-key-file": ca_key,
            "cluster-signing-duration": options.signing_duration,
            "service-account-private-key-file": sa_key,
            "use-service-account-credentials": options.use_service_account_credentials,
            "controllers": "*,bootstrapsigner,tokencleaner",
            "leader-elect": options.leader_elect,
            "terminated-pod-gc-threshold": options.terminated_pod_gc_threshold,
            "profiling": options.profiling,
            "tls-cert-file": serving.cert_path,
            "tls-private-key-file": serving.key_path,
            "feature-gates": feature_gates_flag(effective_gates(ctx, "kube-controller-manager", options.feature_gates)),
            "v": options.verbosity,
        }
        watched = (serving.cert_path, serving.key_path, kubeconfig.path, ca_key, sa_key)
        service = Service(
            name="kube-controller-manager",
            component=self.key,
            description="Kubernetes controller manager",
            binary="kube-controller-manager",
            argv=render_flags(flags, options.extra_args),
            user="kube-controller-manager",
            group="kube-controller-manager",
            wanted_by="kube-apiserver-online.target",
            after=("kube-apiserver.service",),
            gates=(api_gate(ctx, "controller-manager-client"),),
            readiness=https_probe(options.bind_address, options.secure_port, "/healthz", "kubernetes-ca",
                                  run_on=host.name),
            needs_files=(ca_file, proxy_ca, *watched),
            watch_files=watched,
            ports=(options.secure_port,),
        )
        return Contribution(
            services=[service],
            files=[kubeconfig,
                   file_from("ca-private-key", "kubernetes-ca", ca_key, "kube-controller-manager", 0o600),
                   file_from("service-account-key", "service-account", sa_key, "kube-controller-manager", 0o600)],
            certificates=["controller-manager-serving", "controller-manager-client"],
            users=[system_user("kube-controller-manager", "/var/lib/kube-controller-manager",
                               "Kubernetes controller manager")],
        )


MODULE = ControllerManagerModule()


def _mask_problems(spec: Any, options: ControllerManagerOptions) -> list[OptionProblem]:
    """A node range no larger than the pod range it is cut from: kube-controller-manager's node IPAM controller
    exits ("Invalid --cluster-cidr, mask size of cluster CIDR must be less than or equal to --node-cidr-mask-size
    configured for CIDR family")."""
    components = spec.spec.components
    allocate = not components.pod_network.enabled if options.allocate_node_cidrs is None else \
        options.allocate_node_cidrs
    if not allocate or options.node_cidr_mask_size is None:
        return []
    cidr = options.cluster_cidr or spec.spec.network.cluster_cidr
    network = ipaddress.ip_network(cidr, strict=False)
    if options.node_cidr_mask_size < network.prefixlen:
        return [OptionProblem(("nodeCidrMaskSize",), f"/{options.node_cidr_mask_size} node ranges are larger than "
                              f"the pod range {cidr} they are cut from: kube-controller-manager exits (its node IPAM "
                              f"controller takes no node range above the cluster's); give /{network.prefixlen} or "
                              "longer")]
    return []


# client-go's leader election, with kube-controller-manager's defaults: "leaseDuration must be greater than
# renewDeadline" and "renewDeadline must be greater than retryPeriod*JitterFactor" (1.2) stop it at its start
_LEASE_FLAGS = {"leader-elect-lease-duration": "15s", "leader-elect-renew-deadline": "10s",
                "leader-elect-retry-period": "2s"}
_JITTER = 1.2


def _leader_election_problems(options: ControllerManagerOptions) -> list[OptionProblem]:
    flags = options.extra_args
    if not options.leader_elect or not any(flag in flags for flag in _LEASE_FLAGS):
        return []
    try:
        lease, renew, retry = (go_duration_ns(str(flags.get(flag, default))) for flag, default in _LEASE_FLAGS.items())
    except ValueError:
        return []  # the flag check names it
    if min(lease, renew, retry) <= 0:
        return []  # the period check names it
    shown = {flag: flags.get(flag, default) for flag, default in _LEASE_FLAGS.items()}
    if lease <= renew:
        flag = "leader-elect-renew-deadline" if "leader-elect-renew-deadline" in flags else \
            "leader-elect-lease-duration"
        return [OptionProblem(("extraArgs", flag), f"--leader-elect-lease-duration "
                              f"({shown['leader-elect-lease-duration']}) must be longer than --leader-elect-renew-"
                              f"deadline ({shown['leader-elect-renew-deadline']}): kube-controller-manager's leader "
                              "election refuses to start")]
    if renew <= _JITTER * retry:
        flag = "leader-elect-retry-period" if "leader-elect-retry-period" in flags else "leader-elect-renew-deadline"
        return [OptionProblem(("extraArgs", flag), f"--leader-elect-renew-deadline "
                              f"({shown['leader-elect-renew-deadline']}) must be longer than {_JITTER} x "
                              f"--leader-elect-retry-period ({shown['leader-elect-retry-period']}): "
                              "kube-controller-manager's leader election refuses to start")]
    return []
