"""The hostile-input harness (issue 16, issue 32), shared by tests/test_spec_hostile.py and every
tests/test_hostile_*.py: run `kubesmith validate` on a cluster file in this process under an alarm, and
check that it ends in one located error (option path, file:line:col, exit 1) or stays valid.

A module that checks timings imports `warm` too: pytest takes a fixture from the module's own names, and
this one (autouse) loads the imports and the release registry once, outside the bounded runs.
"""

from __future__ import annotations

import contextlib
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT, Result, kubesmith

BOUND_SECONDS = 2.0


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


@pytest.fixture(scope="module", autouse=True)
def warm() -> None:
    """Imports and the release registry load once, outside the bounded runs (they are not the input's cost)."""
    assert kubesmith("validate", str(ROOT / "examples" / "single-node.yaml")).returncode == 0


def assert_one_located_error(result: Result, name: str, path: str, fragment: str) -> None:
    """The first error is the expected one, and every error line is located (one file, one line each)."""
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "TookTooLong" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.stderr.splitlines()[-1] == f"{len(errors)} error{'s' if len(errors) > 1 else ''} found"
    assert errors[0].startswith(f"error: {path}"), result.stderr
    assert fragment in errors[0], result.stderr
    assert all(re.search(rf"\({re.escape(name)}:\d+:\d+\)$", line) for line in errors), result.stderr


def validate_text(directory: Path, name: str, text: str, bound: bool = True, seconds: float = BOUND_SECONDS
                  ) -> Result:
    """`kubesmith validate NAME.yaml` of `text`, written in `directory`; under an alarm of `seconds` unless
    `bound` is false."""
    (directory / f"{name}.yaml").write_text(text)
    with bounded(seconds) if bound else contextlib.nullcontext():
        return kubesmith("validate", f"{name}.yaml", cwd=directory)


def assert_refused(directory: Path, name: str, text: str, path: str, fragment: str,
                   seconds: float = BOUND_SECONDS) -> Result:
    """`text` ends, within `seconds`, in one located error whose first line names `path` and `fragment`."""
    result = validate_text(directory, name, text, seconds=seconds)
    assert_one_located_error(result, f"{name}.yaml", path, fragment)
    return result


def assert_valid(directory: Path, name: str, text: str, bound: bool = True) -> Result:
    """`text` is a valid cluster file: exit 0, no error."""
    result = validate_text(directory, name, text, bound)
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr, result.stderr
    return result
