"""Names that may be feature gates of a release's binaries, for `registry_from_binaries.py --gate-candidates`.

    python3 tools/gate_candidates.py BIN_DIR KNOWN_GATE... > candidates.txt

`--help` lists alpha and beta gates only; GA and deprecated ones (the locked ones among them) must be asked
about by name, and a gate the next release removed is in no newer table. The binaries hold every name: Go
builds each feature-gate map in code, loading a key's text with `LEAQ name(RIP)` and its length with a
`MOV $len` right after. This prints every capitalised name loaded that way within WINDOW bytes of code
around where a KNOWN_GATE is loaded (a gate of each map: Kubernetes', the API server's, client-go's,
component-base's). Most candidates are no gates ("Error", "Forbidden"); the probes sort them out.
"""

from __future__ import annotations

import re
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

WINDOW = 20000
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy")
_LEA_RIP = re.compile(rb"[\x48\x4c]\x8d[\x05\x0d\x15\x1d\x25\x2d\x35\x3d]")  # REX.W LEA reg, [RIP+disp32]
_MOV_LEN = re.compile(rb"[\x40-\x4f]?[\xb8-\xbf](....)", re.S)  # MOV reg, imm32
_NAME = re.compile(rb"[A-Z][A-Za-z0-9]{3,80}")


def _segments(data: bytes) -> list[tuple[int, int, int]]:
    """(file offset, virtual address, size) of each loadable segment of an ELF64 file."""
    phoff, = struct.unpack_from("<Q", data, 0x20)
    size, count = struct.unpack_from("<HH", data, 0x36)
    entries = (struct.unpack_from("<IIQQQQ", data, phoff + index * size) for index in range(count))
    return [(offset, vaddr, filesz) for kind, _, offset, vaddr, _, filesz in entries if kind == 1]


def loaded_strings(data: bytes, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """(offset of the instruction, text) of each string the code between `start` and `end` loads."""
    segments = _segments(data)
    text_offset, text_vaddr, _ = segments[0]
    for match in _LEA_RIP.finditer(data, start, end):
        displacement, = struct.unpack_from("<i", data, match.start() + 3)
        target = text_vaddr + match.start() + 7 - text_offset + displacement
        offset = next((o + target - v for o, v, s in segments if v <= target < v + s), None)
        length = _MOV_LEN.match(data, match.start() + 7)
        if offset is not None and length and 0 < (n := struct.unpack("<I", length.group(1))[0]) < 90:
            yield match.start(), data[offset:offset + n]


def candidates(binary: Path, known: list[str]) -> set[str]:
    data = binary.read_bytes()
    _, _, text_size = _segments(data)[0]
    names = {name.encode() for name in known}
    sites = [offset for offset, text in loaded_strings(data, 0, text_size) if text in names]
    return {text.decode() for site in sites for _, text in loaded_strings(data, max(0, site - WINDOW), site + WINDOW)
            if _NAME.fullmatch(text)}


def main() -> int:
    bin_dir, known = Path(sys.argv[1]), sys.argv[2:]
    print("\n".join(sorted(set().union(*(candidates(bin_dir / name, known) for name in BINARIES)))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
