"""CoreDNS as kubesmith plans it: the Corefile, the objects in kubeadm's layout, the image built from
the real static CoreDNS 1.13.1 (with NET_BIND_SERVICE as a file capability), typed options with
located errors, and the DNS lookup `status` makes, against a real CoreDNS on loopback.
(Pods resolving names: tests/test_run_real.py and tests/test_dns_lab.py.)"""

from __future__ import annotations

import gzip
import io
import json
import re
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml
from conftest import kubesmith
from k8s_support import coredns_dir
from polling import poll

from kubesmith.health.probespec import format_probe, parse_probe
from kubesmith.health.wait import LocalProbeRunner, dns_query
from kubesmith.durations import go_duration_ns
from kubesmith.images import COREDNS_IMAGE, NET_BIND_SERVICE_FILE_CAP, archive_names, coredns_archive
from kubesmith.modules.kubelet import KubeletOptions
from kubesmith.plan.evaluate import evaluate
from kubesmith.spec.load import load_spec_text
from kubesmith.versions.registry import load_registry

SPEC = """apiVersion: kubesmith.io/v1alpha1
kind: Cluster
metadata: {name: dns}
spec:
  kubernetesVersion: "1.36.2"
  hosts:
    - {name: cp, address: 10.0.0.11, roles: [control-plane, etcd, node]}
    - {name: w1, address: 10.0.0.21, roles: [node]}
  components:
    coreDns:
%s
"""


def plan_of(options: str = "      {}"):  # type: ignore[no-untyped-def]
    loaded = load_spec_text(SPEC % options, "cluster.yaml")
    return evaluate(loaded.cluster, load_registry())


def addon_objects(plan, host: str = "cp") -> dict[str, dict]:  # type: ignore[no-untyped-def]
    file = next(f for f in plan.host(host).files if f.path == "/etc/kubernetes/addons/coredns.yaml")
    return {item["kind"]: item for item in file.data["items"]}


