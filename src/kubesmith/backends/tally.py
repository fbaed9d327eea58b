"""A phase's progress across many hosts in one line (`upload 37/100 hosts, 8 at work`), not a line per host.

With a fleet, a line per host per step is thousands of lines nobody reads, and the live view
(`cli/progress.py`) would grow a row per host. So above FLEET_HOSTS hosts a phase says how far it
is at most every EVERY seconds, and once at its end; with fewer, it says nothing here (the phases'
own per-host lines stay as they were). A summary never begins with `word:`, which the live view
would take for a host's row.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

FLEET_HOSTS = 8  # more hosts than this in one phase: summary lines, not a line per host
EVERY = 2.0  # seconds between two summary lines of a phase (the release relay's pace)


@dataclass(slots=True)
class Tally:
    """Hosts done, at work and failed in one phase; says its line through `say` when hosts are many.
    `final`: whether the phase's end is said here (off where the caller has its own end line)."""

    phase: str
    total: int
    say: Callable[[str], None]
    every: float = EVERY
    final: bool = True
    done: int = 0
    busy: int = 0
    failed: int = 0
    _last: float | None = None  # when the last line was said (or the tally began)
    _later: asyncio.TimerHandle | None = None  # a line held back by the pace, due at _last + every

    @property
    def quiet(self) -> bool:
        return self.total <= FLEET_HOSTS

    def line(self) -> str:
        parts = [f"{self.phase} {self.done}/{self.total} hosts"]
        if self.busy:
            parts.append(f"{self.busy} at work")
        if self.failed:
            parts.append(f"{self.failed} failed")
        return ", ".join(parts)

    @contextmanager
    def working(self) -> Iterator[None]:
        """Count one host at work while the block runs, then done (or failed, when it raises)."""
        self.busy += 1
        self._changed()
        try:
            yield
        except BaseException:
            self.failed += 1
            raise
        else:
            self.done += 1
        finally:
            self.busy -= 1
            self._changed()

    def close(self) -> None:
        """The phase is over (also when it stopped early): no held-back line comes after it."""
        if self._later is not None:
            self._later.cancel()
            self._later = None

    def _changed(self) -> None:
        if self.quiet:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._last is None:
            self._last = now  # the first line comes after `every` seconds, or at the end
        if self.done + self.failed == self.total:
            self.close()
            if self.final:
                self.say(self.line())
        elif now - self._last >= self.every:
            self._say_now()
        elif self._later is None:
            self._later = loop.call_later(self._last + self.every - now, self._say_now)

    def _say_now(self) -> None:
        self.close()
        self._last = asyncio.get_running_loop().time()
        self.say(self.line())
