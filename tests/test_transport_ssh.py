"""The SSH transport against a real sshd: commands, atomic uploads, hashes, and clear failures."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import stat
import time
from pathlib import Path

import pytest

from kubesmith.hostfile import HostFile
from kubesmith.transport.ssh import HostKeyMismatch, HostUnreachable, SshOptions, SshTransport, TransportError
from net_support import free_port
from sshd_fixture import LocalSshd


def _options(sshd: LocalSshd, **overrides: object) -> SshOptions:
    values: dict[str, object] = {"port": sshd.port, "known_hosts": sshd.known_hosts,
                                 "identity_files": (sshd.identity,), "connect_timeout": 5.0}
    values.update(overrides)
    return SshOptions(**values)  # type: ignore[arg-type]


async def _run(options: SshOptions, command: str) -> str:
    async with SshTransport(options) as transport:
        return (await transport.run("127.0.0.1", command)).stdout


def test_runs_a_command(local_sshd: LocalSshd) -> None:
    assert asyncio.run(_run(_options(local_sshd), "echo hello; id -u")).split() == ["hello", "0"]


def test_upload_is_atomic_with_mode_and_owner(local_sshd: LocalSshd, tmp_path: Path) -> None:
    target = tmp_path / "deep" / "dir" / "key.pem"
    files = [HostFile(str(target), 0o600, "nobody", "nogroup", b"secret\n"),
             HostFile(str(tmp_path / "deep" / "cert.pem"), 0o644, "root", "root", b"public\n")]

    async def scenario() -> dict[str, str | None]:
        async with SshTransport(_options(local_sshd)) as transport:
            await transport.upload("127.0.0.1", files)
            return await transport.hashes("127.0.0.1", [f.path for f in files] + [str(tmp_path / "missing")])

    hashes = asyncio.run(scenario())
    assert target.read_bytes() == b"secret\n"
    info = target.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid != 0  # owned by nobody
    assert hashes[str(target)] == hashlib.sha256(b"secret\n").hexdigest()
    assert hashes[str(tmp_path / "missing")] is None
    assert not [p for p in tmp_path.rglob("*") if ".kstmp-" in p.name]


def test_cached_hashes_see_every_change_and_read_an_unchanged_file_once(local_sshd: LocalSshd, tmp_path: Path) -> None:
    """The cache skips reading a file whose size, times and inode are those of its last hashing; a write
    that keeps size and mtime still changes its ctime, and a replaced file has another inode. A file
    hashed within a second of its last change is read again (racy, as in git's index: it may have changed
    again within its timestamps' granularity, keeping its size and times)."""
    kept, edited, replaced, racy = tmp_path / "kept", tmp_path / "edited", tmp_path / "replaced", tmp_path / "racy"
    for path in (kept, edited, replaced, racy):
        path.write_bytes(b"first")
    time.sleep(1.1)  # the first hashing comes more than a second after the files' last change
    cache = tmp_path / "state" / "hashes.json"
    paths = [str(kept), str(edited), str(replaced), str(racy), str(tmp_path), str(tmp_path / "missing")]

    async def hashes() -> dict[str, str | None]:
        async with SshTransport(_options(local_sshd)) as transport:
            return await transport.hashes("127.0.0.1", paths, str(cache))

    first = asyncio.run(hashes())
    assert first == {str(kept): hashlib.sha256(b"first").hexdigest(), str(edited): hashlib.sha256(b"first").hexdigest(),
                     str(replaced): hashlib.sha256(b"first").hexdigest(), str(racy): hashlib.sha256(b"first").hexdigest(),
                     str(tmp_path): None, str(tmp_path / "missing"): None}
    recorded = json.loads(cache.read_text())
    assert set(recorded) == {str(kept), str(edited), str(replaced), str(racy)}
    # the cache is what answers for an unchanged file: a forged digest there comes back; not for a racy one,
    # recorded as hashed a microsecond after its last change
    recorded[str(kept)][5] = recorded[str(racy)][5] = "cached"
    recorded[str(racy)][6] = racy.stat().st_ctime_ns + 1000
    cache.write_text(json.dumps(recorded))
    times = edited.stat()
    edited.write_bytes(b"other")  # same size; mtime put back: only the ctime tells
    os.utime(edited, ns=(times.st_atime_ns, times.st_mtime_ns))
    (tmp_path / "new").write_bytes(b"other")
    os.replace(tmp_path / "new", replaced)
    (cache.parent / f".hashes.json.kstmp-{2 ** 22 + 7}").write_text("{")  # a temp whose writer is gone
    second = asyncio.run(hashes())
    assert second[str(kept)] == "cached"
    assert second[str(racy)] == hashlib.sha256(b"first").hexdigest()
    assert second[str(edited)] == second[str(replaced)] == hashlib.sha256(b"other").hexdigest()
    assert sorted(p.name for p in cache.parent.iterdir()) == ["hashes.json"]


def test_wrong_host_key_is_refused(local_sshd: LocalSshd, tmp_path: Path) -> None:
    other = tmp_path / "other"
    os.system(f"ssh-keygen -q -t ed25519 -N '' -f {other}")
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"[127.0.0.1]:{local_sshd.port} {(tmp_path / 'other.pub').read_text()}")
    with pytest.raises(HostKeyMismatch, match="127.0.0.1: host key not trusted"):
        asyncio.run(_run(_options(local_sshd, known_hosts=wrong), "true"))


