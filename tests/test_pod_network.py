"""The pod network and the images of a node, as the plan makes them: pod ranges per node, routes to
the others, the CNI configuration, the controller-manager's allocation, image archives; and how a
host is observed (what decides the kubelet's and containerd's settings)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from plan_support import plan_of_text

from kubesmith.images import ImageError, ImageFile, archive_names, oci_archive
from kubesmith.vocabulary.environment import parse_observation
from kubesmith.vocabulary.errors import SpecError

SPEC = """apiVersion: kubesmith.io/v1alpha1
kind: Cluster
metadata: {name: pods}
spec:
  kubernetesVersion: "1.36.2"
  network: {clusterCidr: 10.244.0.0/22}
  hosts:
    - {name: cp, address: 10.0.0.10, roles: [control-plane, etcd]}
    - {name: w1, address: 10.0.0.11, roles: [node]}
    - {name: w2, address: 10.0.0.12, roles: [node], podCidr: 10.244.0.0/24}
    - {name: w3, address: 10.0.0.13, roles: [node]}
"""


def network_of(plan, host: str) -> dict:
    return next(f.data for f in plan.host(host).files if f.path == "/etc/kubesmith/network.json")


def test_pinned_ranges_are_kept_the_others_fill_in_host_order_and_no_node_s_file_names_another() -> None:
    plan = plan_of_text(SPEC)
    cni = {name: next(f.data for f in plan.host(name).files if f.path.endswith("10-kubesmith.conflist"))
           for name in ("w1", "w2", "w3")}
    subnets = {name: doc["plugins"][0]["ipam"]["ranges"][0][0]["subnet"] for name, doc in cni.items()}
    assert subnets == {"w1": "10.244.1.0/24", "w2": "10.244.0.0/24", "w3": "10.244.2.0/24"}
    w1 = network_of(plan, "w1")
    assert (w1["node"], w1["podCidr"], w1["clusterCidr"]) == ("w1", "10.244.1.0/24", "10.244.0.0/22")
    assert "routes" not in w1 and not any(h in json.dumps(w1) for h in ("w2", "w3", "10.0.0.12", "10.0.0.13"))
    assert w1["nodesKubeconfig"] == "/etc/kubernetes/kube-proxy.conf"  # may read every Node; the kubelet's may not
    follower = next(s for s in plan.host("w1").services if s.name == "kubesmith-routes")
    assert follower.argv == ("network", "follow", "--config", "/etc/kubesmith/network.json")
    assert follower.wanted_by == "node-online.target" and not follower.oneshot
    grown = plan_of_text(SPEC.replace("    - {name: w3,", "    - {name: w4, address: 10.0.0.14, roles: [node]}\n"
                                                       "    - {name: w3,"))
    for host in ("cp", "w1", "w2"):  # a node added: the other nodes' files stay as they were
        assert {f.path: f.data for f in grown.host(host).files if f.data is not None and "ca-service" not in f.path} \
            == {f.path: f.data for f in plan.host(host).files if f.data is not None and "ca-service" not in f.path}
    assert network_of(plan, "w3")["masquerade"] == {"from": "10.244.2.0/24", "except": "10.244.0.0/22"}
    assert not any(f.path == "/etc/kubesmith/network.json" for f in plan.host("cp").files)  # not a node
    manager = next(s for s in plan.host("cp").services if s.name == "kube-controller-manager")
    assert "--allocate-node-cidrs=false" in manager.argv  # kubesmith gives the ranges, nobody else


def test_without_kubesmith_s_network_the_controller_manager_allocates_and_nodes_get_no_bridge() -> None:
    plan = plan_of_text(SPEC + "  components:\n    podNetwork: {enabled: false}\n")
    manager = next(s for s in plan.host("cp").services if s.name == "kube-controller-manager")
    assert "--allocate-node-cidrs=true" in manager.argv and "--node-cidr-mask-size=24" in manager.argv
    assert not any("kubesmith-network" == s.name for s in plan.host("w1").services)


@pytest.mark.parametrize(("change", "message"), [
    ("{name: w3, address: 10.0.0.13, roles: [node]}",
     "{name: w3, address: 10.0.0.13, roles: [node], podCidr: 10.9.0.0/24}"),
    ("{name: w3, address: 10.0.0.13, roles: [node]}",
     "{name: w3, address: 10.0.0.13, roles: [node], podCidr: 10.244.0.128/25}"),
    ("{name: cp, address: 10.0.0.10, roles: [control-plane, etcd]}",
     "{name: cp, address: 10.0.0.10, roles: [control-plane, etcd], podCidr: 10.244.3.0/24}"),
])
def test_a_wrong_pod_range_is_a_located_error(change: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        plan_of_text(SPEC.replace(change, message))
    text = "\n".join(str(problem) for problem in caught.value.errors)
    assert "podCidr" in text and ("outside clusterCidr" in text or "overlaps the pod range of spec.hosts[2]" in text
                                  or "only hosts with the node role" in text), text


def test_a_cluster_range_too_small_for_its_nodes_says_so() -> None:
    crowded = SPEC.replace("10.244.0.0/22", "10.244.0.0/23")
    with pytest.raises(SpecError) as caught:
        plan_of_text(crowded)
    assert any("has no free /24 for node w3" in str(problem) for problem in caught.value.errors)


@pytest.mark.parametrize(("output", "expected"), [
    # a lab host: systemd inside nspawn on a cgroup v1 machine, no CAP_SYS_RESOURCE, controllers made writable
    ("init=systemd\ncgroup=1\ncapbnd=00000000fcecbfff\nmount/sys/fs/cgroup=ro,nosuid,nodev,noexec\n"
     "mount/sys/fs/cgroup/memory=rw,nosuid,nodev,noexec,relatime\n",
     ("systemd", 1, False, True)),
    # a sandbox without systemd whose controllers are read-only
    ("init=none\ncgroup=1\ncapbnd=000001ffffffffff\nmount/sys/fs/cgroup/memory=ro,nosuid\n", ("none", 1, True, False)),
    # an ordinary cgroup v2 machine
    ("init=systemd\ncgroup=2\ncapbnd=000001ffffffffff\nmount/sys/fs/cgroup=rw,nosuid,nodev\n",
     ("systemd", 2, True, True)),
])
def test_an_observation_decides_driver_cgroup_version_oom_and_writable_cgroups(output: str,
                                                                              expected: tuple) -> None:
    environment = parse_observation(output, time.time())
    assert (environment.init_system, environment.cgroup_version, environment.can_lower_oom_score,
            environment.cgroups_writable) == expected
    assert environment.observed and environment.cgroup_driver == ("systemd" if expected[0] == "systemd" else "cgroupfs")


def test_an_image_archive_is_the_same_bytes_every_time_and_names_its_image(tmp_path: Path) -> None:
    files = (ImageFile("/bin/tool", b"\x7fELF tool", 0o755), ImageFile("/etc/tool.conf", b"x = 1\n", 0o644))
    first, second = oci_archive("example.local/tool:2", files, ("/bin/tool",)), \
        oci_archive("example.local/tool:2", files, ("/bin/tool",))
    assert first == second
    assert archive_names(first) == ("example.local/tool:2",)
    with tarfile.open(fileobj=io.BytesIO(first)) as archive:
        index = json.loads(archive.extractfile("index.json").read())  # type: ignore[union-attr]
        assert index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] == "2"
        assert {member.mtime for member in archive.getmembers()} == {0}
    with pytest.raises(ImageError, match="not an image archive"):
        archive_names(b"not a tarball")


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_network_down_removes_the_pods_links_with_the_bridge(tmp_path: Path) -> None:
    """A node (its own network namespace) with the pods' bridge and two pods' veth pairs, each pod
    in a namespace of its own: `kubesmith network down --bridge` (reset, once the pods are stopped)
    leaves neither the bridge nor a veth behind,
    while the pods' namespaces still exist (the kernel would drop a pair only with its namespace)."""
    tag = f"ks-netdown-{os.getpid()}"
    node, pods = tag, [f"{tag}-p{i}" for i in (1, 2)]
    config = tmp_path / "network.json"
    config.write_text(json.dumps({"bridge": "cni0"}))

    def on_node(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", node, *argv], capture_output=True, text=True, check=False)

    try:
        for name in (node, *pods):
            subprocess.run(["ip", "netns", "add", name], check=True)
        assert on_node("ip", "link", "add", "cni0", "type", "bridge").returncode == 0
        for index, pod in enumerate(pods):
            veth = f"veth{index}"
            assert on_node("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", pod).returncode == 0
            assert on_node("ip", "link", "set", veth, "master", "cni0").returncode == 0
        down = on_node(sys.executable, "-c", "from kubesmith.cli import main; main()", "network", "down",
                       "--config", str(config), "--bridge")
        assert down.returncode == 0, down.stderr
        links = on_node("ip", "-o", "link", "show").stdout
        assert "cni0" not in links and "veth" not in links, links
        assert all("eth0" not in subprocess.run(["ip", "netns", "exec", pod, "ip", "-o", "link", "show"],
                                                 capture_output=True, text=True).stdout for pod in pods)
    finally:
        for name in (node, *pods):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    assert not any(Path(f"/run/netns/{name}").exists() for name in (node, *pods))


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_network_up_again_follows_the_learned_routes_and_keeps_the_pods_bridge(tmp_path: Path) -> None:
    """`network up` brings back the routes last learned (`network follow` saves them): a node that left
    loses its route, a route outside the cluster's pod range stays, and the pods' bridge and veth stay,
    through `network up` and through `network down` (a stop or restart of the unit) too."""
    node = f"ks-netup-{os.getpid()}"
    config = tmp_path / "network.json"

    def on_node(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", node, *argv], capture_output=True, text=True, check=False)

    learned = tmp_path / "routes.json"

    def network_up(routes: list[dict[str, str]]) -> subprocess.CompletedProcess[str]:
        learned.write_text(json.dumps({"routes": routes}))
        config.write_text(json.dumps({"bridge": "cni0", "clusterCidr": "10.200.0.0/16", "routesFile": str(learned)}))
        return on_node(sys.executable, "-c", "from kubesmith.cli import main; main()", "network", "up",
                       "--config", str(config))

    two = [{"to": "10.200.1.0/24", "via": "192.0.2.2"}, {"to": "10.200.2.0/24", "via": "192.0.2.3"}]
    try:
        subprocess.run(["ip", "netns", "add", node], check=True)
        for argv in (["ip", "link", "add", "host0", "type", "veth", "peer", "name", "peer0"],  # (no dummy module)
                     ["ip", "addr", "add", "192.0.2.1/24", "dev", "host0"], ["ip", "link", "set", "peer0", "up"],
                     ["ip", "link", "set", "host0", "up"], ["ip", "link", "add", "cni0", "type", "bridge"],
                     ["ip", "link", "add", "veth0", "type", "veth", "peer", "name", "eth0"],
                     ["ip", "link", "set", "veth0", "master", "cni0"],
                     ["ip", "route", "add", "198.51.100.0/24", "via", "192.0.2.9"]):
            assert on_node(*argv).returncode == 0, argv
        first = network_up(two)
        assert first.returncode == 0, first.stderr
        again = network_up(two[:1])
        assert again.returncode == 0, again.stderr
        assert "removed the route to 10.200.2.0/24 via 192.0.2.3" in again.stderr
        routes = on_node("ip", "route", "show").stdout
        assert "10.200.1.0/24 via 192.0.2.2" in routes and "10.200.2.0/24" not in routes, routes
        assert "198.51.100.0/24 via 192.0.2.9" in routes, routes  # not the cluster's: not kubesmith's
        assert "veth0" in on_node("ip", "-o", "link", "show", "master", "cni0").stdout
        down = on_node(sys.executable, "-c", "from kubesmith.cli import main; main()", "network", "down",
                       "--config", str(config))
        assert down.returncode == 0, down.stderr
        routes = on_node("ip", "route", "show").stdout
        assert "10.200.1.0/24" not in routes and "198.51.100.0/24 via 192.0.2.9" in routes, routes
        # a stop of the unit leaves running pods their links: they outlive it, and the kubelet would not
        # make them new ones (their sandboxes still run)
        assert "veth0" in on_node("ip", "-o", "link", "show", "master", "cni0").stdout
    finally:
        subprocess.run(["ip", "netns", "del", node], capture_output=True, check=False)
    assert not Path(f"/run/netns/{node}").exists()
