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
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from sshd_fixture import start_sshd

from kubesmith.backends.relay import OPERATOR, Link, RelayError, distribute
from kubesmith.node.receive import Expected, expected_document, load_expected, receive
from kubesmith.transport.ssh import SshOptions, SshTransport

NODES = sorted(f"n{i}" for i in range(1, 13))


class Wire:
    """Transfers that take `seconds` each, fail where `broken` says, and note how busy each source got."""

    def __init__(self, seconds: float = 0.01, broken: frozenset[str] = frozenset(), dies_after: dict[str, int] | None
                 = None) -> None:
        self.seconds, self.broken, self.dies_after = seconds, broken, dies_after or {}
        self.busy: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.served: dict[str, int] = {}
        self.sent: list[tuple[str, str]] = []

    async def __call__(self, source: str, target: str) -> None:
        self.busy[source] = self.busy.get(source, 0) + 1
        self.peak[source] = max(self.peak.get(source, 0), self.busy[source])
        try:
            await asyncio.sleep(self.seconds)
            if target in self.broken or source in self.broken:
                raise ConnectionError(f"{source} -> {target}: connection lost")
            if source in self.dies_after and self.served.get(source, 0) >= self.dies_after[source]:
                raise ConnectionError(f"{source} rebooted")
            self.served[source] = self.served.get(source, 0) + 1
            self.sent.append((source, target))
        finally:
            self.busy[source] -= 1


def test_the_release_leaves_this_machine_once_and_no_host_serves_more_than_fanout_at_once() -> None:
    wire = Wire()
    lines: list[str] = []
    report = asyncio.run(distribute(NODES, [], 2, wire, lines.append))
    assert sorted(report.sources) == NODES and report.left == [] and report.failures == []
    assert report.from_operator == 1 and [s for s, _ in wire.sent].count(OPERATOR) == 1
    assert max(wire.peak.values()) <= 2
    assert sorted(t for _, t in wire.sent) == NODES  # each host got it once
    assert lines[-1] == "relay 12/12 hosts, 0 relaying"
    # a tree, not a chain: with fanout 2, twelve hosts are served in about log3(12) rounds, not 12
    assert len({s for s, _ in wire.sent}) >= 4


def test_hosts_that_hold_the_release_serve_and_this_machine_sends_nothing() -> None:
    wire = Wire()
    report = asyncio.run(distribute(NODES, ["n1", "n2"], 3, wire))
    assert report.from_operator == 0 and "n1" not in report.sources and sorted(report.sources) == sorted(set(NODES) - {"n1", "n2"})


def test_the_hosts_a_rebooted_relay_served_get_the_release_from_another() -> None:
    """n1 is the seed and dies after serving one host: the hosts it was serving go to other holders."""
    wire = Wire(dies_after={"n1": 1})
    report = asyncio.run(distribute(NODES, [], 2, wire))
    assert sorted(report.sources) == NODES and report.left == []
    assert any(source == "n1" for source, _, _ in report.failures)
    assert report.from_operator == 1  # the other hosts had it: no second seed from this machine


def test_a_host_no_one_can_reach_is_left_to_the_upload_after_three_sources() -> None:
    wire = Wire(broken=frozenset({"n5"}))
    report = asyncio.run(distribute(NODES, [], 2, wire))
    assert report.left == ["n5"] and "n5" not in report.sources
    assert len([f for f in report.failures if f[1] == "n5"]) == 3
    assert sorted(report.sources) == sorted(set(NODES) - {"n5"})


def test_when_the_seed_fails_this_machine_seeds_another_host() -> None:
    wire = Wire(broken=frozenset({"n1"}))
    report = asyncio.run(distribute(NODES, [], 2, wire))
    assert report.left == ["n1"] and report.from_operator == 1
    assert [f[:2] for f in report.failures][0] == (OPERATOR, "n1")


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


def kubesmith(*args: str, input: bytes) -> subprocess.CompletedProcess[str]:
    """The command in a child process, as the relay's forced command runs it: the stream on its stdin."""
    result = subprocess.run([sys.executable, "-c", "from kubesmith.cli import main; main()", *args], input=input,
                            capture_output=True, timeout=120)
    return subprocess.CompletedProcess(result.args, result.returncode, result.stdout.decode(), result.stderr.decode())


def _tar(source: Path, *names: str) -> bytes:
    return subprocess.run(["tar", "-C", str(source), "-cf", "-", *names], capture_output=True, check=True).stdout


def test_a_real_tar_stream_is_placed_file_by_file_with_its_mode(tmp_path: Path) -> None:
    source, expected = _release(tmp_path)
    root = tmp_path / "root"
    received = receive(io.BytesIO(_tar(source, "opt/rel/kubelet", "opt/rel/version")), expected, root)
    assert received.complete and sorted(received.placed) == sorted(expected)
    for path, want in expected.items():
        placed = root / path.lstrip("/")
        assert hashlib.sha256(placed.read_bytes()).hexdigest() == want.sha256
        assert placed.stat().st_mode & 0o777 == 0o755
    assert not [p for p in (root / "opt/rel").iterdir() if ".kstmp-" in p.name]


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
    assert received.placed == ["/opt/rel/version"] and not received.complete
    assert not (root / "opt/rel/kubelet").exists() and not (root / "opt/rel/extra").exists()
    assert not (root / "etc/passwd").exists()
    assert not [p for p in (root / "opt/rel").iterdir() if ".kstmp-" in p.name]


