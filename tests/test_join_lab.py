"""A fourth lab host joins the lab cluster as a node with a token, then renews through the CA service.

h1..h3 run examples/lab.yaml (the session's `lab_cluster`, applied here if no earlier module did).
h4 starts bare: it gets kubesmith's runtime the way apply installs it, the real kubelet and
kube-proxy, and a cluster file that lists it as a node (containerd is Debian's, in the lab image);
then `kubesmith join` runs on h4 over ssh with a token created from this machine (`token create
--cluster`) on h1, where the CA service keeps its token store. Lab hosts are systemd-nspawn
containers with read-only cgroup controllers: join observes that and plans the kubelet without
QoS cgroups, so it runs and registers the node (pods themselves cannot run there); the kernel-wide
settings the kubelet insists on are shown to it as set (`kubesmith.lab.host`), so it never changes
this machine's kernel.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import time
from pathlib import Path
from typing import Any, TypeVar

import pytest
from polling import poll
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
)
from cryptography.x509.oid import NameOID
from lab_cluster import Cluster
from tls_support import served_certificate

from kubesmith import layout
from kubesmith.backends.apply import install_runtime
from kubesmith.backends.runtime_bundle import build_bundle
from kubesmith.hostfile import HostFile
from kubesmith.transport.ssh import SshOptions, SshTransport

pytestmark = [pytest.mark.lab, pytest.mark.slow]
NODE = "h4"
NODE_BINARIES = ("kubelet", "kube-proxy")
KUBELET_PORT, KUBELET_HEALTHZ_PORT = 10250, 10248  # the kubelet module's defaults
T = TypeVar("T")


@pytest.fixture(scope="module")
def cluster(lab_cluster: Cluster) -> Cluster:
    if NODE not in lab_cluster.lab.names:
        pytest.skip(f"needs a lab host {NODE} (KUBESMITH_LAB_TEST_HOSTS >= 4)")
    return lab_cluster.applied()


@pytest.fixture(scope="module")
def ca_file(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cluster's kubernetes-ca certificate, as h1 holds it."""
    path = tmp_path_factory.mktemp("join") / "ca.crt"
    path.write_text(cluster.lab.ssh("h1", f"cat {layout.pki_path('ca.crt')}").stdout)
    return path


def node_spec(cluster: Cluster) -> str:
    """The cluster file with h4 added as a node (what an operator edits before a join)."""
    document = yaml.safe_load(cluster.spec.read_text())
    document["spec"]["hosts"].append({"name": NODE, "address": cluster.lab.address(NODE), "roles": ["node"]})
    return yaml.safe_dump(document, sort_keys=False)


def prepare_node(cluster: Cluster) -> None:
    """kubesmith's runtime (as apply installs it), the node's binaries and the cluster file on h4."""
    lab = cluster.lab
    bundle = build_bundle(cluster.state_dir / "cache")
    files = [HostFile(f"{layout.BIN}/{name}", 0o755, "root", "root", (cluster.binaries / name).read_bytes())
             for name in NODE_BINARIES]
    files.append(HostFile("/root/cluster.yaml", 0o644, "root", "root", node_spec(cluster).encode()))
    options = SshOptions(config_file=lab.ssh_config, known_hosts=lab.config.known_hosts,
                         identity_files=(lab.config.client_key,))

    async def install() -> None:
        async with SshTransport(options) as transport:
            await install_runtime(transport, lab.address(NODE), bundle)
            await transport.upload(lab.address(NODE), files)

    asyncio.run(install())


