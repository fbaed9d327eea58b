"""The trial state machine: table-driven over health sequences, and the reboot-consistency property
(the effects of every transition cut after each one, then a fresh pass on the real store)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

import pytest

from kubesmith.agent import trial
from kubesmith.agent.checkpoints import CheckpointStore, ComponentConfig, snapshot
from kubesmith.agent.keeper import carry_out, step
from kubesmith.agent.trial import Active, Decision, Record, Records, Sample, TrialPolicy, decide
from kubesmith.modules import TRIAL_SECONDS
from kubesmith.modules.agent import TrialComponent
from conftest import kubesmith
from plan_support import plan_of_text

H, L = "b" * 64, "a" * 64  # the configuration on trial, the last-known-good one
POLICY = TrialPolicy(seconds=60, max_restarts=3, drop_seconds=5)
ON_TRIAL = Records(Record(H, 0.0), Active(H, "trial", 0.0, 60.0), Record(L, -100.0))
UNVALIDATED = Records(Record(H, 0.0), Active(H, "trial", 0.0, 60.0, validated=False), Record(L, -100.0))


def ready(*times: float, restarts: int = 0) -> list[Sample]:
    return [Sample(t, True, restarts) for t in times]


def down(*times: float, restarts: int = 0, detail: str = "connection refused") -> list[Sample]:
    return [Sample(t, False, restarts, detail) for t in times]


def away(*times: float, restarts: int = 0) -> list[Sample]:
    """Not ready while the etcd member it starts after was not ready either."""
    return [Sample(t, False, restarts, "connection refused", "etcd") for t in times]


CASES = [
    # (name, records, samples, now, watched_since, action, reason contains)
    ("ready throughout graduates", ON_TRIAL, down(1) + ready(5, 30, 60), 61, 0, "graduate", "ready through its 60s"),
    ("ready, trial not over", ON_TRIAL, ready(5, 30), 30, 0, "keep", "30s of 60s, ready"),
    ("never ready", ON_TRIAL, down(5, 30, 60, 120), 121, 0, "rollback",
     "kube-apiserver did not become ready within 120s (connection refused)"),
    ("no sample at all", ON_TRIAL, [], 121, 0, "rollback", "did not become ready within 120s"),
    ("a slow start gets past the trial's end", ON_TRIAL, down(5, 30, 60), 61, 0, "keep", "not ready yet after 61s"),
    ("a late start is watched before it passes", ON_TRIAL, down(5, 60) + ready(90), 91, 0, "keep", "came up late"),
    ("a late start that stays up passes", ON_TRIAL, down(5, 60) + ready(90, 96), 96, 0, "graduate", ""),
    ("a late start that drops fails", ON_TRIAL, down(5, 60) + ready(90) + down(91, 96), 96, 0, "rollback",
     "was ready, then not ready for 5s"),
    ("crash loop", ON_TRIAL, down(1) + down(10, restarts=1) + down(20, restarts=2) + down(40, restarts=3), 40, 0,
     "rollback", "kube-apiserver exited 3 times in 40s"),
    ("two exits are tolerated", ON_TRIAL, down(1) + down(10, restarts=2) + ready(15, 61, restarts=2), 61, 0,
     "graduate", ""),
    ("a reset counter still counts", ON_TRIAL,
     ready(1) + ready(10, restarts=2) + down(20, restarts=0) + ready(21, restarts=1), 21, 0, "rollback",
     "exited 3 times in 21s"),
    ("readiness drops", ON_TRIAL, ready(5, 30) + down(31, 34, 36, detail="HTTP 500"), 36, 0, "rollback",
     "was ready, then not ready for 5s: HTTP 500"),
    ("a short drop is tolerated", ON_TRIAL, ready(5, 30) + down(31, 33) + ready(34, 61), 61, 0, "graduate", ""),
    ("over, but down for now", ON_TRIAL, ready(5, 59) + down(61), 62, 0, "keep", "waiting for kube-apiserver"),
    ("no last-known-good: give up", Records(Record(H, 0), Active(H, "trial", 0, 60)), down(30, 121), 121, 0,
     "give-up", "did not become ready"),
    ("graduation half recorded", Records(Record(H, 0), Active(H, "trial", 0, 60), Record(H, 50)), [], 51, 0,
     "graduate", "already last-known-good"),
    ("rollback half done", Records(Record(H, 0), Active(L, "rolling-back", 40, failed=H, reason="r")), [], 45, 45,
     "finish-rollback", "r"),
    ("settled phases do nothing", Records(Record(H, 0), Active(L, "rolled-back", 40, failed=H), Record(L, 0)),
     [], 45, 0, "none", ""),
    ("a drop while its etcd is away is not held against it", ON_TRIAL,
     ready(5, 20) + away(21, 30, 40, restarts=1) + ready(42, 61, restarts=1), 61, 0, "graduate", ""),
    ("exits while its etcd is away are not counted", ON_TRIAL,
     ready(5) + away(10, restarts=1) + away(20, restarts=2) + away(30, restarts=3) + ready(31, 61, restarts=3), 61, 0,
     "graduate", ""),
    ("exits after it is back count", ON_TRIAL,
     ready(5) + away(10, restarts=2) + down(11, restarts=3) + down(20, restarts=5) + down(30, restarts=6), 30, 0,
     "rollback", "exited 3 times in 30s"),
    ("not judged at the trial's end while away", ON_TRIAL, ready(5, 30) + away(59, 61), 62, 0, "keep",
     "not judged while etcd is not ready"),
    ("back, then starting again", ON_TRIAL, ready(5, 30) + away(59) + down(61, 65), 66, 0, "keep",
     "ready again now that etcd is"),
    ("back, then ready: watched before it passes", ON_TRIAL, ready(5, 30) + away(59) + ready(61), 62, 0, "keep",
     "came up late"),
    ("back, but never ready again", ON_TRIAL, ready(5, 30) + away(40) + down(41, 100, 161), 161, 0, "rollback",
     "kube-apiserver was not ready again 120s after etcd was back"),
    ("back, ready, then a drop fails", ON_TRIAL, ready(5) + away(10) + ready(12) + down(13, 18), 18, 0, "rollback",
     "was ready, then not ready for 5s"),
    ("ready throughout, but its validation is owed", UNVALIDATED, ready(5, 30, 60), 61, 0, "keep",
     "validation still owed"),
    ("an owed validation does not excuse a crash loop", UNVALIDATED,
     down(1) + down(10, restarts=1) + down(20, restarts=3), 20, 0, "rollback", "exited 3 times"),
    ("after a reboot the trial resumes", ON_TRIAL, ready(101, 130), 130, 100, "keep", "30s of 60s"),
    ("a resumed trial ends a full length after", ON_TRIAL, ready(101, 161), 161, 100, "graduate", ""),
    ("the clock set back does not stretch it", Records(Record(H, 0), Active(H, "trial", 10_000, 60), Record(L, 0)),
     ready(1, 20), 20, 0, "keep", "on trial for 0s of 60s"),
]


@pytest.mark.parametrize(("records", "samples", "now", "watched", "action", "reason"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_decide(records: Records, samples: list[Sample], now: float, watched: float, action: str,
                reason: str) -> None:
    decision = decide("kube-apiserver", records, samples, POLICY, now, watched)
    assert decision.action == action, decision
    assert reason in decision.reason


def test_the_status_message_reads_like_the_controllers() -> None:
    decision = decide("kube-apiserver", ON_TRIAL, down(1) + down(10, restarts=1) + down(40, restarts=3), POLICY, 40, 0)
    [*_, done] = trial.effects(ON_TRIAL, decision, 40)
    assert isinstance(done, trial.WriteActive)
    after = Records(ON_TRIAL.assigned, done.record, ON_TRIAL.last_known_good)
    assert trial.status_message(after) == (f"using last-known-good config {L[:12]}: assigned config {H[:12]} "
                                           "failed its trial: kube-apiserver exited 3 times in 40s")
    assert trial.condition(after).status == "False"
    assert trial.condition(ON_TRIAL).status == "True"


# ---- reboot consistency, on the real store and real files

CONFIG = ComponentConfig("kube-scheduler", ("--config=/etc/ks/scheduler.yaml",),
                         ("/etc/ks/scheduler.yaml", "/etc/ks/scheduler.conf"))


def _write(root: Path, version: str) -> str:
    (root / "etc/ks").mkdir(parents=True, exist_ok=True)
    (root / "etc/ks/scheduler.yaml").write_text(f"profile: {version}\n")
    (root / "etc/ks/scheduler.conf").write_text(f"kubeconfig for {version}\n")
    return snapshot(CONFIG, root).hash


def _host_with_good_config(root: Path) -> tuple[CheckpointStore, str]:
    """A host whose scheduler runs config `good`, which passed its trial."""
    store = CheckpointStore(root / "var/lib/kubesmith/config")
    good = _write(root, "good")
    step(store, CONFIG, root, POLICY, [], 0.0, 0.0, lambda _: None)
    step(store, CONFIG, root, POLICY, ready(1, 61), 61.0, 0.0, lambda _: None)
    assert store.records(CONFIG.name).active == Active(good, "good", 61.0, 60.0)
    return store, good


def _check_consistent(store: CheckpointStore, root: Path, failed: str | None) -> Records:
    """What must hold after any crash and one recovery pass: the active record names what is on disk
    in a settled or trial phase, every record names a complete checkpoint, and a configuration that
    failed its trial never became last-known-good."""
    records = store.records(CONFIG.name)
    assert records.active is not None and records.active.phase != "rolling-back"
    assert snapshot(CONFIG, root).hash == records.active.hash
    for record in (records.assigned, records.active, records.last_known_good):
        if record is not None:
            store.load(CONFIG.name, record.hash)
    assert records.last_known_good is not None and records.last_known_good.hash != failed
    return records


def _cuts(effects: tuple[trial.Effect, ...]) -> range:
    return range(len(effects) + 1)


@pytest.mark.parametrize("cut", range(4))
def test_a_crash_while_a_new_configuration_begins_its_trial(tmp_path: Path, cut: int) -> None:
    store, good = _host_with_good_config(tmp_path)
    new = _write(tmp_path, "new")  # apply laid down a new configuration
    effects = trial.begin(store.records(CONFIG.name), new, 100.0, 60.0)
    assert len(effects) == 3 and cut in _cuts(effects)
    carry_out(effects[:cut], store, CONFIG.name, tmp_path, snapshot(CONFIG, tmp_path), lambda _: None)
    # reboot: a fresh pass at t=130 with nothing watched yet
    step(store, CONFIG, tmp_path, POLICY, [], 130.0, 130.0, lambda _: None)
    records = _check_consistent(store, tmp_path, None)
    assert records.active == Active(new, "trial", 100.0 if cut == 3 else 130.0, 60.0)  # resumed, or begun
    assert records.last_known_good == Record(good, 61.0)


@pytest.mark.parametrize("cut", range(3))
def test_a_crash_while_a_trial_graduates(tmp_path: Path, cut: int) -> None:
    store, _ = _host_with_good_config(tmp_path)
    new = _write(tmp_path, "new")
    step(store, CONFIG, tmp_path, POLICY, [], 100.0, 100.0, lambda _: None)
    records = store.records(CONFIG.name)
    decision = decide(CONFIG.name, records, ready(101, 160), POLICY, 160.0, 100.0)
    effects = trial.effects(records, decision, 160.0)
    assert decision.action == "graduate" and len(effects) == 2
    carry_out(effects[:cut], store, CONFIG.name, tmp_path, None, lambda _: None)
    step(store, CONFIG, tmp_path, POLICY, [], 400.0, 400.0, lambda _: None)  # reboot
    records = _check_consistent(store, tmp_path, None)
    if cut == 0:  # nothing recorded: the trial resumes from its recorded start, watched again
        assert records.active == Active(new, "trial", 100.0, 60.0)
    else:  # the half-recorded graduation was finished
        assert records.active is not None and records.active.phase == "good" and records.active.hash == new
        assert records.last_known_good is not None and records.last_known_good.hash == new


@pytest.mark.parametrize("cut", range(5))
def test_a_crash_while_rolling_back(tmp_path: Path, cut: int) -> None:
    store, good = _host_with_good_config(tmp_path)
    bad = _write(tmp_path, "bad")
    step(store, CONFIG, tmp_path, POLICY, [], 100.0, 100.0, lambda _: None)
    records = store.records(CONFIG.name)
    crash_loop = down(101) + down(110, restarts=1) + down(120, restarts=3)
    decision = decide(CONFIG.name, records, crash_loop, POLICY, 120.0, 100.0)
    effects = trial.effects(records, decision, 120.0)
    assert decision.action == "rollback" and len(effects) == 4
    restarts: list[str] = []
    carry_out(effects[:cut], store, CONFIG.name, tmp_path, None, restarts.append)
    if cut in (2, 3):  # restore was interrupted between its renames: half of each on disk
        (tmp_path / "etc/ks/scheduler.conf").write_text("kubeconfig for bad\n")
    restarts.clear()
    step(store, CONFIG, tmp_path, POLICY, [], 500.0, 500.0, restarts.append)  # reboot
    records = _check_consistent(store, tmp_path, bad)
    if cut == 0:  # the failure was never recorded: the trial resumes from its start, and is watched again
        assert records.active == Active(bad, "trial", 100.0, 60.0) and restarts == []
        assert snapshot(CONFIG, tmp_path).hash == bad
        after = step(store, CONFIG, tmp_path, POLICY, crash_loop_at(500), 530.0, 500.0, restarts.append)
        assert after.decision.action == "rollback" and restarts == [CONFIG.name]
        records = _check_consistent(store, tmp_path, bad)
    elif cut < 4:  # the rollback was recorded first: the pass finished it
        assert restarts == [CONFIG.name]
    assert records.active is not None and records.active.phase == "rolled-back"
    assert (records.active.hash, records.active.failed) == (good, bad)
    assert "exited 3 times" in records.active.reason
    assert snapshot(CONFIG, tmp_path).hash == good


def crash_loop_at(start: float) -> list[Sample]:
    return down(start + 1) + down(start + 10, restarts=2) + down(start + 20, restarts=3)


def test_without_the_write_ahead_record_a_crash_mid_restore_is_not_finished(tmp_path: Path) -> None:
    """The property above depends on the intent being recorded before the files move: cut a
    rollback that restores first and records after, and the pass after the reboot takes the mixed
    files for a new configuration, which is the inconsistency the order prevents."""
    store, good = _host_with_good_config(tmp_path)
    bad = _write(tmp_path, "bad")
    step(store, CONFIG, tmp_path, POLICY, [], 100.0, 100.0, lambda _: None)
    (tmp_path / "etc/ks/scheduler.yaml").write_text("profile: good\n")  # restore cut after its first rename
    outcome = step(store, CONFIG, tmp_path, POLICY, [], 500.0, 500.0, lambda _: None)
    assert outcome.began and outcome.records.active is not None
    assert outcome.records.active.hash not in (good, bad)


def test_a_rollback_restores_the_files_and_restarts_once(tmp_path: Path) -> None:
    store, good = _host_with_good_config(tmp_path)
    bad = _write(tmp_path, "bad")
    restarts: list[str] = []
    step(store, CONFIG, tmp_path, POLICY, [], 100.0, 100.0, restarts.append)
    outcome = step(store, CONFIG, tmp_path, POLICY, down(101, 130, 221), 221.0, 100.0, restarts.append)
    assert outcome.decision == Decision("rollback", "kube-scheduler did not become ready within 120s "
                                                    "(connection refused)")
    assert restarts == [CONFIG.name] and snapshot(CONFIG, tmp_path).hash == good
    assert outcome.records.assigned == Record(bad, 100.0)
    again = step(store, CONFIG, tmp_path, POLICY, ready(230), 230.0, 100.0, restarts.append)
    assert again.decision.action == "none" and restarts == [CONFIG.name]  # settled: nothing more


# ---- the trial length is an option of the spec, and reaches the agent on every host

SPEC = """apiVersion: kubesmith.io/v1alpha1
kind: Cluster
metadata: {name: demo}
spec:
  kubernetesVersion: "1.36.2"
  hosts:
    - {name: h1, address: 10.0.0.11, roles: [control-plane, etcd, node]}
  components:
    agent:
      configTrials: %s
