"""Day-2 operations on the lab cluster (three control-plane + etcd hosts, the real binaries):
etcd snapshot and restore, and reset followed by a fresh apply with the same CAs.

The module leaves the cluster applied and healthy for the modules after it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from lab_cluster import Cluster
from polling import poll

pytestmark = [pytest.mark.lab, pytest.mark.slow]

OWNED = ("/var/lib/etcd", "/etc/kubernetes", "/var/lib/kubesmith", "/etc/kubesmith", "/usr/local/lib/kubesmith")


@pytest.fixture(scope="module")
def cluster(lab_cluster: Cluster) -> Cluster:
    applied = lab_cluster.apply()
    assert applied.returncode == 0, applied.stdout + applied.stderr
    return lab_cluster


def kubectl(cluster: Cluster, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """kubectl inside the lab's network namespace (the lab is not routed from the machine's own)."""
    return subprocess.run(["nsenter", f"--net={cluster.lab.config.netns_path}", "kubectl", "--kubeconfig",
                           str(kubeconfig), *args], capture_output=True, text=True, timeout=120, check=False)


def admin_kubeconfig(cluster: Cluster, directory: Path) -> Path:
    path = directory / "admin.conf"
    path.write_text(cluster.lab.ssh("h1", "cat /etc/kubernetes/admin.conf").stdout)
    path.chmod(0o600)
    return path


def configmap(cluster: Cluster, admin: Path, name: str) -> str | None:
    result = kubectl(cluster, admin, "get", "configmap", name, "-o", "jsonpath={.data.value}")
    return result.stdout if result.returncode == 0 else None


def test_a_snapshot_brings_back_what_was_deleted_and_a_corrupted_one_changes_nothing(
        cluster: Cluster, tmp_path: Path) -> None:
    admin = admin_kubeconfig(cluster, tmp_path)
    created = kubectl(cluster, admin, "create", "configmap", "precious", "--from-literal=value=kept")
    assert created.returncode == 0, created.stderr
    snapshot = tmp_path / "snap.db"
    taken = cluster.kubesmith("etcd snapshot", "--output", str(snapshot), "--format", "json", state=False)
    assert taken.returncode == 0, taken.stderr
    facts = json.loads(taken.stdout)
    assert facts["revision"] > 0 and facts["keys"] > 100 and facts["member"] in cluster.hosts
    assert snapshot.stat().st_mode & 0o777 == 0o600 and snapshot.stat().st_size == facts["size"]
    assert kubectl(cluster, admin, "delete", "configmap", "precious").returncode == 0

    corrupted = tmp_path / "corrupted.db"
    data = bytearray(snapshot.read_bytes())
    data[len(data) // 2] ^= 0xFF
    corrupted.write_bytes(bytes(data))
    before = {host: cluster.unit_state(host) for host in cluster.hosts}
    refused = cluster.kubesmith("etcd restore", str(corrupted), "--yes", state=False)
    assert refused.returncode == 5
    assert refused.stderr.strip() == f"error: {corrupted} fails its integrity check (the sha256 etcdctl appended " \
                                     "does not match the data); nothing was changed"
    assert {host: cluster.unit_state(host) for host in cluster.hosts} == before
    assert configmap(cluster, admin, "precious") is None

    restored = cluster.kubesmith("etcd restore", str(snapshot), "--yes", timeout=900, state=False)
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert poll(lambda: configmap(cluster, admin, "precious"), 60, "the configmap to be back") == "kept"
    status = cluster.kubesmith("status", "--output", "json", timeout=300)
    assert status.returncode == 0 and json.loads(status.stdout)["healthy"], status.stdout + status.stderr
    for host in cluster.hosts:
        assert cluster.lab.ssh(host, "ls -d /var/lib/etcd.before-restore-* 2>/dev/null || true").stdout == ""


def test_reset_refuses_another_clusters_hosts_then_removes_everything_and_apply_rebuilds(
        cluster: Cluster, tmp_path: Path) -> None:
    admin = admin_kubeconfig(cluster, tmp_path)
    other = tmp_path / "other.yaml"
    document = yaml.safe_load(cluster.spec.read_text())
    document["metadata"]["name"] = "other"
    other.write_text(yaml.safe_dump(document))
    refused = cluster.kubesmith("reset", "--yes", spec=other)
    assert refused.returncode == 5
    assert "not of cluster 'other'; no host was changed" in refused.stderr
    assert all(cluster.lab.ssh(h, "systemctl is-active kubernetes.target").stdout.strip() == "active"
               for h in cluster.hosts)

    reset = cluster.kubesmith("reset", "--yes")
    assert reset.returncode == 0, reset.stdout + reset.stderr
    for host in cluster.hosts:
        units = cluster.lab.ssh(host, "systemctl list-unit-files --no-legend 'kube*' 'etcd*' 'kubesmith*' "
                                      "'kubernetes*' 'node-online*'", check=False).stdout
        assert units.strip() == "", (host, units)
        left = cluster.lab.ssh(host, "ls -d " + " ".join(OWNED) + " 2>/dev/null || true").stdout
        assert left.strip() == "", (host, left)
        running = cluster.lab.ssh(host, "pgrep -l 'etcd|kube-' || true").stdout
        assert running.strip() == "", (host, running)

    again = cluster.apply()
    assert again.returncode == 0, again.stdout + again.stderr
    nodes = poll(lambda: kubectl(cluster, admin, "get", "namespaces", "-o", "name").stdout, 60,
                 "the old admin kubeconfig to work again")
    assert "namespace/kube-system" in nodes.split()
