"""The checkpoint store: which files make up a component's configuration (from a real plan and a
real rendered host tree), content addressing, restore, garbage collection, and crash safety
against a real writer process SIGKILLed at random moments."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import pytest

from kubesmith import layout
from kubesmith.agent.checkpoints import CheckpointError, CheckpointStore, ComponentConfig, restore, snapshot
from kubesmith.agent.trial import Active, Record
from kubesmith.backends.render import render
from kubesmith.fsutil import TEMP_MARKER
from kubesmith.plan.components import component_config
from kubesmith.vocabulary.model import Plan
from conftest import kubesmith
from plan_support import plan_of

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> tuple[Plan, Path]:
    """The single-node example rendered as the host's tree (real PKI, real units)."""
    base = tmp_path_factory.mktemp("rendered")
    plan = plan_of(ROOT / "examples" / "single-node.yaml")
    render(plan, base / "state", base / "out")
    return plan, base / "out" / plan.hosts[0].name


def _config(plan: Plan, service: str) -> ComponentConfig:
    host = plan.hosts[0]
    return component_config(host, host.service(service))


def test_a_components_configuration_is_its_unit_documents_and_credentials(single: tuple[Plan, Path]) -> None:
    plan, _ = single
    apiserver = set(_config(plan, "kube-apiserver").paths)
    assert {f"{layout.UNIT_DIR}/kube-apiserver.service", "/etc/kubernetes/config/admission.yaml",
            "/etc/kubernetes/config/encryption.yaml", "/etc/kubernetes/pki/apiserver.crt",
            "/etc/kubernetes/pki/apiserver.key", "/etc/kubernetes/pki/etcd/ca.crt"} <= apiserver
    # named only inside admission.yaml's document, not on the command line
    assert "/etc/kubernetes/config/event-rate-limit.yaml" in apiserver
    kubelet = set(_config(plan, "kubelet").paths)
    assert {"/etc/kubernetes/config/kubelet.yaml", "/etc/kubernetes/kubelet.conf",
            "/etc/kubernetes/pki/kubelet-serving.crt", "/etc/kubernetes/pki/ca.crt"} <= kubelet
    assert "/etc/kubernetes/admin.conf" not in apiserver | kubelet  # another component's credential
    assert not any(p.startswith("/etc/kubernetes/config/kube-proxy") for p in kubelet)


def test_a_checkpoint_is_named_by_its_content_and_loads_back(single: tuple[Plan, Path], tmp_path: Path) -> None:
    plan, tree = single
    config = _config(plan, "kube-scheduler")
    store = CheckpointStore(tmp_path / "store")
    first = snapshot(config, tree)
    assert {e.path for e in first.entries} == set(config.paths)  # every file of the rendered tree
    digest = store.save(first)
    assert store.save(snapshot(config, tree)) == digest and store.hashes("kube-scheduler") == [digest]
    loaded = store.load("kube-scheduler", digest)
    assert loaded.argv == config.argv and loaded.entries == first.entries
    assert oct((store.base / "kube-scheduler").stat().st_mode & 0o777) == oct(0o700)
    # a flag (in the unit file), a byte of a document, or a mode makes another checkpoint; the argv the
    # agent was told alone does not (it may name a newer configuration than a rollback restored)
    assert snapshot(ComponentConfig(config.name, (*config.argv, "--v=4"), config.paths), tree).hash == digest
    unit = tree / "etc/systemd/system/kube-scheduler.service"
    original = unit.read_bytes()
    try:
        unit.write_bytes(original.replace(b"--profiling=false", b"--profiling=false --v=4"))
        assert unit.read_bytes() != original and snapshot(config, tree).hash != digest
    finally:
        unit.write_bytes(original)
    document = tree / "etc/kubernetes/config/scheduler.yaml"
    original = document.read_bytes()
    try:
        document.write_bytes(original + b"# changed\n")
        assert snapshot(config, tree).hash != digest
    finally:
        document.write_bytes(original)
    document.chmod(0o600)
    try:
        assert snapshot(config, tree).hash != digest
    finally:
        document.chmod(0o644)


