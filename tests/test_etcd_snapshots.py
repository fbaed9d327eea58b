"""The agent's periodic etcd snapshots (`agent/snapshots.py`) against a real etcd 3.5 on loopback:
a snapshot is due at once when none is kept and then only after the interval, each is checked
with the real etcdutl and kept 0600, the oldest beyond `keep` go, and a failed one (etcd down)
leaves no file behind. The plan gives the agent of each etcd member, and only those, the settings."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from k8s_support import etcd_tool
from net_support import free_port
from plan_support import plan_of_text

from kubesmith.agent.snapshots import SnapshotError, SnapshotSettings, seconds_until_due, snapshots, take

SPEC = """apiVersion: kubesmith.io/v1alpha1
kind: Cluster
metadata: {name: snaps}
spec:
  kubernetesVersion: "1.36.2"
  hosts:
    - {name: cp, address: 10.0.0.10, roles: [control-plane, etcd]}
    - {name: w1, address: 10.0.0.11, roles: [node]}
  components:
    etcd: {snapshots: {interval: 6h, keep: 3}}
"""


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    client, peer = free_port(), free_port()
    argv = [etcd_tool("etcd"), "--name", "solo", "--data-dir", str(tmp_path / "data"),
            "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"solo=http://127.0.0.1:{peer}", "--log-level", "error"]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while subprocess.run([etcd_tool("etcdctl"), f"--endpoints=http://127.0.0.1:{client}", "put", "k", "v"],
                             capture_output=True).returncode != 0:
            assert process.poll() is None and time.monotonic() < deadline, "etcd did not start"
            time.sleep(0.2)
        yield process, client
    finally:
        process.terminate()
        process.wait(timeout=20)


def settings_for(client: int, directory: Path, keep: int = 2) -> SnapshotSettings:
    return SnapshotSettings(interval=3600, keep=keep, directory=directory,
                            etcdctl=(etcd_tool("etcdctl"), f"--endpoints=http://127.0.0.1:{client}",
                                     "--dial-timeout=2s", "--command-timeout=10s"),
                            etcdutl=etcd_tool("etcdutl"))


def test_snapshots_are_taken_when_due_checked_kept_private_and_pruned(etcd, tmp_path: Path) -> None:
    _, client = etcd
    settings = settings_for(client, tmp_path / "snaps")
    start = dt.datetime.now(dt.timezone.utc)
    assert seconds_until_due(settings, start) == 0  # none kept: one at once
    taken = [take(settings, start + dt.timedelta(hours=hour)) for hour in range(3)]
    assert taken[0].revision >= 2 and taken[0].keys >= 1
    kept = snapshots(settings.directory)
    assert kept == [t.path for t in taken[1:]] and taken[2].pruned == (taken[0].path,)  # keep 2: the oldest went
    assert all(path.stat().st_mode & 0o777 == 0o600 for path in kept)
    assert settings.directory.stat().st_mode & 0o777 == 0o700
    assert 3500 < seconds_until_due(settings, dt.datetime.now(dt.timezone.utc)) <= 3600  # the newest is fresh
    status = subprocess.run([settings.etcdutl, "snapshot", "status", str(kept[-1])], capture_output=True)
    assert status.returncode == 0, status.stderr


def test_a_snapshot_of_a_stopped_etcd_fails_and_leaves_nothing(etcd, tmp_path: Path) -> None:
    process, client = etcd
    settings = settings_for(client, tmp_path / "snaps")
    process.terminate()
    process.wait(timeout=20)
    with pytest.raises(SnapshotError, match="etcdctl snapshot save failed"):
        take(settings, dt.datetime.now(dt.timezone.utc))
    assert os.listdir(settings.directory) == []


def test_only_etcd_members_agents_get_the_snapshot_settings() -> None:
    plan = plan_of_text(SPEC)
    agent = {host: next(f.data for f in plan.host(host).files if f.path == "/etc/kubesmith/agent.json")
             for host in ("cp", "w1")}
    cp = agent["cp"]["etcd_snapshots"]
    assert (cp["interval"], cp["keep"], cp["directory"]) == (21600.0, 3, "/var/backups/kubesmith/etcd")
    assert cp["etcdctl"][0] == "/usr/local/bin/etcdctl" and "--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt" \
        in cp["etcdctl"]
    assert agent["w1"]["etcd_snapshots"] is None
    off = plan_of_text(SPEC.replace("    etcd: {snapshots: {interval: 6h, keep: 3}}\n", "    etcd: {}\n"))
    assert next(f.data for f in off.host("cp").files if f.path.endswith("agent.json"))["etcd_snapshots"] is None
