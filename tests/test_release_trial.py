"""Two releases side by side on a host, and a host's release that goes back as a whole.

The units name each Kubernetes binary in its release's directory, so a checkpoint (which holds the
unit) knows its release; an apply keeps the release a host ran beside the new one; and when one
component's new release fails its trial, the keeper sends the host's other components back to the
old release too. The lab run is tests/test_upgrade_lab.py's failing upgrade; these are the pieces.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plan_support import plan_of_text

from kubesmith import layout
from kubesmith.agent import hostrelease, trial
from kubesmith.agent.checkpoints import CheckpointStore, ComponentConfig, snapshot
from kubesmith.agent.configloop import Component, Keeper
from kubesmith.agent.keeper import Outcome, carry_out, step
from kubesmith.backends import releases
from kubesmith.backends.render import render
from kubesmith.backends.rollout import failure_line
from kubesmith.backends.systemd import UnitOptions, for_release, unit_files
from kubesmith.health.wait import LocalProbeRunner

OLD, NEW = "1.35.6", "1.36.2"
SPEC = ("apiVersion: kubesmith.io/v1alpha1\nkind: Cluster\nmetadata: {name: demo}\nspec:\n"
        "  kubernetesVersion: \"1.36.2\"\n  hosts:\n    - {name: h1, address: 10.0.0.11, "
        "roles: [control-plane, etcd, node]}\n")


def exec_start(unit: str) -> str:
    return next(line for line in unit.splitlines() if line.startswith("ExecStart=")).split("=", 1)[1].split()[0]


def test_units_name_each_kubernetes_binary_in_its_release_directory_and_etcd_in_bin(tmp_path: Path) -> None:
    plan = plan_of_text(SPEC)
    host = plan.host("h1")
    units = unit_files(host, for_release(NEW))
    where = f"{layout.RELEASES}/{NEW}"
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"):
        assert exec_start(units[f"etc/systemd/system/{name}.service"]) == f"{where}/{name}"
    assert exec_start(units["etc/systemd/system/etcd.service"]) == f"{layout.BIN}/etcd"  # versioned on its own
    assert exec_start(unit_files(host, UnitOptions())["etc/systemd/system/kubelet.service"]) == f"{layout.BIN}/kubelet"
    assert layout.release_of(f"{where}/kubelet") == NEW
    assert layout.release_of(f"{layout.BIN}/kubelet") == layout.LEGACY_RELEASE
    assert layout.release_of(f"{layout.BIN}/etcd") is None and layout.release_of(f"{where}/a/b") is None


def test_a_render_with_binaries_places_them_where_the_units_name_them(tmp_path: Path) -> None:
    from kubesmith.backends.render import Shipped

    # Why not the real binaries: the test checks which files ship and where, never runs them; the real
    # kube-apiserver, kubelet and etcd (223 MB) would be hashed and copied into the bundle each run.
    binaries = {}
    for name in ("kube-apiserver", "kubelet", "etcd"):
        binaries[name] = tmp_path / name
        binaries[name].write_bytes(b"#!/bin/sh\n")
    plan = plan_of_text(SPEC)
    render(plan, tmp_path / "state", tmp_path / "out", shipped=Shipped(binaries, (), for_release(NEW)))
    tree = tmp_path / "out" / "h1"
    paths = {entry["path"] for entry in json.loads((tree / "manifest.json").read_text())["files"]}
    assert {f"{layout.RELEASES}/{NEW}/kube-apiserver", f"{layout.RELEASES}/{NEW}/kubelet",
            f"{layout.BIN}/etcd"} <= paths
    components = json.loads((tree / "etc/kubesmith/components.json").read_text())["components"]
    assert next(c for c in components if c["name"] == "kubelet")["executable"] == f"{layout.RELEASES}/{NEW}/kubelet"


def manifest(release: str | None, previous: str | None, *versions: str) -> dict[str, object]:
    files = {f"{layout.release_dir(v)}/kubelet": f"sha-{v}" for v in versions}
    files["/etc/kubernetes/kubelet.conf"] = "sha-conf"
    return {"cluster": "demo", **({"release": release} if release else {}),
            **({"previous": previous} if previous else {}), "files": files}


@pytest.mark.parametrize(("document", "on_host", "release", "previous", "stale"), [
    # an upgrade keeps the release the host runs; nothing else is there
    (manifest(OLD, None, OLD), [OLD], NEW, OLD, ()),
    # the release stays: the one kept before stays kept (a no-op apply removes nothing)
    (manifest(NEW, OLD, NEW, OLD), [OLD, NEW], NEW, OLD, ()),
    # a third release: the oldest goes before the upload, so at most two are on the host
    (manifest(NEW, OLD, NEW, OLD), [OLD, NEW], "1.37.0", NEW, (OLD,)),
    # going back to the kept release: the one it leaves is kept in turn
    (manifest(NEW, OLD, NEW, OLD), [OLD, NEW], OLD, NEW, ()),
    # a release an apply uploaded but never recorded (its trial failed, the old spec applied since) goes
    (manifest(OLD, None, OLD), [OLD, NEW], OLD, None, (NEW,)),
    # a host applied before release directories: its binaries in BIN are the release it runs
    ({"cluster": "demo", "files": {f"{layout.BIN}/kubelet": "x", f"{layout.BIN}/etcd": "y"}}, [], NEW,
     layout.LEGACY_RELEASE, ()),
    # a fresh host
    ({}, [], NEW, None, ()),
])
def test_an_apply_keeps_the_release_the_host_ran_and_at_most_two(document: dict[str, object], on_host: list[str],
                                                                  release: str, previous: str | None,
                                                                  stale: tuple[str, ...]) -> None:
    found = releases.kept(document, release, on_host)
    assert (found.release, found.previous, found.stale) == (release, previous, stale)
    files = document.get("files") or {}
    assert found.files == {path: digest for path, digest in files.items()  # type: ignore[union-attr]
                           if previous is not None and layout.release_of(path) == previous}
    assert releases.listed(f"{OLD}\n{NEW}\n\n") == (OLD, NEW)


# ---- the keeper: a host's release goes back as a whole

NAMES = ("kube-apiserver", "kubelet")


def configs() -> dict[str, ComponentConfig]:
    return {name: ComponentConfig(name, (f"--config=/etc/ks/{name}.yaml",),
                                  (f"/etc/ks/{name}.yaml", f"{layout.UNIT_DIR}/{name}.service")) for name in NAMES}


def write_release(root: Path, version: str, names: tuple[str, ...] = NAMES) -> None:
    for name in names:
        unit = root / layout.UNIT_DIR.lstrip("/") / f"{name}.service"
        unit.parent.mkdir(parents=True, exist_ok=True)
        unit.write_text(f"[Service]\nExecStart={layout.release_dir(version)}/{name} \\\n"
                        f"  --config=/etc/ks/{name}.yaml\n")
        (root / "etc/ks").mkdir(parents=True, exist_ok=True)
        (root / f"etc/ks/{name}.yaml").write_text(f"{name} of {version}\n")


POLICY = trial.TrialPolicy(seconds=60)


def upgraded_host(root: Path) -> tuple[CheckpointStore, dict[str, str], dict[str, str]]:
    """Both components graduated on OLD, then NEW on disk and on trial: (store, OLD hashes, NEW hashes)."""
    store = CheckpointStore(root / "var/lib/kubesmith/config")
    write_release(root, OLD)
    old = {name: snapshot(config, root).hash for name, config in configs().items()}
    for name, config in configs().items():
        step(store, config, root, POLICY, [], 0.0, 0.0, lambda _: None)
        step(store, config, root, POLICY, [trial.Sample(1, True), trial.Sample(61, True)], 61.0, 0.0, lambda _: None)
        assert store.records(name).last_known_good == trial.Record(old[name], 61.0)
    write_release(root, NEW)
    for config in configs().values():
        step(store, config, root, POLICY, [], 100.0, 100.0, lambda _: None)
    return store, old, {name: snapshot(config, root).hash for name, config in configs().items()}


class Restarts:
    """systemd's part, recorded: which components were restarted (systemd cannot run here)."""

    def __init__(self) -> None:
        self.done: list[str] = []

    def restarts(self, name: str) -> int:
        return 0

    def restart(self, name: str) -> None:
        self.done.append(name)


