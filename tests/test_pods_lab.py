"""Pods across three lab hosts (examples/lab.yaml: each host is control plane, etcd and node), with
the real kubelet and kube-proxy, Debian's containerd, runc and CNI plugins, and a busybox image built
here and imported with `kubesmith images import`: one pod per node, pod-to-pod traffic between
hosts, a Service reached from a pod on another host, and a rebooted host that runs its pod again
with no manual step.

Lab hosts are nspawn containers on this machine: each has its own cgroup in every controller and
makes them writable at boot (`kubesmith.lab`), so runc runs pods there as on a machine of its own.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from images_support import BUSYBOX_IMAGE, busybox_archive, http_get, web_manifest
from lab_cluster import Cluster
from polling import poll

pytestmark = [pytest.mark.lab, pytest.mark.slow]
APP = "spread"


def pods(cluster: Cluster, admin: Path) -> list[dict[str, Any]]:
    answer = cluster.kubectl(admin, "get", "pods", "-l", f"app={APP}", "-o", "json")
    return json.loads(answer.stdout).get("items", []) if answer.returncode == 0 else []


def running_by_node(cluster: Cluster, admin: Path) -> dict[str, dict[str, Any]] | None:
    """node -> its Running pod, once every node has one."""
    found = {pod["spec"].get("nodeName"): pod for pod in pods(cluster, admin)
             if pod["status"].get("phase") == "Running" and pod["status"].get("podIP")}
    return found if set(found) == set(cluster.hosts) else None


def ready_nodes(cluster: Cluster, admin: Path) -> set[str]:
    answer = cluster.kubectl(admin, "get", "nodes", "-o", "json")
    nodes = json.loads(answer.stdout).get("items", []) if answer.returncode == 0 else []
    return {node["metadata"]["name"] for node in nodes
            if any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))}


def fetch(cluster: Cluster, admin: Path, pod: str, address: str, port: int) -> str:
    return cluster.kubectl(admin, "exec", pod, "--", *http_get(address, port)).stdout.strip()


def test_images_are_imported_and_a_pod_per_node_reaches_the_others_and_the_service(
        cluster: Cluster, admin: Path, tmp_path: Path) -> None:
    assert poll(lambda: ready_nodes(cluster, admin) >= set(cluster.hosts), 120, "every lab host a Ready node")
    imported = subprocess.run(
        ["kubesmith", "images", "import", str(cluster.spec), str(busybox_archive(tmp_path)),
         "--ssh-config", str(cluster.lab.ssh_config), "--known-hosts", str(cluster.lab.config.known_hosts),
         "--identity", str(cluster.lab.config.client_key)], capture_output=True, text=True, timeout=300)
    assert imported.returncode == 0, imported.stderr
    for host in cluster.hosts:
        images = cluster.lab.ssh(host, "ctr --namespace k8s.io images list --quiet").stdout.split()
        assert BUSYBOX_IMAGE in images and "kubesmith.local/pause:1" in images, (host, images)

    manifest = tmp_path / "spread.yaml"
    manifest.write_text(web_manifest(APP, len(cluster.hosts), spread_over=cluster.hosts))
    # --validate=false: this build answers protobuf /openapi/v2 with 503 (../shared/k8s/README.md)
    created = cluster.kubectl(admin, "create", "--validate=false", "-f", str(manifest))
    assert created.returncode == 0, created.stderr
    by_node = poll(lambda: running_by_node(cluster, admin), 180, "one Running pod on every node")
    names = {node: pod["metadata"]["name"] for node, pod in by_node.items()}
    first, *others = sorted(by_node)
    for other in others:  # pod to pod between hosts, over the routes to each node's pod range
        poll(lambda: fetch(cluster, admin, names[first], by_node[other]["status"]["podIP"], 8080) == names[other],
             30, f"a pod on {first} to reach the pod on {other}")
    service = cluster.kubectl(admin, "get", "service", APP, "-o", "jsonpath={.spec.clusterIP}").stdout
    answers: set[str] = set()  # the Service, from a pod on another host, reaches all three: kube-proxy
    # there may program the last pod's endpoint a little after the pod is Running (seen once in CI)

    def every_pod_answered() -> bool:
        answers.add(fetch(cluster, admin, names[others[0]], service, 80))
        return answers >= set(names.values())

    poll(every_pod_answered, 60, "the Service to reach the pod on every node", interval=0.2)
    assert answers - set(names.values()) <= {""}, answers  # no other answer than the three pods


def test_a_rebooted_host_runs_its_components_and_its_pod_again_without_a_manual_step(
        cluster: Cluster, admin: Path) -> None:
    """h3 (control plane, etcd and node) rebooted from inside: a fresh boot (its /run is new), the
    other hosts undisturbed, its control plane back in kubernetes.target, etcd whole, and its pod
    running again."""
    before = poll(lambda: running_by_node(cluster, admin), 180, "one Running pod on every node")
    host = "h3"
    boot_id = cluster.kubectl(admin, "get", "node", host, "-o", "jsonpath={.status.nodeInfo.bootID}").stdout
    cluster.lab.ssh(host, "touch /run/before-reboot")  # /run is a fresh tmpfs on every boot
    cluster.lab.reboot(host)
    fresh = cluster.lab.ssh(host, "test ! -e /run/before-reboot && hostname", check=False).stdout.strip()
    assert fresh == host
    assert cluster.lab.ssh("h1", "hostname").stdout.strip() == "h1"  # the others were not disturbed

    def back() -> dict[str, Any] | None:
        rebooted = cluster.kubectl(admin, "get", "node", host, "-o", "jsonpath={.status.nodeInfo.bootID}").stdout
        after = running_by_node(cluster, admin) if host in ready_nodes(cluster, admin) else None
        pod = (after or {}).get(host)
        # graceful node shutdown stopped the pod (Failed) and its ReplicaSet replaced it: a new pod on
        # h3 (the only node its anti-affinity leaves), or the same one restarted where shutdown was not graceful
        restarted = pod is not None and (
            pod["metadata"]["uid"] != before[host]["metadata"]["uid"]
            or pod["status"]["containerStatuses"][0]["restartCount"]
            > before[host]["status"]["containerStatuses"][0]["restartCount"])
        return pod if rebooted and rebooted != boot_id and restarted else None

    pod = poll(back, 180, f"{host} Ready again after its reboot, with its pod running again")
    assert fetch(cluster, admin, pod["metadata"]["name"], pod["status"]["podIP"], 8080) == pod["metadata"]["name"]
    poll(lambda: cluster.lab.ssh(host, "systemctl is-active kubernetes.target", check=False).stdout.strip()
         == "active", 180, f"{host}'s kubernetes.target active again")
    assert cluster.etcd_health().count("is healthy") == 3
    cluster.assert_healthy()
