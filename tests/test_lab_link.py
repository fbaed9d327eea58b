"""The lab reached from the machine's own network namespace (`kubesmith lab up` links it), and
never through the default route once the link is gone.

No systemd here: the test makes a lab namespace with its bridge (`netns.create`, as `lab up` does)
and a third namespace standing for a lab host, with a veth into the bridge at the host's address
and a real TCP server. The network is 10.213.201.0/24, not the default lab's, so a user's lab on
this machine is never touched; every namespace, link and route made here is removed in `finally`.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubesmith.lab import netns
from kubesmith.lab.config import LabConfig

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces, routes)")

NETWORK = "10.213.201"
HOST_ADDRESS = f"{NETWORK}.11"
PORT = 8443
SERVER = ("import socket\n"
          "s = socket.create_server(('0.0.0.0', %d))\n"
          "print('listening', flush=True)\n"
          "while True:\n"
          "    c, peer = s.accept(); c.sendall(('hello ' + peer[0]).encode()); c.close()\n") % PORT


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def lab_network(tmp_path: Path) -> Iterator[LabConfig]:
    """A lab namespace with its bridge and one 'host' namespace serving TCP on HOST_ADDRESS."""
    tag = f"{os.getpid() % 100000}"
    config = LabConfig(state_dir=tmp_path, netns=f"kslink-lab-{tag}", bridge="kslab0", network=NETWORK, link=True)
    host_ns = f"kslink-host-{tag}"
    server: subprocess.Popen[str] | None = None
    try:
        netns.create(config)
        ip("netns", "add", host_ns)
        ip("-n", config.netns, "link", "add", "h1b", "type", "veth", "peer", "name", "h1", "netns", host_ns)
        ip("-n", config.netns, "link", "set", "h1b", "master", config.bridge)
        ip("-n", config.netns, "link", "set", "h1b", "up")
        ip("-n", host_ns, "addr", "add", f"{HOST_ADDRESS}/24", "dev", "h1")
        ip("-n", host_ns, "link", "set", "h1", "up")
        ip("-n", host_ns, "link", "set", "lo", "up")
        server = subprocess.Popen(["ip", "netns", "exec", host_ns, sys.executable, "-c", SERVER],
                                  stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        yield config
    finally:
        if server is not None:
            server.kill()
            server.wait()
        netns.unlink(config)
        subprocess.run(["ip", "route", "del", "unreachable", f"{NETWORK}.0/24", "metric",
                        str(netns.GUARD_METRIC)], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", host_ns], capture_output=True, check=False)
        netns.delete(config)


def greeting() -> str:
    with socket.create_connection((HOST_ADDRESS, PORT), timeout=5) as connection:
        return connection.recv(100).decode()


def route_to_host() -> str:
    """What the machine's routing says for the host's address (`ip` prints an error for unreachable)."""
    found = subprocess.run(["ip", "route", "get", HOST_ADDRESS], capture_output=True, text=True, check=False)
    return found.stdout + found.stderr


def test_linked_the_hosts_answer_the_machine_and_unlinked_the_default_route_is_never_taken(
        lab_network: LabConfig) -> None:
    config = lab_network
    machine = netns.link(config)
    assert machine == f"{NETWORK}.254"
    assert netns.link(config) == machine  # again: nothing more to do
    assert greeting() == f"hello {machine}"  # the host saw the machine's own lab address: no NAT
    link_name, _ = netns.link_names(config)
    assert f"dev {link_name}" in route_to_host()

    netns.unlink(config)
    assert "unreachable" in route_to_host() or "No route to host" in route_to_host(), route_to_host()
    with pytest.raises(OSError) as refused:
        greeting()
    assert refused.value.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH), refused.value
    netns.unlink(config)  # again: fine