def keeper_on(root: Path, store: CheckpointStore, host: Restarts) -> Keeper:
    components = tuple(Component(config, name, None) for name, config in configs().items())
    return Keeper(components, store, root, {}, host, LocalProbeRunner(), str(root), clock=lambda: 130.0)


def test_a_release_that_fails_on_one_component_takes_the_hosts_others_back(tmp_path: Path) -> None:
    store, old, new = upgraded_host(tmp_path)
    crash_loop = [trial.Sample(101, False), trial.Sample(110, False, 1), trial.Sample(120, False, 3)]
    config = configs()["kube-apiserver"]
    outcome = step(store, config, tmp_path, POLICY, crash_loop, 120.0, 100.0, lambda _: None)
    assert outcome.decision.action == "rollback"
    assert hostrelease.release_of(snapshot(config, tmp_path)) == OLD
    kubelet = Outcome(store.records("kubelet"), trial.Decision("keep"))
    assert hostrelease.release_of(snapshot(configs()["kubelet"], tmp_path)) == NEW
    host = Restarts()
    outcomes = {"kube-apiserver": outcome, "kubelet": kubelet}
    keeper_on(tmp_path, store, host)._follow_releases(outcomes)

    assert host.done == ["kubelet"]
    assert snapshot(configs()["kubelet"], tmp_path).hash == old["kubelet"]
    records = store.records("kubelet")
    assert records.active is not None and records.active.phase == "rolled-back"
    assert (records.active.hash, records.active.failed) == (old["kubelet"], new["kubelet"])
    assert records.last_known_good is not None and records.last_known_good.hash == old["kubelet"]
    assert outcomes["kubelet"].decision.action == "rollback"
    assert records.active.reason.startswith(trial.FOLLOWED) and "kube-apiserver 1.36.2 failed" in records.active.reason

    verdicts = {name: trial.verdict(name, store.records(name), snapshot(configs()[name], tmp_path).hash, 100.0)
                for name in NAMES}
    assert all(v is not None and not v.passed for v in verdicts.values())
    entries = [{"component": v.component, "passed": False, "hash": v.hash, "reason": v.reason, "running": v.running}
               for v in verdicts.values() if v is not None]
    line = failure_line("h1", list(reversed(entries)))  # the follower first: the line still names the cause
    assert line.startswith("h1: kube-apiserver's new configuration ") and "exited 3 times" in line
    assert line.endswith("(kubelet went back with it)") and "\n" not in line

    again = keeper_on(tmp_path, store, host)
    assert step(store, configs()["kubelet"], tmp_path, POLICY, [], 140.0, 140.0, host.restart).decision.action == "none"
    again._follow_releases({"kube-apiserver": Outcome(store.records("kube-apiserver"), trial.Decision("none"))})
    assert host.done == ["kubelet"]  # settled: nothing more