def create_token(cluster: Cluster) -> dict[str, Any]:
    """A token bound to h4, created from this machine with `--cluster`: over SSH on h1, where the CA
    service keeps its token store; the answer names h1's CA service for the join."""
    result = subprocess.run(
        ["kubesmith", "token", "create", str(cluster.spec), "--node", NODE, "--address",
         cluster.lab.address(NODE), "--ttl", "15m", "--output", "json", "--ssh-config", str(cluster.lab.ssh_config),
         "--known-hosts", str(cluster.lab.config.known_hosts), "--identity", str(cluster.lab.config.client_key)],
        capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    info: dict[str, Any] = json.loads(result.stdout)
    assert info["server"] == f"https://{cluster.lab.address('h1')}:{ca_port(cluster)}"
    return info


def ca_port(cluster: Cluster) -> int:
    return int(json.loads(cluster.lab.ssh("h1", "cat /etc/kubesmith/ca-service.json").stdout)["port"])


def kubeconfig_credentials(cluster: Cluster, host: str, path: str) -> tuple[x509.Certificate, bytes]:
    """(client certificate, client key PEM) embedded in a kubeconfig on host."""
    user = yaml.safe_load(cluster.lab.ssh(host, ["cat", path]).stdout)["users"][0]["user"]
    cert = x509.load_pem_x509_certificate(base64.b64decode(user["client-certificate-data"]))
    return cert, base64.b64decode(user["client-key-data"])


def private_keys_on(cluster: Cluster, host: str, roots: str) -> dict[str, bytes]:
    """Public key (DER) of every PEM private key in files under `roots` on host, by path."""
    pattern = "-e 'BEGIN \\(EC \\|RSA \\)\\?PRIVATE KEY' -e 'client-key-data'"  # PEM keys, kubeconfigs
    listing = cluster.lab.ssh(host, f"grep -rlI {pattern} {roots} 2>/dev/null || true")
    found: dict[str, bytes] = {}
    for path in listing.stdout.split():
        text = cluster.lab.ssh(host, ["cat", path]).stdout
        pems = [base64.b64decode(yaml.safe_load(text)["users"][0]["user"]["client-key-data"])] \
            if "client-key-data" in text else [text.encode()]
        for pem in pems:
            found[path] = public_der(load_pem_private_key(pem, None))
    return found


def public_der(holder: Any) -> bytes:
    """The public key (SubjectPublicKeyInfo DER) of a private key or a certificate."""
    return holder.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)


def local_public_keys(state_dir: Path) -> set[bytes]:
    """Public keys of every private key in the PKI state of the machine that ran apply."""
    keys = set()
    for path in state_dir.rglob("*.key"):
        try:
            keys.add(public_der(load_pem_private_key(path.read_bytes(), None)))
        except (ValueError, TypeError):
            continue  # not a PEM private key (e.g. an encryption secret)
    return keys


def ca_public_keys(cluster: Cluster) -> dict[str, bytes]:
    """Public keys of the cluster's CAs (kubernetes, etcd, front-proxy), as h1 holds their certificates."""
    names = {"kubernetes-ca": "ca.crt", "etcd-ca": "etcd/ca.crt", "front-proxy-ca": "front-proxy-ca.crt"}
    return {name: public_der(x509.load_pem_x509_certificate(cluster.lab.ssh("h1", ["cat", layout.pki_path(file)])
                                                             .stdout.encode())) for name, file in names.items()}


def kubelet_healthz(cluster: Cluster) -> str:
    """The kubelet's /healthz on h4: 'ok' only once the API answered its client certificate."""
    probe = ("import urllib.request\ntry:\n print(urllib.request.urlopen("
             f"'http://127.0.0.1:{KUBELET_HEALTHZ_PORT}/healthz', timeout=5).read().decode().strip())\n"
             "except Exception as exc:\n print('not ready:', exc)\n")
    return cluster.lab.ssh(NODE, ["python3", "-c", probe], check=False).stdout.strip()


def kubelet_certificate(cluster: Cluster, ca_file: Path) -> x509.Certificate:
    """The serving certificate h4's kubelet presents on its TLS port, verified against kubernetes-ca."""
    with cluster.lab.connect(cluster.lab.address(NODE), KUBELET_PORT) as sock:
        return served_certificate(sock, ca_file)


def main_pids(cluster: Cluster, host: str, units: tuple[str, ...]) -> dict[str, int]:
    out = cluster.lab.ssh(host, ["systemctl", "show", "-p", "Id,MainPID", *units]).stdout
    blocks = [dict(line.split("=", 1) for line in block.splitlines()) for block in out.strip().split("\n\n")]
    return {block["Id"]: int(block["MainPID"]) for block in blocks}


def active(cluster: Cluster, host: str, *units: str) -> bool:
    states = cluster.lab.ssh(host, ["systemctl", "is-active", *units], check=False).stdout.split()
    return states == ["active"] * len(units)


def journal(cluster: Cluster, host: str, *units: str) -> str:
    """The last lines each unit logged on `host`, for a failure's message."""
    argv = ["journalctl", "--no-pager", "-o", "cat", "-n", "40", *(f"--unit={unit}" for unit in units)]
    return "\n--- journal ---\n" + cluster.lab.ssh(host, argv, check=False).stdout


