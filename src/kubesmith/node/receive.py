"""The receiving end of a relayed release: a tar stream from another host, each file checked
against what the operator's machine expects before it is placed.

At fleet size, the release (Kubernetes binaries, images, kubesmith's runtime) leaves the operator's
machine once and hosts pass it on to each other (`backends/relay.py`). The operator writes the list
of expected files (path, sha256, size, mode, owner) to the receiving host over its own SSH session
first; the relay only carries bytes. So a relay, broken or hostile, can withhold a file but cannot
change one: a member that is not expected, is not a regular file, has another size or another
digest is refused, and nothing of it is placed. A placed file is written as apply's uploads are
(temp file beside the target, fsync, rename, fsync of the directory), so an interrupted relay
leaves at most temp files that the next apply removes.

The operator's machine copies this file to the receiving host and the relay key's forced command runs
it there with the host's own python3 (`python3 -I receive.py --expect FILE`): it needs nothing but
the standard library, so a host gets the release before kubesmith's runtime is installed on it.

The stream may come zstd-compressed (the relay compresses when both hosts have `zstd`: the release
shrinks to a third, docs/fleet.md has the figures). The receiver tells by the stream's first bytes
and then reads the tar from the host's own `zstd -d`, its memory bounded by -M; every member is
checked exactly as in a plain stream, and a stream zstd cannot decode is refused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tarfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

CHUNK = 1 << 20
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # the first four bytes of a zstd frame (a tar stream starts with a name)
ZSTD_MEMORY_MB = 64  # zstd -d refuses a frame that needs a larger window (level 1's needs a few MB)
TRAILING_LIMIT = 1 << 20  # bytes after the tar's end a compressed stream may carry (its padding)
TEMP_MARKER = ".kstmp-"  # fsutil's and the SSH upload's: apply removes what an interrupted relay left


class ReceiveError(Exception):
    """The expected list cannot be read, or a file cannot be written; the message names it."""


@dataclass(frozen=True, slots=True)
class Expected:
    """A file the operator's machine sent the receiving host a digest of."""

    path: str  # absolute, on the receiving host
    sha256: str
    size: int
    mode: int
    owner: str
    group: str

    def to_document(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "size": self.size, "mode": self.mode, "owner": self.owner, "group": self.group}


def expected_document(files: Mapping[str, Expected]) -> bytes:
    """The expected list as the operator's machine writes it to the receiving host."""
    return json.dumps({path: file.to_document() for path, file in sorted(files.items())}, indent=1).encode()