def test_a_refused_host_leaves_no_connect_half_done(local_sshd: LocalSshd, tmp_path: Path) -> None:
    """One host fails while another is still connecting through a (slow) ProxyCommand: the
    transport lets that attempt finish before closing rather than leaving it to be cancelled
    mid-spawn, which on Python 3.11 can hang the program's exit forever."""
    os.system(f"ssh-keygen -q -t ed25519 -N '' -f {tmp_path / 'other'}")
    port = local_sshd.port
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {(tmp_path / 'other.pub').read_text()}"
                     f"[localhost]:{port} {local_sshd.host_key_pub.read_text()}")
    config = tmp_path / "ssh_config"
    config.write_text("Host localhost\n  ProxyCommand bash -c 'sleep 0.5; exec 3<>/dev/tcp/127.0.0.1/%p; "
                      "cat <&3 & exec cat >&3'\n")

    async def scenario() -> list[str]:
        with pytest.raises(HostKeyMismatch):
            async with SshTransport(_options(local_sshd, known_hosts=known, config_file=config)) as transport:
                await asyncio.gather(transport.run("127.0.0.1", "true"), transport.run("localhost", "true"))
        pending = [t for t in asyncio.all_tasks() if not t.done() and t is not asyncio.current_task()]
        return [t.get_coro().cr_code.co_filename for t in pending]  # type: ignore[union-attr]

    leftovers = asyncio.run(scenario())
    assert not [name for name in leftovers if "asyncssh" in name], leftovers


def test_unknown_host_key_is_refused(local_sshd: LocalSshd, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(HostKeyMismatch):
        asyncio.run(_run(_options(local_sshd, known_hosts=empty), "true"))


def test_unreachable_host_fails_after_retries(local_sshd: LocalSshd) -> None:
    options = _options(local_sshd, port=free_port(), connect_attempts=2, connect_timeout=1.0)
    with pytest.raises(HostUnreachable, match="cannot connect on port"):
        asyncio.run(_run(options, "true"))


def test_failed_upload_names_the_host(local_sshd: LocalSshd) -> None:
    async def scenario() -> None:
        async with SshTransport(_options(local_sshd)) as transport:
            await transport.upload("127.0.0.1", [HostFile("/proc/kubesmith-cannot/x", 0o644, "root", "root", b"")])

    with pytest.raises(TransportError, match="127.0.0.1: "):
        asyncio.run(scenario())
