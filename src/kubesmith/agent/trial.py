"""The trial of a component's new configuration, as pure decisions over records and health samples.

After the kubelet's dynamic-config controller (its `checkTrial`, `graduateAssignedToLastKnownGood`
and ConfigOK messages), for every component kubesmith runs. Each component has three records
(`CheckpointStore` keeps them on the host, each written atomically):

* `assigned`: the configuration the last apply put on disk (a checkpoint's hash);
* `active`: the configuration the component runs and in which phase: `trial` (since when, for how
  long), `good` (it passed), `rolling-back` (intent: the files of `hash` are being put back because
  `failed` failed), `rolled-back` (done), `failed` (it failed and there was nothing to go back to);
* `last-known-good`: the last configuration that passed its trial.

Nothing here reads a file, a clock or a process: `decide` maps records + samples + now to a
decision, and `effects` turns a decision into the ordered writes and actions that carry it out.
The order is what keeps a host consistent across a crash or reboot between any two effects:

* begin:     checkpoint, assigned := H, active := trial(H, now). Cut after `assigned`: the disk
             holds H, active names the old hash, so the next pass sees a new configuration and
             begins again; nothing half-done is ever acted on.
* graduate:  last-known-good := H, then active := good(H). Cut between: active is a trial whose
             hash is already last-known-good, which `decide` finishes as a graduation.
* roll back: active := rolling-back(L, failed H) first (write-ahead), then restore L's files,
             restart, then active := rolled-back(L). Cut anywhere before the last write: the
             record still says rolling-back, and the next pass restores (idempotent) and restarts
             again. The disk is never left holding half of each without a record saying so.
* a trial cut by a reboot keeps its recorded start: the agent resumes it. A trial counts only time
  the agent watched, though: one the agent did not watch to its end (host or agent down) runs a
  full length again from when the agent is back, so an unwatched trial never graduates unseen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

Phase = Literal["trial", "good", "rolling-back", "rolled-back", "failed"]
Action = Literal["none", "keep", "graduate", "rollback", "finish-rollback", "give-up"]
SHORT = 12  # hex digits of a checkpoint hash shown to people


def short(digest: str) -> str:
    return digest[:SHORT]


@dataclass(frozen=True, slots=True)
class Record:
    """`assigned` or `last-known-good`: a checkpoint's hash and when it got that role (Unix time)."""

    hash: str
    at: float


@dataclass(frozen=True, slots=True)
class Active:
    """What the component runs, and in which phase (see the module's docstring)."""

    hash: str
    phase: Phase
    since: float  # when this phase began (a trial's start)
    trial_seconds: float = 0.0
    failed: str | None = None  # the hash that failed its trial (rolling-back, rolled-back, failed)
    reason: str = ""  # why, in words: what `status` shows
    seen_ready: bool = False  # seen ready during its trial: recorded, so an agent restarted by the very
    # apply that supersedes this trial (its components file changed too) still knows (`begin`)
    validated: bool = True  # False from `begin` until the keeper's validation of it is done: an agent stopped
    # in the middle (an apply that restarts it, a kill) leaves it so, and the next agent validates it then.
    # Records older than this field were validated in the pass that began them.


@dataclass(frozen=True, slots=True)
class Records:
    assigned: Record | None = None
    active: Active | None = None
    last_known_good: Record | None = None


@dataclass(frozen=True, slots=True)
class Sample:
    """One look at the component: ready or not (and why), and how often it was restarted so far
    (systemd's NRestarts, or `kubesmith run`'s supervisor count)."""

    at: float
    ready: bool
    restarts: int = 0
    detail: str = ""
    waiting_on: str = ""  # the components it starts after on this host that were not ready then, if any:
    # such a look is not held against its configuration (a leading controller manager exits when its API
    # server goes away, whatever its own configuration)


@dataclass(frozen=True, slots=True)
class TrialPolicy:
    seconds: float  # the trial's length
    max_restarts: int = 3  # this many exits during a trial fail it (a crash loop)
    drop_seconds: float = 5.0  # ready, then not ready this long, fails it (one slow probe does not)
    ready_within: float = 120.0  # the first readiness may come this late, even after a shorter trial: a
    # loaded host can take longer than the trial to start a healthy API server; only "never ready" fails

    @property
    def startup_bound(self) -> float:
        return max(self.seconds, self.ready_within)


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: str = ""  # why the trial failed, or how far it is


