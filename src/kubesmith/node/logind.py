"""Graceful node shutdown needs logind to allow the kubelet's delay: `InhibitDelayMaxSec` at least
`shutdownGracePeriod`. The kubelet raises it itself (a logind.conf.d file, then SIGHUP) but reads the
value back without waiting for logind to reload, and gives graceful shutdown up when it reads the old
one (kubernetes issue "race condition in systemd-logind configuration reloading"). kubesmith ships the
drop-in with the plan, and this step, before the kubelet starts, has logind load it and waits until
it reports the new value.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

PROPERTY = ("busctl", "get-property", "org.freedesktop.login1", "/org/freedesktop/login1",
            "org.freedesktop.login1.Manager", "InhibitDelayMaxUSec")
Say = Callable[[str], None]


def inhibit_delay() -> float | None:
    """logind's InhibitDelayMaxSec in seconds, or None when logind does not answer."""
    try:
        result = subprocess.run(PROPERTY, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    kind, _, value = result.stdout.strip().partition(" ")
    return int(value) / 1e6 if result.returncode == 0 and kind == "t" and value.isdigit() else None


def ensure_inhibit_delay(seconds: float, deadline: float, say: Say) -> bool:
    """Reload logind until it allows `seconds` of delay (True), or say why not by `deadline` (False).
    Never fatal: without it the node still runs, only its shutdown is not graceful."""
    current = inhibit_delay()
    if current is None:
        say("logind does not answer: graceful node shutdown unavailable")
        return False
    end = time.monotonic() + deadline
    while current is not None and current < seconds:
        if time.monotonic() > end:
            say(f"logind still allows {current:g}s of shutdown delay, not {seconds:g}s")
            return False
        subprocess.run(["systemctl", "kill", "--signal=SIGHUP", "systemd-logind.service"], capture_output=True,
                       timeout=10, check=False)
        time.sleep(0.5)
        current = inhibit_delay()
    return current is not None