def test_restore_puts_back_bytes_and_modes_and_is_idempotent(single: tuple[Plan, Path], tmp_path: Path) -> None:
    plan, tree = single
    config = _config(plan, "kubelet")
    store = CheckpointStore(tmp_path / "store")
    good = store.load("kubelet", store.save(snapshot(config, tree)))
    copy = tmp_path / "host"
    for entry in good.entries:  # a host holding that configuration, then a bad change to it
        target = copy / entry.path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(good.blobs[entry.sha256])
        target.chmod(entry.mode)
    document = copy / "etc/kubernetes/config/kubelet.yaml"
    document.write_text("kind: KubeletConfiguration\nfailSwapOn: maybe\n")
    key = copy / "etc/kubernetes/pki/kubelet-serving.key"
    key.chmod(0o644)
    assert snapshot(config, copy).hash != good.hash
    assert restore(good, copy) == 2
    assert snapshot(config, copy).hash == good.hash and key.stat().st_mode & 0o777 == 0o600
    assert restore(good, copy) == 0
    assert not [p for p in copy.rglob("*") if TEMP_MARKER in p.name]


def test_load_refuses_a_damaged_checkpoint(single: tuple[Plan, Path], tmp_path: Path) -> None:
    plan, tree = single
    store = CheckpointStore(tmp_path / "store")
    digest = store.save(snapshot(_config(plan, "kube-scheduler"), tree))
    blob = next((store.checkpoints_dir("kube-scheduler") / digest / "blobs").iterdir())
    blob.write_bytes(blob.read_bytes() + b"x")
    with pytest.raises(CheckpointError, match="does not match its name"):
        store.load("kube-scheduler", digest)
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        store.load("kube-scheduler", "0" * 64)


def _versions(store: CheckpointStore, tmp_path: Path, count: int) -> list[str]:
    config = ComponentConfig("kube-proxy", ("--config=/etc/kube-proxy.yaml",), ("/etc/kube-proxy.yaml",))
    hashes = []
    for index in range(count):
        (tmp_path / "etc").mkdir(exist_ok=True)
        (tmp_path / "etc/kube-proxy.yaml").write_text(f"version: {index}\n")
        hashes.append(store.save(snapshot(config, tmp_path)))
        path = store.checkpoints_dir("kube-proxy") / hashes[-1]
        os.utime(path, (1_000_000 + index, 1_000_000 + index))  # creation order, whatever the clock's resolution
    return hashes


def test_collect_keeps_assigned_active_failed_lkg_and_the_newest(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "store")
    v = _versions(store, tmp_path, 7)
    store.write_record("kube-proxy", "last_known_good", Record(v[0], 1.0))
    store.write_record("kube-proxy", "active", Active(v[0], "rolled-back", 2.0, failed=v[1], reason="r"))
    store.write_record("kube-proxy", "assigned", Record(v[2], 1.5))
    leftover = store.checkpoints_dir("kube-proxy") / f".{v[3]}{TEMP_MARKER}dead"
    leftover.mkdir()
    removed = store.collect("kube-proxy", keep=2)
    assert sorted(removed) == sorted(v[3:5]) and not leftover.exists()
    assert store.hashes("kube-proxy") == sorted([v[0], v[1], v[2], v[5], v[6]])
    assert store.collect("kube-proxy", keep=2) == []
    for digest in store.hashes("kube-proxy"):
        store.load("kube-proxy", digest)


def _writer(root: Path, base: Path, ready: int) -> None:
    """The child: saves a new configuration of 6 files of 256 KiB, again and again, until killed."""
    config = ComponentConfig("etcd", ("--config-file=/etc/etcd/a",), tuple(f"/etc/etcd/{n}" for n in "abcdef"))
    store = CheckpointStore(base)
    (root / "etc/etcd").mkdir(parents=True, exist_ok=True)
    os.write(ready, b"r")
    while True:
        for name in "abcdef":
            (root / "etc/etcd" / name).write_bytes(os.urandom(1 << 18))
        store.save(snapshot(config, root))