def decide(component: str, records: Records, samples: Sequence[Sample], policy: TrialPolicy, now: float,
           watched_since: float) -> Decision:
    """What to do about `component` now. `samples` are this agent's looks since `watched_since`
    (when it began watching: its own start, or the trial's if it began the trial)."""
    active = records.active
    if active is None or active.phase in ("good", "rolled-back", "failed"):
        return Decision("none")
    if active.phase == "rolling-back":
        return Decision("finish-rollback", active.reason)
    lkg = records.last_known_good
    if lkg is not None and lkg.hash == active.hash:
        return Decision("graduate", "it was already last-known-good")
    start = max(min(active.since, now), watched_since)  # a clock set back must not stretch the trial
    seen = [s for s in samples if s.at >= start]
    failure = _failure(component, seen, policy, start)
    if failure:
        return Decision(_failed_action(records), failure)
    end = start + policy.seconds
    if now < end:
        state = "ready" if seen and seen[-1].ready else "not ready yet"
        return Decision("keep", f"on trial for {now - start:.0f}s of {policy.seconds:.0f}s, {state}")
    back = next((i for i in range(len(seen), 0, -1) if seen[i - 1].waiting_on), 0)  # after the last outage
    if seen and seen[-1].waiting_on:
        return Decision("keep", f"trial over, not judged while {seen[-1].waiting_on} is not ready")
    first_ready = next((s.at for s in seen[back:] if s.ready), None)
    if first_ready is None and back:
        return Decision("keep", f"trial over, waiting for {component} to be ready again now that "
                                f"{seen[back - 1].waiting_on} is")
    if first_ready is None:
        if now < start + policy.startup_bound:
            return Decision("keep", f"trial over, {component} not ready yet after {now - start:.0f}s "
                                    f"(it has {policy.startup_bound:.0f}s)")
        detail = f" ({seen[-1].detail})" if seen and seen[-1].detail else ""
        return Decision(_failed_action(records),
                        f"{component} did not become ready within {policy.startup_bound:.0f}s{detail}")
    if not seen[-1].ready:  # a drop shorter than drop_seconds so far: it recovers or it fails
        return Decision("keep", f"trial over, waiting for {component} to be ready again")
    if now < first_ready + policy.drop_seconds:  # a late start is watched long enough to see a drop
        return Decision("keep", f"trial over, watching {component} that came up late")
    if not active.validated:  # its validation was cut short each time so far: the keeper does it again
        return Decision("keep", f"trial over, {component}'s validation still owed")
    return Decision("graduate", f"{component} was ready through its {policy.seconds:.0f}s trial")


def _failure(component: str, seen: Sequence[Sample], policy: TrialPolicy, start: float) -> str:
    """Why the samples so far fail the trial (crash loop, readiness lost), or ''. Looks taken while a
    component it starts after was not ready do not count, nor exits across them; after such an outage
    the component starts again: it must be ready again within `ready_within`."""
    exits = 0
    was_ready = False
    down_since: Sample | None = None
    back_since: Sample | None = None  # the first look after an outage, until it is ready again
    outage = ""  # what it waited on then
    previous: Sample | None = None
    for sample in seen:
        if sample.waiting_on:
            was_ready, down_since, back_since, previous = False, None, None, sample
            continue
        if previous is not None and previous.waiting_on:
            back_since, outage = sample, previous.waiting_on
        elif previous is not None:  # a counter that went down was reset (a manual restart, a reboot)
            exits += sample.restarts - previous.restarts if sample.restarts >= previous.restarts else sample.restarts
        if exits >= policy.max_restarts:
            return f"{component} exited {exits} times in {sample.at - start:.0f}s"
        if back_since is not None and not sample.ready and sample.at - back_since.at >= policy.ready_within:
            return f"{component} was not ready again {policy.ready_within:.0f}s after {outage} was back"
        if sample.ready:
            was_ready, down_since, back_since = True, None, None
        elif was_ready:
            down_since = down_since or sample
            if sample.at - down_since.at >= policy.drop_seconds:
                detail = f": {sample.detail}" if sample.detail else ""
                return f"{component} was ready, then not ready for {sample.at - down_since.at:.0f}s{detail}"
        previous = sample
    return ""