def test_a_component_that_graduated_on_the_new_release_still_goes_back(tmp_path: Path) -> None:
    store, old, _ = upgraded_host(tmp_path)
    ready = [trial.Sample(101, True), trial.Sample(161, True)]
    graduated = step(store, configs()["kubelet"], tmp_path, POLICY, ready, 161.0, 100.0, lambda _: None)
    assert graduated.decision.action == "graduate"
    assert hostrelease.checkpoint_of(store, "kubelet", OLD, store.records("kubelet")) == old["kubelet"]
    crash_loop = [trial.Sample(101, False), trial.Sample(110, False, 1), trial.Sample(162, False, 3)]
    outcome = step(store, configs()["kube-apiserver"], tmp_path, POLICY, crash_loop, 162.0, 100.0, lambda _: None)
    host = Restarts()
    settled = Outcome(store.records("kubelet"), trial.Decision("none"))
    keeper_on(tmp_path, store, host)._follow_releases({"kube-apiserver": outcome, "kubelet": settled})
    assert host.done == ["kubelet"] and snapshot(configs()["kubelet"], tmp_path).hash == old["kubelet"]
    assert store.records("kubelet").last_known_good.hash == old["kubelet"]  # type: ignore[union-attr]


@pytest.mark.parametrize("cut", range(6))
def test_a_crash_while_following_the_hosts_release_is_finished_by_the_next_pass(tmp_path: Path, cut: int) -> None:
    store, old, new = upgraded_host(tmp_path)
    effects = trial.follow_release(new["kubelet"], old["kubelet"], 130.0, "kube-apiserver failed")
    assert len(effects) == 5
    carry_out(effects[:cut], store, "kubelet", tmp_path, None, lambda _: None)
    restarts: list[str] = []
    step(store, configs()["kubelet"], tmp_path, POLICY, [], 500.0, 500.0, restarts.append)  # reboot
    records = store.records("kubelet")
    assert records.active is not None and records.active.phase in ("trial", "rolled-back")
    if cut == 0:  # nothing recorded: the new release's trial goes on
        assert records.active.hash == new["kubelet"] and restarts == []
    else:  # the intent was written first: the pass finished it
        assert records.active.hash == old["kubelet"] == snapshot(configs()["kubelet"], tmp_path).hash
        assert records.active.phase == "rolled-back" and restarts == ([] if cut == 5 else ["kubelet"])
