"""Relaying the release: the schedule of who sends to whom, and the receiving end's checks.

The schedule is run with a transfer function that only sleeps and fails where a test says (the
schedule is what is under test; bytes move in the receiver tests, through real GNU tar streams).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import io
import json
import os
import random
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from lab_fixture import LabHosts
from polling import poll
from sshd_fixture import start_sshd

from kubesmith import fsutil, layout
from kubesmith.backends.relay import (AUTO_FANOUT, KEY_MARK, OPERATOR, RELAY_DIR, Link, RelayError, distribute,
                                      fanout_for, relay_release)
from kubesmith.backends.tally import FLEET_HOSTS
from kubesmith.hostfile import HostFile
from kubesmith.node import receive as receiving
from kubesmith.node.receive import TEMP_MARKER, Expected, expected_document, load_expected, receive
from kubesmith.transport import ssh
from kubesmith.transport.ssh import SshOptions, SshTransport

NODES = sorted(f"n{i}" for i in range(1, 13))
RELEASE = frozenset({"/r/kubelet", "/r/kube-proxy", "/r/runtime.tar"})
CONTROL = frozenset({"/r/kube-apiserver", "/r/etcd"})


# Why a stand-in: a lost connection to a chosen host, or a relay that dies after exactly N sends, cannot be
# made to happen on demand across twelve real hosts; real tar streams and a real mid-send reboot are below.
class Wire:
    """Transfers that take `seconds` each, fail where `broken` says, and note how busy each source got."""

    def __init__(self, seconds: float = 0.01, broken: frozenset[str] = frozenset(),
                 dies_after: dict[str, int] | None = None) -> None:
        self.seconds, self.broken, self.dies_after = seconds, broken, dies_after or {}
        self.busy: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.served: dict[str, int] = {}
        self.sent: list[tuple[str, str, frozenset[str]]] = []

    async def __call__(self, source: str, target: str, files: frozenset[str]) -> frozenset[str]:
        self.busy[source] = self.busy.get(source, 0) + 1
        self.peak[source] = max(self.peak.get(source, 0), self.busy[source])
        try:
            await asyncio.sleep(self.seconds)
            if target in self.broken or source in self.broken:
                raise ConnectionError(f"{source} -> {target}: connection lost")
            if source in self.dies_after and self.served.get(source, 0) >= self.dies_after[source]:
                raise ConnectionError(f"{source} rebooted")
            self.served[source] = self.served.get(source, 0) + 1
            self.sent.append((source, target, files))
            return files
        finally:
            self.busy[source] -= 1

    def operator_bytes(self) -> int:
        """Files the operator's machine sent, counted once per target."""
        return sum(len(files) for source, _, files in self.sent if source == OPERATOR)


def test_each_file_leaves_this_machine_once_and_no_host_serves_more_than_fanout_at_once() -> None:
    wire = Wire()
    lines: list[str] = []
    report = asyncio.run(distribute(dict.fromkeys(NODES, RELEASE), {}, 2, wire, lines.append))
    assert report.left == {} and report.failures == []
    assert all(set(report.received[node]) == RELEASE for node in NODES)
    assert wire.operator_bytes() == len(RELEASE) and report.from_operator == len(RELEASE)
    assert max(wire.peak.values()) <= 2
    assert lines[-1] == "release relay 12/12 hosts, 0 relaying"
    # a tree, not a chain: with fanout 2 many hosts serve
    assert len({source for source, _, _ in wire.sent}) >= 4


def test_hosts_that_want_different_files_share_what_they_have_in_common() -> None:
    """Control-plane hosts want the API server and etcd as well: the node files they share come from
    the nodes, and only the control-plane files come from this machine, once."""
    want = {**dict.fromkeys(NODES[:9], RELEASE), **dict.fromkeys(NODES[9:], RELEASE | CONTROL)}
    wire = Wire()
    report = asyncio.run(distribute(want, {}, 2, wire))
    assert report.left == {} and all(set(report.received[n]) == want[n] for n in NODES)
    assert wire.operator_bytes() == len(RELEASE | CONTROL)


def test_hosts_that_hold_the_files_serve_and_this_machine_sends_nothing() -> None:
    wire = Wire()
    report = asyncio.run(distribute(dict.fromkeys(NODES[2:], RELEASE), dict.fromkeys(NODES[:2], RELEASE), 3, wire))
    assert report.from_operator == 0 and sorted(report.received) == NODES[2:] and report.left == {}


