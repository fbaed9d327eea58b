"""The fault-injection stand-ins (a /readyz that stays false: what a real binary cannot show on demand)
still refuse what the real binaries refuse: unknown flags, client certificates from the wrong CA."""

from __future__ import annotations

import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from net_support import free_port
from tls_support import CaFiles, make_ca

STANDINS = Path(__file__).resolve().parent / "standins"


def run_standin(binary: str, *flags: str, version: str = "1.31") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STANDIN_KUBERNETES_VERSION": version}
    return subprocess.run([str(STANDINS / binary), *flags], capture_output=True, text=True, timeout=30, env=env)


@pytest.mark.parametrize("binary", ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet",
                                    "kube-proxy"])
def test_unknown_flag_exits_1(binary: str) -> None:
    result = run_standin(binary, "--no-such-flag=1")
    assert result.returncode == 1 and "unknown flag: --no-such-flag" in result.stderr


def test_flags_follow_the_version_registry() -> None:
    """--insecure-port was removed long before 1.28: every supported version refuses it."""
    for version in ("1.28", "1.33"):
        result = run_standin("kube-apiserver", "--insecure-port=0", version=version)
        assert result.returncode == 1 and "unknown flag: --insecure-port" in result.stderr
    assert "unexpected argument" in run_standin("kube-scheduler", "positional").stderr


@pytest.fixture()
def controller_manager(tmp_path: Path) -> Iterator[tuple[int, CaFiles, CaFiles, Path]]:
    good = make_ca(tmp_path / "good", "kubernetes-ca")
    other = make_ca(tmp_path / "other", "other-ca")
    serving = good.issue(tmp_path / "good", "serving", server=True)
    port = free_port()
    process = subprocess.Popen(
        [str(STANDINS / "kube-controller-manager"), "--bind-address=127.0.0.1", f"--secure-port={port}",
         f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}", f"--client-ca-file={good.cert}"],
        env={**os.environ, "STANDIN_KUBERNETES_VERSION": "1.31"}, stderr=subprocess.PIPE, text=True)
    try:
        yield port, good, other, tmp_path
    finally:
        process.terminate()
        process.wait(10)


def get(port: int, path: str, ca: Path, cert: Path | None = None, key: Path | None = None) -> int:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(ca)
    if cert and key:
        context.load_cert_chain(cert, key)
    handler = urllib.request.HTTPSHandler(context=context)
    opener = urllib.request.build_opener(handler, urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"https://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def wait_serving(port: int, ca: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            get(port, "/healthz", ca)
            return
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_client_certificate_must_come_from_the_client_ca(controller_manager: tuple[int, CaFiles, CaFiles, Path]) -> None:
    port, good, other, tmp = controller_manager
    wait_serving(port, good.cert)
    assert get(port, "/healthz", good.cert) == 200  # anonymous, as --authorization-always-allow-paths
    assert get(port, "/version", good.cert) == 401  # everything else needs a client certificate
    client = good.issue(tmp / "good", "client", client=True)
    assert get(port, "/version", good.cert, client.cert, client.key) == 200
    stranger = other.issue(tmp / "other", "stranger", client=True)
    with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
        get(port, "/version", good.cert, stranger.cert, stranger.key)
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        get(port, "/healthz", other.cert)  # and the stand-in serves the certificate it was given


def test_missing_certificate_file_fails_start(tmp_path: Path) -> None:
    result = run_standin("kube-scheduler", "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
                         f"--tls-cert-file={tmp_path}/none.crt", f"--tls-private-key-file={tmp_path}/none.key")
    assert result.returncode == 1 and "cannot read certificate" in result.stderr
