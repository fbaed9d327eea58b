"""A real sshd on 127.0.0.1 with its own host key, for transport tests (no lab needed)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from net_support import free_port, listening


@dataclass(frozen=True)
class LocalSshd:
    port: int
    known_hosts: Path
    identity: Path
    host_key_pub: Path


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


# A session's shell starts at SHLVL 2, so bash does not read root's ~/.bashrc as a remote shell: a
# host's sshd gives the login's dotfiles, and this machine's are not a host's. Here they run a version
# manager's init (pyenv: 0.27 CPU-s and about a hundred processes a session, thousands of sessions a
# run) and put its shims first on PATH; a session now has sshd's own PATH, as on a host.
SESSION_SHELL = "SetEnv SHLVL=1\n"


@contextmanager
def start_sshd(base: Path, extra_config: str = "", key_options: str = "") -> Iterator[LocalSshd]:
    """A real sshd on 127.0.0.1 with its files in `base`; `key_options` go before the client's key in
    authorized_keys (`environment="..."`, with `PermitUserEnvironment` in `extra_config`)."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if os.geteuid() != 0 or not Path(sshd).exists() or not shutil.which("ssh-keygen"):
        pytest.skip("needs root, openssh-server and openssh-client")
    _keygen(base / "host_key")
    _keygen(base / "client_key")
    prefix = f"{key_options} " if key_options else ""
    (base / "authorized_keys").write_text(prefix + (base / "client_key.pub").read_text())
    port = free_port()
    config = base / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {base / 'host_key'}\n"
        f"AuthorizedKeysFile {base / 'authorized_keys'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n"
        f"PidFile {base / 'sshd.pid'}\nSubsystem sftp internal-sftp\n{SESSION_SHELL}{extra_config}")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    process = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE)
    known_hosts = base / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {(base / 'host_key.pub').read_text()}")
    try:
        if not listening(port, process, deadline=10):
            raise RuntimeError(f"sshd did not start listening: {process.stderr.read().decode() if process.stderr else ''}")
        yield LocalSshd(port, known_hosts, base / "client_key", base / "host_key.pub")
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="session")
def local_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSshd]:
    with start_sshd(tmp_path_factory.mktemp("sshd")) as sshd:
        yield sshd
