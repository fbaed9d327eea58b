"""The kubesmith agent on every host: renews the host's certificates long before they expire, and on
etcd members takes the periodic snapshots of `etcd.snapshots` (`agent/snapshots.py`).

It signs locally where the host holds the issuing CA's key and otherwise asks the CA services of
the control-plane hosts over mutual TLS with its `agent-client` certificate. Its settings go to a
JSON file; its report goes to a state file that `kubesmith status` reads.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import Field

from kubesmith import layout
from kubesmith.modules.base import Module, Trial
from kubesmith.modules.ca_service import CA_KEY_PATH
from kubesmith.modules.cluster import SIGNING_ROLES
from kubesmith.modules.discovery import component_modules
from kubesmith.modules.etcd import local_etcdctl
from kubesmith.vocabulary.facts import Contribution, HostContext
from kubesmith.vocabulary.model import File, RestartPolicy, Service
from kubesmith.settings import AgentConfig
from kubesmith.vocabulary.types import MAX_SERVERS, HttpsUrl, StrictModel, at_most
from kubesmith.urls import url_host


# The components whose configurations go on trial: those whose module declares a trial length (Module.trial),
# which the cluster facts hand over as the defaults; configTrials' keys, in their rank order. The agent's own
# module is being imported here, so it is the one that cannot declare a trial.
TRIALS: tuple[Trial, ...] = tuple(sorted((module.trial for module in component_modules(besides=__name__)
                                          if module.trial is not None), key=lambda trial: trial.rank))
TrialComponent = Literal[tuple(trial.service for trial in TRIALS)]  # type: ignore[valid-type]


def defaults_text(trials: tuple[Trial, ...]) -> str:
    """The defaults as configTrials' description gives them (60 for etcd, kube-apiserver and kubelet, 30 for
    the others): by length, longest first, naming the components of all lengths but the last."""
    lengths = sorted({trial.seconds for trial in trials}, reverse=True)
    named = [f"{seconds:g} for {_names([t.service for t in trials if t.seconds == seconds])}" for seconds in lengths]
    return ", ".join([*named[:-1], f"{lengths[-1]:g} for the others" if len(named) > 1 else named[-1]])


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


class AgentOptions(StrictModel):
    renew_fraction: float | None = Field(default=None, gt=0, lt=1,
                                         description="Renew a certificate once it has used this fraction of its "
                                                     "life; default: spec.pki.renewFraction.",
                                         json_schema_extra={"x-derived-from": "spec.pki.renewFraction"})
    check_interval: float = Field(default=300.0, ge=1, le=86400,
                                  description="Seconds between checks (the agent also wakes at the next due time).")
    retry_max_interval: float = Field(default=60.0, ge=1, le=3600,
                                      description="Longest pause between retries while the CA is unreachable "
                                                  "(seconds; backoff is exponential with jitter).")
    keep_configs: bool = Field(default=False,
                               description="Checkpoint each component's configuration, run a new one on trial and "
                                           "roll it back to the last-known-good one when the component fails its "
                                           "trial; apply then waits for each host's trials before the next host "
                                           "(a roll-out takes a trial's length per control-plane host).")
    config_trials: dict[TrialComponent, Annotated[float, Field(ge=5, le=3600)]] = Field(
        default={}, description="Trial length in seconds of a component's new configuration, by component; one that "
                                "fails its trial goes back to its last-known-good configuration. Defaults: "
                                f"{defaults_text(TRIALS)}. A component that is slow to start gets at least 120 s "
                                "to become ready before it fails.")
    ca_urls: Annotated[list[HttpsUrl], at_most(MAX_SERVERS, "URLs", "one per CA service host")] | None = Field(
        default=None, description="CA service URLs, tried in order; default: https://<address>:"
        "<spec.components.caService.port> of every control-plane host.",
        json_schema_extra={"x-derived-from": "control-plane hosts and spec.components.caService.port"})


def etcd_snapshots(ctx: HostContext) -> dict[str, Any] | None:
    """What the agent of an etcd member needs to take its periodic snapshots (`agent.snapshots`):
    etcdctl against the member's loopback listener with the health-check client, as `etcd snapshot` does."""
    snapshots = ctx.cluster.etcd_snapshots
    if "etcd" not in ctx.host.roles or snapshots is None:
        return None
    etcdctl = [*local_etcdctl(layout.BIN, ctx.cluster.etcd_client_port), "--dial-timeout=10s", "--command-timeout=120s"]
    return {"interval": snapshots.interval, "keep": snapshots.keep,
            "directory": snapshots.directory, "etcdctl": etcdctl, "etcdutl": f"{layout.BIN}/etcdutl"}


def trial_defaults(ctx: HostContext) -> dict[str, float]:
    """Each component's default trial length, as its module declares it, in configTrials' order."""
    declared = dict(ctx.cluster.config_trials)
    return {name: declared[name] for name in get_args(TrialComponent)}


class AgentModule(Module):
    key = "agent"
    position = 120
    title = "kubesmith agent (certificate renewal)"
    options = AgentOptions
    roles = frozenset({"control-plane", "etcd", "node"})

    def contribute(self, ctx: HostContext, options: AgentOptions) -> Contribution:
        port = ctx.cluster.ca_service_port
        urls = options.ca_urls or [f"https://{url_host(cp.address)}:{port}" for cp in ctx.cluster.control_plane]
        settings = AgentConfig(  # its paths (PKI, report, checkpoints...) are its defaults: the layout's
            host=ctx.host.name, ca_urls=tuple(urls),
            renew_fraction=options.renew_fraction or ctx.cluster.renew_fraction,
            check_interval=options.check_interval, retry_max=options.retry_max_interval,
            config_trials={**trial_defaults(ctx), **options.config_trials}, keep_configs=options.keep_configs,
            # CA keys this host holds (it renews those certificates itself, without the network)
            ca_keys={"kubernetes-ca": CA_KEY_PATH} if SIGNING_ROLES["kubernetes-ca"] & ctx.host.roles else {},
            etcd_snapshots=etcd_snapshots(ctx),
            node_kubeconfig=layout.kubeconfig_path("kubelet") if "node" in ctx.host.roles else None,
        )
        return Contribution(
            services=[ctx.shared("agent-service", lambda: self._service())],
            files=[File(path=layout.AGENT_CONFIG, mode=0o644, data=settings.to_document(), format="json")],
            certificates=["agent-client"],
        )

    def _service(self) -> Service:
        return Service(
            name="kubesmith-agent",
            component=self.key,
            description="kubesmith agent: certificate renewal",
            binary="kubesmith",
            argv=("agent", "--config", layout.AGENT_CONFIG),
            user="root",
            group="root",
            wanted_by="kubernetes.target",
            after=("network-online.target",),
            restart=RestartPolicy(delay_seconds=5),
            needs_files=(layout.AGENT_CONFIG,),
            watch_files=(layout.COMPONENTS_FILE,),  # its keeper learns a component's new argv and files
            state_directory=layout.AGENT_STATE,
            hardening=False,  # rewrites certificates and kubeconfigs under /etc/kubernetes
        )


MODULE = AgentModule()