def test_a_stream_cut_mid_file_places_what_came_whole_and_names_the_rest(tmp_path: Path) -> None:
    source, expected = _release(tmp_path)
    stream = _tar(source, "opt/rel/version", "opt/rel/kubelet")
    root = tmp_path / "root"
    received = receive(io.BytesIO(stream[: len(stream) // 2]), expected, root)
    assert received.placed == ["/opt/rel/version"] and received.missing == ["/opt/rel/kubelet"]
    assert not (root / "opt/rel/kubelet").exists()
    assert not [p for p in (root / "opt/rel").iterdir() if ".kstmp-" in p.name]


def test_the_command_places_a_stream_and_exits_5_naming_what_it_refused(tmp_path: Path) -> None:
    source, expected = _release(tmp_path)
    expect_file = tmp_path / "expected.json"
    expect_file.write_bytes(expected_document(expected))
    assert load_expected(expect_file) == expected
    root = tmp_path / "root"
    good = kubesmith("relay", "receive", "--expect", str(expect_file), "--root", str(root),
                     input=_tar(source, "opt/rel/kubelet", "opt/rel/version"))
    assert good.returncode == 0, good.stderr
    assert sorted(json.loads(good.stdout)["placed"]) == sorted(expected)
    bad = kubesmith("relay", "receive", "--expect", str(expect_file), "--root", str(tmp_path / "other"),
                    input=_tar(source, "opt/rel/version"))
    assert bad.returncode == 5
    assert "/opt/rel/kubelet: not in the stream" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("content", ["", "[]", '{"/x": {"sha256": "ab"}}', "{"])
def test_a_broken_expected_list_is_one_clear_error(tmp_path: Path, content: str) -> None:
    expect_file = tmp_path / "expected.json"
    expect_file.write_text(content)
    result = kubesmith("relay", "receive", "--expect", str(expect_file), "--root", str(tmp_path / "root"),
                       input=b"")
    assert result.returncode == 5 and "not a list of expected files" in result.stderr
    assert "Traceback" not in result.stderr


def test_one_host_passes_files_to_another_over_ssh_with_a_key_that_can_do_nothing_else(tmp_path: Path) -> None:
    """A real sshd plays both hosts: the relaying one runs tar | ssh with the apply's key, the receiving
    one's authorized_keys forces `relay receive`. A changed byte is refused; the key leaves with close()."""
    (tmp_path / "sshd").mkdir()
    with start_sshd(tmp_path / "sshd") as sshd:
        authorized = tmp_path / "sshd/authorized_keys"
        before = authorized.read_text()
        source, expected = _release(tmp_path)
        expected = {str(source) + path: dataclasses.replace(want, path=str(source) + path)
                    for path, want in expected.items()}
        root = tmp_path / "received"
        receive_command = (f"env PYTHONPATH={Path(__file__).resolve().parents[1] / 'src'} {sys.executable} -c "
                           f"'from kubesmith.cli import main; main()' relay receive --root {root}")
        options = SshOptions(port=sshd.port, known_hosts=sshd.known_hosts, identity_files=(sshd.identity,))

        async def relay() -> tuple[str, str]:
            async with SshTransport(options) as transport:
                link = Link(transport, {"a": "127.0.0.1", "b": "127.0.0.1"}, receive=receive_command,
                            authorized_keys=str(authorized), ssh_port=sshd.port)
                try:
                    await link.expect("b", expected)
                    await link.send("a", "b", sorted(expected))
                    # the key itself: whatever is asked, the forced command answers (no shell, no file read)
                    other = await transport.run("127.0.0.1", shlex.join([
                        "ssh", "-F", "/dev/null", "-i", f"{link.directory}/key", "-o", "BatchMode=yes",
                        "-o", f"UserKnownHostsFile={link.directory}/known_hosts.b", "-p", str(sshd.port),
                        "root@127.0.0.1", "cat /etc/shadow"]) + " < /dev/null")
                    kubelet = next(path for path in expected if path.endswith("/kubelet"))
                    data = bytearray(Path(kubelet).read_bytes())
                    data[7] ^= 1
                    Path(kubelet).write_bytes(bytes(data))
                    (root / kubelet.lstrip("/")).unlink()
                    with pytest.raises(RelayError) as refused:
                        await link.send("a", "b", sorted(expected))
                    return other.stdout + other.stderr, str(refused.value)
                finally:
                    await link.close(["a", "b"])

        said, refused = asyncio.run(relay())
        for path, want in expected.items():
            if not path.endswith("/kubelet"):
                assert hashlib.sha256((root / path.lstrip("/")).read_bytes()).hexdigest() == want.sha256
        assert "root:" not in said and "not in the stream" in said
        assert "a -> b: relay failed (5)" in refused and "is expected: not placed" in refused
        assert not (root / next(p for p in expected if p.endswith("/kubelet")).lstrip("/")).exists()
        assert authorized.read_text() == before
        assert not Path("/run/kubesmith/relay").exists() or not any(Path("/run/kubesmith/relay").iterdir())
