"""Day-2 operations on the lab cluster (three control-plane + etcd hosts, the real binaries):
etcd snapshot and restore; a host removed from the spec (and a removal below quorum refused);
reset followed by a fresh apply with the same CAs, of h1 alone first, then grown to three hosts
while a client writes to the API; an etcd member whose data is wiped, replaced.

The module leaves the cluster applied and healthy for the modules after it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import yaml
from lab_cluster import Cluster
from polling import poll

from kubesmith.pki.store import store_root

pytestmark = [pytest.mark.lab, pytest.mark.slow]
SNAPSHOTS = "/var/backups/kubesmith/etcd"  # the agents' periodic snapshots (spec.components.etcd.snapshots)

PKI = "/etc/kubernetes/pki/etcd"
ETCDCTL = (f"/usr/local/bin/etcdctl --endpoints=https://127.0.0.1:2379 --cacert={PKI}/ca.crt "
           f"--cert={PKI}/healthcheck-client.crt --key={PKI}/healthcheck-client.key")
OWNED = ("/var/lib/etcd", "/etc/kubernetes", "/var/lib/kubesmith", "/etc/kubesmith", "/usr/local/lib/kubesmith",
         "/var/lib/kubelet")


class WriteLoop:
    """Writes to the API (a ConfigMap's value, every half second) from a thread while an apply runs:
    each failed write is kept with kubectl's message."""

    def __init__(self, cluster: Cluster, admin: Path, server: str) -> None:
        self.cluster, self.admin, self.server = cluster, admin, server
        self.done, self.failed = 0, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            patch = json.dumps({"data": {"value": str(self.done)}})
            result = self.cluster.kubectl(self.admin, "patch", "configmap", "write-loop", "--type=merge", "-p",
                                          patch, server=self.server, timeout=60)
            if result.returncode == 0:
                self.done += 1
            else:
                self.failed.append(result.stderr.strip())
            self.stop.wait(0.5)

    def __enter__(self) -> WriteLoop:
        made = self.cluster.kubectl(self.admin, "create", "configmap", "write-loop", "--from-literal=value=0",
                                    server=self.server)
        assert made.returncode == 0 or "AlreadyExists" in made.stderr, made.stderr
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=120)


def configmap(cluster: Cluster, admin: Path, name: str) -> str | None:
    result = cluster.kubectl(admin, "get", "configmap", name, "-o", "jsonpath={.data.value}")
    return result.stdout if result.returncode == 0 else None


def account(cluster: Cluster, admin: Path, namespace: str) -> bool:
    """The namespace's `default` service account exists (the controller manager makes it)."""
    return cluster.kubectl(admin, "get", "serviceaccount", "default", "-n", namespace).returncode == 0


def periodic_snapshots(cluster: Cluster, host: str) -> list[str]:
    """The snapshots the host's agent kept (examples/lab.yaml: every 12 hours, the first at once)."""
    return cluster.lab.ssh(host, f"ls {SNAPSHOTS} 2>/dev/null || true").stdout.split()


def test_a_snapshot_brings_back_what_was_deleted_and_a_corrupted_one_changes_nothing(
        cluster: Cluster, tmp_path: Path) -> None:
    for host in cluster.hosts:  # each member's agent took one of its own, which etcdutl finds whole
        kept = poll(lambda host=host: periodic_snapshots(cluster, host), 90, f"{host}'s first periodic snapshot")
        checked = cluster.lab.ssh(host, f"/usr/local/bin/etcdutl snapshot status {SNAPSHOTS}/{kept[-1]}", check=False)
        assert checked.returncode == 0 and kept[-1].startswith("snapshot-"), (host, kept, checked.stderr)
    admin = cluster.admin_kubeconfig(tmp_path)
    created = cluster.kubectl(admin, "create", "configmap", "precious", "--from-literal=value=kept")
    assert created.returncode == 0, created.stderr
    snapshot = tmp_path / "snap.db"
    taken = cluster.kubesmith("etcd snapshot", "--out", str(snapshot), "-o", "json", state=False)
    assert taken.returncode == 0, taken.stderr
    facts = json.loads(taken.stdout)
    assert facts["revision"] > 0 and facts["keys"] > 100 and facts["member"] in cluster.hosts
    assert snapshot.stat().st_mode & 0o777 == 0o600 and snapshot.stat().st_size == facts["size"]
    assert cluster.kubectl(admin, "delete", "configmap", "precious").returncode == 0
    # made after the snapshot: the restore takes the namespace and its service account away, while a
    # controller manager left running would keep them in its cache and never make the account again
    assert cluster.kubectl(admin, "create", "namespace", "late").returncode == 0
    poll(lambda: account(cluster, admin, "late"), 60, "the service account of namespace late")

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
    assert not account(cluster, admin, "late")
    assert cluster.kubectl(admin, "create", "namespace", "late").returncode == 0  # again, after the restore
    poll(lambda: account(cluster, admin, "late"), 60, "the controller manager to make the account again")
    status = cluster.kubesmith("status", "--output", "json", timeout=300)
    assert status.returncode == 0 and json.loads(status.stdout)["healthy"], status.stdout + status.stderr
    for host in cluster.hosts:
        assert cluster.lab.ssh(host, "ls -d /var/lib/etcd.before-restore-* 2>/dev/null || true").stdout == ""