def common_name(cert: x509.Certificate) -> str:
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def test_a_fourth_host_joins_as_a_node_with_a_token(cluster: Cluster, ca_file: Path) -> None:
    lab = cluster.lab
    assert lab.ssh(NODE, "test -e /usr/local/bin/kubesmith || test -e /etc/kubernetes", check=False).returncode != 0
    prepare_node(cluster)
    token = create_token(cluster)
    join = lab.ssh(NODE, ["kubesmith", "join", "--server", token["server"],
                          "--token", token["token"], "--ca-hash", token["ca_hash"], "/root/cluster.yaml",
                          "--deadline", "150"], check=False, timeout=240)
    assert join.returncode == 0, join.stdout + join.stderr + journal(cluster, NODE, "containerd", "kubelet", "kube-proxy")
    assert f"joined as {NODE}" in join.stdout and "node-online.target is active" in join.stdout
    assert active(cluster, NODE, "node-online.target", "kubelet.service", "kube-proxy.service",
                  "kubesmith-agent.service")
    poll(lambda: active(cluster, NODE, "kubernetes.target"), 60, "kubernetes.target on h4")

    # the kubelet is ready: it reached the API server with its new client certificate
    assert kubelet_healthz(cluster) == "ok"
    ca = x509.load_pem_x509_certificate(ca_file.read_bytes())
    client, client_key = kubeconfig_credentials(cluster, NODE, layout.kubeconfig_path("kubelet"))
    assert common_name(client) == f"system:node:{NODE}"
    assert client.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    assert client.issuer == ca.subject
    client.verify_directly_issued_by(ca)
    issued = lab.ssh("h1", "journalctl -u kubesmith-ca --no-pager -o cat").stdout
    assert f"{client.serial_number:x}" in issued  # issued just now by h1's CA service, and logged
    serving = kubelet_certificate(cluster, ca_file)
    assert common_name(serving) == f"system:node:{NODE}" and serving.issuer == ca.subject

    # no CA private key on a host that does not sign; h4's keys were made on h4
    names = lab.ssh(NODE, "find / -xdev -name '*ca.key' -print", check=False).stdout
    assert names.split() == []
    keys = private_keys_on(cluster, NODE, "/etc /var/lib /root /run /tmp")
    assert f"{layout.pki_path('kubelet-serving.key')}" in keys  # the scan sees the node's keys
    ca_keys = ca_public_keys(cluster)
    assert not {path: der for path, der in keys.items() if der in ca_keys.values()}
    node_keys = set(keys.values()) | {public_der(load_pem_private_key(client_key, None))}
    assert not node_keys & local_public_keys(cluster.state_dir)


def test_the_other_hosts_route_to_the_new_node_s_pods_and_its_spec_changes_none_of_them(
        cluster: Cluster, tmp_path: Path) -> None:
    """Issue 21: h4 announces its pod range on its Node; h1..h3 route to it with no apply (their
    `kubesmith-routes` follows the Nodes), and the cluster file with h4 added plans no change on them."""
    lab = cluster.lab
    if not active(cluster, NODE, "kubelet.service"):
        pytest.skip("h4 did not join (see the join test)")
    own = json.loads(lab.ssh(NODE, "cat /etc/kubesmith/network.json").stdout)
    assert "routes" not in own and own["node"] == NODE
    wanted = f"{own['podCidr']} via {lab.address(NODE)}"
    for host in cluster.hosts:
        poll(lambda host=host: wanted in lab.ssh(host, "ip route show").stdout, 90, f"{host}'s route to h4's pods")
    with_node = tmp_path / "with-h4.yaml"
    with_node.write_text(node_spec(cluster))
    plan = cluster.kubesmith("plan", "--binaries", str(cluster.binaries), "--output", "json", spec=with_node,
                             timeout=300)
    assert plan.returncode == 0, plan.stderr
    changed = {c["host"] for c in json.loads(plan.stdout)["changes"] if any(c[k] for k in c if k != "host")}
    assert not changed & set(cluster.hosts), plan.stdout


