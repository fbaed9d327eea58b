"""The agent's configuration keeper on a host: every few seconds, for each component it keeps, look
at its health, run one `keeper.step`, and record its ConfigOK condition in the agent's report.

What it keeps comes from `layout.COMPONENTS_FILE` (written beside the units: each component's
service name, binary, argv, configuration files and readiness probe, from the plan). A new
configuration found on disk is validated first (`validate`); one that fails validation fails its
trial at once and the last-known-good configuration is restored. Otherwise it runs on trial and
graduates or is rolled back as `trial.decide` says. A rollback to another Kubernetes release takes
the host's other components back to that release too (`agent.hostrelease`).

Health comes from the component's readiness probe (the same probe argument `kubesmith wait` and
the units use) and its restart count; the restart count and the restart action come from a
`ServiceHost`: `Systemd` on hosts (NRestarts, `systemctl restart`), or whatever supervises the
component elsewhere. A look taken while a component it starts after (its API server, for a
controller manager) was not ready in the same pass says so, and is not held against it.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from kubesmith.agent import hostrelease, trial
from kubesmith.agent.checkpoints import CheckpointError, CheckpointStore, snapshot
from kubesmith.agent.keeper import Outcome, carry_out, condition_document, step
from kubesmith.agent.report import Stopping, iso, locked_report
from kubesmith.clock import utc_now
from kubesmith.documents import damaged, read_json_file, reason
from kubesmith.health.probespec import parse_probe
from kubesmith.plan.components import Component

if TYPE_CHECKING:  # the running keeper's (keeper_for): `config wait` and `config status` start without them
    from kubesmith.agent.nodeconditions import NodeConditions
    from kubesmith.agent.validate import Verdict
    from kubesmith.health.wait import ProbeRunner
    from kubesmith.settings import AgentConfig

LOG = logging.getLogger("kubesmith.agent")
MAX_SAMPLES = 2000


def load_components(path: Path) -> tuple[str, tuple[Component, ...]]:
    """(Kubernetes minor, components) from the components file, read bounded; an OSError naming it when
    unusable (a FIFO, huge, nested too deeply, not such a file)."""
    expected, remedy = "the agent's list of components", "apply the cluster again to rewrite it"
    document = read_json_file(path, expected, remedy=remedy)
    try:
        return str(document["minor"]), tuple(Component.from_document(entry) for entry in document["components"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise damaged(path, expected, exc, remedy) from None


class ServiceHost(Protocol):
    """What supervises the components: how often one was restarted, and how to restart it."""

    def restarts(self, name: str) -> int: ...

    def restart(self, name: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Systemd:
    """systemd on a host: NRestarts counts automatic restarts (a manual restart resets it, which
    `trial.decide` reads as a reset); a restart reloads units first, since a restored checkpoint
    may hold the unit file itself."""

    def restarts(self, name: str) -> int:
        done = subprocess.run(["systemctl", "show", "--property=NRestarts", "--value", f"{name}.service"],
                              capture_output=True, text=True, timeout=30, check=False)
        return int(done.stdout.strip()) if done.stdout.strip().isdigit() else 0

    def restart(self, name: str) -> None:
        for command in (["systemctl", "daemon-reload"], ["systemctl", "restart", "--no-block", f"{name}.service"]):
            subprocess.run(command, capture_output=True, timeout=60, check=False)


Validator = Callable[[Component], "Verdict"]


@dataclass(slots=True)
class Watch:
    """This process's looks at one component since it began watching (its own start, or a new trial)."""

    since: float
    samples: list[trial.Sample] = field(default_factory=list)


