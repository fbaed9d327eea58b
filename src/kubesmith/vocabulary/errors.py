"""Located problems in a cluster file: every message names the option path and the file position."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

Severity = Literal["error", "warning", "note"]  # a note says what kubesmith will do
LocPart = str | int


@dataclass(frozen=True, slots=True)
class Location:
    file: str
    line: int  # 1-based
    column: int  # 1-based

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


def format_path(loc: tuple[LocPart, ...]) -> str:
    """Render a pydantic-style location as the dotted option path users write: spec.hosts[0].name."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not part.isprintable():  # a key with a newline or escape must not break the message's line
            text += f"[{part!r}]"
        else:
            text += f".{part}" if text else part
    return text or "(document)"


def yaml_text(value: Any) -> str:
    """A value as the user wrote it in YAML, for messages: null, true, .nan, 1.5, 'text'; a list or a mapping
    by its kind (never Python's None, True, nan or a list's repr)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else ".inf" if value > 0 else "-.inf"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return str(value)


def yaml_key(key: Any) -> str:
    """A mapping key as a part of an option path: as YAML writes it (`data.9000`, `x.true`), so it is told
    apart from a list position (`hosts[0]`) and found again in the file."""
    return key if isinstance(key, str) else yaml_text(key)


ECHO_LIMIT = 80  # characters of a value a message repeats: a 100 KB value would bury its own location
_QUOTED = re.compile(r"'((?:[^'\\\n]|\\.){%d,})'|\"((?:[^\"\\\n]|\\.){%d,})\"" % (ECHO_LIMIT + 1, ECHO_LIMIT + 1))
_LONG_WORD = re.compile(r"[^\s'\"]{%d,}" % (2 * ECHO_LIMIT + 1))


def shorten(text: str) -> str:
    """`text` with every quoted value (and any other run without spaces) longer than ECHO_LIMIT cut to its
    first ECHO_LIMIT characters and its length: `'aaaa…'(100000 characters)`."""
    def quoted(match: re.Match[str]) -> str:
        quote = "'" if match[1] is not None else '"'
        inner = match[1] if match[1] is not None else match[2]
        if any(c.isspace() for c in inner) and len(inner) < 5 * ECHO_LIMIT:
            return match[0]  # perhaps prose between two apostrophes (the cluster's ... kubesmith's)
        return f"{quote}{inner[:ECHO_LIMIT]}…{quote}({len(inner)} characters)"

    if len(text) <= 2 * ECHO_LIMIT:
        return text
    text = _QUOTED.sub(quoted, text)
    return _LONG_WORD.sub(lambda m: f"{m[0][:ECHO_LIMIT]}…({len(m[0])} characters)", text)


@dataclass(frozen=True, slots=True)
class Problem:
    path: str
    message: str
    location: Location | None = None
    severity: Severity = "error"

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", shorten(self.path))
        object.__setattr__(self, "message", shorten(self.message))

    def __str__(self) -> str:
        where = f" ({self.location})" if self.location else ""
        prefix = f"{self.severity}: " if self.severity in ("warning", "note") else ""
        return f"{prefix}{self.path}: {self.message}{where}"

    def as_dict(self) -> dict[str, object]:
        return {
            "severity": self.severity,
            "path": self.path,
            "message": self.message,
            "file": self.location.file if self.location else None,
            "line": self.location.line if self.location else None,
            "column": self.location.column if self.location else None,
        }


class SpecError(Exception):
    """Raised with every problem found, never only the first."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in problems))

    @property
    def errors(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity == "error")
