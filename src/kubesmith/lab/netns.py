"""The lab's private network namespace: its bridge, and entering it from Python.

Nothing here touches the machine's own network namespace: every `ip` call names the
lab namespace with `-n`, and sockets are opened from a thread that has setns()'d into it.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import threading
from pathlib import Path

from kubesmith.lab.config import LabConfig
from kubesmith.lab.errors import LabError

CLONE_NEWNET = 0x40000000


def exists(config: LabConfig) -> bool:
    return config.netns_path.exists()


def create(config: LabConfig) -> None:
    """Namespace + bridge with the gateway address; the hosts' veths are added by nspawn."""
    _ip("netns", "add", config.netns)
    _ip("-n", config.netns, "link", "set", "lo", "up")
    _ip("-n", config.netns, "link", "add", config.bridge, "type", "bridge")
    _ip("-n", config.netns, "addr", "add", f"{config.bridge_address}/24", "dev", config.bridge)
    _ip("-n", config.netns, "link", "set", config.bridge, "up")


def delete(config: LabConfig) -> None:
    """Delete the namespace (with the bridge and veths in it); fine when it is already gone."""
    if exists(config):
        _ip("netns", "del", config.netns)


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise LabError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")


def enter(path: Path) -> None:
    """Move the *calling thread* into the network namespace at path (os.setns is 3.12+)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            error = ctypes.get_errno()
            raise LabError(f"setns({path}) failed: {os.strerror(error)}")
    finally:
        os.close(fd)


def connect(netns_path: Path, address: str, port: int, timeout: float = 10.0) -> socket.socket:
    """A TCP connection made from inside the namespace, usable from any thread afterwards.

    A socket stays in the namespace it was created in, so a short-lived helper thread
    enters the namespace, connects and hands the socket back; the caller's thread and
    the rest of the process stay in the machine's own namespace.
    """
    outcome: dict[str, object] = {}

    def work() -> None:
        try:
            enter(netns_path)
            outcome["socket"] = socket.create_connection((address, port), timeout=timeout)
        except BaseException as exc:  # handed to the caller's thread below
            outcome["error"] = exc

    thread = threading.Thread(target=work, name=f"lab-connect-{address}:{port}", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["socket"]  # type: ignore[return-value]
