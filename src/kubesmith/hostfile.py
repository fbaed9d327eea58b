"""One file as it must exist on a host: what render writes, apply uploads and run lays down."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class HostFile:
    path: str  # absolute path on the host
    mode: int
    owner: str
    group: str
    data: bytes = field(repr=False)  # a binary is 100+ MB: a repr (asyncio's task logging) would copy it
    digest: str | None = field(default=None, init=False, repr=False, compare=False)  # memo of sha256; replace()
    # makes a new instance without it, so a copy with other data is hashed afresh

    @property
    def sha256(self) -> str:
        """Computed once: apply compares, diffs and records each file, and a binary is 100+ MB."""
        if self.digest is None:
            object.__setattr__(self, "digest", hashlib.sha256(self.data).hexdigest())  # a memo of immutable data
        return self.digest  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class StreamedFile:
    """A file for a host that is copied from a file here in chunks, never held in memory whole (an
    image archive of gigabytes); `source` is read as a regular file of at most `limit` bytes."""

    path: str  # absolute path on the host
    mode: int
    owner: str
    group: str
    source: Path
    limit: int
    memo: Path | None = None  # where digests are remembered between runs (fsutil.file_sha256)
    digest: str | None = field(default=None, init=False, repr=False, compare=False)  # memo, as HostFile's

    @property
    def sha256(self) -> str:
        """Hashed in chunks, once (or not at all, when `memo` remembers this very file)."""
        if self.digest is None:
            from kubesmith import fsutil

            object.__setattr__(self, "digest", fsutil.file_sha256(self.source, self.limit, self.memo))
        return self.digest  # type: ignore[return-value]

    @property
    def size(self) -> int:
        return self.source.stat().st_size


def size_of(file: HostFile | StreamedFile) -> int:
    return file.size if isinstance(file, StreamedFile) else len(file.data)


AnyHostFile = HostFile | StreamedFile  # what render resolves a plan's file to, and apply uploads
