"""Crash safety: `kubesmith render` killed with SIGKILL at random moments never leaves a torn file,
and the next run completes, reusing every key that was complete."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography import x509

from kubesmith.fsutil import TEMP_MARKER
from kubesmith.pki.keys import load as load_key, public_pem
from pki_support import write_spec

CONTROL_PLANE = [{"name": f"cp{i}", "address": f"10.9.0.{i}", "roles": ["control-plane", "etcd"]} for i in (1, 2, 3)]
# ten nodes: a first render takes 2-3 s here, room enough for kills at random moments, and each
# host tree holds its own copy of the 20 MB CoreDNS image, so thirty cost 700 MB of writes a round
WORKERS = [{"name": f"w{i}", "address": f"10.9.1.{i + 1}", "roles": ["node"]} for i in range(10)]


def _command(spec: Path, root: Path) -> list[str]:
    return [sys.executable, "-c", "from kubesmith.cli import main; main()", "render", str(spec),
            "--out-dir", str(root / "out"), "--state-dir", str(root / "state")]


def _complete_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and TEMP_MARKER not in p.name and p.name != ".lock"]


def _check_consistent(root: Path) -> dict[Path, bytes]:
    """Every complete file parses; every stored certificate has its key and matches it. Returns the keys."""
    keys: dict[Path, bytes] = {}
    for path in sorted(_complete_files(root / "state"), key=lambda p: p.suffix != ".key"):
        data = path.read_bytes()
        if path.suffix == ".key":
            load_key(data, str(path))
            keys[path] = data
        elif path.suffix == ".crt":
            cert = x509.load_pem_x509_certificate(data)
            key_path = path.with_suffix(".key")
            assert key_path.exists(), f"certificate without key: {path}"
            key = keys.get(key_path) or key_path.read_bytes()
            assert public_pem(cert.public_key()) == public_pem(load_key(key, str(key_path)))
        elif path.name.startswith("encryption-key"):
            assert len(data.strip()) == 44, path
    for path in _complete_files(root / "out"):
        data = path.read_bytes()
        if path.suffix == ".key":
            load_key(data, str(path))
        elif path.suffix == ".crt":
            x509.load_pem_x509_certificate(data)
        elif path.suffix == ".json":
            json.loads(data)
    return keys


def _full_render_seconds(spec: Path, root: Path) -> float:
    """How long one complete render takes here: kill moments are drawn inside this span."""
    started = time.monotonic()
    subprocess.run(_command(spec, root), capture_output=True, check=True, timeout=300)
    return time.monotonic() - started


@pytest.mark.slow
def test_sigkill_at_random_moments_never_tears_a_file(tmp_path):
    spec = write_spec(tmp_path / "c.yaml", "crash", CONTROL_PLANE + WORKERS, endpoint="10.9.0.100:6443")
    rng = random.Random(int(os.environ.get("KUBESMITH_CRASH_SEED", time.time_ns())))
    upper = _full_render_seconds(spec, tmp_path / "calibration")
    kills, attempts, rounds = 0, 0, 0
    while kills < 20 and attempts < 100:
        rounds += 1
        root = tmp_path / f"round{rounds}"
        for _ in range(5):
            attempts += 1
            process = subprocess.Popen(_command(spec, root), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            delay = rng.uniform(0.2, 1.0) * upper
            time.sleep(delay)
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                kills += 1
            else:  # finished first (a re-run has less to do): draw earlier moments from now on
                upper = max(0.2, delay * 0.8)
            process.wait()
            _check_consistent(root)
        keys_before = _check_consistent(root)
        final = subprocess.run(_command(spec, root), capture_output=True, text=True, timeout=120)
        assert final.returncode == 0, final.stderr
        keys_after = _check_consistent(root)
        assert all(keys_after[path] == data for path, data in keys_before.items()), "a complete key was replaced"
        assert not [p for p in root.rglob("*") if TEMP_MARKER in p.name], "temp files left after a full run"
        for host in ("cp1", WORKERS[-1]["name"]):
            manifest = json.loads((root / "out" / host / "manifest.json").read_text())
            for entry in manifest["files"]:
                data = (root / "out" / host / entry["path"].lstrip("/")).read_bytes()
                assert hashlib.sha256(data).hexdigest() == entry["sha256"], entry["path"]
    assert kills >= 20, f"only {kills} of {attempts} runs were still going when killed"