def reject(records: Records, reason: str) -> Decision:
    """A configuration that fails validation fails its trial at once: it is not started (or kept)."""
    return Decision(_failed_action(records), reason)


def _failed_action(records: Records) -> Action:
    lkg = records.last_known_good
    return "rollback" if lkg is not None and records.active is not None and lkg.hash != records.active.hash \
        else "give-up"


# ---- effects: what carrying out a decision writes and does, in order

@dataclass(frozen=True, slots=True)
class SaveCheckpoint:
    hash: str  # the snapshot the shell took of the files on disk


@dataclass(frozen=True, slots=True)
class WriteAssigned:
    record: Record


@dataclass(frozen=True, slots=True)
class WriteActive:
    record: Active


@dataclass(frozen=True, slots=True)
class WriteLastKnownGood:
    record: Record


@dataclass(frozen=True, slots=True)
class RestoreFiles:
    hash: str


@dataclass(frozen=True, slots=True)
class Restart:
    pass


Effect = SaveCheckpoint | WriteAssigned | WriteActive | WriteLastKnownGood | RestoreFiles | Restart


def begin(records: Records, on_disk: str, now: float, trial_seconds: float,
          healthy_so_far: bool = False, validating: bool = False) -> tuple[Effect, ...]:
    """A new configuration is on disk (the active record names another, or none): put it on trial.
    Nothing while a rollback is under way: its own files are being put back.

    A change that lands while the previous configuration is still on trial supersedes that trial.
    When the superseded configuration came up healthy (`healthy_so_far`, see `came_up_healthy`) it
    becomes last-known-good first: otherwise a bad change applied seconds after a cluster's first
    apply would find nothing to go back to and leave the component down. One that did not come up
    healthy, or whose validation is still owed, is not promoted: the new one is tried against the older
    last-known-good, if any. With `validating` (a keeper that validates) the trial owes its validation."""
    active = records.active
    if active is not None and (active.hash == on_disk or active.phase == "rolling-back"):
        return ()
    lkg = records.last_known_good
    promote: tuple[Effect, ...] = ()
    if (active is not None and active.phase == "trial" and (healthy_so_far or active.seen_ready)
            and active.validated and (lkg is None or lkg.hash != active.hash)):
        promote = (WriteLastKnownGood(Record(active.hash, now)),)
    return (*promote, SaveCheckpoint(on_disk), WriteAssigned(Record(on_disk, now)),
            WriteActive(Active(on_disk, "trial", now, trial_seconds, validated=not validating)))


def awaiting_validation(records: Records) -> bool:
    """Whether the configuration on trial still waits for its validation (see `Active.validated`)."""
    return on_trial(records) and records.active is not None and not records.active.validated


def mark_validated(records: Records) -> tuple[Effect, ...]:
    active = records.active
    return (WriteActive(replace(active, validated=True)),) if active is not None and not active.validated else ()


def mark_ready(records: Records, samples: Sequence[Sample], watched_since: float) -> tuple[Effect, ...]:
    """Record, once, that the configuration on trial was seen ready (see `Active.seen_ready`)."""
    active = records.active
    if active is None or active.seen_ready or not came_up_healthy(records, samples, watched_since):
        return ()
    return (WriteActive(replace(active, seen_ready=True)),)


def came_up_healthy(records: Records, samples: Sequence[Sample], watched_since: float) -> bool:
    """Whether the configuration on trial was seen ready during its trial (a failed one is no longer on
    trial: `decide` took it off): what makes a superseded trial's configuration good enough to go back
    to (`begin`). Any ready sample counts, not only the last: the samples of the pass that finds the new
    configuration on disk may already be the new one's, restarted by the apply that wrote it."""
    active = records.active
    if active is None or not on_trial(records):
        return False
    return any(s.ready for s in samples if s.at >= max(active.since, watched_since))


def on_trial(records: Records) -> bool:
    """Whether a configuration is on trial: the only time the component's looks count (`decide`)."""
    return records.active is not None and records.active.phase == "trial"


