"""`python3 -m kubesmith.lab.proxy [--netns NAME] HOST PORT`: relay stdin/stdout to HOST:PORT.

Used as the ssh ProxyCommand in the lab's ssh_config: lab addresses exist only inside
the lab's network namespace, so the relay setns()'s into it before connecting. The
namespace defaults to $KUBESMITH_LAB_NETNS or `kubesmith-lab`.
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import sys

from kubesmith.lab.setns import enter

CHUNK = 65536


def relay(sock: socket.socket, stdin_fd: int, stdout_fd: int) -> None:
    """Copy both ways until the remote side closes; half-close when stdin ends."""
    selector = selectors.DefaultSelector()
    selector.register(stdin_fd, selectors.EVENT_READ, "in")
    selector.register(sock, selectors.EVENT_READ, "sock")
    while True:
        for key, _ in selector.select():
            if key.data == "in":
                data = os.read(stdin_fd, CHUNK)
                if not data:
                    selector.unregister(stdin_fd)
                    sock.shutdown(socket.SHUT_WR)
                    continue
                sock.sendall(data)
            else:
                data = sock.recv(CHUNK)
                if not data:
                    return
                _write_all(stdout_fd, data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m kubesmith.lab.proxy", description=__doc__)
    parser.add_argument("--netns", help="lab network namespace name (default: as the lab's settings say)")
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    args = parser.parse_args(argv)
    if args.netns is None:  # the lab's ssh_config always names it: its settings are imported only here
        from kubesmith.lab.config import LabConfig

        args.netns = LabConfig.from_env().netns
    try:
        enter(os.path.join("/run/netns", args.netns))
        sock = socket.create_connection((args.host, args.port), timeout=10)
    except Exception as exc:  # one line for ssh to show, no traceback
        print(f"kubesmith lab proxy: {args.host}:{args.port} via netns {args.netns}: {exc}", file=sys.stderr)
        return 1
    sock.settimeout(None)
    try:
        relay(sock, sys.stdin.fileno(), sys.stdout.fileno())
    except (BrokenPipeError, ConnectionResetError):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