def test_the_hosts_a_rebooted_relay_served_get_the_files_from_another() -> None:
    """The first host to get the files dies after serving one host: the hosts it was serving are
    served by others, and this machine does not send again (other hosts hold the files)."""
    wire = Wire(dies_after={NODES[0]: 1})
    report = asyncio.run(distribute(dict.fromkeys(NODES, RELEASE), {}, 2, wire))
    assert report.left == {} and all(set(report.received[n]) == RELEASE for n in NODES)
    assert any(source == NODES[0] for source, _, _ in report.failures)
    assert wire.operator_bytes() == len(RELEASE)


def test_a_host_no_one_can_reach_is_left_to_the_upload_after_three_failures() -> None:
    wire = Wire(broken=frozenset({"n5"}))
    report = asyncio.run(distribute(dict.fromkeys(NODES, RELEASE), {}, 2, wire))
    assert report.left == {"n5": RELEASE}
    assert len([f for f in report.failures if f[1] == "n5"]) == 3
    assert sorted(report.received) == sorted(set(NODES) - {"n5"})


def test_when_the_seed_fails_this_machine_seeds_another_host() -> None:
    wire = Wire(broken=frozenset({NODES[0]}))
    report = asyncio.run(distribute(dict.fromkeys(NODES, RELEASE), {}, 2, wire))
    assert report.left == {NODES[0]: RELEASE} and wire.operator_bytes() == len(RELEASE)
    assert report.failures[0][:2] == (OPERATOR, NODES[0])



def test_hosts_that_cannot_reach_each_other_stop_the_relay_after_three_tries() -> None:
    """A firewall between the hosts: after three host-to-host failures and no success, relaying stops
    and the other hosts are left to the upload, instead of each waiting out its timeouts."""
    async def walled(source: str, target: str, files: frozenset[str]) -> frozenset[str]:
        await asyncio.sleep(0.01)
        if source != OPERATOR:
            raise ConnectionError(f"{source} -> {target}: connection timed out")
        return files

    report = asyncio.run(distribute(dict.fromkeys(NODES, RELEASE), {}, 2, walled))
    # the seed's two tries fail at once, a second seed's first try ends it: at most two hosts got the files
    assert len(report.received) <= 2 and len(report.received) + len(report.left) == len(NODES)
    assert all(source == OPERATOR for got in report.received.values() for source in got.values())
    assert 3 <= len(report.failures) <= 4  # the third ends it; a fourth may already be on its way

def test_a_partial_transfer_keeps_what_was_placed_and_gets_the_rest_elsewhere() -> None:
    async def half(source: str, target: str, files: frozenset[str]) -> frozenset[str]:
        await asyncio.sleep(0.01)
        return frozenset(sorted(files)[:1]) if source != OPERATOR and target == "n3" and len(files) > 1 else files

    report = asyncio.run(distribute(dict.fromkeys(NODES, RELEASE), {}, 2, half))
    assert report.left == {} and set(report.received["n3"]) == RELEASE
    assert any(target == "n3" and "placed 1 of" in why for _, target, why in report.failures)


def _release(tmp_path: Path) -> tuple[Path, dict[str, Expected]]:
    """Two files under <source>/opt/rel: a 3 MB binary and a small one, and what is expected of them."""
    source = tmp_path / "source"
    (source / "opt/rel").mkdir(parents=True)
    files = {"opt/rel/kubelet": os.urandom(3 << 20), "opt/rel/version": b"v1.36.2\n"}
    expected = {}
    for name, data in files.items():
        (source / name).write_bytes(data)
        expected[f"/{name}"] = Expected(f"/{name}", hashlib.sha256(data).hexdigest(), len(data), 0o755, "root", "root")
    return source, expected


def receiver(*args: str, input: bytes) -> subprocess.CompletedProcess[str]:
    """The receiver as the relay key's forced command runs it: the file alone, isolated (-I), with
    the stream on its stdin (it needs nothing of kubesmith installed)."""
    result = subprocess.run([sys.executable, "-I", receiving.__file__, *args], input=input, capture_output=True,
                            timeout=120)
    return subprocess.CompletedProcess(result.args, result.returncode, result.stdout.decode(), result.stderr.decode())


