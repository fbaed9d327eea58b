"""Values every consumer can hold: finite numbers within 64 bits everywhere, and in `extraConfig` only what
its target format represents (JSON for the Kubernetes components' documents, TOML for containerd's).

YAML has types neither format has: `.nan`/`.inf`, timestamps (`2024-01-01` unquoted), `!!binary`, `!!set`,
non-string keys (`on:` is the boolean true in YAML 1.1) and integers of any size. They used to pass
`validate` and fail later, as a traceback while rendering or as a component that will not start. Works on
raw data, so it runs even when types are wrong.
"""

from __future__ import annotations

import datetime
import math
from typing import Any

from kubesmith.vocabulary.errors import LocPart, yaml_key, yaml_text

Finding = tuple[tuple[LocPart, ...], str, str]
INT64 = (-(1 << 63), (1 << 63) - 1)
# extraConfig sections and the format their document is written in
TARGETS = {"kubelet": "JSON", "proxy": "JSON", "scheduler": "JSON", "containerRuntime": "TOML"}


def value_findings(data: Any) -> list[Finding]:
    """Non-finite or out-of-range numbers anywhere; unrepresentable values in every extraConfig."""
    findings = _numbers(data, ())
    components = data.get("spec", {}).get("components") if isinstance(data, dict) and \
        isinstance(data.get("spec"), dict) else None
    if isinstance(components, dict):
        for section, target in TARGETS.items():
            config = components.get(section, {}).get("extraConfig") if isinstance(components.get(section), dict) \
                else None
            where = ("spec", "components", section, "extraConfig")
            findings += _representable(config, where, target)  # numbers were checked above
    return findings


def json_findings(data: Any) -> list[Finding]:
    """Everything in `data` JSON cannot carry, each located relative to `data` (an add-on manifest's object).
    Integer and boolean keys pass: kubectl writes them as strings, and so does the add-on step."""
    return _numbers(data, ()) + _representable(data, (), "JSON", scalar_keys=(int, bool))


def _numbers(data: Any, loc: tuple[LocPart, ...]) -> list[Finding]:
    findings: list[Finding] = []
    stack: list[tuple[Any, tuple[LocPart, ...]]] = [(data, loc)]
    while stack:
        value, where = stack.pop()
        if (problem := number_problem(value)) is not None:
            findings.append((where, problem, "error"))
        elif isinstance(value, dict):
            stack.extend((item, (*where, _part(key))) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((item, (*where, index)) for index, item in enumerate(value))
    return findings


def number_problem(value: Any) -> str | None:
    """Why no consumer can take this number, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{yaml_text(value)} is not a finite number: no option takes NaN or an infinity"
    if isinstance(value, int) and not isinstance(value, bool) and not INT64[0] <= value <= INT64[1]:
        return f"{value} does not fit in 64 bits: no component reads integers this large"
    return None


def _representable(config: Any, loc: tuple[LocPart, ...], target: str, scalar_keys: tuple[type, ...] = ()
                   ) -> list[Finding]:
    """Values of `config` that `target` (JSON or TOML) cannot hold, each located."""
    if not isinstance(config, dict):
        return []
    findings: list[Finding] = []
    stack: list[tuple[Any, tuple[LocPart, ...]]] = [(config, loc)]
    while stack:
        value, where = stack.pop()
        if (problem := _unrepresentable(value, target)) is not None:
            findings.append((where, problem, "error"))
        elif isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, (str, *scalar_keys)):
                    findings.append(((*where, _part(key)), f"the key {yaml_text(key)} is {_kind(key)}; {target} keys are "
                                     "strings (quote it: YAML reads on, yes, 1 and dates as other types)", "error"))
                else:
                    stack.append((item, (*where, key)))
        elif isinstance(value, list):
            stack.extend((item, (*where, index)) for index, item in enumerate(value))
    return findings


def _unrepresentable(value: Any, target: str) -> str | None:
    if isinstance(value, (datetime.date, datetime.datetime)):
        return (f"{value} is a YAML timestamp, which {target} cannot hold; quote it if you mean the text "
                f"\"{value}\"")
    if isinstance(value, bytes):
        return f"a !!binary value cannot be written to {target}; give the text the component expects"
    if isinstance(value, (set, frozenset)):
        return f"a !!set cannot be written to {target}; write a list"
    if value is None and target == "TOML":
        return "null cannot be written to TOML (containerd's config.toml); leave the key out"
    if not isinstance(value, (str, int, float, bool, dict, list, type(None))):
        return f"a {type(value).__name__} cannot be written to {target}"
    return None


def _kind(key: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", type(None): "null"}
    return names.get(type(key), f"a {type(key).__name__}")


def _part(key: Any) -> LocPart:
    """A mapping key as a path part, as YAML writes it: `data.9000`, never a list position `data[9000]`."""
    return yaml_key(key)
