"""Waiting in tests: poll a condition with a deadline (timing never decides pass or fail by itself)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll(condition: Callable[[], T | None], deadline: float, what: str, interval: float = 0.3) -> T:
    """The first truthy value of `condition`, or an AssertionError naming `what` after `deadline` seconds."""
    end = time.monotonic() + deadline
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline:g}s waiting for {what}")
        time.sleep(interval)
