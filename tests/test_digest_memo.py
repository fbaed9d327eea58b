"""Digests remembered between runs (`fsutil.file_sha256` with a memo): apply hashed the 400 MB of a
release's binaries at every run. A remembered digest answers only for the very same file (device,
inode, size, mtime, ctime); anything else is read again, and a memo that is damaged costs only a read."""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from kubesmith import fsutil
from kubesmith.backends import render, runtime_bundle
from kubesmith.hostfile import StreamedFile
from plan_support import plan_of

LIMIT = 1 << 20


def _settled(path: Path, data: bytes) -> Path:
    """`data` written to `path` and settled: its ctime older than the racy window."""
    path.write_bytes(data)
    return path


@pytest.fixture(autouse=True)
def no_racy_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files here are seconds old; the window that keeps a just-changed file out is tested on its own."""
    monkeypatch.setattr(fsutil, "RACY_NS", 0)


def test_a_remembered_digest_answers_without_a_read_and_a_changed_file_is_read_again(tmp_path: Path) -> None:
    memo, binary = tmp_path / "cache" / "digests.json", _settled(tmp_path / "kubelet", b"release one")
    assert fsutil.file_sha256(binary, LIMIT, memo) == hashlib.sha256(b"release one").hexdigest()
    (key,) = json.loads(memo.read_text())
    memo.write_text(json.dumps({key: "remembered"}))  # stands for the digest: proves the file is not read
    assert fsutil.file_sha256(binary, LIMIT, memo) == "remembered"
    assert fsutil.file_sha256(binary, LIMIT) == hashlib.sha256(b"release one").hexdigest()  # no memo: read
    time.sleep(0.01)
    binary.write_bytes(b"release two")  # same size, same inode: its ctime moved
    assert fsutil.file_sha256(binary, LIMIT, memo) == hashlib.sha256(b"release two").hexdigest()
    replacement = _settled(tmp_path / "kubelet.new", b"release one")
    replacement.rename(binary)  # another file at the same path, as apply replaces one
    assert fsutil.file_sha256(binary, LIMIT, memo) == hashlib.sha256(b"release one").hexdigest()


@pytest.mark.parametrize("damage", [b"", b"{not json", b"[1, 2]", b'{"a": 1}', b"\xff\xfe"])
def test_a_damaged_memo_costs_a_read_and_is_written_anew(tmp_path: Path, damage: bytes) -> None:
    memo, binary = tmp_path / "digests.json", _settled(tmp_path / "etcd", b"etcd")
    memo.write_bytes(damage)
    assert fsutil.file_sha256(binary, LIMIT, memo) == hashlib.sha256(b"etcd").hexdigest()
    assert hashlib.sha256(b"etcd").hexdigest() in json.loads(memo.read_text()).values()


def test_a_memo_that_cannot_be_written_still_gives_the_digest(tmp_path: Path) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the memo's directory would be")
    binary = _settled(tmp_path / "kube-proxy", b"proxy")
    assert fsutil.file_sha256(binary, LIMIT, blocker / "digests.json") == hashlib.sha256(b"proxy").hexdigest()


def test_a_file_changed_within_the_racy_window_is_not_remembered(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Timestamps move in ticks: a file rewritten within one tick keeps its key, so a digest of a file
    that changed a moment ago is not kept (as git treats a racily clean entry)."""
    monkeypatch.setattr(fsutil, "RACY_NS", 60_000_000_000)
    memo, binary = tmp_path / "digests.json", _settled(tmp_path / "kubelet", b"fresh")
    assert fsutil.file_sha256(binary, LIMIT, memo) == hashlib.sha256(b"fresh").hexdigest()
    assert not memo.exists()


def test_the_memo_keeps_the_newest_entries_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fsutil, "MEMO_ENTRIES", 3)
    memo = tmp_path / "digests.json"
    for index in range(5):
        fsutil.file_sha256(_settled(tmp_path / f"binary-{index}", f"{index}".encode()), LIMIT, memo)
    assert sorted(json.loads(memo.read_text()).values()) == sorted(
        hashlib.sha256(f"{index}".encode()).hexdigest() for index in (2, 3, 4))


