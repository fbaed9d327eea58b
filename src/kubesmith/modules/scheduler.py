"""kube-scheduler: places pods on nodes; on control-plane hosts, bound to 127.0.0.1."""

from __future__ import annotations

from pydantic import Field

from kubesmith import layout
from kubesmith.modules.base import (COMMON_FLAGS, CONFIG, DOCUMENT, MASTER, PKI, CisRule, ComponentOptions, Managed,
                                    Module, Trial, effective_gates, feature_gates_flag, https_probe, render_flags,
                                    system_user)
from kubesmith.modules.kubeconfigs import api_gate, kubeconfig_file
from kubesmith.modules.merge import deep_merge
from kubesmith.pki.certlist import authority, certificate
from kubesmith.vocabulary.facts import Contribution, HostContext
from kubesmith.vocabulary.model import File, Service
from kubesmith.vocabulary.types import ExtraConfig, IPAddress, Port


class SchedulerOptions(ComponentOptions):
    bind_address: IPAddress = Field(default="127.0.0.1", description="Address of the secure port (CIS: 127.0.0.1).")
    secure_port: Port = Field(default=10259, description="HTTPS port for health and metrics.")
    leader_elect: bool = Field(default=True, description="Elect a leader among control-plane hosts.")
    profiling: bool = Field(default=False, description="Serve /debug/pprof (CIS: off).")
    extra_config: ExtraConfig = Field(default={}, description="Merged into the KubeSchedulerConfiguration document.")


class SchedulerModule(Module):
    key = "scheduler"
    position = 40
    title = "Kubernetes scheduler"
    options = SchedulerOptions
    roles = frozenset({"control-plane"})
    binary = "kube-scheduler"
    trial = Trial("kube-scheduler", 30.0, rank=5)
    managed = Managed(
        flags=COMMON_FLAGS | {
            "master": MASTER, "config": CONFIG, "bind-address": "bindAddress", "secure-port": "securePort",
            "authentication-kubeconfig": PKI, "authorization-kubeconfig": PKI, "client-ca-file": PKI,
            "tls-cert-file": PKI, "tls-private-key-file": PKI, "profiling": "profiling",
        },
        config=DOCUMENT | {("clientConnection", "kubeconfig"): PKI},
        same={("apiVersion",): "kubescheduler.config.k8s.io/v1", ("kind",): "KubeSchedulerConfiguration"},
        # the deprecated flags its --help says it ignores next to --config (its leader election flags still
        # apply)
        ignored_with_config=frozenset({"contention-profiling", "kube-api-burst", "kube-api-content-type",
                                       "kube-api-qps", "kubeconfig",
                                       "pod-max-in-unschedulable-pods-duration"}).__contains__,
    )
    cis_rules = (
        CisRule("1.4.1", "scheduler --profiling=false", ("profiling",), weak=lambda o: o.profiling),
        CisRule("1.4.2", "scheduler --bind-address=127.0.0.1", ("bindAddress",),
                weak=lambda o: o.bind_address != "127.0.0.1"),
    )

    def contribute(self, ctx: HostContext, options: SchedulerOptions) -> Contribution:
        cluster, host = ctx.cluster, ctx.host
        serving = certificate("scheduler-serving")
        kubeconfig = kubeconfig_file(ctx, "scheduler", "scheduler-client", "kube-scheduler")
        config_path = layout.config_path("scheduler.yaml")
        ca_file = layout.pki_path(authority("kubernetes-ca").cert_file)
        document = deep_merge({
            "apiVersion": ctx.registry.config_api("KubeSchedulerConfiguration", cluster.minor),
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": kubeconfig.path},
            "leaderElection": {"leaderElect": options.leader_elect},
            "enableProfiling": options.profiling,
        }, options.extra_config)
        flags = {
            "config": config_path,
            "bind-address": options.bind_address,
            "secure-port": options.secure_port,
            "authentication-kubeconfig": kubeconfig.path,
            "authorization-kubeconfig": kubeconfig.path,
            "client-ca-file": ca_file,
            "tls-cert-file": serving.cert_path,
            "tls-private-key-file": serving.key_path,
            "profiling": options.profiling,
            "feature-gates": feature_gates_flag(effective_gates(ctx, "kube-scheduler", options.feature_gates)),
            "v": options.verbosity,
        }
        watched = (serving.cert_path, serving.key_path, kubeconfig.path)
        service = Service(
            name="kube-scheduler",
            component=self.key,
            description="Kubernetes scheduler",
            binary="kube-scheduler",
            argv=render_flags(flags, options.extra_args),
            user="kube-scheduler",
            group="kube-scheduler",
            wanted_by="kube-apiserver-online.target",
            after=("kube-apiserver.service",),
            gates=(api_gate(ctx, "scheduler-client"),),
            readiness=https_probe(options.bind_address, options.secure_port, "/healthz", "kubernetes-ca",
                                  run_on=host.name),
            needs_files=(ca_file, config_path, *watched),
            watch_files=watched,
            ports=(options.secure_port,),
        )
        return Contribution(
            services=[service],
            files=[kubeconfig, File(path=config_path, mode=0o644, data=document, format="yaml")],
            certificates=["scheduler-serving", "scheduler-client"],
            users=[system_user("kube-scheduler", "/var/lib/kube-scheduler", "Kubernetes scheduler")],
        )


MODULE = SchedulerModule()
