"""A connection that drops is named as lost, and no asyncio child-watcher line reaches the terminal.

Against the real local sshd, through a real ProxyCommand (bash relaying to the port), in a child
Python so its stderr is exactly what a user's terminal would show.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sshd_fixture import LocalSshd

NOISE = ("Unknown child process", "that handles pid", "Traceback", "Task exception", "Exception ignored")

SCRIPT = textwrap.dedent('''
    import asyncio, sys
    from pathlib import Path
    from kubesmith.transport.ssh import HostLost, SshOptions, SshTransport

    async def main(port, known, key, config, command):
        options = SshOptions(port=port, known_hosts=Path(known), identity_files=(Path(key),),
                             config_file=Path(config), connect_timeout=5.0)
        async with SshTransport(options) as transport:
            try:
                print((await transport.run("localhost", command)).stdout.strip())
            except HostLost as exc:
                print("lost:", exc)

    for _ in range(3):  # one apply runs several event loops one after another
        asyncio.run(main(int(sys.argv[1]), *sys.argv[2:]))
''')


def _run(sshd: LocalSshd, tmp_path: Path, command: str) -> subprocess.CompletedProcess[str]:
    known = tmp_path / "known_hosts"
    known.write_text(f"[localhost]:{sshd.port} {sshd.host_key_pub.read_text()}")
    config = tmp_path / "ssh_config"
    # the lab's relay: it exits once the server closes, a moment after asyncssh saw the connection end
    relay = ("import socket; from kubesmith.lab.proxy import relay; "
             "relay(socket.create_connection(('127.0.0.1', %p)), 0, 1)")
    config.write_text(f"Host localhost\n  ProxyCommand {sys.executable} -c \"{relay}\"\n")
    return subprocess.run([sys.executable, "-c", SCRIPT, str(sshd.port), str(known), str(sshd.identity),
                           str(config), command], capture_output=True, text=True, timeout=120)


def test_a_proxied_session_ends_without_asyncio_noise(local_sshd: LocalSshd, tmp_path: Path) -> None:
    result = _run(local_sshd, tmp_path, "echo fine")
    assert result.stdout.split() == ["fine"] * 3, result.stdout + result.stderr
    assert not [line for line in result.stderr.splitlines() if any(n in line for n in NOISE)], result.stderr


def test_a_dropped_connection_is_named_lost_without_noise(local_sshd: LocalSshd, tmp_path: Path) -> None:
    """The session's sshd process dies under the command (as when the host reboots)."""
    result = _run(local_sshd, tmp_path, "kill -KILL $PPID; sleep 5")
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and all(line.startswith("lost: localhost: connection lost while running")
                                   for line in lines), result.stdout + result.stderr
    assert not [line for line in result.stderr.splitlines() if any(n in line for n in NOISE)], result.stderr


@pytest.mark.parametrize("retry_seconds", [30.0, 0.0])
def test_a_host_that_refuses_while_it_boots_is_retried_within_its_window(
        local_sshd: LocalSshd, tmp_path: Path, retry_seconds: float) -> None:
    """The first three connects fail as a booting host's do (nothing listens yet); the fourth gets
    through. With spec.ssh.connectRetrySeconds 0 the first refusal is the answer."""
    from kubesmith.backends.ssh_settings import ssh_options
    from kubesmith.spec.model import Cluster

    spec = {"apiVersion": "kubesmith.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "c"},
            "spec": {"kubernetesVersion": "1.36.2", "hosts": [{"name": "h1", "address": "10.9.0.1", "roles": ["node"]}],
                     "ssh": {"connectRetrySeconds": retry_seconds}}}
    retry_for = ssh_options(Cluster.model_validate(spec))[0].connect_retry_for
    known = tmp_path / "known_hosts"
    known.write_text(f"[localhost]:{local_sshd.port} {local_sshd.host_key_pub.read_text()}")
    count = tmp_path / "attempts"
    relay = tmp_path / "relay.py"
    relay.write_text("import socket, sys\nfrom kubesmith.lab.proxy import relay\n"
                     "relay(socket.create_connection(('127.0.0.1', int(sys.argv[1]))), 0, 1)\n")
    config = tmp_path / "ssh_config"
    config.write_text(f"Host localhost\n  ProxyCommand sh -c 'echo x >> {count}; "
                      f"[ $(wc -l < {count}) -gt 3 ] || exit 1; exec {sys.executable} {relay} %p'\n")
    script = textwrap.dedent(f'''
        import asyncio
        from pathlib import Path
        from kubesmith.transport.ssh import HostUnreachable, SshOptions, SshTransport

        async def main():
            options = SshOptions(port={local_sshd.port}, known_hosts=Path("{known}"), config_file=Path("{config}"),
                                 identity_files=(Path("{local_sshd.identity}"),), connect_timeout=5.0,
                                 connect_retry_for={retry_for})
            async with SshTransport(options) as transport:
                try:
                    print((await transport.run("localhost", "echo up")).stdout.strip())
                except HostUnreachable as exc:
                    print("unreachable:", exc)

        asyncio.run(main())
    ''')
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    if retry_seconds:
        assert result.stdout.strip() == "up", result.stdout + result.stderr
        assert count.read_text().count("x") == 4
    else:
        assert result.stdout.startswith("unreachable: localhost: cannot connect"), result.stdout + result.stderr
        assert count.read_text().count("x") == 1
    assert not [line for line in result.stderr.splitlines() if any(n in line for n in NOISE)], result.stderr