def test_shipped_binaries_are_streamed_and_remembered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What apply ships of a release is streamed from this machine's file (never held whole in memory),
    one instance for every host, with the memo in this machine's cache directory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    plan = plan_of(Path(__file__).resolve().parents[1] / "examples" / "lab.yaml")
    binaries = {name: _settled(tmp_path / name, name.encode()) for name in ("kubelet", "kube-proxy")}
    extras = render._Extras(render.Shipped(binaries=binaries))
    shipped = [[f for f in extras.for_host(plan, host) if isinstance(f, StreamedFile)] for host in plan.hosts[:2]]
    assert [sorted(f.source.name for f in files) for files in shipped] == [["kube-proxy", "kubelet"]] * 2
    assert all(a is b for a, b in zip(*shipped))  # hashed once however many hosts get it
    assert {f.sha256 for f in shipped[0]} == {hashlib.sha256(name.encode()).hexdigest() for name in binaries}
    assert sorted(json.loads((tmp_path / "xdg" / "kubesmith" / "digests.json").read_text()).values()) == sorted(
        f.sha256 for f in shipped[0])


def test_the_runtime_bundle_is_recalled_while_its_files_are_unchanged(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Every apply builds kubesmith's runtime for the hosts from ~1,400 files: it is recalled by the
    files' identities, and built again once one of them changed."""
    sources = {"kubesmith/one.py": _settled(tmp_path / "one.py", b"one = 1\n"),
               "dep/two.py": _settled(tmp_path / "two.py", b"two = 2\n")}
    # Why a stand-in: the real runtime files are the installed kubesmith and its dependencies; a test may
    # not rewrite one of them to show a changed file.
    monkeypatch.setattr(runtime_bundle, "_runtime_files", lambda: dict(sources))
    cache = tmp_path / "cache"
    first = runtime_bundle.build_bundle(cache)
    (kept,) = json.loads((cache / "bundles.json").read_text()).values()
    assert (cache / kept).read_bytes() == first.data
    (cache / kept).write_bytes(b"planted")  # stands for the bundle: proves the files are not read again
    assert runtime_bundle.build_bundle(cache).data == b"planted"
    time.sleep(0.01)
    sources["kubesmith/one.py"].write_bytes(b"one = 3\n")
    third = runtime_bundle.build_bundle(cache)
    with tarfile.open(fileobj=io.BytesIO(third.data)) as tar:
        member = tar.extractfile("kubesmith/one.py")
        assert member is not None and member.read() == b"one = 3\n"


def test_the_runtime_carries_its_bytecode_and_the_same_code_gives_the_same_bundle(tmp_path: Path) -> None:
    """The bundle carries its bytecode, so a host compiles nothing: neither a new bundle's first
    imports nor the CA service's at each start (its unit sees /usr read-only; `-B` here: nor write any).
    Two builds of the same files, in two caches, are the same bytes (bytecode and gzip header
    included): a host that has it from one operator's machine is not sent it again from another's."""
    first = runtime_bundle.build_bundle(tmp_path / "one")
    time.sleep(1.1)  # gzip's header holds a time in seconds
    assert runtime_bundle.build_bundle(tmp_path / "two").data == first.data
    unpacked = tmp_path / "runtime"
    with tarfile.open(fileobj=io.BytesIO(first.data)) as tar:
        tar.extractall(unpacked, filter="data")
    imports = f"import sys; sys.path.insert(0, {str(unpacked)!r}); import kubesmith.agent.renewal, kubesmith.ca.server"
    seen = subprocess.run([sys.executable, "-I", "-B", "-v", "-c", imports], capture_output=True, text=True,
                          timeout=120, check=True).stderr
    loaded = re.findall(rf"^# code object from '?({re.escape(str(unpacked))}/[^']*)'?$", seen, re.MULTILINE)
    assert len(loaded) > 100, seen[-2000:]
    assert [path for path in loaded if not path.endswith(".pyc")] == []