@dataclass(slots=True)
class Keeper:
    components: tuple[Component, ...]
    store: CheckpointStore
    root: Path
    trials: dict[str, float]  # component -> trial seconds
    host: ServiceHost
    runner: ProbeRunner
    pki_dir: str
    validator: Validator | None = None
    clock: Callable[[], float] = time.time
    probe_timeout: float = 2.0
    watches: dict[str, Watch] = field(default_factory=dict)
    node: NodeConditions | None = None  # the node components' conditions go on the Node object too

    def policy(self, name: str) -> trial.TrialPolicy:
        return trial.TrialPolicy(self.trials.get(name, 60.0))

    async def sample(self, component: Component) -> trial.Sample:
        restarts = self.host.restarts(component.config.name)
        if component.probe is None:
            return trial.Sample(self.clock(), False, restarts, "no readiness probe")
        result = await self.runner.check(parse_probe(component.probe).resolved(self.pki_dir), self.probe_timeout)
        return trial.Sample(self.clock(), result.ok, restarts, "" if result.ok else result.reason)

    async def pass_once(self) -> dict[str, Outcome]:
        """One look and one step for every component; returns what each step found."""
        outcomes = {}
        ready: dict[str, bool] = {}  # this pass's looks, for the components that start after them
        looked_at = self._looked_at()
        for component in self.components:
            name = component.config.name
            watch = self.watches.setdefault(name, Watch(self.clock()))
            if name in looked_at:
                sample = await self.sample(component)
                ready[name] = sample.ready
                waiting_on = ", ".join(dependency for dependency in component.after
                                       if ready.get(dependency) is False)
                watch.samples.append(replace(sample, waiting_on=waiting_on))
                del watch.samples[:-MAX_SAMPLES]
            outcome = step(self.store, component.config, self.root, self.policy(name), watch.samples, self.clock(),
                           watch.since, self.host.restart, self.validator is not None)
            if outcome.began:
                self.watches[name] = Watch(self.clock())
            if trial.awaiting_validation(outcome.records):
                outcome = self._validated(component, outcome)
            if outcome.began:
                assigned = outcome.records.assigned  # the new one (after a rejection, active is the old)
                LOG.info("%s: new configuration %s: %s", name, trial.short(assigned.hash) if assigned else "?",
                         outcome.decision.reason)
            elif outcome.decision.action not in ("none", "keep"):
                LOG.warning("%s: %s: %s", name, outcome.decision.action, outcome.decision.reason)
            if outcome.decision.action not in ("none", "keep"):
                self.store.collect(name)
            outcomes[name] = outcome
        self._follow_releases(outcomes)
        return outcomes

    def _looked_at(self) -> set[str]:
        """The components whose looks can count this pass: those on trial, whose samples decide it, and
        those they start after, whose outages excuse theirs. Samples of any other component are never
        read (`trial.decide` judges only a trial), and each look is a `systemctl` and a probe: seven of
        them every pass cost a host a tenth of a core while every trial was long over."""
        on_trial = [c for c in self.components if trial.on_trial(self.store.records(c.config.name))]
        return {c.config.name for c in on_trial} | {dependency for c in on_trial for dependency in c.after}

    def _follow_releases(self, outcomes: dict[str, Outcome]) -> None:
        """A component rolled back to another release this pass takes the host's others with it
        (`agent.hostrelease`): a host never keeps a kubelet of the release its API server left."""
        for name, outcome in list(outcomes.items()):
            active = outcome.records.active
            if outcome.decision.action != "rollback" or active is None or active.failed is None:
                continue
            try:
                back, failed = (hostrelease.release_of(self.store.load(name, digest))
                                for digest in (active.hash, active.failed))
            except CheckpointError as exc:
                LOG.error("%s: cannot tell the release it went back to: %s", name, exc)
                continue
            if back is None or back == failed:
                continue
            cause = f"{name} {failed} failed its trial ({outcome.decision.reason}); the host goes back to {back}"
            for other in self.components:
                if other.config.name != name:
                    outcomes[other.config.name] = self._follow(other, back, cause) or outcomes[other.config.name]

    def _follow(self, component: Component, release: str, cause: str) -> Outcome | None:
        """Send one component back to `release` unless it runs it already (or is no Kubernetes binary)."""
        name = component.config.name
        disk = snapshot(component.config, self.root)
        if hostrelease.release_of(disk) in (None, release):
            return None
        target = hostrelease.checkpoint_of(self.store, name, release, self.store.records(name))
        if target is None:
            LOG.error("%s: no checkpoint of release %s to go back to with its host", name, release)
            return None
        carry_out(trial.follow_release(disk.hash, target, self.clock(), cause), self.store, name, self.root, None,
                  self.host.restart)
        self.watches[name] = Watch(self.clock())
        self.store.collect(name)
        LOG.warning("%s: back to %s with its host: %s", name, trial.short(target), cause)
        return Outcome(self.store.records(name), trial.Decision("rollback", trial.FOLLOWED + cause))

    def _validated(self, component: Component, outcome: Outcome) -> Outcome:
        """Validate before use: an invalid new configuration fails its trial before it is relied on. A
        validation that did not finish (its load killed, this agent stopped first) is done again next pass,
        by the next agent if need be: the record says it is still owed."""
        records, name = outcome.records, component.config.name
        if self.validator is None:
            return outcome
        verdict = self.validator(component)
        if verdict.interrupted:
            LOG.info("%s: validation interrupted (%s); again next pass", name, verdict.summary())
            return outcome
        if verdict.ok:
            carry_out(trial.mark_validated(records), self.store, name, self.root, None, self.host.restart)
            return replace(outcome, records=self.store.records(name))
        decision = trial.reject(records, f"it is not valid: {verdict.summary()}")
        carry_out(trial.effects(records, decision, self.clock()), self.store, name, self.root,
                  snapshot(component.config, self.root), self.host.restart)
        return Outcome(self.store.records(name), decision, outcome.began)

    def conditions(self) -> dict[str, dict[str, str | None]]:
        now = iso(utc_now())
        return {c.config.name: condition_document(c.config.name, self.store.records(c.config.name), now)
                for c in self.components}

    async def run(self, stop: asyncio.Event, state_file: Path, host_name: str, interval: float = 2.0) -> None:
        """Pass after pass until `stop`; each pass's conditions go into the agent's report."""
        while not stop.is_set():
            try:
                await self.pass_once()
                conditions = self.conditions()
                async with locked_report(state_file, host_name, stop) as state:
                    state.configs = conditions
                if self.node is not None:
                    await self.node.publish(conditions, iso(utc_now()), time.monotonic())
            except Stopping:
                return
            except Exception as exc:  # one bad pass (a damaged record, a full disk) must not end the agent
                LOG.error("configuration keeper: %s", exc)
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval)
            except asyncio.TimeoutError:
                pass


