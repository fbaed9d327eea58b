"""JSON from files anyone may have written (image archives, the token store, the state directory),
parsed with a nesting budget.

Python's JSON decoder recurses once per level: a few thousand `[` make it raise RecursionError, which
every reader let escape as a traceback. The nesting is measured first, without recursion, so a
document nested too deeply is a ValueError like any other malformed one, and each reader already
turns a ValueError into its own located message.
"""

from __future__ import annotations

import errno
import json
import re
from pathlib import Path
from typing import Any

from kubesmith import fsutil

MAX_STATE_BYTES = 16 << 20  # a record of the state directory: the applied spec of 10,000 hosts is ~2 MiB
MAX_DEPTH = 64  # kubesmith's own documents nest 5 levels; an image index a few more
RESTORE = "restore it from a backup"
_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # unrolled: linear time
_BRACKETS = re.compile(rb"[\[\]{}]")


class TooDeep(ValueError):
    """A document nested beyond the budget."""


def load_json(data: bytes | str, max_depth: int = MAX_DEPTH) -> Any:
    """`json.loads(data)`, refusing (TooDeep, a ValueError) a document nested more than `max_depth` levels."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if nesting_exceeds(raw, max_depth):
        raise TooDeep(f"nested too deeply (more than {max_depth} levels)")
    try:
        return json.loads(data)
    except RecursionError:  # the measure above makes this unreachable; a traceback must stay impossible
        raise TooDeep(f"nested too deeply (more than {max_depth} levels)") from None


def nesting_exceeds(raw: bytes, limit: int) -> bool:
    """Whether the brackets outside JSON strings nest deeper than `limit` (iterative: no recursion)."""
    depth = 0
    for match in _BRACKETS.finditer(_STRINGS.sub(b"", raw)):
        depth += 1 if match.group() in (b"[", b"{") else -1
        if depth > limit:
            return True
    return False


def read_json_file(path: Path, expected: str, limit: int = MAX_STATE_BYTES, remedy: str = RESTORE) -> Any:
    """The JSON document of a record kubesmith keeps (the state directory's), read as a bounded regular
    file. A FIFO, a huge file or a damaged document is an OSError naming the file and what it should be,
    which every command reports in one line; FileNotFoundError passes through (a record not made yet)."""
    data = fsutil.read_regular(path, limit, expected)
    try:
        return load_json(data)
    except ValueError as exc:
        raise damaged(path, expected, exc, remedy) from None


def damaged(path: Path, expected: str, exc: Exception, remedy: str = RESTORE) -> OSError:
    """The error for a record that is no longer what kubesmith wrote; `remedy` says what to do."""
    return OSError(errno.EINVAL, f"damaged: not {expected} ({reason(exc)}); {remedy}", str(path))


def reason(exc: BaseException) -> str:
    """What went wrong reading a document, without the path its message names already: an OSError's
    text, `missing 'key'` for a KeyError, else the exception's own words."""
    if isinstance(exc, OSError) and exc.strerror:
        return str(exc.strerror)
    return f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