def test_a_writer_killed_at_random_moments_leaves_no_torn_checkpoint(tmp_path: Path) -> None:
    """A real process (forked, so it starts at once) writes checkpoints in a loop; SIGKILL lands at
    20 random moments. Every directory bearing a hash loads, checked blob by blob; what the killed
    writers left is only temp directories, which `collect` removes."""
    store = CheckpointStore(tmp_path / "store")
    rng = random.Random(18)
    leftovers = 0
    for _ in range(20):
        ready_read, ready_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child never returns into pytest
            try:
                _writer(tmp_path / "root", store.base, ready_write)
            finally:
                os._exit(1)
        os.close(ready_write)
        try:
            assert os.read(ready_read, 1) == b"r"
            time.sleep(rng.uniform(0.0, 0.2))
        finally:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(ready_read)
        parent = store.checkpoints_dir("etcd")
        leftovers += sum(TEMP_MARKER in p.name for p in parent.iterdir()) if parent.is_dir() else 0
        for digest in store.hashes("etcd"):
            store.load("etcd", digest)  # raises on a torn checkpoint
    saved = store.hashes("etcd")
    assert saved, "the writer never completed a checkpoint: the test proves nothing"
    assert leftovers, "no kill landed inside a write: the test proves nothing"
    store.collect("etcd", keep=len(saved))
    assert not [p for p in store.checkpoints_dir("etcd").iterdir() if TEMP_MARKER in p.name]
    assert store.hashes("etcd") == saved


def test_records_round_trip_and_a_damaged_one_is_named(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "store")
    active = Active("a" * 64, "trial", 10.0, 60.0)
    store.write_record("etcd", "active", active)
    assert store.records("etcd").active == active and store.records("etcd").assigned is None
    (store.base / "etcd" / "assigned.json").write_text("{")
    with pytest.raises(CheckpointError, match="assigned.json: damaged record"):
        store.records("etcd")
    assert json.loads((store.base / "etcd" / "active.json").read_text())["phase"] == "trial"


def test_config_status_finds_a_torn_checkpoint_and_a_record_without_one(single: tuple[Plan, Path],
                                                                        tmp_path: Path) -> None:
    """`kubesmith config status` on a host: every checkpoint checked against its hash, every record
    against the checkpoints (what the lab's agent-killing test asks after each kill)."""
    plan, tree = single
    config = _config(plan, "kube-scheduler")
    store = CheckpointStore(tmp_path / "store")
    digest = store.save(snapshot(config, tree))
    store.write_record("kube-scheduler", "assigned", Record(digest, 1.0))
    store.write_record("kube-scheduler", "active", Active(digest, "good", 1.0))
    components = tmp_path / "components.json"
    components.write_text(json.dumps({"minor": "1.36", "components": [
        {**config.document(), "binary": "kube-scheduler", "probe": None, "executable": None}]}))

    def status() -> tuple[int, dict]:
        done = kubesmith("config", "status", "--output", "json", "--components-file", str(components),
                         "--checkpoints-dir", str(store.base))
        assert "Traceback" not in done.stderr, done.stderr
        return done.returncode, json.loads(done.stdout)["components"][0]

    code, entry = status()
    assert (code, entry["problems"], entry["checkpoints"], entry["active"]) == (0, [], 1, digest), entry
    assert entry["status"] == "True", entry
    store.write_record("kube-scheduler", "last_known_good", Record("f" * 64, 1.0))
    code, entry = status()
    assert code == 4 and entry["problems"] == [f"kube-scheduler: its last-known-good record names {'f' * 12}, "
                                               "which has no checkpoint"], entry
    blob = next((store.checkpoints_dir("kube-scheduler") / digest / "blobs").iterdir())
    blob.write_bytes(blob.read_bytes() + b"torn")
    code, entry = status()
    assert code == 4 and any("content does not match its name" in p for p in entry["problems"]), entry