def test_renewal_through_the_ca_service_restarts_the_node_components_with_the_new_certificate(
        cluster: Cluster, ca_file: Path) -> None:
    """h4 holds no CA key: its agent renews over mutual TLS with the CA service; the `.path`
    units restart the kubelet and kube-proxy, which come back ready with the new certificates."""
    lab = cluster.lab
    if not active(cluster, NODE, "node-online.target"):
        pytest.skip("h4 did not join (see the join test)")
    units = ("kubelet.service", "kube-proxy.service")
    before_pids = main_pids(cluster, NODE, units)
    before_serving = kubelet_certificate(cluster, ca_file)
    before_client, _ = kubeconfig_credentials(cluster, NODE, layout.kubeconfig_path("kubelet"))
    renewal = lab.ssh(NODE, ["kubesmith", "agent", "--once", "--renew-fraction", "0.000001"], check=False,
                      timeout=120)
    assert renewal.returncode == 0, renewal.stderr
    assert "via ca-service" in renewal.stderr and "via local" not in renewal.stderr

    def restarted_and_ready() -> bool:
        pids = main_pids(cluster, NODE, units)
        return (all(pids[u] not in (0, before_pids[u]) for u in units)
                and active(cluster, NODE, "kubelet-online.service", "node-online.target", "kubernetes.target")
                and kubelet_healthz(cluster) == "ok")

    poll(restarted_and_ready, 120, "kubelet and kube-proxy restarted by their path units and ready again")
    serving = kubelet_certificate(cluster, ca_file)
    client, _ = kubeconfig_credentials(cluster, NODE, layout.kubeconfig_path("kubelet"))
    for old, new in ((before_serving, serving), (before_client, client)):
        assert new.serial_number != old.serial_number
        assert new.issuer == old.issuer and common_name(new) == common_name(old)
        assert new.public_key() == old.public_key()  # renewal keeps the key made on h4
        assert new.not_valid_after_utc > old.not_valid_after_utc
    assert f"{client.serial_number:x}" in lab.ssh("h1", "journalctl -u kubesmith-ca --no-pager -o cat").stdout
    state = json.loads(lab.ssh(NODE, "kubesmith agent --show-state").stdout)
    assert state["last_error"] is None and state["last_renewal"] is not None


def test_renewal_on_a_control_plane_host_restarts_the_api_server_with_the_new_certificate(
        cluster: Cluster, ca_file: Path) -> None:
    """h1 holds the kubernetes-ca key and renews itself; its path units restart the API server,
    which serves the new certificate, and the node's kubelet reaches it again. A re-apply then
    keeps the renewed certificates: it changes nothing on h1 and restarts nothing."""
    lab = cluster.lab
    address = lab.address("h1")
    with lab.connect(address, 6443) as sock:
        before_cert = served_certificate(sock, ca_file)
    before_pid = main_pids(cluster, "h1", ("kube-apiserver.service",))["kube-apiserver.service"]
    renewal = lab.ssh("h1", ["kubesmith", "agent", "--once", "--renew-fraction", "0.000001"], check=False, timeout=120)
    assert renewal.returncode == 0, renewal.stderr
    assert "apiserver.crt" in renewal.stderr and "via local" in renewal.stderr

    def restarted_and_ready() -> bool:
        pid = main_pids(cluster, "h1", ("kube-apiserver.service",))["kube-apiserver.service"]
        return pid not in (0, before_pid) and active(cluster, "h1", "kube-apiserver-online.service",
                                                     "kubernetes.target")

    poll(restarted_and_ready, 120, "the API server on h1 restarted by its path unit and ready again")
    with lab.connect(address, 6443) as sock:
        cert = served_certificate(sock, ca_file)
    assert cert.serial_number != before_cert.serial_number and cert.public_key() == before_cert.public_key()
    assert cert.not_valid_after_utc > before_cert.not_valid_after_utc
    poll(lambda: kubelet_healthz(cluster) == "ok", 60, "h4's kubelet to reach the restarted API server")
    renewed_pid = main_pids(cluster, "h1", ("kube-apiserver.service",))["kube-apiserver.service"]
    again = cluster.apply()
    assert again.returncode == 0, again.stdout + again.stderr
    assert "h1: no changes" in again.stdout, again.stdout  # the renewed certificates are kept
    assert main_pids(cluster, "h1", ("kube-apiserver.service",))["kube-apiserver.service"] == renewed_pid
    for host in cluster.hosts:
        assert active(cluster, host, "kubernetes.target"), host


def lb_backends(cluster: Cluster) -> dict[str, str]:
    """Each API server's state as h4's local load balancer sees it (its stats page on loopback)."""
    from kubesmith.modules.api_load_balancer import STATS_PATH, backend_states

    out = cluster.lab.ssh(NODE, ["curl", "-sf", f"http://127.0.0.1:7444{STATS_PATH}"], check=False).stdout
    return {state.server: state.status for state in backend_states(out)}


def node_lease(cluster: Cluster, admin: Path, server: str) -> tuple[str, str]:
    """(the Lease's renewTime, the Node's Ready status) of h4, asked of the API server at `server`."""
    lease = cluster.kubectl(admin, "get", "lease", NODE, "-n", "kube-node-lease", "-o",
                            "jsonpath={.spec.renewTime}", server=server, timeout=30)
    ready = cluster.kubectl(admin, "get", "node", NODE, "-o",
                            'jsonpath={.status.conditions[?(@.type=="Ready")].status}', server=server, timeout=30)
    return lease.stdout.strip(), ready.stdout.strip()


