"""A corpus of hostile cluster files (issue 16): each ends, quickly, in one located error (or a
documented acceptance), exit code 1 and no traceback.

Every case runs in this process under a 2-second alarm: a reader that loops (recursive aliases),
expands without bound (billion laughs) or reads without end (/dev/zero) fails the test instead
of hanging it. The cases that need no file of their own (generated, special files) are below.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT, Result, kubesmith

HOSTILE = ROOT / "tests" / "specs" / "hostile"
BOUND_SECONDS = 2.0
HEAD = (HOSTILE / "alias-recursive-list.yaml").read_text().split("  x: &a")[0]

# file stem -> (option path, message fragment)
EXPECTED: dict[str, tuple[str, str]] = {
    "alias-recursive-list": ("spec.x[0]", "recursive alias"),
    "alias-recursive-labels": ("spec.components.apiserver.extraArgs.k", "recursive alias"),
    "alias-recursive-host-labels": ("spec.hosts[0].labels.k", "recursive alias"),
    "alias-recursive-nested": ("spec.components.kubelet.extraConfig.a.b[2].c", "recursive alias"),
    "alias-merge-key-recursive": ("spec.network.<<", "recursive alias"),
    "alias-billion-laughs": ("spec.components.kubelet.extraConfig.l7", "excessive aliasing"),
    "alias-quadratic-maps": ("spec.components.kubelet.extraConfig.l9", "excessive aliasing"),
    "alias-undefined": ("(document)", "found undefined alias"),
    "control-newline-user-root": ("spec.components.apiserver.extraArgs.v", "control character (U+000A)"),
    "control-carriage-return": ("spec.components.apiserver.extraArgs.cors-allowed-origins",
                                "control character (U+000D)"),
    "control-escape-in-label": ("spec.hosts[1].labels.zone", "control character (U+001B)"),
    "control-nul-in-path": ("spec.components.etcd.dataDir", "control character (U+0000)"),
    "control-in-flag-name": ("spec.components.kubelet.extraArgs['v\\nUser']", "control character (U+000A)"),
    "control-line-separator": ("spec.components.apiserver.extraArgs.cors-allowed-origins",
                               "line separator (U+2028)"),
    "control-tab-in-metadata-label": ("spec.network.dnsDomain", "control character (U+0009)"),
}

# generated stem -> (text, option path, message fragment)
GENERATED: dict[str, tuple[str, str, str]] = {
    "deep-flow-nesting": (HEAD + "  x: " + "[" * 200_000 + "]" * 200_000 + "\n", "(document)",
                          "nested more than 64 levels"),
    "deep-block-nesting": (HEAD + "".join(f"{'  ' * (level + 1)}k{level}:\n" for level in range(300)) + "x\n",
                           "(document)", "nested more than 64 levels"),
    "larger-than-1-mib": (HEAD + "#" * (1 << 20) + "\n", "(document)", "larger than 1 MiB"),
    "ten-level-laughs": (HEAD + "  components:\n    kubelet:\n      extraConfig:\n        l0: &l0 [x, x]\n" + "".join(
        f"        l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 11)),
        "spec.components.kubelet.extraConfig.l", "excessive aliasing"),
}


class TookTooLong(Exception):
    pass


@contextlib.contextmanager
def bounded(seconds: float) -> Iterator[None]:
    """Fail a Python-level loop that runs longer than `seconds` (SIGALRM interrupts it)."""
    def expire(signum: int, frame: object) -> None:
        raise TookTooLong(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def validate(path: Path) -> tuple[Result, float]:
    started = time.monotonic()
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", path.name, cwd=path.parent)
    return result, time.monotonic() - started


def assert_one_located_error(result: Result, name: str, path: str, fragment: str) -> None:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "TookTooLong" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert lines[-1] == "1 error found", result.stderr
    assert lines[0].startswith(f"error: {path}"), result.stderr
    assert fragment in lines[0], result.stderr
    assert f"({name}:" in lines[0], result.stderr


def test_corpus_is_complete() -> None:
    assert {path.stem for path in HOSTILE.glob("*.yaml")} == set(EXPECTED)
    assert len(EXPECTED) + len(GENERATED) + len(SPECIAL_FILES) >= 20


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_hostile_file_gets_one_located_error_quickly(stem: str) -> None:
    path, fragment = EXPECTED[stem]
    result, seconds = validate(HOSTILE / f"{stem}.yaml")
    assert_one_located_error(result, f"{stem}.yaml", path, fragment)
    assert seconds < BOUND_SECONDS


@pytest.mark.parametrize("stem", sorted(GENERATED))
def test_generated_hostile_file_gets_one_located_error_quickly(stem: str, tmp_path: Path) -> None:
    text, path, fragment = GENERATED[stem]
    (tmp_path / f"{stem}.yaml").write_text(text)
    result, seconds = validate(tmp_path / f"{stem}.yaml")
    assert_one_located_error(result, f"{stem}.yaml", path, fragment)
    assert seconds < BOUND_SECONDS


SPECIAL_FILES = ("/dev/zero", "fifo", "directory", "/dev/urandom")


@pytest.mark.parametrize("name", SPECIAL_FILES)
def test_only_regular_files_are_read(name: str, tmp_path: Path) -> None:
    """/dev/zero used to be read until 4 GB; a FIFO blocks an ordinary open until a writer comes."""
    target = Path(name)
    if name == "fifo":
        target = tmp_path / "cluster.yaml"
        os.mkfifo(target)
    elif name == "directory":
        target = tmp_path / "cluster.yaml"
        target.mkdir()
    started = time.monotonic()
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", str(target))
    assert time.monotonic() - started < BOUND_SECONDS
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    kind = {"fifo": "a FIFO", "directory": "is a directory"}.get(name, "a character device")
    assert result.stderr.startswith(f"error: {target}: "), result.stderr
    assert kind in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr


def test_a_cluster_of_a_thousand_hosts_still_loads(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from plan_bench import spec_yaml
    finally:
        sys.path.remove(str(ROOT / "bench"))
    text = spec_yaml(1000).replace("clusterCidr: 10.200.0.0/16", "clusterCidr: 10.128.0.0/9")  # room for 1,000 /24s
    assert len(text) < 100_000
    (tmp_path / "big.yaml").write_text(text)
    result = kubesmith("validate", "big.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
