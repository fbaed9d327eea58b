"""One pass of the configuration keeper for one component: look at the disk, decide, carry it out.

The decisions are `trial`'s (pure); this is the thin shell around them that reads the files and
records, and performs the effects in the order `trial.effects` gives. Each effect is durable before
the next begins (records and checkpoints are atomic writes, restore fsyncs before it returns), so a
crash or reboot between any two leaves records that the next `step` completes: that is what
tests/test_config_trial.py cuts at every point.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kubesmith.agent import trial
from kubesmith.agent.checkpoints import CheckpointStore, ComponentConfig, Snapshot, restore, snapshot

Restarter = Callable[[str], None]  # restarts the named component (systemctl, or run's supervisor)


@dataclass(frozen=True, slots=True)
class Outcome:
    records: trial.Records
    decision: trial.Decision
    began: bool = False  # a new configuration was found on disk and put on trial


def carry_out(effects: Sequence[trial.Effect], store: CheckpointStore, component: str, root: Path,
              disk: Snapshot | None, restart: Restarter) -> None:
    """Perform `effects` in order; each is durable before the next."""
    for effect in effects:
        if isinstance(effect, trial.SaveCheckpoint):
            assert disk is not None and disk.hash == effect.hash
            store.save(disk)
        elif isinstance(effect, trial.WriteAssigned):
            store.write_record(component, "assigned", effect.record)
        elif isinstance(effect, trial.WriteActive):
            store.write_record(component, "active", effect.record)
        elif isinstance(effect, trial.WriteLastKnownGood):
            store.write_record(component, "last_known_good", effect.record)
        elif isinstance(effect, trial.RestoreFiles):
            restore(store.load(component, effect.hash), root)
        elif isinstance(effect, trial.Restart):
            restart(component)


def step(store: CheckpointStore, config: ComponentConfig, root: Path, policy: trial.TrialPolicy,
         samples: Sequence[trial.Sample], now: float, watched_since: float, restart: Restarter,
         validating: bool = False) -> Outcome:
    """One pass: a new configuration on disk begins a trial (owing its validation, when `validating`);
    otherwise the trial (if any) is decided on the samples and the decision carried out. Returns the
    records as they are afterwards."""
    records = store.records(config.name)
    disk = snapshot(config, root)
    healthy = trial.came_up_healthy(records, samples, watched_since)
    began = trial.begin(records, disk.hash, now, policy.seconds, healthy, validating)
    if began:
        carry_out(began, store, config.name, root, disk, restart)
        return Outcome(store.records(config.name), trial.Decision("keep", "a new configuration is on trial"), True)
    decision = trial.decide(config.name, records, samples, policy, now, watched_since)
    marked = trial.mark_ready(records, samples, watched_since) if decision.action == "keep" else ()
    carry_out(trial.effects(records, decision, now) + marked, store, config.name, root, None, restart)
    changed = decision.action not in ("none", "keep") or marked
    return Outcome(store.records(config.name) if changed else records, decision)


def condition_document(component: str, records: trial.Records, updated: str) -> dict[str, str | None]:
    """The component's ConfigOK-style condition as the agent's report keeps it and `status` shows it:
    which configuration is assigned, active and last-known-good, and why, in words."""
    found = trial.condition(records)
    active = records.active
    return {"component": component, "status": found.status, "message": found.message, "reason": found.reason or None,
            "phase": active.phase if active else None, "assigned": records.assigned.hash if records.assigned else None,
            "active": active.hash if active else None,
            "last_known_good": records.last_known_good.hash if records.last_known_good else None,
            "updated": updated}