def renewals_while(cluster: Cluster, admin: Path, server: str, seconds: float, enough: int) -> list[str]:
    """The distinct renewTimes of h4's Lease seen during `seconds`, or until `enough` are seen; fails
    the moment the node is not Ready. The first is the renewal in place when the watch starts."""
    seen: list[str] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end and len(seen) < enough:
        renewed, ready = node_lease(cluster, admin, server)
        assert ready == "True", f"{NODE} is not Ready ({ready!r}) after renewals {seen}"
        if renewed and renewed not in seen:
            seen.append(renewed)
        time.sleep(2)
    return seen


def test_the_node_keeps_the_api_through_its_local_load_balancer_when_a_control_plane_host_is_lost(
        cluster: Cluster, tmp_path: Path) -> None:
    """h4 is a node without an API server: its kubelet and kube-proxy use https://127.0.0.1:7443, where
    Debian's HAProxy balances over the three API servers, health-checking /readyz with a certificate of
    its own. Stop h1's API server, then the whole of h1 (every component stopped, and its traffic dropped
    as a host that lost power answers nothing, not even a reset): h4 stays Ready and its kubelet keeps
    renewing its Lease (the kubelet renews every 10 s; the Lease expires after 40 s)."""
    lab = cluster.lab
    if not active(cluster, NODE, "node-online.target"):
        pytest.skip("h4 did not join (see the join test)")
    assert active(cluster, NODE, "kube-api-lb.service", "kube-api-lb-online.service")
    kubelet_server = yaml.safe_load(lab.ssh(NODE, ["cat", layout.kubeconfig_path("kubelet")]).stdout)
    assert kubelet_server["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:7443"
    assert poll(lambda: lb_backends(cluster) == {"h1": "UP", "h2": "UP", "h3": "UP"}, 60, "every API server UP")
    admin = cluster.admin_kubeconfig(tmp_path)
    survivor = f"https://{lab.address('h2')}:6443"
    drop = "iptables -w {verb} INPUT ! -i lo -j DROP && iptables -w {verb} OUTPUT ! -o lo -j DROP"
    try:
        lab.ssh("h1", "systemctl stop kube-apiserver.service")
        stopped = time.monotonic()
        poll(lambda: lb_backends(cluster).get("h1", "").startswith("DOWN"), 30, "h4's balancer to mark h1 DOWN")
        print(f"h4's balancer marked h1 DOWN {time.monotonic() - stopped:.1f}s after its API server stopped")
        with_node = tmp_path / "with-h4.yaml"
        with_node.write_text(node_spec(cluster))
        report = json.loads(cluster.kubesmith("status", "--output", "json", "--host", NODE, spec=with_node,
                                              timeout=300).stdout)
        balancer = next(c for h in report["hosts"] for c in h["components"] if c["service"] == "kube-api-lb")
        assert balancer["ready"] and any(b.startswith("h1 DOWN") for b in balancer["backends"]), balancer
        assert sum(b.startswith(("h2 UP", "h3 UP")) for b in balancer["backends"]) == 2, balancer
        seen = renewals_while(cluster, admin, survivor, 25, enough=2)
        assert len(seen) >= 2, f"h4's Lease was renewed {seen} in 25 s with h1's API server stopped"

        lab.ssh("h1", "systemctl stop kubernetes.slice")  # then the whole host: every component,
        lab.exec("h1", drop.format(verb="-I"))  # and nothing in or out (nsenter: no network needed)
        lost = time.monotonic()
        seen = renewals_while(cluster, admin, survivor, 45, enough=3)
        print(f"h4's Lease renewed at {seen} during {time.monotonic() - lost:.0f}s without h1")
        assert len(seen) >= 3, f"h4's Lease was renewed {seen} in 45 s with h1 gone"
    finally:
        lab.exec("h1", drop.format(verb="-D"), check=False)
        lab.exec("h1", drop.format(verb="-D"), check=False)  # once more, should a half-done -I have doubled one
        lab.ssh("h1", "systemctl start kubernetes.target", timeout=300)
    poll(lambda: lb_backends(cluster) == {"h1": "UP", "h2": "UP", "h3": "UP"}, 180, "h1 UP again behind h4's balancer")
    poll(lambda: all(active(cluster, host, "kubernetes.target") for host in cluster.hosts), 180,
         "the control plane healthy again")
    # and its pods, which outlived its units: once a stop took their links, the pods on h1 (CoreDNS, after
    # the day-2 module rebuilt the cluster from h1) ran on with no network, and cluster DNS never came back
    cluster.wait_healthy(180, "the cluster healthy again, its DNS included")