def effects(records: Records, decision: Decision, now: float) -> tuple[Effect, ...]:
    """The ordered effects of `decision` (see the module's docstring for why this order)."""
    active = records.active
    if active is None or decision.action in ("none", "keep"):
        return ()
    if decision.action == "graduate":
        return (WriteLastKnownGood(Record(active.hash, now)), WriteActive(replace(active, phase="good", since=now)))
    if decision.action == "give-up":
        return (WriteActive(replace(active, phase="failed", since=now, failed=active.hash,
                                    reason=decision.reason)),)
    lkg = records.last_known_good
    if decision.action == "rollback" and lkg is not None:
        intent = Active(lkg.hash, "rolling-back", now, failed=active.hash, reason=decision.reason)
        done = replace(intent, phase="rolled-back")
        return (WriteActive(intent), RestoreFiles(lkg.hash), Restart(), WriteActive(done))
    if decision.action == "finish-rollback":
        return (RestoreFiles(active.hash), Restart(), WriteActive(replace(active, phase="rolled-back", since=now)))
    raise ValueError(f"no effects for {decision.action} without a last-known-good record")


FOLLOWED = "went back with its host's release: "  # a reason's prefix: the component did not fail itself


def follow_release(on_disk: str, target: str, now: float, cause: str) -> tuple[Effect, ...]:
    """Back to `target` (a checkpoint of the release another component of the host went back to),
    whatever this component's own trial says: a host's release goes back as a whole, since a kubelet or
    controller-manager newer than its host's API server breaks the skew policy. Write-ahead as a
    rollback (`rolling-back` first, which the next pass finishes after a crash); `target` becomes
    last-known-good too, so a later failure does not return to the release that failed."""
    intent = Active(target, "rolling-back", now, failed=on_disk, reason=FOLLOWED + cause)
    return (WriteActive(intent), WriteLastKnownGood(Record(target, now)), RestoreFiles(target), Restart(),
            WriteActive(replace(intent, phase="rolled-back")))


# ---- a roll-out waits for the verdict

@dataclass(frozen=True, slots=True)
class TrialVerdict:
    """How the configuration an apply put on disk fared: passed its trial, or failed it (and why)."""

    component: str
    passed: bool
    hash: str
    reason: str = ""
    running: str = ""  # the configuration the component runs now (last-known-good after a rollback)


def verdict(component: str, records: Records, on_disk: str, since: float) -> TrialVerdict | None:
    """The verdict on what was assigned at or after `since` (the roll-out's start, host clock), or on
    `on_disk` when nothing was assigned since (the component's configuration did not change, or its
    trial has not begun yet); None while undecided. An older failure of the same configuration
    does not count: the keeper puts it on trial again."""
    assigned, active, lkg = records.assigned, records.active, records.last_known_good
    fresh = assigned is not None and assigned.at >= since
    digest = assigned.hash if fresh and assigned is not None else on_disk
    if active is None:
        return None
    if fresh and active.failed == digest and active.phase in ("rolled-back", "failed"):
        return TrialVerdict(component, False, digest, active.reason, active.hash if active.phase == "rolled-back" else "")
    if lkg is not None and lkg.hash == digest and active.hash == digest and active.phase != "rolling-back":
        return TrialVerdict(component, True, digest, running=digest)
    return None


# ---- the condition `status` shows

@dataclass(frozen=True, slots=True)
class Condition:
    """A ConfigOK-style condition: whether the assigned configuration is the one that runs, and why."""

    status: Literal["True", "False", "Unknown"]
    message: str
    reason: str = ""


def condition(records: Records) -> Condition:
    active = records.active
    if active is None:
        return Condition("Unknown", "no configuration checkpointed yet")
    if active.phase == "trial":
        return Condition("True", f"using assigned config {short(active.hash)}, on trial "
                                 f"({active.trial_seconds:.0f}s)")
    if active.phase == "good":
        return Condition("True", f"using assigned config {short(active.hash)}, which passed its trial")
    failed = short(active.failed or "?")
    if active.phase == "failed":
        return Condition("False", f"using assigned config {failed}: it failed its trial and there is no "
                                  f"last-known-good config to go back to", active.reason)
    doing = "going back to" if active.phase == "rolling-back" else "using"
    return Condition("False", f"{doing} last-known-good config {short(active.hash)}: assigned config {failed} "
                              f"failed its trial", active.reason)


def status_message(records: Records) -> str:
    """The condition in one line, as the controller's messages read."""
    found = condition(records)
    return f"{found.message}: {found.reason}" if found.reason else found.message
