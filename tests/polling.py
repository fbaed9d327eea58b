"""Waiting in tests: poll a condition with a deadline (timing never decides pass or fail by itself)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

GROWTH = 1.5  # each pause half as long again as the last ...
PAUSE_CAP = 2.0  # ... up to this many seconds (or the caller's interval, if longer)


def poll(condition: Callable[[], T | None], deadline: float, what: str, interval: float = 0.3) -> T:
    """The first truthy value of `condition`, or an AssertionError naming `what` after `deadline` seconds.

    Pauses start at `interval` and grow to PAUSE_CAP, and each is at least as long as the try before it.
    A condition met soon is seen soon; a long wait (a trial, a reboot) costs a few tries a minute, not
    hundreds: tries are `kubesmith status` or kubectl or ssh, up to 2 CPU-s each on two shared cores,
    and polled back to back they slowed the very hosts the test waited for."""
    end = time.monotonic() + deadline
    pause = interval
    while True:
        started = time.monotonic()
        value = condition()
        if value:
            return value
        finished = time.monotonic()
        if finished > end:
            raise AssertionError(f"timed out after {deadline:g}s waiting for {what}")
        time.sleep(min(max(pause, finished - started), end - finished + interval))
        pause = min(pause * GROWTH, max(PAUSE_CAP, interval))