def _tar(source: Path, *names: str) -> bytes:
    return subprocess.run(["tar", "-C", str(source), "-cf", "-", *names], capture_output=True, check=True).stdout


def test_a_real_tar_stream_is_placed_file_by_file_with_its_mode(tmp_path: Path) -> None:
    source, expected = _release(tmp_path)
    root = tmp_path / "root"
    received = receive(io.BytesIO(_tar(source, "opt/rel/kubelet", "opt/rel/version")), expected, root)
    assert received.ok and sorted(received.placed) == sorted(expected)
    for path, want in expected.items():
        placed = root / path.lstrip("/")
        assert hashlib.sha256(placed.read_bytes()).hexdigest() == want.sha256
        assert placed.stat().st_mode & 0o777 == 0o755
    assert not [p for p in (root / "opt/rel").iterdir() if TEMP_MARKER in p.name]


def test_a_changed_byte_an_unexpected_file_and_a_symlink_are_refused_and_nothing_of_them_placed(
        tmp_path: Path) -> None:
    source, expected = _release(tmp_path)
    data = bytearray((source / "opt/rel/kubelet").read_bytes())
    data[1000] ^= 1
    (source / "opt/rel/kubelet").write_bytes(bytes(data))
    (source / "opt/rel/extra").write_bytes(b"#!/bin/sh\n")
    (source / "etc").mkdir()
    (source / "etc/passwd").symlink_to("/etc/shadow")
    expected["/etc/passwd"] = Expected("/etc/passwd", "0" * 64, 0, 0o644, "root", "root")
    root = tmp_path / "root"
    stream = _tar(source, "opt/rel/kubelet", "opt/rel/version", "opt/rel/extra", "etc/passwd")
    received = receive(io.BytesIO(stream), expected, root)
    refused = dict(received.refused)
    assert "is expected: not placed" in refused["opt/rel/kubelet"]
    assert refused["opt/rel/extra"] == "not among the expected files"
    assert refused["etc/passwd"] == "not a regular file"
    assert received.placed == ["/opt/rel/version"] and not received.ok
    assert not (root / "opt/rel/kubelet").exists() and not (root / "opt/rel/extra").exists()
    assert not (root / "etc/passwd").exists()
    assert not [p for p in (root / "opt/rel").iterdir() if TEMP_MARKER in p.name]


