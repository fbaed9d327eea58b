"""`kubesmith binaries fetch` against a local HTTP server: verified, refused on a bad digest."""

from __future__ import annotations

import hashlib
import subprocess
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from net_support import free_port

VERSION = "1.33.2"


# Why a stand-in: the real release mirror (dl.k8s.io) cannot be made to serve a wrong digest or lack a
# binary on demand, and tests never download; a loopback mirror can.
@pytest.fixture()
def mirror(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A release mirror on loopback: BASE/v1.33.2/bin/linux/amd64/<binary>[.sha512]."""
    root = tmp_path / "mirror"
    release = root / f"v{VERSION}" / "bin" / "linux" / "amd64"
    release.mkdir(parents=True)
    for name in ("kubectl", "kubelet"):
        body = f"#!/bin/sh\necho {name}\n".encode() * 1000
        (release / name).write_bytes(body)
        (release / f"{name}.sha512").write_text(hashlib.sha512(body).hexdigest())
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", release
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def _fetch(base: str, dest: Path, *names: str) -> subprocess.CompletedProcess[str]:
    only = [arg for name in names for arg in ("--only", name)]
    return subprocess.run(["kubesmith", "binaries", "fetch", "--version", VERSION, "--out-dir", str(dest),
                           "--base-url", base, *only], capture_output=True, text=True, timeout=60)


def test_fetch_verifies_and_installs_executables(mirror: tuple[str, Path], tmp_path: Path) -> None:
    base, release = mirror
    dest = tmp_path / "bin"
    result = _fetch(base, dest, "kubectl", "kubelet")
    assert result.returncode == 0, result.stderr
    for name in ("kubectl", "kubelet"):
        assert (dest / name).read_bytes() == (release / name).read_bytes()
        assert (dest / name).stat().st_mode & 0o777 == 0o755
    assert "sha512 verified" in result.stderr


def test_bad_checksum_writes_nothing(mirror: tuple[str, Path], tmp_path: Path) -> None:
    base, release = mirror
    (release / "kubelet.sha512").write_text("0" * 128)
    dest = tmp_path / "bin"
    result = _fetch(base, dest, "kubelet")
    assert result.returncode == 5
    assert "kubelet: sha512 mismatch" in result.stderr and "Traceback" not in result.stderr
    assert not (dest / "kubelet").exists() and not list(dest.glob("*kubelet*"))


def test_missing_binary_is_one_clear_error(mirror: tuple[str, Path], tmp_path: Path) -> None:
    base, _ = mirror
    result = _fetch(base, tmp_path / "bin", "kube-proxy")
    assert result.returncode == 5 and "HTTP 404" in result.stderr and "Traceback" not in result.stderr


def test_unreachable_mirror(tmp_path: Path) -> None:
    result = _fetch(f"http://127.0.0.1:{free_port()}", tmp_path / "bin", "kubectl")
    assert result.returncode == 5 and "127.0.0.1" in result.stderr and "Traceback" not in result.stderr
