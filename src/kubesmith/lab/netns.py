"""The lab's private network namespace: its bridge, and entering it from Python.

Every `ip` call names the lab namespace with `-n`, and sockets are opened from a thread that
has setns()'d into it, except for the link to the machine's own namespace (`link`, `unlink`,
`guard`): one veth pair and the routes for the lab's /24, nothing else of the machine's.
"""

from __future__ import annotations

import hashlib
import socket
import subprocess
import threading
from pathlib import Path

from kubesmith.lab.config import LabConfig
from kubesmith.lab.errors import LabError
from kubesmith.lab.setns import enter

LINK_HOST_OCTET = 254  # the machine's address on the lab's /24 (hosts use .11-.210, the bridge .1)
GUARD_METRIC = 4294967295  # loses to the link's own route; wins over the default route


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


def link_names(config: LabConfig) -> tuple[str, str]:
    """The veth pair's ends (machine side, lab side): named after the namespace, within IFNAMSIZ."""
    tag = hashlib.sha256(config.netns.encode()).hexdigest()[:8]
    return f"ksl{tag}m", f"ksl{tag}l"


def link(config: LabConfig) -> str:
    """Reach the lab from the machine's own namespace, as kind's port mapping does for kind: a veth
    pair whose lab end is a port of the bridge and whose machine end holds .254 of the lab's /24,
    so the hosts answer it directly. Returns the machine's address on the lab network."""
    guard(config)
    machine, lab = link_names(config)
    address = f"{config.network}.{LINK_HOST_OCTET}"
    if _link_exists(machine):
        return address
    _ip("link", "add", machine, "type", "veth", "peer", "name", lab)
    try:
        _ip("link", "set", lab, "netns", config.netns)
        _ip("-n", config.netns, "link", "set", lab, "master", config.bridge)
        _ip("-n", config.netns, "link", "set", lab, "up")
        _ip("addr", "add", f"{address}/24", "dev", machine)
        _ip("link", "set", machine, "up")
    except LabError:
        unlink(config)
        raise
    return address


def unlink(config: LabConfig) -> None:
    """Remove the veth pair (both ends go together); the guard stays. Fine when there is none."""
    machine, _ = link_names(config)
    if _link_exists(machine):
        _ip("link", "del", machine)


def guard(config: LabConfig) -> None:
    """An unreachable route for the lab's /24 in the machine's namespace, at the lowest priority:
    with no link, a client that was not started in the lab's namespace gets "no route to host"
    instead of sending the lab's addresses to the default route, off the machine."""
    _ip("route", "replace", "unreachable", f"{config.network}.0/24", "metric", str(GUARD_METRIC))


def _link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", "dev", name], capture_output=True, check=False).returncode == 0


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise LabError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")


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
