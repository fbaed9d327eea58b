"""Loopback ports for test servers: a free one, and waiting until a started server listens on it."""

from __future__ import annotations

import socket
import subprocess
import time


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listening(port: int, process: subprocess.Popen, deadline: float = 15.0) -> bool:  # type: ignore[type-arg]
    """Whether `process` listens on 127.0.0.1:port before the deadline (False as soon as it exits)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if process.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False