def spec_with(cluster: Cluster, directory: Path, count: int) -> Path:
    """The cluster's spec with its first `count` hosts."""
    path = directory / f"hosts-{count}.yaml"
    document = yaml.safe_load(cluster.spec.read_text())
    document["spec"]["hosts"] = document["spec"]["hosts"][:count]
    path.write_text(yaml.safe_dump(document))
    return path


def renew_with_kept_credentials(cluster: Cluster, kept: Path) -> subprocess.CompletedProcess[str]:
    """One pass of the agent, on h2, with h3's agent and kubelet credentials kept from before its
    removal, against h1's CA service: every renewal is due at once (renew_fraction 1e-9)."""
    work = "/tmp/old-h3"
    cluster.lab.ssh("h2", f"rm -rf {work} && mkdir -p {work}/pki {work}/kubeconfigs && "
                          f"cp /etc/kubernetes/pki/ca.crt {work}/pki/")
    for path in sorted(kept.iterdir()):
        cluster.lab.copy_to("h2", path, f"{work}/pki/{path.name}")
    port = json.loads(cluster.lab.ssh("h1", "cat /etc/kubesmith/ca-service.json").stdout)["port"]
    config = {"host": "h3", "pki_dir": f"{work}/pki", "kubeconfig_dir": f"{work}/kubeconfigs",
              "state_file": f"{work}/state.json", "renew_fraction": 1e-9,
              "ca_urls": [f"https://{cluster.lab.address('h1')}:{port}"]}
    (kept.parent / "agent.json").write_text(json.dumps(config))
    cluster.lab.copy_to("h2", kept.parent / "agent.json", f"{work}/agent.json")
    return cluster.lab.ssh("h2", f"kubesmith agent --once --config {work}/agent.json", check=False, timeout=120)


def test_a_removed_host_is_drained_and_leaves_etcd_and_a_removal_below_quorum_is_refused(
        cluster: Cluster, tmp_path: Path) -> None:
    admin = cluster.admin_kubeconfig(tmp_path)
    pod = tmp_path / "pod.yaml"  # drained away with h3
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: on-h3}\nspec:\n  nodeName: h3\n"
                   "  containers: [{name: pause, image: kubesmith.local/pause:1, imagePullPolicy: Never}]\n")
    assert cluster.kubectl(admin, "create", "--validate=false", "-f", str(pod)).returncode == 0
    poll(lambda: cluster.kubectl(admin, "get", "pod", "on-h3", "-o", "jsonpath={.status.phase}").stdout
         == "Running", 120, "a pod running on h3")
    two = spec_with(cluster, tmp_path, 2)
    planned = cluster.kubesmith("plan", "--binaries", str(cluster.binaries), "--output", "json", spec=two)
    assert planned.returncode == 0 and json.loads(planned.stdout)["removals"] == ["h3"], planned.stderr

    leaves = store_root(cluster.state_dir) / "hosts" / "h3"
    kept = tmp_path / "old-h3"  # a copy of h3's credentials that outlives the removal
    kept.mkdir()
    for name in ("agent-client.crt", "agent-client.key", "kubelet-client.crt", "kubelet-client.key"):
        shutil.copy(leaves / name, kept / name)

    removed = cluster.apply(spec=two)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert "h3: removed from the cluster" in removed.stdout
    assert not leaves.exists()  # h3's keys are forgotten: added again, it gets new ones
    removed_keys = json.loads(cluster.lab.ssh("h1", "cat /etc/kubesmith/ca-service.json").stdout)["removed_keys"]
    assert set(removed_keys.values()) == {"h3"} and len(removed_keys) >= 5, removed_keys
    refused = renew_with_kept_credentials(cluster, kept)
    assert refused.returncode == 5, refused.stdout + refused.stderr
    assert "which was removed from the cluster" in refused.stdout + refused.stderr, refused.stdout + refused.stderr
    members = json.loads(cluster.lab.ssh("h1", f"{ETCDCTL} member list -w json").stdout)["members"]
    assert sorted(m["name"] for m in members) == ["h1", "h2"]
    gone = cluster.kubectl(admin, "get", "node", "h3")
    assert gone.returncode != 0 and "NotFound" in gone.stderr, gone.stdout + gone.stderr
    evicted = cluster.kubectl(admin, "get", "pod", "on-h3")
    assert evicted.returncode != 0 and "NotFound" in evicted.stderr
    units = cluster.lab.ssh("h3", "systemctl list-unit-files --no-legend 'kube*' 'etcd*' 'kubernetes*'",
                            check=False).stdout
    assert units.strip() == ""
    status = cluster.kubesmith("status", "--output", "json", spec=two, timeout=300)
    assert status.returncode == 0, status.stdout + status.stderr

    refused = cluster.apply(spec=spec_with(cluster, tmp_path, 1))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "would leave 1 of etcd's 2 members, fewer than its quorum (2)" in refused.stderr
    members = json.loads(cluster.lab.ssh("h1", f"{ETCDCTL} member list -w json").stdout)["members"]
    assert len(members) == 2  # nothing changed; the next test grows the cluster back to three hosts


