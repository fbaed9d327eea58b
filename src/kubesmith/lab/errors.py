"""Lab failures the user can act on, and the checks that turn a missing tool into one clear line."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

Progress = Callable[[str], None]

# tool -> Debian package that provides it
TOOL_PACKAGES: dict[str, str] = {
    "systemd-nspawn": "systemd-container",
    "mmdebstrap": "mmdebstrap",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "scp": "openssh-client",
    "nsenter": "util-linux",
    "mount": "mount",
    "umount": "mount",
    "ip": "iproute2",
    "systemctl": "systemd",
}


class LabError(Exception):
    """A lab operation failed for a reason worth one line to the user (never a traceback)."""


class NoLab(LabError):
    """No lab is up: nothing is running (for `lab status`, an unhealthy answer rather than a failure)."""


class LabNotPossible(LabError):
    """This machine cannot run a lab as things stand (not root, a tool missing)."""


def quiet(_: str) -> None:
    """A progress sink that drops messages (library and test use)."""


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabNotPossible("the lab needs root (network namespaces, mounts, cgroups); run it with sudo")


def require_tools(tools: Iterable[str]) -> None:
    """Fail with the apt package to install for the first missing tool."""
    import shutil  # here: the SSH relay imports this module for LabError, and starts once a connection

    for tool in tools:
        if shutil.which(tool) is None:
            package = TOOL_PACKAGES.get(tool, tool)
            raise LabNotPossible(f"{tool} not found: install it with `apt-get install -y {package}`")
