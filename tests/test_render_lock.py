"""Renders into one output directory take turns: the second waits and says for whom, both succeed,
and no temp file is left behind (a failed batch removes its own)."""

from __future__ import annotations

import fcntl
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kubesmith import fsutil
from kubesmith.backends.render import LOCK
from pki_support import REPO, manifest

SPEC = REPO / "examples" / "ha.yaml"  # 53 certificates: long enough to overlap

CLI = [sys.executable, "-c", "from kubesmith.cli import main; main()"]


def _render(out: Path, state: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([*CLI, "render", str(SPEC), "--out-dir", str(out), "--state-dir", str(state)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _temps(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if fsutil.is_temp(path)]


def test_two_renders_at_once_into_one_directory_both_succeed(tmp_path):
    out = tmp_path / "out"
    first = _render(out, tmp_path / "state")
    time.sleep(0.3)  # the spacing: the second starts while the first is still working
    second = _render(out, tmp_path / "state")
    results = [process.communicate(timeout=120) + (process.returncode,) for process in (first, second)]
    for stdout, stderr, code in results:
        assert code == 0, stderr
        assert "rendered 5 hosts" in stdout, stdout
    assert _temps(out) == [] and _temps(tmp_path / "state") == []
    for host in ("cp1", "w2"):
        for entry in manifest(out, host).values():
            assert (out / host / entry["path"].lstrip("/")).stat().st_size == entry["size"]


def test_a_held_directory_makes_render_wait_and_say_for_whom(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with open(out / LOCK, "w") as lock:  # this test process plays the first render
        fcntl.flock(lock, fcntl.LOCK_EX)
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        process = _render(out, tmp_path / "state")
        said = _stderr_until(process, "waiting for", deadline=60)
        assert f"waiting for pid {os.getpid()}" in said and str(out) in said
        time.sleep(0.2)
        assert process.poll() is None and not (out / "plan.json").exists()  # it waits, writes nothing
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert (out / "plan.json").exists() and _temps(out) == []


def test_a_failed_batch_leaves_no_temp_file(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    batch = [fsutil.Pending(tmp_path / f"ok{i}", b"data", 0o600) for i in range(6)]
    batch.append(fsutil.Pending(blocker / "child", b"data", 0o600))  # its directory cannot be made
    with pytest.raises(OSError):
        fsutil.write_many(batch)
    assert _temps(tmp_path) == [] and not any((tmp_path / f"ok{i}").exists() for i in range(6))


def _stderr_until(process: subprocess.Popen[str], needle: str, deadline: float) -> str:
    assert process.stderr is not None
    seen, end = "", time.monotonic() + deadline
    while needle not in seen:
        remaining = end - time.monotonic()
        assert remaining > 0 and process.poll() is None, f"no {needle!r} in stderr: {seen!r}"
        ready, _, _ = select.select([process.stderr], [], [], remaining)
        if ready:
            seen += process.stderr.readline()
    return seen
