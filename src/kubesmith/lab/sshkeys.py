"""SSH identity for a lab: a fresh client key, fresh host keys, and the files `ssh -F` reads.

Host keys are generated on the machine (not inside the hosts) before first boot, so
known_hosts can be written up front and every connection checks host keys strictly.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import kubesmith
from kubesmith.lab.config import LabConfig, LabHost
from kubesmith.lab.errors import LabError


def keygen(path: Path, comment: str) -> str:
    """Write a new ed25519 key pair at path; return the public key line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in (path, path.with_name(path.name + ".pub")):
        stale.unlink(missing_ok=True)
    result = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise LabError(f"ssh-keygen {path} failed: {result.stderr.strip()}")
    return path.with_name(path.name + ".pub").read_text().strip()


def known_hosts_line(host: LabHost, public_key: str) -> str:
    key_type, key_data = public_key.split()[:2]
    return f"{host.name},{host.address} {key_type} {key_data}"


# The relay's start: `-S` skips site's .pth files (on some machines they import whole packages), so the
# directory that holds kubesmith, its first argument, goes on sys.path by hand. One starts for every SSH
# connection to a lab host.
PROXY_START = "import sys; sys.path.insert(0, sys.argv.pop(1)); from kubesmith.lab.proxy import main; sys.exit(main())"


def proxy_command(config: LabConfig) -> str:
    """The ProxyCommand: this Python, relaying from inside the lab netns (ssh runs it via a shell)."""
    root = str(Path(kubesmith.__file__).resolve().parent.parent)
    return shlex.join([sys.executable, "-S", "-c", PROXY_START, root, "--netns", config.netns]) + " %h %p"


def ssh_config_block(config: LabConfig, host: LabHost) -> str:
    options = {
        "HostName": host.address,
        "User": "root",
        "IdentityFile": str(config.client_key),
        "IdentitiesOnly": "yes",
        "UserKnownHostsFile": str(config.known_hosts),
        "GlobalKnownHostsFile": "/dev/null",
        "StrictHostKeyChecking": "yes",
        "HostKeyAlgorithms": "ssh-ed25519",
        "BatchMode": "yes",
        "ConnectTimeout": "10",
        "LogLevel": "ERROR",
        "ProxyCommand": proxy_command(config),
    }
    return f"Host {host.name} {host.address}\n" + "".join(f"  {k} {v}\n" for k, v in options.items())


def write_client_files(config: LabConfig, host_keys: dict[LabHost, str]) -> None:
    """known_hosts and ssh_config for every host (the client key is made by `up` before)."""
    config.known_hosts.write_text("".join(known_hosts_line(h, key) + "\n" for h, key in host_keys.items()))
    header = f"# kubesmith lab ({config.netns}); use with: ssh -F {config.ssh_config} h1\n"
    config.ssh_config.write_text(header + "\n".join(ssh_config_block(config, h) for h in host_keys))
