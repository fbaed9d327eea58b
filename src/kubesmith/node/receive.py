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
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import sys
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

CHUNK = 1 << 20
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

    @property
    def ok(self) -> bool:
        """Nothing refused. A file the stream lacked is no error: a relay may carry part of what a host
        expects, and the operator's machine, which reads `placed`, sends the rest from elsewhere."""
        return not self.refused

    def to_document(self) -> dict[str, Any]:
        return {"placed": self.placed, "refused": [{"member": m, "why": why} for m, why in self.refused],
                "missing": self.missing}


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
        received = receive(sys.stdin.buffer, load_expected(args.expect), args.root)
    except ReceiveError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 5
    print(json.dumps(received.to_document()))
    for member, why in received.refused:
        print(f"refused {member}: {why}", file=sys.stderr)
    return 0 if received.ok else 5


if __name__ == "__main__":
    sys.exit(main())