"""


def test_trial_lengths_are_set_per_component_in_the_spec(tmp_path: Path) -> None:
    plan = plan_of_text(SPEC % "{kube-apiserver: 90}")
    settings = next(f.data for f in plan.hosts[0].files if f.path == "/etc/kubesmith/agent.json")
    assert settings["config_trials"]["kube-apiserver"] == 90 and settings["config_trials"]["kube-scheduler"] == 30
    config = tmp_path / "agent.json"
    config.write_text(json.dumps(settings))
    empty = tmp_path / "empty"
    empty.mkdir()
    ran = kubesmith("agent", "--once", "--config", str(config), "--pki-dir", str(empty), "--kubeconfig-dir",
                    str(empty), "--state-file", str(tmp_path / "state.json"))
    assert ran.returncode == 0 and "nothing to renew" in ran.stderr  # the agent takes its new settings
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC % "{kube-shceduler: 20, etcd: 1}")
    refused = kubesmith("validate", str(spec))
    assert refused.returncode == 1
    assert "spec.components.agent.configTrials.kube-shceduler" in refused.stderr
    assert "'kube-scheduler'" in refused.stderr
    assert "spec.components.agent.configTrials.etcd: Input should be greater than or equal to 5" in refused.stderr


# ---- the verdict a roll-out waits for (`kubesmith config wait`)

GOOD_HASH, NEW_HASH = "a" * 64, "b" * 64


def _graduated(digest: str, at: float) -> trial.Records:
    return trial.Records(trial.Record(digest, at), trial.Active(digest, "good", at), trial.Record(digest, at))


def test_an_unchanged_configuration_passes_at_once_and_a_new_one_waits_for_its_trial() -> None:
    settled = _graduated(GOOD_HASH, 100.0)
    found = trial.verdict("etcd", settled, GOOD_HASH, since=500.0)
    assert found is not None and found.passed and found.hash == GOOD_HASH
    assert trial.verdict("etcd", settled, NEW_HASH, since=500.0) is None  # on disk, not yet on trial
    on_trial = trial.Records(trial.Record(NEW_HASH, 510.0), trial.Active(NEW_HASH, "trial", 510.0, 60.0),
                             trial.Record(GOOD_HASH, 100.0))
    assert trial.verdict("etcd", on_trial, NEW_HASH, since=500.0) is None
    graduated = trial.verdict("etcd", _graduated(NEW_HASH, 580.0), NEW_HASH, since=500.0)
    assert graduated is not None and graduated.passed and graduated.hash == NEW_HASH


def test_a_failed_trial_is_the_verdict_only_when_it_belongs_to_this_roll_out() -> None:
    failed = trial.Active(GOOD_HASH, "rolled-back", 530.0, failed=NEW_HASH, reason="etcd exited 3 times in 20s")
    records = trial.Records(trial.Record(NEW_HASH, 510.0), failed, trial.Record(GOOD_HASH, 100.0))
    # the rollback already put the good files back on disk: the verdict is still on what was assigned
    found = trial.verdict("etcd", records, GOOD_HASH, since=500.0)
    assert found is not None and not found.passed and found.hash == NEW_HASH
    assert (found.reason, found.running) == ("etcd exited 3 times in 20s", GOOD_HASH)
    # a later roll-out (since after the failure) reads the host as running its good configuration
    later = trial.verdict("etcd", records, GOOD_HASH, since=900.0)
    assert later is not None and later.passed and later.hash == GOOD_HASH
    # the same bad configuration assigned again after an old failure: undecided until its new trial ends
    again = trial.Records(trial.Record(NEW_HASH, 100.0), failed, trial.Record(GOOD_HASH, 50.0))
    assert trial.verdict("etcd", again, NEW_HASH, since=900.0) is None
    rolling_back = trial.Records(records.assigned, trial.Active(GOOD_HASH, "rolling-back", 530.0, failed=NEW_HASH),
                                 records.last_known_good)
    assert trial.verdict("etcd", rolling_back, GOOD_HASH, since=500.0) is None  # not back yet
    gave_up = trial.Records(trial.Record(NEW_HASH, 510.0),
                            trial.Active(NEW_HASH, "failed", 530.0, failed=NEW_HASH, reason="never ready"))
    found = trial.verdict("etcd", gave_up, NEW_HASH, since=500.0)
    assert found is not None and not found.passed and found.running == ""


def _first_config_on_trial(root: Path) -> tuple[CheckpointStore, str]:
    """A fresh host: its first configuration was just put on trial (no last-known-good yet)."""
    store = CheckpointStore(root / "var/lib/kubesmith/config")
    first = _write(root, "first")
    step(store, CONFIG, root, POLICY, [], 0.0, 0.0, lambda _: None)
    assert store.records(CONFIG.name).active == Active(first, "trial", 0.0, 60.0)
    assert store.records(CONFIG.name).last_known_good is None
    return store, first


def test_a_change_during_the_first_trial_can_go_back_to_a_configuration_that_came_up(tmp_path: Path) -> None:
    """The bug this guards: a bad change applied seconds after the first apply found no last-known-good
    configuration and left the component down. The first one came up ready: it becomes the one to go
    back to, and the bad change is rolled back to it."""
    store, first = _first_config_on_trial(tmp_path)
    bad = _write(tmp_path, "bad")
    # the pass that finds `bad` may already sample it (the apply restarted the component): ready before counts
    outcome = step(store, CONFIG, tmp_path, POLICY, ready(5, 10) + down(12), 12.0, 0.0, lambda _: None)
    assert outcome.began and store.records(CONFIG.name).last_known_good == Record(first, 12.0)
    restarts: list[str] = []
    crash_loop = down(13) + down(20, restarts=1) + down(25, restarts=3)
    outcome = step(store, CONFIG, tmp_path, POLICY, crash_loop, 25.0, 12.0, restarts.append)
    assert outcome.decision.action == "rollback" and restarts == [CONFIG.name]
    records = store.records(CONFIG.name)
    assert records.active is not None and records.active.phase == "rolled-back"
    assert records.active.hash == first and records.active.failed == bad
    assert snapshot(CONFIG, tmp_path).hash == first


def test_a_first_configuration_that_never_came_up_is_not_promoted(tmp_path: Path) -> None:
    store, first = _first_config_on_trial(tmp_path)
    second = _write(tmp_path, "second")
    outcome = step(store, CONFIG, tmp_path, POLICY, down(5, 10), 10.0, 0.0, lambda _: None)
    records = store.records(CONFIG.name)
    assert outcome.began and records.last_known_good is None and records.active == Active(second, "trial", 10.0, 60.0)
    assert first != second


@pytest.mark.parametrize("cut", range(5))
def test_a_crash_while_a_superseded_trial_is_promoted(tmp_path: Path, cut: int) -> None:
    store, first = _first_config_on_trial(tmp_path)
    new = _write(tmp_path, "new")
    effects = trial.begin(store.records(CONFIG.name), new, 30.0, 60.0, healthy_so_far=True)
    assert len(effects) == 4 and isinstance(effects[0], trial.WriteLastKnownGood) and cut in _cuts(effects)
    carry_out(effects[:cut], store, CONFIG.name, tmp_path, snapshot(CONFIG, tmp_path), lambda _: None)
    step(store, CONFIG, tmp_path, POLICY, [], 40.0, 40.0, lambda _: None)  # reboot: nothing watched yet
    records = store.records(CONFIG.name)
    assert records.active is not None and records.active.hash == new and records.active.phase == "trial"
    if cut == 0:  # nothing was written: the first trial is superseded with no sample seen, so not promoted
        assert records.last_known_good is None
    else:
        assert records.last_known_good == Record(first, 30.0)
        store.load(CONFIG.name, first)


def test_a_restarted_agent_still_knows_the_superseded_configuration_came_up(tmp_path: Path) -> None:
    """The apply that supersedes a trial changes the components file too, which restarts the agent:
    its samples are gone, but the trial's record says the configuration was seen ready."""
    store, first = _first_config_on_trial(tmp_path)
    step(store, CONFIG, tmp_path, POLICY, ready(5), 5.0, 0.0, lambda _: None)
    assert store.records(CONFIG.name).active == Active(first, "trial", 0.0, 60.0, seen_ready=True)
    _write(tmp_path, "bad")
    outcome = step(store, CONFIG, tmp_path, POLICY, down(20), 20.0, 20.0, lambda _: None)  # a fresh agent
    assert outcome.began and store.records(CONFIG.name).last_known_good == Record(first, 20.0)


def test_the_trial_lengths_the_modules_declare_are_the_options_keys() -> None:
    """A module that declares a trial length (Module.trial) can have it replaced in configTrials, and
    configTrials names no component without one."""
    assert set(get_args(TrialComponent)) == set(TRIAL_SECONDS)
    assert TRIAL_SECONDS["kube-apiserver"] == 60 and TRIAL_SECONDS["containerd"] == 30
