"""Durations as operators write them (`90s`, `3m`, `1h30m`, `365d`), for token TTLs and validities."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|d|h|m|s)", re.ASCII)  # ASCII: Python's \d takes any script's digits
# Go's time.ParseDuration, what every Kubernetes component reads: "300ms", "1h30m", "-1.5h", "0"
_GO_DURATION = re.compile(r"[-+]?(0|((\d+(\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h))+)", re.ASCII)
_UNIT = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)", re.ASCII)
_GO_UNIT_NS = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "\u03bcs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9,
               "h": 3600 * 10**9}
GO_MAX_NS = (1 << 63) - 1  # Go's time.Duration is an int64 of nanoseconds: about 292 years
GO_MAX_TEXT = "2562047h47m16.854775807s"


def duration_seconds(text: str) -> float:
    """Seconds in `text`, zero included: `90s`, `15m`, `1h30m`, `7d`, `500ms`, or a bare number of
    seconds. The one syntax of every duration on the command line (cli.common.Duration). Raises
    ValueError with a message fit for users."""
    value = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", value, re.ASCII):
        return float(value)
    parts = _PART.findall(value)
    if not parts or "".join(number + unit for number, unit in parts) != value:
        raise ValueError(f"{text!r} is not a duration (examples: 90s, 15m, 1h30m, 7d, 500ms; a bare number is "
                         "seconds)")
    return sum(float(number) * _UNIT[unit] for number, unit in parts)


def parse_duration(text: str) -> float:
    """Seconds in `text` (see duration_seconds), which must be positive: a lifetime or validity."""
    seconds = duration_seconds(text)
    if seconds <= 0:
        raise ValueError(f"{text!r}: a duration must be positive")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest exact `1h30m`-style text for whole seconds (cfssl's `expiry` uses Go's `8760h`)."""
    remaining = int(round(seconds))
    out = ""
    for unit in ("h", "m", "s"):
        count, remaining = divmod(remaining, int(_UNIT[unit]))
        if count:
            out += f"{count}{unit}"
    return out or "0s"


def go_duration_ns(text: str) -> int:
    """Nanoseconds in `text` as Go's time.ParseDuration reads it, refusing what it refuses: other
    syntax, and magnitudes beyond an int64 of nanoseconds (Go: "invalid duration")."""
    if not _GO_DURATION.fullmatch(text):
        raise ValueError(f"{text!r} is not a Go duration (examples: 90s, 15m, 1h30m, 500ms; units ns, us, ms, s, "
                         "m, h)")
    sign = -1 if text.startswith("-") else 1
    try:
        total = sum(Decimal(number) * _GO_UNIT_NS[unit] for number, unit in _GO_PART.findall(text))
    except InvalidOperation:  # pragma: no cover - the pattern admits decimal numbers only
        total = Decimal(GO_MAX_NS + 1)
    if total > GO_MAX_NS:
        raise ValueError(f"{text!r} is longer than Go's longest duration ({GO_MAX_TEXT}, about 292 years): the "
                         "binary refuses it")
    return sign * int(total)


def go_duration_problem(text: str, positive: bool = False) -> str | None:
    """Why `text` is no length of time as Go reads it, or None: not a Go duration, negative (no component
    means anything by a negative interval, timeout or lifetime), or, for a `positive` one (a period that
    would spin at 0, a lifetime that would end at once), zero."""
    try:
        nanoseconds = go_duration_ns(text)
    except ValueError as exc:
        return str(exc)
    if nanoseconds < 0:
        return f"{text!r} is negative: a length of time here is 0 or more"
    if positive and nanoseconds == 0:
        return f"{text!r} is zero: this period or lifetime must be longer than 0"
    return None


def check_go_length(text: str) -> str:
    """`text` when it is a Go duration of 0 or more; raises ValueError with a message fit for users."""
    if problem := go_duration_problem(text):
        raise ValueError(problem)
    return text


def check_go_period(text: str) -> str:
    """`text` when it is a positive Go duration; raises ValueError with a message fit for users."""
    if problem := go_duration_problem(text, positive=True):
        raise ValueError(problem)
    return text


def go_seconds(text: str) -> float:
    """Seconds in a Go duration already checked by `check_go_length` ("15s", "1m30s", "0")."""
    return go_duration_ns(text) / 1e9


def check_go_at_least(text: str, minimum: str, why: str, zero_ok: bool = False) -> str:
    """`text` when it is a Go duration of at least `minimum` (or 0, when `zero_ok`: 0 then means "off" and
    other checks judge it); raises ValueError naming the minimum and `why` a shorter one is no setting."""
    if problem := go_duration_problem(text, positive=not zero_ok):
        raise ValueError(problem)
    nanoseconds = go_duration_ns(text)
    if not (zero_ok and nanoseconds == 0) and nanoseconds < go_duration_ns(minimum):
        raise ValueError(f"{text!r} is shorter than {minimum}, the shortest kubesmith takes here: {why}")
    return text