def keeper_for(config: AgentConfig) -> Keeper | None:
    """The keeper the agent runs beside its renewals: only when the spec asks (`keepConfigs`), a
    components file is there and systemd supervises the components (not under `kubesmith run`)."""
    if not config.keep_configs:
        return None
    if not Path("/run/systemd/system").is_dir():
        LOG.warning("configuration keeper: systemd does not run here; configurations are not kept")
        return None
    try:
        minor, components = load_components(config.components_file)
    except OSError as exc:
        LOG.error("configuration keeper: %s: %s; configurations are not kept", config.components_file, reason(exc))
        return None
    from kubesmith.agent.nodeconditions import NodeConditions
    from kubesmith.agent.validate import validate
    from kubesmith.health.wait import LocalProbeRunner
    from kubesmith.versions.registry import load_registry

    registry = load_registry()

    def validator(component: Component) -> Verdict:
        executable = Path(component.executable) if component.executable else None
        return validate(component.config, component.binary, executable, minor, registry)

    node = NodeConditions(config.host, Path(config.node_kubeconfig)) if config.node_kubeconfig else None
    return Keeper(components, CheckpointStore(config.checkpoints_dir), Path("/"), config.config_trials, Systemd(),
                  LocalProbeRunner(), str(config.pki_dir), validator, node=node)


def verdicts_now(names: Sequence[str], components: Sequence[Component], store: CheckpointStore, root: Path,
                 since: float) -> dict[str, trial.TrialVerdict | None]:
    """Each named component's verdict as its records say now (None: undecided)."""
    by_name = {c.config.name: c for c in components}
    return {name: trial.verdict(name, store.records(name), snapshot(by_name[name].config, root).hash, since)
            for name in names}


async def wait_for_verdicts(names: Sequence[str], components: Sequence[Component], store: CheckpointStore,
                            root: Path, since: float, timeout: float,
                            interval: float = 1.0) -> dict[str, trial.TrialVerdict | None]:
    """Until every named component's new configuration passed or failed its trial, or `timeout`;
    what is still undecided then stays None. KeyError: a name the components file does not hold."""
    unknown = sorted(set(names) - {c.config.name for c in components})
    if unknown:
        raise KeyError(", ".join(unknown))
    from tenacity import AsyncRetrying, retry_if_result, stop_after_delay, wait_fixed

    found: dict[str, trial.TrialVerdict | None] = {}
    async for attempt in AsyncRetrying(stop=stop_after_delay(timeout), wait=wait_fixed(interval),
                                       retry=retry_if_result(lambda undecided: undecided),
                                       retry_error_callback=lambda _: True):
        with attempt:
            found = verdicts_now(names, components, store, root, since)
            undecided = any(v is None for v in found.values())
        if not attempt.retry_state.outcome.failed:  # type: ignore[union-attr]
            attempt.retry_state.set_result(undecided)
    return found
