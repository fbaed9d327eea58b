"""The lab tests' warm-forked `kubesmith` (tests/forked_cli.py) behaves as the console script in a child
process does: the same exit codes and output, the caller's environment and directory, and a SIGKILL
that ends it. Each case runs both and compares."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import forked_cli
import pytest

ROOT = Path(__file__).resolve().parent.parent
CONSOLE = [sys.executable, "-c", "import sys; from kubesmith.cli import main; sys.argv[0] = 'kubesmith'; main()"]


@pytest.mark.parametrize("argv", [["version"], ["validate", str(ROOT / "examples" / "lab.yaml")],
                                  ["validate", "no-such-cluster.yaml"], ["plan", "--no-such-flag"]],
                         ids=["version", "valid", "missing-file", "unknown-flag"])
def test_a_forked_command_exits_and_writes_as_a_fresh_process(argv: list[str]) -> None:
    fresh = subprocess.run([*CONSOLE, *argv], capture_output=True, text=True, timeout=120)
    forked = forked_cli.run(argv, timeout=120)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_a_forked_command_takes_the_callers_directory_and_environment(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative file name is found in the caller's directory, and the caller's environment is the
    child's: COLUMNS sets the width `--help` wraps at, as in a fresh process given the same."""
    (tmp_path / "lab.yaml").write_bytes((ROOT / "examples" / "lab.yaml").read_bytes())
    monkeypatch.chdir(tmp_path)
    found = forked_cli.run(["validate", "lab.yaml"], timeout=120)
    assert found.returncode == 0 and found.stdout.startswith("lab.yaml: valid"), found.stdout + found.stderr
    helps = {}
    for columns in ("50", "160"):
        environment = {**os.environ, "COLUMNS": columns}
        narrow = forked_cli.start(["apply", "--help"], environment)
        helps[columns] = narrow.communicate(timeout=120)[0]
        fresh = subprocess.run([*CONSOLE, "apply", "--help"], capture_output=True, text=True, timeout=120,
                               env=environment)
        assert helps[columns] == fresh.stdout
    assert helps["50"] != helps["160"]


def test_a_forked_command_dies_of_sigkill_as_a_process_does() -> None:
    waiting = forked_cli.start(["wait", "--deadline", "120", "tcp://127.0.0.1:9"])
    time.sleep(1)
    assert waiting.poll() is None
    waiting.send_signal(signal.SIGKILL)
    assert waiting.wait(timeout=60) == -signal.SIGKILL
    with pytest.raises(subprocess.TimeoutExpired):
        forked_cli.run(["wait", "--deadline", "120", "tcp://127.0.0.1:9"], timeout=1)
