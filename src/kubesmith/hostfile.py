"""One file as it must exist on a host: what render writes, apply uploads and run lays down."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class HostFile:
    path: str  # absolute path on the host
    mode: int
    owner: str
    group: str
    data: bytes = field(repr=False)  # a binary is 100+ MB: a repr (asyncio's task logging) would copy it

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()