def test_a_stream_cut_mid_file_places_what_came_whole_and_refuses_the_rest(tmp_path: Path) -> None:
    source, expected = _release(tmp_path)
    stream = _tar(source, "opt/rel/version", "opt/rel/kubelet")
    root = tmp_path / "root"
    received = receive(io.BytesIO(stream[: len(stream) // 2]), expected, root)
    assert received.placed == ["/opt/rel/version"] and received.missing == ["/opt/rel/kubelet"]
    assert not received.ok and received.refused[0][0] == "(stream)"
    assert not (root / "opt/rel/kubelet").exists()
    assert not [p for p in (root / "opt/rel").iterdir() if TEMP_MARKER in p.name]


def test_the_receiver_runs_alone_takes_part_of_a_list_and_exits_5_naming_what_it_refused(tmp_path: Path) -> None:
    source, expected = _release(tmp_path)
    expect_file = tmp_path / "expected.json"
    expect_file.write_bytes(expected_document(expected))
    assert load_expected(expect_file) == expected
    root = tmp_path / "root"
    part = receiver("--expect", str(expect_file), "--root", str(root), input=_tar(source, "opt/rel/version"))
    assert part.returncode == 0, part.stderr
    assert json.loads(part.stdout) == {"placed": ["/opt/rel/version"], "refused": [], "missing": ["/opt/rel/kubelet"],
                                       "stream": "tar"}
    (source / "opt/rel/kubelet").write_bytes(b"not the binary")
    bad = receiver("--expect", str(expect_file), "--root", str(root), input=_tar(source, "opt/rel/kubelet"))
    assert bad.returncode == 5 and "refused opt/rel/kubelet: 14 bytes where" in bad.stderr
    assert "Traceback" not in bad.stderr


def _compressible_release(tmp_path: Path) -> tuple[Path, Path, dict[str, Expected]]:
    """_release with a binary that compresses as release binaries do (repeated runs), its expected list
    written where the receiver reads it."""
    source, expected = _release(tmp_path)
    data = random.Random(35).randbytes(64 << 10) * 48
    (source / "opt/rel/kubelet").write_bytes(data)
    expected["/opt/rel/kubelet"] = dataclasses.replace(expected["/opt/rel/kubelet"], size=len(data),
                                                       sha256=hashlib.sha256(data).hexdigest())
    expect_file = tmp_path / "expected.json"
    expect_file.write_bytes(expected_document(expected))
    return source, expect_file, expected


def _zstd(data: bytes) -> bytes:
    return subprocess.run(["zstd", "-1", "-T0", "-q", "-c"], input=data, capture_output=True, check=True).stdout


def _placed_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_a_zstd_stream_is_decompressed_by_the_hosts_zstd_and_checked_member_by_member(tmp_path: Path) -> None:
    source, expect_file, expected = _compressible_release(tmp_path)
    stream = _zstd(_tar(source, "opt/rel/kubelet", "opt/rel/version"))
    assert len(stream) < 200_000  # 3 MB of repeated runs: the receiver did get a compressed stream
    root = tmp_path / "root"
    result = receiver("--expect", str(expect_file), "--root", str(root), input=stream)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"placed": ["/opt/rel/kubelet", "/opt/rel/version"], "refused": [],
                                         "missing": [], "stream": "zstd"}
    for path, want in expected.items():
        assert hashlib.sha256((root / path.lstrip("/")).read_bytes()).hexdigest() == want.sha256
    # a well-formed stream of a changed file: the member's digest is checked as in a plain stream
    (source / "opt/rel/version").write_bytes(b"v1.36.3\n")
    changed = receiver("--expect", str(expect_file), "--root", str(tmp_path / "changed"),
                       input=_zstd(_tar(source, "opt/rel/version")))
    assert changed.returncode == 5 and "refused opt/rel/version: sha256 " in changed.stderr
    assert _placed_files(tmp_path / "changed") == []


@pytest.mark.parametrize("where", ["header", "middle", "end"])
def test_a_corrupted_zstd_stream_is_refused_with_nothing_placed(tmp_path: Path, where: str) -> None:
    source, expect_file, _ = _compressible_release(tmp_path)
    stream = bytearray(_zstd(_tar(source, "opt/rel/kubelet", "opt/rel/version")))
    stream[{"header": 5, "middle": len(stream) // 2, "end": len(stream) - 2}[where]] ^= 0x40
    root = tmp_path / "root"
    result = receiver("--expect", str(expect_file), "--root", str(root), input=bytes(stream))
    assert result.returncode == 5 and "Traceback" not in result.stderr
    said = json.loads(result.stdout)
    assert said["stream"] == "zstd" and "refused (stream): zstd -d failed (1): " in result.stderr
    assert "/opt/rel/kubelet" not in said["placed"]
    assert _placed_files(root) == [f.lstrip("/") for f in said["placed"]] == [], result.stderr


def test_a_zstd_stream_to_a_host_without_zstd_is_refused_in_one_line(tmp_path: Path) -> None:
    source, expect_file, _ = _compressible_release(tmp_path)
    root = tmp_path / "root"
    result = subprocess.run([sys.executable, "-I", receiving.__file__, "--expect", str(expect_file), "--root",
                             str(root)], input=_zstd(_tar(source, "opt/rel/version")), capture_output=True,
                            env={"PATH": str(tmp_path / "no-programs")}, timeout=60, check=False)
    assert result.returncode == 5
    assert result.stderr.decode() == "refused (stream): the stream is zstd-compressed and this host has no zstd\n"
    assert _placed_files(root) == []


@pytest.mark.parametrize("content", ["", "[]", '{"/x": {"sha256": "ab"}}', "{"])
def test_a_broken_expected_list_is_one_clear_error(tmp_path: Path, content: str) -> None:
    expect_file = tmp_path / "expected.json"
    expect_file.write_text(content)
    result = receiver("--expect", str(expect_file), "--root", str(tmp_path / "root"), input=b"")
    assert result.returncode == 5 and "not a list of expected files" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_receiver_leaves_temp_files_as_apply_cleans_them_up() -> None:
    assert TEMP_MARKER == fsutil.TEMP_MARKER == ssh.TEMP_MARK


def test_one_host_passes_files_to_another_over_ssh_with_a_key_that_can_do_nothing_else(tmp_path: Path) -> None:
    """A real sshd plays both hosts (one root directory): the relaying one runs tar | ssh with the apply's
    key, the receiving one's authorized_keys forces the receiver. A changed byte is refused; the key can
    read nothing; close() takes it out again."""
    (tmp_path / "sshd").mkdir()
    with start_sshd(tmp_path / "sshd") as sshd:
        authorized = tmp_path / "sshd/authorized_keys"
        before = authorized.read_text()
        # what an apply killed mid-relay left: a key line and a directory of its own
        stale_key = ('restrict,command="true" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGdeadbeef '
                     "kubesmith-relay:0badc0ffee\n")
        authorized.write_text(before + stale_key)
        Path(RELAY_DIR, "0badc0ffee").mkdir(parents=True, exist_ok=True)
        root, expected = _release(tmp_path)
        options = SshOptions(port=sshd.port, known_hosts=sshd.known_hosts, identity_files=(sshd.identity,))

        async def relay() -> tuple[frozenset[str], str, str]:
            async with SshTransport(options) as transport:
                link = Link(transport, {"a": "127.0.0.1", "b": "127.0.0.1"}, python=sys.executable,
                            authorized_keys=str(authorized), root=str(root), ssh_port=sshd.port)
                try:
                    await link.expect("b", expected)
                    placed = await link.send("a", "b", frozenset(expected))
                    # the key itself: whatever is asked, the forced command answers (no shell, no file read)
                    other = await transport.run("127.0.0.1", shlex.join([
                        "ssh", "-F", "/dev/null", "-i", f"{link.directory}/key", "-o", "BatchMode=yes",
                        "-o", f"UserKnownHostsFile={link.directory}/known_hosts.b",
                        "-o", f"HostKeyAlias={KEY_MARK}.b", "-p", str(sshd.port),
                        "root@127.0.0.1", "cat /etc/shadow"]) + " < /dev/null")
                    data = bytearray((root / "opt/rel/kubelet").read_bytes())
                    data[7] ^= 1
                    (root / "opt/rel/kubelet").write_bytes(bytes(data))
                    with pytest.raises(RelayError) as refused:
                        await link.send("a", "b", frozenset(expected))
                    return placed, other.stdout + other.stderr, str(refused.value)
                finally:
                    await link.close(["a", "b"])

        placed, said, refused = asyncio.run(relay())
        assert placed == frozenset(expected)
        assert "root:" not in said and '"placed": []' in said
        assert "a -> b: relay failed (5)" in refused and "is expected: not placed" in refused
        assert authorized.read_text() == before
        assert not Path(RELAY_DIR).exists() or not any(Path(RELAY_DIR).iterdir())


def test_hosts_that_both_have_zstd_relay_compressed_and_plain_when_either_lacks_it(tmp_path: Path) -> None:
    """A real sshd plays both hosts. Both have zstd: the stream is compressed. The receiving host lacks it
    (as the operator's probe finds): plain tar. The relaying host lacks it (its own `command -v` in the
    relay command): plain tar. The same files are placed every time."""
    (tmp_path / "sshd").mkdir()
    with start_sshd(tmp_path / "sshd") as sshd:
        authorized = tmp_path / "sshd/authorized_keys"
        before = authorized.read_text()
        root, expected = _release(tmp_path)
        options = SshOptions(port=sshd.port, known_hosts=sshd.known_hosts, identity_files=(sshd.identity,))
        addresses = {"a": "127.0.0.1", "b": "127.0.0.1"}

        async def relay(zstd: str, relaying_zstd: str) -> tuple[frozenset[str], str, bool]:
            async with SshTransport(options) as transport:
                link = Link(transport, addresses, python=sys.executable, authorized_keys=str(authorized),
                            root=str(root), ssh_port=sshd.port, zstd=zstd)
                try:
                    await link.expect("b", expected)
                    # the relaying host's own zstd: the same host here, so a name it lacks stands for its absence
                    sender = dataclasses.replace(link, zstd=relaying_zstd)
                    placed = await sender.send("a", "b", frozenset(expected))
                    return placed, link.streams["a", "b"], link.decompresses["b"]
                finally:
                    await link.close(["a", "b"])

        absent = "zstd-not-installed"
        assert asyncio.run(relay("zstd", "zstd")) == (frozenset(expected), "zstd", True)
        assert asyncio.run(relay(absent, absent)) == (frozenset(expected), "tar", False)
        assert asyncio.run(relay("zstd", absent)) == (frozenset(expected), "tar", True)
        assert authorized.read_text() == before


@pytest.mark.lab
@pytest.mark.slow
def test_lab_hosts_pass_release_files_on_with_their_own_ssh_sshd_and_python(lab_hosts: LabHosts) -> None:
    """Real hosts, as apply meets them: root's own authorized_keys, each host's ssh client, sshd and
    python3. h1 holds two files of a release directory; the other hosts get them from hosts only, and
    every host is left as it was (authorized_keys, no relay files)."""
    names = lab_hosts.names
    files = [HostFile(f"{layout.RELEASES}/relay-test/{name}", 0o755, "root", "root", os.urandom(size))
             for name, size in (("big", 24 << 20), ("small", 4096))]
    options = SshOptions(config_file=lab_hosts.ssh_config, known_hosts=lab_hosts.config.known_hosts,
                         identity_files=(lab_hosts.config.client_key,))
    addresses = {name: lab_hosts.address(name) for name in names}
    keys_before = {name: lab_hosts.ssh(name, "cat /root/.ssh/authorized_keys").stdout for name in names}
    lines: list[str] = []

    async def run() -> tuple[dict[str, frozenset[str]], dict[str, dict[str, str | None]]]:
        async with SshTransport(options) as transport:
            try:
                await transport.upload(addresses[names[0]], files)
                placed = await relay_release(transport, dict.fromkeys(names[1:], files), {names[0]: files},
                                             addresses, 1, lines.append)
                hashes = {name: await transport.hashes(addresses[name], [f.path for f in files]) for name in names}
                return placed, hashes
            finally:
                await asyncio.gather(*(transport.run(address, f"rm -rf {layout.RELEASES}/relay-test")
                                       for address in addresses.values()))

    placed, hashes = asyncio.run(run())
    assert placed == dict.fromkeys(names[1:], frozenset(f.path for f in files)), lines
    assert all(hashes[name] == {f.path: f.sha256 for f in files} for name in names)
    targets = len(names) - 1
    assert f"release relay: {targets}/{targets} hosts done, {2 * targets} files passed on by hosts, 0 sent from here" \
        in lines, lines
    # the lab image has no zstd (nor have many real hosts): the plain stream, nothing failed for it
    assert f"release relay: 0/{targets} host-to-host streams zstd-compressed" in lines, lines
    for name in names:
        assert lab_hosts.ssh(name, "cat /root/.ssh/authorized_keys").stdout == keys_before[name]
        assert lab_hosts.ssh(name, f"ls -A {RELAY_DIR}", check=False).stdout.strip() == ""


FAULT_DIR = f"{layout.RELEASES}/relay-fault"
STOP_AFTER = 8 << 20  # bytes the relaying tar has read when it is frozen: well into the first file
# The relay's own link, shaped while it sends: unshaped, its 80 MB went in well under a second, and CI once
# saw the tar gone before it could be frozen. At 8 MB/s the freeze lands ~1 s in with ~9 s to spare.
RELAY_LINK = ["tc", "qdisc", "replace", "dev", "host0", "root", "tbf", "rate", "64mbit", "burst", "256kb",
              "latency", "100ms"]


class RebootsTheRelay(SshTransport):
    """The real transport, and the fault: when `relay` starts its `tar | ssh` to another host, a thread
    freezes that tar once bytes flow (the receiver holds a half-written temp file) and reboots `relay`."""

    def __init__(self, options: SshOptions, lab: LabHosts, relay: str) -> None:
        super().__init__(options)
        self.lab, self.relay = lab, relay
        self.fault: asyncio.Future[tuple[str, int, str]] | None = None  # (target, bytes read, temp file seen)

    async def run(self, host: str, command: str | Sequence[str], input: str | None = None,
                  timeout: float | None = 120.0) -> ssh.CommandResult:
        sending = isinstance(command, str) and command.startswith("tar ")
        if self.fault is None and sending and host == self.lab.address(self.relay):
            assert isinstance(command, str)
            address = command.rsplit("@", 1)[1]
            target = next(name for name in self.lab.names if self.lab.address(name) == address)
            await asyncio.to_thread(self.lab.exec, self.relay, RELAY_LINK)  # gone with the reboot's new veth
            running = asyncio.ensure_future(super().run(host, command, input, timeout))
            self.fault = asyncio.ensure_future(asyncio.to_thread(self._reboot_mid_send, target))
            return await running
        return await super().run(host, command, input, timeout)

    def _reboot_mid_send(self, target: str) -> tuple[str, int, str]:
        """Freeze the relay's tar mid-file, see the target's temp file, reboot the relay."""
        find = ("for pid in $(pgrep -x tar); do grep -q relay-fault /proc/$pid/cmdline && "
                "echo $pid $(sed -n 's/^rchar: //p' /proc/$pid/io); done")
        end = time.monotonic() + 60
        while True:  # polls fast on purpose: the tar reads the files in a second or two
            found = self.lab.exec(self.relay, find, check=False).stdout.split()
            if len(found) == 2 and int(found[1]) >= STOP_AFTER:
                break
            assert time.monotonic() < end, f"{self.relay}'s relaying tar never read {STOP_AFTER} bytes"
            time.sleep(0.02)
        pid = found[0]
        self.lab.exec(self.relay, ["kill", "-STOP", pid])
        try:
            read = int(self.lab.exec(self.relay, ["sed", "-n", "s/^rchar: //p", f"/proc/{pid}/io"]).stdout)
            temp = poll(lambda: next((name for name in self.lab.exec(target, ["ls", "-A", FAULT_DIR]).stdout.split()
                                      if TEMP_MARKER in name), None), 30, f"a temp file of the relay on {target}",
                        interval=0.05)
        except BaseException:  # no reboot then: a frozen tar would hold the relay for SEND_TIMEOUT
            self.lab.exec(self.relay, ["kill", "-CONT", pid], check=False)
            raise
        self.lab.reboot(self.relay)
        self.lab.exec(self.relay, ["tc", "qdisc", "del", "dev", "host0", "root"], check=False)  # if it outlived it
        return target, read, temp


def _lacking(hashes: dict[str, dict[str, str | None]], files: list[HostFile]) -> dict[str, list[HostFile]]:
    return {name: [f for f in files if held.get(f.path) != f.sha256] for name, held in hashes.items()}


@pytest.mark.lab
@pytest.mark.slow
def test_lab_a_relaying_host_rebooted_mid_send_leaves_its_targets_to_others_and_the_next_relay_converges(
        lab_hosts: LabHosts) -> None:
    """h1 seeds the first target (fanout 1), which then relays: its tar is frozen mid-file and it
    reboots. Its target gets the files from another host, never a half file; the failure and the key
    line the rebooted host keeps are reported, not raised (the relay's placements stand). The next
    relay of the same release has nothing to do; a later relay to that host removes the stale line.
    The relay is h4, a node only: when the shared cluster runs, the reboot restarts none of its etcd
    and API servers, and the modules after this one find it as they left it."""
    names = lab_hosts.names
    seed, relay = names[0], names[-1]
    targets = [relay, *names[1:-1]]  # the schedule serves targets in this order: the relay first
    files = [HostFile(f"{FAULT_DIR}/part-{i}", 0o755, "root", "root", os.urandom(40 << 20)) for i in (1, 2)]
    later = HostFile(f"{FAULT_DIR}/later", 0o644, "root", "root", os.urandom(4096))
    paths = frozenset(f.path for f in files)
    options = SshOptions(config_file=lab_hosts.ssh_config, known_hosts=lab_hosts.config.known_hosts,
                         identity_files=(lab_hosts.config.client_key,))
    addresses = {name: lab_hosts.address(name) for name in names}
    keys_before = {name: lab_hosts.ssh(name, "cat /root/.ssh/authorized_keys").stdout for name in names}
    first: list[str] = []
    second: list[str] = []
    third: list[str] = []

    def keys_and_relay_dirs() -> dict[str, tuple[str, str]]:
        """Each host's authorized_keys and what its relay directory holds, one nsenter each."""
        said = {name: lab_hosts.exec(name, f"cat /root/.ssh/authorized_keys; echo '{RELAY_DIR}:'; "
                                           f"ls -A {RELAY_DIR} 2>/dev/null; true").stdout for name in names}
        return {name: (keys, left.strip()) for name, (keys, _, left) in
                ((name, text.rpartition(f"{RELAY_DIR}:\n")) for name, text in said.items())}

    async def faulted() -> tuple[dict[str, frozenset[str]], tuple[str, int, str]]:
        async with RebootsTheRelay(options, lab_hosts, relay) as transport:
            await transport.upload(addresses[seed], files)
            placed = await relay_release(transport, dict.fromkeys(targets, files), {seed: files}, addresses, 1,
                                         first.append)
            assert transport.fault is not None, f"{relay} never relayed: {first}"
            return placed, await transport.fault

    async def again(wanted: dict[str, list[HostFile]], held: dict[str, list[HostFile]], lines: list[str],
                    seeded: Sequence[HostFile] = ()) -> dict[str, frozenset[str]]:
        """A later apply's relay step, on its own connections (`seeded`: what it first uploads to h1)."""
        async with SshTransport(options) as transport:
            await transport.upload(addresses[seed], seeded)
            return await relay_release(transport, wanted, held, addresses, 1, lines.append)

    async def hashes(of: frozenset[str]) -> dict[str, dict[str, str | None]]:
        async with SshTransport(options) as transport:
            return {name: await transport.hashes(addresses[name], sorted(of)) for name in names}

    try:
        placed, (target, read, temp) = asyncio.run(faulted())
        assert target not in (seed, relay) and STOP_AFTER <= read < sum(len(f.data) for f in files)
        assert temp.startswith(".part-1") and TEMP_MARKER in temp  # the stream stopped in the first file
        # every target holds both files, the rebooted relay too (it had them before it relayed)
        assert placed == dict.fromkeys(targets, paths), first
        after_fault = asyncio.run(hashes(paths))
        assert _lacking(after_fault, files) == {name: [] for name in names}, after_fault
        # served by hosts (the seed or a host it served), never the operator: holders stayed live
        done = f"release relay: {len(targets)}/{len(targets)} hosts done, {len(files) * len(targets)} files passed"
        assert f"{done} on by hosts, 0 sent from here" in first, first
        assert any(line.startswith(f"release relay: {relay} -> {target} failed") for line in first), first
        assert any(line.startswith(f"release relay: {relay}: the relay key stays") for line in first), first
        # no half file: the frozen stream's temp file went with the stream
        for name in names:
            assert lab_hosts.exec(name, ["ls", "-A", FAULT_DIR]).stdout.split() == ["part-1", "part-2"], name
        # the rebooted relay keeps its key line (authorized_keys is on disk), its relay files went with /run
        keys = keys_and_relay_dirs()
        stale = keys[relay][0].removeprefix(keys_before[relay])
        assert stale.startswith("restrict,command=") and f" {KEY_MARK}:" in stale and stale.count("\n") == 1
        assert all(keys[name] == (keys_before[name], "") for name in names if name != relay), keys
        assert keys[relay][1] == ""
        # the next apply: every host holds the release, so its relay step does nothing
        lacking = _lacking(after_fault, files)
        assert asyncio.run(again(lacking, {n: [f for f in files if f not in lacking[n]] for n in names},
                                 second)) == {}
        assert second == [] and keys_and_relay_dirs() == keys
        # a later relay to the rebooted host (a file h1 holds) removes the stale line first
        assert asyncio.run(again({name: [later] for name in targets}, {seed: [later]}, third, [later])) \
            == dict.fromkeys(targets, frozenset({later.path})), third
        assert keys_and_relay_dirs() == {name: (keys_before[name], "") for name in names}
        # the release files stay as hashed above: only the later file is new
        assert asyncio.run(hashes(frozenset({later.path}))) == {name: {later.path: later.sha256} for name in names}
    finally:
        for name in names:
            lab_hosts.exec(name, ["rm", "-rf", FAULT_DIR], check=False)
            lab_hosts.exec(name, "cat > /root/.ssh/authorized_keys", input=keys_before[name], check=False)


@pytest.mark.parametrize("setting, hosts, fanout", [
    (None, 3, 0), (None, FLEET_HOSTS, 0), (None, FLEET_HOSTS + 1, AUTO_FANOUT), (None, 1000, AUTO_FANOUT),
    (0, 1000, 0), (1, 3, 1), (4, 20, 4),
])
def test_unset_relaying_is_on_for_a_fleet_and_off_for_a_few_hosts_and_a_setting_wins(
        setting: int | None, hosts: int, fanout: int) -> None:
    assert fanout_for(setting, hosts) == fanout