def test_the_objects_follow_kubeadms_layout_and_run_unprivileged() -> None:
    plan = plan_of()
    objects = addon_objects(plan)
    assert set(objects) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment",
                            "PodDisruptionBudget", "Service"}
    assert all(o["metadata"]["labels"]["addonmanager.kubernetes.io/mode"] == "Reconcile" for o in objects.values())
    service = objects["Service"]
    assert (service["metadata"]["name"], service["metadata"]["namespace"]) == ("kube-dns", "kube-system")
    assert service["spec"]["clusterIP"] == "10.32.0.10"  # the kubelets' clusterDNS
    assert [(p["port"], p["protocol"]) for p in service["spec"]["ports"]] == [(53, "UDP"), (53, "TCP"), (9153, "TCP")]
    deployment = objects["Deployment"]
    assert deployment["metadata"]["name"] == "coredns" and deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-cluster-critical" and pod["dnsPolicy"] == "Default"
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532
    (container,) = pod["containers"]
    assert container["image"] == COREDNS_IMAGE and container["imagePullPolicy"] == "Never"
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}}
    assert container["livenessProbe"]["httpGet"]["port"] == 8080 and container["readinessProbe"]["httpGet"] == {
        "path": "/ready", "port": 8181, "scheme": "HTTP"}
    assert objects["ClusterRole"]["rules"] == [
        {"apiGroups": [""], "resources": ["services", "namespaces"], "verbs": ["list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]
    assert objects["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    # the image on every node, the objects on control-plane hosts only
    assert any(f.path.endswith("/kubesmith-coredns.tar") for f in plan.host("w1").files)
    assert not any(f.path.startswith("/etc/kubernetes/addons/") for f in plan.host("w1").files)



def test_the_lame_duck_ends_before_the_kubelet_kills_a_critical_pod() -> None:
    """A stopping CoreDNS answers for its lame duck; the kubelet's share of a shutdown for critical pods
    must outlast it, or the lame duck ends in a SIGKILL."""
    objects = addon_objects(plan_of())
    lame_duck = re.search(r"lameduck (\d+)s", objects["ConfigMap"]["data"]["Corefile"])
    assert lame_duck, objects["ConfigMap"]["data"]["Corefile"]
    critical = KubeletOptions().shutdown_grace_period_critical_pods
    assert go_duration_ns(critical) > int(lame_duck[1]) * 10**9, (critical, lame_duck[0])


def test_pods_go_only_to_nodes_labelled_as_holding_the_image_and_adding_a_node_changes_no_file() -> None:
    plan = plan_of()
    labels = next(f for f in plan.host("cp").files if f.path == "/etc/kubernetes/addons/coredns.labels.json")
    assert labels.data == {"label": "images.kubesmith.io/coredns", "nodes": ["cp"]}  # itself; apply names w1
    deployment = addon_objects(plan)["Deployment"]
    terms = deployment["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "images.kubesmith.io/coredns", "operator": "In",
                                            "values": ["true"]}]}]
    more = load_spec_text((SPEC % "      {}").replace(
        "    - {name: w1, address: 10.0.0.21, roles: [node]}\n",
        "    - {name: w1, address: 10.0.0.21, roles: [node]}\n    - {name: w2, address: 10.0.0.22, roles: [node]}\n"),
        "cluster.yaml")
    grown = evaluate(more.cluster, load_registry())
    addon_files = lambda p: {f.path: f.data for f in p.host("cp").files if "/addons/" in f.path}  # noqa: E731
    assert addon_files(grown) == addon_files(plan)
    # an image of the user's own (on every node already, or pulled): no labels, no affinity
    own = plan_of("      {image: 'registry.example/coredns:1.13.1'}")
    assert not any(f.path.endswith(".labels.json") for f in own.host("cp").files)
    assert "nodeAffinity" not in addon_objects(own)["Deployment"]["spec"]["template"]["spec"]["affinity"]


def test_the_corefile_serves_the_cluster_zones_and_forwards_the_rest() -> None:
    corefile = addon_objects(plan_of())["ConfigMap"]["data"]["Corefile"]
    for line in ("errors", "health {", "ready", "kubernetes cluster.local 10.200.0.0/16 10.32.0.0/16 {",
                 "prometheus :9153", "forward . /etc/resolv.conf {", "cache 30 {", "disable denial cluster.local",
                 "loop", "reload", "loadbalance"):
        assert line in corefile.splitlines() or f"    {line}" in corefile, (line, corefile)
    options = ("      upstream: [192.0.2.53, '192.0.2.54:5353']\n      stubDomains: {corp.example: [192.0.2.99]}\n"
               "      cacheTtl: 0\n      replicas: 3\n      extraServerBlocks: {'other.example:53': [whoami]}")
    objects = addon_objects(plan_of(options))
    corefile = objects["ConfigMap"]["data"]["Corefile"]
    assert "forward . 192.0.2.53 192.0.2.54:5353 {" in corefile and "cache" not in corefile
    assert "corp.example:53 {\n    errors\n    forward . 192.0.2.99\n}" in corefile
    assert corefile.endswith("other.example:53 {\n    whoami\n}\n")
    assert objects["Deployment"]["spec"]["replicas"] == 3
    # an option change changes the pod template: the Deployment rolls
    before = addon_objects(plan_of())["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert objects["Deployment"]["spec"]["template"]["metadata"]["annotations"] != before


def test_one_node_gets_one_replica_and_disabled_means_no_dns_objects_or_image() -> None:
    single = load_spec_text((SPEC % "      {}").replace(
        "    - {name: w1, address: 10.0.0.21, roles: [node]}\n", ""), "cluster.yaml")
    assert addon_objects(evaluate(single.cluster, load_registry()))["Deployment"]["spec"]["replicas"] == 1
    plan = plan_of("      {enabled: false}")
    assert not any("coredns" in f.path for host in plan.hosts for f in host.files)
    assert any(s.name == "kubesmith-addons" for s in plan.host("cp").services)  # the admins binding stays


def test_bad_options_are_located_errors(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(SPEC % "      upstream: ['192.0.2.1:99999', resolver.example]\n      stubDomains: {corp.example: []}"
                    "\n      cacheTtl: -1")
    result = kubesmith("validate", str(path))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"spec.components.coreDns.cacheTtl: Input should be greater than or equal to 0 ({path}:13:7)" \
        in result.stderr, result.stderr
    path.write_text(SPEC % "      upstream: ['192.0.2.1:99999', resolver.example]\n      stubDomains: {corp.example: []}")
    result = kubesmith("validate", str(path))
    assert result.returncode == 1, result.stderr
    assert f"error: spec.components.coreDns.upstream[0]: '192.0.2.1:99999': '99999' is not a port (1-65535) " \
           f"({path}:11:18)" in result.stderr, result.stderr
    assert "upstream[1]: 'resolver.example' is not an address" in result.stderr
    assert "stubDomains.corp.example: name at least one resolver" in result.stderr


def test_the_image_holds_the_real_coredns_with_only_net_bind_service(tmp_path: Path) -> None:
    found = coredns_dir()
    assert found is not None
    archive = coredns_archive(found / "coredns", tmp_path)
    assert archive_names(archive) == (COREDNS_IMAGE,)
    assert coredns_archive(found / "coredns", tmp_path) == archive  # cached, byte for byte
    with tarfile.open(fileobj=io.BytesIO(archive)) as outer:
        index = json.loads(outer.extractfile("index.json").read())  # type: ignore[union-attr]
        manifest = json.loads(outer.extractfile(f"blobs/sha256/{index['manifests'][0]['digest'][7:]}").read())  # type: ignore[union-attr]
        layer = outer.extractfile(f"blobs/sha256/{manifest['layers'][0]['digest'][7:]}").read()  # type: ignore[union-attr]
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer))) as inner:
        member = inner.getmember("coredns")
        assert member.pax_headers["SCHILY.xattr.security.capability"].encode("utf-8", "surrogateescape") == \
            NET_BIND_SERVICE_FILE_CAP[1]
        assert inner.extractfile(member).read() == (found / "coredns").read_bytes()  # type: ignore[union-attr]


