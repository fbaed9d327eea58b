"""Day-2 operations on the lab cluster (three control-plane + etcd hosts, the real binaries):
etcd snapshot and restore, and reset followed by a fresh apply with the same CAs.

The module leaves the cluster applied and healthy for the modules after it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from lab_cluster import Cluster
from polling import poll

pytestmark = [pytest.mark.lab, pytest.mark.slow]

OWNED = ("/var/lib/etcd", "/etc/kubernetes", "/var/lib/kubesmith", "/etc/kubesmith", "/usr/local/lib/kubesmith",
         "/var/lib/kubelet")


@pytest.fixture(scope="module")
def cluster(lab_cluster: Cluster) -> Cluster:
    return lab_cluster.applied()


def configmap(cluster: Cluster, admin: Path, name: str) -> str | None:
    result = cluster.kubectl(admin, "get", "configmap", name, "-o", "jsonpath={.data.value}")
    return result.stdout if result.returncode == 0 else None


def test_a_snapshot_brings_back_what_was_deleted_and_a_corrupted_one_changes_nothing(
        cluster: Cluster, tmp_path: Path) -> None:
    admin = cluster.admin_kubeconfig(tmp_path)
    created = cluster.kubectl(admin, "create", "configmap", "precious", "--from-literal=value=kept")
    assert created.returncode == 0, created.stderr
    snapshot = tmp_path / "snap.db"
    taken = cluster.kubesmith("etcd snapshot", "--output", str(snapshot), "--format", "json", state=False)
    assert taken.returncode == 0, taken.stderr
    facts = json.loads(taken.stdout)
    assert facts["revision"] > 0 and facts["keys"] > 100 and facts["member"] in cluster.hosts
    assert snapshot.stat().st_mode & 0o777 == 0o600 and snapshot.stat().st_size == facts["size"]
    assert cluster.kubectl(admin, "delete", "configmap", "precious").returncode == 0

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
    admin = cluster.admin_kubeconfig(tmp_path)
    other = tmp_path / "other.yaml"
    document = yaml.safe_load(cluster.spec.read_text())
    document["metadata"]["name"] = "other"
    other.write_text(yaml.safe_dump(document))
    refused = cluster.kubesmith("reset", "--yes", spec=other)
    assert refused.returncode == 5
    assert "not of cluster 'other'; no host was changed" in refused.stderr
    assert all(cluster.lab.ssh(h, "systemctl is-active kubernetes.target").stdout.strip() == "active"
               for h in cluster.hosts)

    pod = tmp_path / "pod.yaml"  # a pod on a node: reset must stop what outlives its kubelet and containerd
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: before-reset}\nspec:\n  nodeName: h2\n"
                   "  containers: [{name: pause, image: kubesmith.local/pause:1, imagePullPolicy: Never}]\n")
    assert cluster.kubectl(admin, "create", "--validate=false", "-f", str(pod)).returncode == 0
    poll(lambda: cluster.kubectl(admin, "get", "pod", "before-reset", "-o", "jsonpath={.status.phase}").stdout
         == "Running", 120, "a pod running on h2")

    reset = cluster.kubesmith("reset", "--yes")
    assert reset.returncode == 0, reset.stdout + reset.stderr
    for host in cluster.hosts:
        units = cluster.lab.ssh(host, "systemctl list-unit-files --no-legend 'kube*' 'etcd*' 'kubesmith*' "
                                      "'kubernetes*' 'node-online*'", check=False).stdout
        assert units.strip() == "", (host, units)
        left = cluster.lab.ssh(host, "ls -d " + " ".join(OWNED) + " 2>/dev/null || true").stdout
        assert left.strip() == "", (host, left)
        running = cluster.lab.ssh(host, "pgrep -l 'etcd|kube-|containerd|pause' || true").stdout
        assert running.strip() == "", (host, running)
        mounts = cluster.lab.ssh(host, "grep -E ' /(var/lib/kubelet|run/containerd)' /proc/mounts || true").stdout
        assert mounts.strip() == "", (host, mounts)
        empty = cluster.lab.ssh(host, "ls -A /var/lib/containerd").stdout  # a mount point here: emptied
        assert empty.strip() == "", (host, empty)

    again = cluster.apply()
    assert again.returncode == 0, again.stdout + again.stderr
    nodes = poll(lambda: cluster.kubectl(admin, "get", "namespaces", "-o", "name").stdout, 60,
                 "the old admin kubeconfig to work again")
    assert "namespace/kube-system" in nodes.split()