def test_reset_removes_everything_then_apply_rebuilds_from_one_host_grows_and_replaces_a_wiped_member(
        cluster: Cluster, tmp_path: Path) -> None:
    """After the removal test the cluster is h1 and h2 (h3 reset): reset refuses another cluster's
    hosts, then empties them; apply builds h1 alone with the same CAs, grows it to h1..h3 while a
    client writes, and replaces h2's member once its data is wiped."""
    admin = cluster.admin_kubeconfig(tmp_path)
    two = spec_with(cluster, tmp_path, 2)
    other = tmp_path / "other.yaml"
    document = yaml.safe_load(cluster.spec.read_text())
    document["metadata"]["name"] = "other"
    other.write_text(yaml.safe_dump(document))
    refused = cluster.kubesmith("reset", "--yes", spec=other)
    assert refused.returncode == 5
    assert "not of cluster 'other'; no host was changed" in refused.stderr
    assert all(cluster.lab.ssh(h, "systemctl is-active kubernetes.target").stdout.strip() == "active"
               for h in ("h1", "h2"))

    pod = tmp_path / "pod.yaml"  # a pod on a node: reset must stop what outlives its kubelet and containerd
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: before-reset}\nspec:\n  nodeName: h2\n"
                   "  containers: [{name: pause, image: kubesmith.local/pause:1, imagePullPolicy: Never}]\n")
    assert cluster.kubectl(admin, "create", "--validate=false", "-f", str(pod)).returncode == 0
    poll(lambda: cluster.kubectl(admin, "get", "pod", "before-reset", "-o", "jsonpath={.status.phase}").stdout
         == "Running", 120, "a pod running on h2")

    reset = cluster.kubesmith("reset", "--yes", spec=two)
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
    assert periodic_snapshots(cluster, "h1"), "reset deleted h1's periodic etcd snapshots"

    # apply again, grown from one host: h1 alone first, then h2 and h3 join its etcd as learners
    first = cluster.apply(spec=spec_with(cluster, tmp_path, 1))
    assert first.returncode == 0, first.stdout + first.stderr
    nodes = poll(lambda: cluster.kubectl(admin, "get", "namespaces", "-o", "name").stdout, 60,
                 "the old admin kubeconfig to work again")
    assert "namespace/kube-system" in nodes.split()
    kept = ("etcd.service", "kube-apiserver.service")  # (a controller may lose its lease on two busy cores)
    h1 = {unit: state for unit, state in cluster.unit_state("h1").items() if unit in kept}
    with WriteLoop(cluster, admin, server=f"https://{cluster.lab.address('h1')}:6443") as writes:
        grown = cluster.apply()
    assert grown.returncode == 0, grown.stdout + grown.stderr
    for joiner in ("h2", "h3"):
        assert f"{joiner}: adding it to etcd as a learner" in grown.stdout + grown.stderr
    assert writes.done >= 10 and writes.failed == [], (writes.done, writes.failed)
    assert {u: v for u, v in cluster.unit_state("h1").items() if u in kept} == h1  # not restarted
    members = json.loads(cluster.lab.ssh("h1", f"{ETCDCTL} member list -w json").stdout)["members"]
    assert sorted(m["name"] for m in members) == ["h1", "h2", "h3"]
    assert not any(m.get("isLearner") for m in members)
    cluster.assert_healthy()
    ids = {m["name"]: m["ID"] for m in members}

    cluster.lab.ssh("h2", "systemctl stop etcd.service && rm -rf /var/lib/etcd/member")  # a wiped disk
    replaced = cluster.apply()
    assert replaced.returncode == 0, replaced.stdout + replaced.stderr
    assert "h2: its etcd data is gone; it joins etcd again as a new member" in replaced.stderr
    assert "h2: its old member (started once, its data now gone) leaves etcd first" in replaced.stderr
    members = json.loads(cluster.lab.ssh("h1", f"{ETCDCTL} member list -w json").stdout)["members"]
    assert sorted(m["name"] for m in members) == ["h1", "h2", "h3"] and not any(m.get("isLearner") for m in members)
    assert {m["name"]: m["ID"] for m in members}["h2"] != ids["h2"]  # a new member, not the old identity
    # h2's API server was not restarted: it reconnects to its new member by itself (CI: after ~10 s)
    cluster.wait_healthy(90, "kubesmith status to exit 0 once h2's API server reached its new etcd member")
    cluster.assert_healthy()
