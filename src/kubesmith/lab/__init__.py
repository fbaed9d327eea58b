"""Local lab hosts: systemd-nspawn containers booting real systemd and sshd, on a private network.

`kubesmith lab up N` gives hosts h1..hN at 10.213.0.11.. on a bridge inside a network
namespace of their own, each booted from an overlayfs copy of one cached Debian image.
Works on machines whose PID 1 is not systemd (no machined, no system bus needed).

Entry points: `lifecycle.up/down/leftovers`, `access.status/exec_argv/ssh_argv/scp_argv/reboot`,
`netns.connect` (a TCP connection from inside the lab network), `LabConfig.from_env()`.
"""

from kubesmith.lab.config import LabConfig, LabHost
from kubesmith.lab.errors import LabError, LabNotPossible

__all__ = ["LabConfig", "LabError", "LabHost", "LabNotPossible"]
