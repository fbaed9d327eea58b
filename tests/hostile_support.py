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


# A run blocked on I/O (a FIFO, a device) uses no CPU: the wall-clock alarm ends it, this many times later
WALL_FACTOR = 30


@contextlib.contextmanager
def bounded(seconds: float) -> Iterator[None]:
    """Fail a run that spends more than `seconds` of CPU (SIGPROF), or blocks for WALL_FACTOR times as
    long (SIGALRM). CPU time, not wall time, is the bound: four workers on two cores stretch a 0.5 s
    validation past 2 s of wall time, and timing must not decide a test, only a runaway loop or a hang."""
    def expire(signum: int, frame: object) -> None:
        spent = "of CPU" if signum == signal.SIGPROF else "of wall time, blocked"
        raise TookTooLong(f"still running after {seconds * (1 if signum == signal.SIGPROF else WALL_FACTOR):g} s "
                          f"{spent}")

    previous = {number: signal.signal(number, expire) for number in (signal.SIGPROF, signal.SIGALRM)}
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.setitimer(signal.ITIMER_REAL, seconds * WALL_FACTOR)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        for number, handler in previous.items():
            signal.signal(number, handler)


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


def assert_refused_alone(directory: Path, name: str, text: str, path: str, fragment: str) -> Result:
    """As assert_refused, and that error is the file's only one: one mistake, one message."""
    result = assert_refused(directory, name, text, path, fragment)
    assert result.stderr.splitlines()[-1] == "1 error found", result.stderr
    return result


def assert_valid(directory: Path, name: str, text: str, bound: bool = True) -> Result:
    """`text` is a valid cluster file: exit 0, no error."""
    result = validate_text(directory, name, text, bound)
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr, result.stderr
    return result
