"""Local lab hosts: systemd-nspawn containers booting real systemd and sshd, on a private network.

`kubesmith lab up N` gives hosts h1..hN at 10.213.0.11.. on a bridge inside a network
namespace of their own, each booted from an overlayfs copy of one cached Debian image.
Works on machines whose PID 1 is not systemd (no machined, no system bus needed).

Entry points: `lifecycle.up/down/leftovers`, `access.status/exec_argv/ssh_argv/scp_argv/reboot`,
`netns.connect` (a TCP connection from inside the lab network), `LabConfig.from_env()`.
"""

import importlib

__all__ = ["LabConfig", "LabError", "LabHost", "LabNotPossible"]
_HOMES = {"LabConfig": "kubesmith.lab.config", "LabHost": "kubesmith.lab.config", "LabError": "kubesmith.lab.errors",
          "LabNotPossible": "kubesmith.lab.errors"}


def __getattr__(name: str) -> object:
    """The names above, imported on first use: the SSH ProxyCommand (`kubesmith.lab.proxy`), started
    for every connection to a lab host, imports this package and needs none of them."""
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
