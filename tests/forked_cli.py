"""`kubesmith` as a child forked from a warm interpreter, for tests that run many short commands.

The lab tests run `status`, `plan` and `apply` hundreds of times. Each child process started Python and
imported kubesmith's CLI, the spec model, the planner, asyncssh and cryptography anew: about 1 CPU-s of
a run of 1.3 on this project's machines, on two cores that the labs' clusters need too. Here a fork
server (multiprocessing's, one a test process) imports all of that once, and each command runs in a
child forked from it: still a process of its own, with its own exit code, standard streams,
environment, working directory and signals, running the console script's own entry point
(`run_guarded`). Only the imports are shared: each child starts from the server's state as the imports
left it, never from an earlier child's.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from functools import cache
from multiprocessing.context import ForkServerContext
from pathlib import Path

# What the operator's commands import when they run (each command module imports its own at run time).
PRELOAD = ["kubesmith.cli", "kubesmith.cli.common", "kubesmith.cli.apply_commands", "kubesmith.cli.status_commands",
           "kubesmith.cli.plan_commands", "kubesmith.cli.upgrade_commands", "kubesmith.cli.reset_commands",
           "kubesmith.cli.etcd_commands", "kubesmith.cli.images_commands", "kubesmith.health.status",
           "kubesmith.health.remote", "kubesmith.transport.ssh", "kubesmith.backends.apply",
           "kubesmith.backends.ssh_settings", "kubesmith.pki.store", "kubesmith.spec", "asyncssh", "pydantic",
           "cryptography.x509", "yaml"]


@cache
def _server() -> ForkServerContext:
    """This process's fork server, started on first use with PRELOAD imported."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def _command(argv: list[str], environment: dict[str, str], cwd: str, out: str, err: str) -> None:
    """The child: streams, environment and directory as `subprocess.run` would give them, then the CLI."""
    for fd, path in ((1, out), (2, err)):
        opened = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's own stream
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    os.environ.clear()
    os.environ.update(environment)
    os.chdir(cwd)
    sys.argv = ["kubesmith", *argv]
    from kubesmith.cli import cli
    from kubesmith.cli.common import run_guarded

    try:
        code = run_guarded(cli)
    except SystemExit as exc:  # as under the console script
        code = exc.code if isinstance(exc.code, int) else 1
    sys.stdout.flush()
    sys.stderr.flush()
    raise SystemExit(code)


class ForkedProcess:
    """A started command, with the part of `subprocess.Popen`'s interface the tests use: `pid`,
    `poll`, `wait`, `send_signal`, `kill`, `communicate` and `returncode` (text streams)."""

    def __init__(self, argv: list[str], environment: dict[str, str]) -> None:
        self.args = ["kubesmith", *argv]
        self._scratch = tempfile.TemporaryDirectory(prefix="kubesmith-forked-")
        self._out, self._err = Path(self._scratch.name) / "stdout", Path(self._scratch.name) / "stderr"
        self._out.touch()
        self._err.touch()
        self._child = _server().Process(target=_command, args=(argv, environment, os.getcwd(), str(self._out),
                                                               str(self._err)))
        self._child.start()
        self.pid = self._child.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self._child.exitcode is not None:
            self.returncode = self._child.exitcode
            self._child.close()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.poll() is None:
            self._child.join(timeout)
        code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            os.kill(self.pid or 0, number)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Its output once it ended (TimeoutExpired, the child left running, past `timeout`)."""
        self.wait(timeout)
        try:
            return self._out.read_text(errors="replace"), self._err.read_text(errors="replace")
        finally:
            self._scratch.cleanup()


def start(argv: Sequence[str], environment: dict[str, str] | None = None) -> ForkedProcess:
    """`kubesmith ARGV` started in a forked child, with this environment (default: this process's)."""
    return ForkedProcess(list(argv), dict(os.environ if environment is None else environment))


def run(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """`kubesmith ARGV` in a forked child, as `subprocess.run(..., capture_output=True, text=True)`
    returns it; TimeoutExpired (the child killed) past `timeout`."""
    process = start(argv)
    try:
        out, err = process.communicate(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise subprocess.TimeoutExpired(process.args, timeout, out, err) from None
    return subprocess.CompletedProcess(process.args, process.wait(), out, err)