def load_expected(path: Path) -> dict[str, Expected]:
    try:
        document = json.loads(path.read_text())
        return {name: Expected(_absolute(name), str(entry["sha256"]), int(entry["size"]), int(entry["mode"]),
                               str(entry["owner"]), str(entry["group"])) for name, entry in document.items()}
    except OSError as exc:
        raise ReceiveError(f"{path}: cannot read the expected files: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ReceiveError(f"{path}: not a list of expected files: {exc}") from None


@dataclass(slots=True)
class Received:
    """What a stream brought: files placed, members refused (with why), expected files it lacked."""

    placed: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    stream: str = "tar"  # how it came: "tar", or "zstd" (compressed)

    @property
    def ok(self) -> bool:
        """Nothing refused. A file the stream lacked is no error: a relay may carry part of what a host
        expects, and the operator's machine, which reads `placed`, sends the rest from elsewhere."""
        return not self.refused

    def to_document(self) -> dict[str, Any]:
        return {"placed": self.placed, "refused": [{"member": m, "why": why} for m, why in self.refused],
                "missing": self.missing, "stream": self.stream}


def receive(stream: IO[bytes], expected: Mapping[str, Expected], root: Path = Path("/")) -> Received:
    """Read a tar stream (members named relative to `root`, as `tar -C / -cf - PATH...` writes them)
    and place each expected member that checks out; never follows a path outside the expected list."""
    received = Received()
    seen: set[str] = set()
    try:
        archive = tarfile.open(fileobj=stream, mode="r|")
    except tarfile.TarError as exc:
        received.refused.append(("(stream)", f"not a tar stream: {exc}"))
        received.missing = sorted(expected)
        return received
    with archive:
        try:
            for member in archive:
                why = _place(archive, member, expected, seen, root)
                if why is None:
                    received.placed.append(_absolute(member.name))
                else:
                    received.refused.append((member.name, why))
        except tarfile.TarError as exc:  # a relay that stopped mid-file: what was placed stays placed
            received.refused.append(("(stream)", f"the stream broke off: {exc}"))
    received.missing = sorted(set(expected) - seen)
    return received


def receive_stream(stream: IO[bytes], expected: Mapping[str, Expected], root: Path = Path("/")) -> Received:
    """`receive`, from a plain or a zstd-compressed tar stream (told apart by its first bytes)."""
    head = _read_up_to(stream, len(ZSTD_MAGIC))
    if head != ZSTD_MAGIC:
        return receive(_Prefixed(head, stream), expected, root)
    program = shutil.which("zstd")
    if program is None:
        return _refused_stream(expected, "the stream is zstd-compressed and this host has no zstd")
    decoder = subprocess.Popen([program, "-d", "-c", "-q", f"-M{ZSTD_MEMORY_MB}MB"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    feeder = threading.Thread(target=_feed, args=(head, stream, decoder.stdin), daemon=True)
    feeder.start()
    assert decoder.stdout is not None and decoder.stderr is not None
    try:
        received = receive(decoder.stdout, expected, root)
        received.stream = "zstd"
        overflow = len(decoder.stdout.read(TRAILING_LIMIT + 1)) > TRAILING_LIMIT
    except BaseException:
        decoder.kill()
        decoder.wait()
        raise
    status, said = _stop(decoder, feeder, overflow)
    if overflow:
        received.refused.append(("(stream)", "more than the tar's padding after its end"))
    elif status != 0:  # first: a broken frame is why the tar in it broke off
        received.refused.insert(0, ("(stream)", f"zstd -d failed ({status}): {said or 'no message'}"))
    return received


def _stop(decoder: subprocess.Popen[bytes], feeder: threading.Thread, kill: bool) -> tuple[int, str]:
    """zstd's exit status and what it said, once it has ended (killed first when `kill`)."""
    assert decoder.stdout is not None and decoder.stderr is not None
    if kill:
        decoder.kill()
    decoder.stdout.close()  # zstd, if still writing, stops on EPIPE
    said = decoder.stderr.read(4096).decode(errors="replace").strip()
    status = decoder.wait()
    feeder.join(timeout=1)
    return status, said


def _read_up_to(stream: IO[bytes], count: int) -> bytes:
    """The stream's first `count` bytes, fewer only at its end (a pipe may hand them over in parts)."""
    data = b""
    while len(data) < count and (chunk := stream.read(count - len(data))):
        data += chunk
    return data


class _Prefixed:
    """A stream whose first bytes were read already: those, then the rest."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self._head, self._rest = head, rest

    def read(self, size: int = -1) -> bytes:
        if not self._head:
            return self._rest.read(size)
        taken = self._head if size < 0 else self._head[:size]
        self._head = self._head[len(taken):]
        return taken


def _feed(head: bytes, stream: IO[bytes], sink: IO[bytes] | None) -> None:
    """Copy the compressed stream into zstd's stdin, one chunk at a time; stop when zstd stops reading."""
    assert sink is not None
    try:
        sink.write(head)
        while chunk := stream.read(CHUNK):
            sink.write(chunk)
    except (OSError, ValueError):  # zstd gave up (a broken frame), or the stream on stdin did
        pass
    finally:
        try:
            sink.close()
        except OSError:
            pass


def _refused_stream(expected: Mapping[str, Expected], why: str) -> Received:
    return Received(refused=[("(stream)", why)], missing=sorted(expected), stream="zstd")


def _place(archive: tarfile.TarFile, member: tarfile.TarInfo, expected: Mapping[str, Expected], seen: set[str],
           root: Path) -> str | None:
    """Why the member was refused, or None once it is placed."""
    name = _absolute(member.name)
    want = expected.get(name)
    if want is None:
        return "not among the expected files"
    if name in seen:
        return "sent twice"
    if not member.isreg():
        return "not a regular file"
    if member.size != want.size:
        return f"{member.size} bytes where {want.size} are expected"
    source = archive.extractfile(member)
    assert source is not None  # a regular member always has data
    target = root / name.lstrip("/")
    temp, digest = _write_temp(target, source, want.mode)
    if digest != want.sha256:
        temp.unlink(missing_ok=True)
        return f"sha256 {digest[:12]}... where {want.sha256[:12]}... is expected: not placed"
    try:
        shutil.chown(temp, want.owner, want.group)
        os.replace(temp, target)
    except (OSError, LookupError) as exc:
        temp.unlink(missing_ok=True)
        raise ReceiveError(f"{target}: cannot place it: {exc}") from None
    _fsync_dir(target.parent)
    seen.add(name)
    return None


def _write_temp(target: Path, source: IO[bytes], mode: int) -> tuple[Path, str]:
    """The member's bytes in a temp file beside `target`, durable, and their sha256."""
    _make_dirs(target.parent)
    temp = target.with_name(f".{target.name}{TEMP_MARKER}{secrets.token_hex(4)}")
    digest = hashlib.sha256()
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)
        while chunk := source.read(CHUNK):
            digest.update(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)
    return temp, digest.hexdigest()


def _absolute(name: str) -> str:
    """A member's name as an absolute path; '..' never survives (it would leave the expected list)."""
    path = PurePosixPath("/", name)
    return "/" + "/".join(part for part in path.parts[1:] if part not in ("", ".", ".."))


def _make_dirs(directory: Path) -> None:
    """Missing directories as 0755 whatever the umask, as apply's uploads make them."""
    missing = []
    while not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    for path in reversed(missing):
        try:
            path.mkdir(0o755)
        except FileExistsError:
            continue
        os.chmod(path, 0o755)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    """Read the stream on stdin; print what was placed, refused and missing (JSON); exit 5 when anything
    was refused or the list of expected files cannot be read."""
    parser = argparse.ArgumentParser(description="Take release files relayed by another host.")
    parser.add_argument("--expect", required=True, type=Path, help="the expected files (JSON, from apply)")
    parser.add_argument("--root", default=Path("/"), type=Path, help="where the paths are placed (tests)")
    args = parser.parse_args(argv)
    try:
        received = receive_stream(sys.stdin.buffer, load_expected(args.expect), args.root)
    except ReceiveError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 5
    print(json.dumps(received.to_document()))
    for member, why in received.refused:
        print(f"refused {member}: {why}", file=sys.stderr)
    return 0 if received.ok else 5


if __name__ == "__main__":
    sys.exit(main())
