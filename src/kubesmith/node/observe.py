"""This machine as a host: its environment observed (`run`, `join`), its name and address (`init`).

The I/O half of `kubesmith.vocabulary.environment`, which holds the command and the parsing of its answer.
"""

from __future__ import annotations

import socket
import subprocess
import time

from kubesmith.vocabulary.environment import OBSERVE_COMMAND, HostEnvironment, parse_observation


def observe_local(command: str = OBSERVE_COMMAND) -> HostEnvironment:
    """This machine's environment (no privileges needed)."""
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30, check=False)
    return parse_observation(result.stdout, time.time())


def local_host_name() -> str:
    """This machine's host name as a node name: the first label, lower case (names are DNS labels)."""
    return socket.gethostname().split(".")[0].lower()


def primary_address() -> str | None:
    """The source address of this machine's default route, or None without one.

    Connecting a UDP socket only asks the kernel for a route: no packet is sent."""
    for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            try:
                sock.connect((probe, 9))
            except OSError:
                continue
            return str(sock.getsockname()[0])
    return None
