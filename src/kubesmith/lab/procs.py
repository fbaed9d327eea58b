"""Processes the lab started, identified by PID *and* start time, so a reused PID is never signalled."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """A process as the lab recorded it: a PID is only trusted while its start time still matches."""

    pid: int
    start_time: int  # clock ticks since boot, field 22 of /proc/PID/stat

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)) + "\n")

    @classmethod
    def load(cls, path: Path) -> ProcessRecord | None:
        try:
            data = json.loads(path.read_text())
            return cls(pid=int(data["pid"]), start_time=int(data["start_time"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    @classmethod
    def of(cls, pid: int) -> ProcessRecord | None:
        stat = read_stat(pid)
        return None if stat is None else cls(pid=pid, start_time=stat.start_time)

    def alive(self) -> bool:
        stat = read_stat(self.pid)
        return stat is not None and stat.start_time == self.start_time and stat.state != "Z"

    def signal(self, signum: signal.Signals) -> bool:
        """Send signum if this is still the recorded process; False when it is gone."""
        if not self.alive():
            return False
        try:
            os.kill(self.pid, signum)
        except ProcessLookupError:
            return False
        return True

    def wait_gone(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True


@dataclass(frozen=True, slots=True)
class Stat:
    pid: int
    comm: str
    state: str
    ppid: int
    start_time: int


def read_stat(pid: int) -> Stat | None:
    """Parse /proc/PID/stat (comm may contain spaces and parentheses, hence rpartition)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    head, _, tail = raw.rpartition(")")
    fields = tail.split()
    return Stat(pid=pid, comm=head.partition("(")[2], state=fields[0], ppid=int(fields[1]),
                start_time=int(fields[19]))


def children(pid: int, comm: str) -> list[Stat]:
    """Direct children of pid whose command name is comm."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = read_stat(int(entry.name))
            if stat is not None and stat.ppid == pid and stat.comm == comm and stat.state != "Z":
                found.append(stat)
    return found
