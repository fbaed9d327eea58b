"""Entering a network namespace from Python (os.setns is 3.12+): stdlib only, so that the lab's SSH
ProxyCommand (`kubesmith.lab.proxy`), started for every SSH connection to a lab host, stays light."""

from __future__ import annotations

import ctypes
import os

from kubesmith.lab.errors import LabError

CLONE_NEWNET = 0x40000000


def enter(path: str | os.PathLike[str]) -> None:
    """Move the *calling thread* into the network namespace at path."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            error = ctypes.get_errno()
            raise LabError(f"setns({path}) failed: {os.strerror(error)}")
    finally:
        os.close(fd)
