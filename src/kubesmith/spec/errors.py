"""Located problems in a cluster file: every message names the option path and the file position."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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


@dataclass(frozen=True, slots=True)
class Problem:
    path: str
    message: str
    location: Location | None = None
    severity: Severity = "error"

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
