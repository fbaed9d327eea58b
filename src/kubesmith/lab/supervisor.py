"""`python3 -m kubesmith.lab.supervisor`: keep one lab host booted, like systemd-nspawn@.service would.

Started detached by `up`, one per host. It first moves itself into the host's own
cgroups (with --keep-unit, nspawn creates payload/ and supervisor/ inside the cgroup it
starts in; on a machine whose PID 1 is not systemd that is the root cgroup, shared by
every host otherwise). Then it runs nspawn inside the lab netns, and boots again when
nspawn exits with 133 (an in-guest `systemctl reboot`), until the stop file exists.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

REBOOT_EXIT = 133


def join_cgroups(cgroups: list[str]) -> None:
    for cgroup in cgroups:
        Path(cgroup, "cgroup.procs").write_text("0\n")  # "0" = the writing process


def supervise(argv: list[str], stop_file: Path) -> int:
    """Run argv until it exits with anything but a reboot request (or a stop was asked for)."""
    current: dict[str, subprocess.Popen[bytes]] = {}

    def forward(signum: int, _frame: FrameType | None) -> None:
        stop_file.touch()
        if "child" in current:
            current["child"].send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while True:
        started = time.strftime("%H:%M:%S")
        print(f"[supervisor {started}] booting", flush=True)
        current["child"] = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        code = current["child"].wait()
        print(f"[supervisor] nspawn exited with {code}", flush=True)
        if code != REBOOT_EXIT or stop_file.exists():
            return code


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m kubesmith.lab.supervisor")
    parser.add_argument("--cgroup", action="append", default=[], help="cgroup dir to join first (repeatable)")
    parser.add_argument("--stop-file", required=True, type=Path, help="when it exists, a reboot ends the loop")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    parsed = parser.parse_args(args)
    command = parsed.command[1:] if parsed.command[:1] == ["--"] else parsed.command
    join_cgroups(parsed.cgroup)
    return supervise(command, parsed.stop_file)


if __name__ == "__main__":
    sys.exit(main())