def test_the_status_lookup_asks_a_real_coredns(tmp_path: Path) -> None:
    """`status`'s DNS check: one A query over UDP, answered or not, against CoreDNS 1.13.1 on loopback."""
    found = coredns_dir()
    assert found is not None
    (tmp_path / "db").write_text("$ORIGIN svc.test.\n@ 60 IN SOA ns admin 1 60 60 60 60\n@ 60 IN NS ns\n"
                                 "ns 60 IN A 127.0.0.1\nkubernetes 60 IN A 10.32.0.1\n")
    (tmp_path / "Corefile").write_text(f"svc.test:0 {{\n    bind 127.0.0.1\n    file {tmp_path}/db\n}}\n")
    port = _free_udp_port()
    (tmp_path / "Corefile").write_text((tmp_path / "Corefile").read_text().replace(":0 ", f":{port} "))
    server = subprocess.Popen([str(found / "coredns"), "-conf", str(tmp_path / "Corefile")],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # CoreDNS that stopped (a port taken meanwhile) ends the wait at once, with what it said
        poll(lambda: server.poll() is not None or _answers(port), 60, "CoreDNS on loopback to answer")
        assert server.poll() is None, server.communicate()[0]
        assert dns_query("127.0.0.1", port, "kubernetes.svc.test", 2) == ["10.32.0.1"]
        with pytest.raises(OSError, match="NXDOMAIN"):
            dns_query("127.0.0.1", port, "missing.svc.test", 2)
        spec = parse_probe(f"dns://127.0.0.1:{port}/kubernetes.svc.test")
        assert format_probe(spec) == f"dns://127.0.0.1:{port}/kubernetes.svc.test"
        import asyncio

        result = asyncio.run(LocalProbeRunner().check(spec, 2))
        assert result.ok and result.reason == "kubernetes.svc.test -> 10.32.0.1"
    finally:
        server.terminate()
        server.wait(timeout=20)


def _answers(port: int) -> bool:
    try:
        return bool(dns_query("127.0.0.1", port, "kubernetes.svc.test", 0.5))
    except OSError:
        return False


def _free_udp_port() -> int:
    """A port free over UDP and TCP: CoreDNS listens on both."""
    import socket

    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, \
                socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            udp.bind(("127.0.0.1", 0))
            port = int(udp.getsockname()[1])
            try:
                tcp.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def test_the_plan_lists_the_addon_step_on_control_plane_hosts() -> None:
    plan = plan_of()
    (step,) = [s for s in plan.host("cp").services if s.name == "kubesmith-addons"]
    assert step.oneshot and step.argv[:6] == ("addons", "apply", "--kubeconfig", "/etc/kubernetes/super-admin.conf",
                                             "--dir", "/etc/kubernetes/addons")
    assert not any(s.name == "kubesmith-addons" for s in plan.host("w1").services)
    admins = next(f for f in plan.host("cp").files if f.path == "/etc/kubernetes/addons/kubesmith-admins.yaml")
    assert yaml.safe_dump(admins.data)  # a plain document


def test_status_reports_dns_per_node_and_for_the_cluster() -> None:
    """Each node's lookup through the DNS Service and its CoreDNS pods; one cluster line; a failed
    lookup makes the cluster unhealthy."""
    from kubesmith.health.status import ClusterStatus, DnsState, HostStatus, NodeState, dns_probe, status_lines

    plan = plan_of()
    probe = dns_probe(plan.host("w1"))
    assert probe is not None and format_probe(probe) == "dns://10.32.0.10:53/kubernetes.default.svc.cluster.local"
    assert dns_probe(plan_of("      {enabled: false}").host("w1")) is None
    answered = DnsState(True, "kubernetes.default.svc.cluster.local -> 10.32.0.1", 2.5)
    hosts = (HostStatus("cp", (), node=NodeState(True, "", 3, 3, 1, 1), dns=answered),
             HostStatus("w1", (), node=NodeState(True, "", 2, 2, 1, 1), dns=answered))
    lines = status_lines(ClusterStatus("dns", hosts))
    assert "  dns: ready (kubernetes.default.svc.cluster.local -> 10.32.0.1, 2.5 ms; CoreDNS pods here: 1/1 " \
           "Ready)" in lines
    assert lines[-2:] == ["cluster DNS: ready: 2/2 CoreDNS pods Ready; lookups answered on 2/2 nodes",
                          "cluster healthy"]
    failed = (hosts[0], HostStatus("w1", (), node=NodeState(True, "", 2, 2, 0, 1),
                                   dns=DnsState(False, "timed out")))
    status = ClusterStatus("dns", failed)
    assert not status.healthy
    assert status_lines(status)[-2:] == ["cluster DNS: NOT READY: 1/2 CoreDNS pods Ready; lookups answered on 1/2 "
                                         "nodes", "cluster UNHEALTHY"]
