"""The version registry: per minor release, the flags each binary accepts and the config API versions.

Facts live in `data/k8s_flags.json` (full flag lists at one documented release plus a
history of additions and removals), so a new release is a data change, not a code change.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any


def minor_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


@dataclass(frozen=True, slots=True)
class FlagChange:
    flag: str
    added_in: str | None
    removed_in: str | None
    replacement: str | None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class BinaryFlags:
    documented_in: str
    flags: frozenset[str]
    deprecated: frozenset[str]
    history: tuple[FlagChange, ...]
    types: dict[str, str]  # flag -> bool, duration, int, ... (flags not named: strings or kinds not checked)

    def accepted(self, minor: str, minors: tuple[str, ...]) -> frozenset[str]:
        if self.documented_in not in minors:  # etcd: not versioned with Kubernetes
            return self.flags
        at = minor_key(minor)
        flags = set(self.flags)
        for change in self.history:  # the history decides availability of every flag it mentions
            added = change.added_in is None or minor_key(change.added_in) <= at
            removed = change.removed_in is not None and minor_key(change.removed_in) <= at
            if added and not removed:
                flags.add(change.flag)
            else:
                flags.discard(change.flag)
        return frozenset(flags)


@dataclass(frozen=True, slots=True)
class GateFact:
    """A feature gate as a release's binaries take it."""

    stage: str  # ALPHA, BETA, GA, DEPRECATED
    default: bool | None  # None: a GA or deprecated gate whose default the binaries did not show
    locked: bool  # setting it to the other value stops the binary

    @classmethod
    def parse(cls, text: str) -> GateFact:
        words = text.split()
        default = {"true": True, "false": False}.get(words[1]) if len(words) > 1 else None
        return cls(words[0], default, "locked" in words)


@dataclass(frozen=True, slots=True)
class RemovedFlag:
    binary: str
    flag: str
    removed_in: str
    replacement: str | None
    note: str | None = None


class VersionRegistry:
    """Answers: is this version supported, does this binary accept this flag, which config API to write."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.minors: tuple[str, ...] = tuple(sorted(data["minors"], key=minor_key))
        # the release the test suite runs for real (init's default)
        self.tested_release: str = data.get("tested_release") or f"{self.minors[-1]}.0"
        self._binaries = {name: _binary(entry) for name, entry in data["binaries"].items()}
        self._removed = tuple(
            RemovedFlag(item["binary"], item["flag"], item["removed_in"], item.get("replacement"), item.get("note"))
            for item in data.get("removed_before_supported", ()))
        self._config_apis: dict[str, dict[str, str]] = data["config_apis"]
        self._gate_tables: dict[str, dict[str, Any]] = data.get("feature_gates", {})
        self._gate_cache: dict[tuple[str, str], dict[str, GateFact] | None] = {}
        self._accepted: dict[tuple[str, str], frozenset[str]] = {}

    @property
    def newest(self) -> str:
        return self.minors[-1]

    @property
    def binaries(self) -> tuple[str, ...]:
        return tuple(sorted(self._binaries))

    def supports(self, minor: str) -> bool:
        return minor in self.minors

    def flags(self, binary: str, minor: str) -> frozenset[str]:
        key = (binary, minor)
        if key not in self._accepted:
            self._accepted[key] = self._binaries[binary].accepted(minor, self.minors)
        return self._accepted[key]

    def accepts(self, binary: str, flag: str, minor: str) -> bool:
        return flag in self.flags(binary, minor)

    def flag_type(self, binary: str, flag: str) -> str | None:
        """How `binary` parses `flag`'s value (bool, duration, int, strings, ...); None when not known."""
        entry = self._binaries.get(binary)
        return entry.types.get(flag) if entry else None

    def check_flag(self, binary: str, flag: str, minor: str) -> str | None:
        """None when accepted; otherwise a message that says why and what to use instead."""
        name = flag.lstrip("-")
        if flag.startswith("-"):
            return f"write flag names without leading dashes: {name!r}"
        if self.accepts(binary, name, minor):
            return None
        removal = self._removal(binary, name, minor)
        if removal:
            return removal
        added = self._added_later(binary, name, minor)
        if added:
            return f"{binary} --{name} is not available in Kubernetes {minor}; it was added in {added}"
        close = difflib.get_close_matches(name, sorted(self.flags(binary, minor)), n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"{binary} has no flag --{name} in {self._release(binary, minor)}{hint}"

    def gates(self, binary: str, minor: str) -> dict[str, GateFact] | None:
        """The feature gates `binary` of release `minor` knows; None where the registry has no gate facts.
        Parsed once per (binary, release): a file's every gate asks, and parsing ~230 facts per gate made
        thousands of gates take minutes."""
        key = (binary, minor)
        if key not in self._gate_cache:
            table = self._gate_tables.get(minor)
            if table is None:
                self._gate_cache[key] = None
            else:
                merged = {**table["gates"], **table.get("differences", {}).get(binary, {})}
                self._gate_cache[key] = {name: GateFact.parse(text) for name, text in merged.items()
                                         if text != "unknown"}
        return self._gate_cache[key]

    @property
    def gate_minors(self) -> tuple[str, ...]:
        """The releases whose feature gates the registry knows (read from those releases' binaries)."""
        return tuple(sorted(self._gate_tables, key=minor_key))

    def check_gate(self, binaries: tuple[str, ...], name: str, value: bool, minor: str,
                   hint: bool = True) -> str | None:
        """None when every binary in `binaries` that knows the gate takes `value` and at least one knows
        it; otherwise why not, with a close name when the gate is unknown (and `hint`: the search is the
        costly part, so callers stop asking after a few unknown gates)."""
        tables = [table for binary in binaries if (table := self.gates(binary, minor)) is not None]
        if not tables:
            return None
        facts = [table[name] for table in tables if name in table]
        if not facts:
            close = difflib.get_close_matches(name, sorted({gate for table in tables for gate in table}), n=1,
                                              cutoff=0.75) if hint else []
            guess = f"; did you mean {close[0]!r}?" if close else ""
            return f"Kubernetes {minor} has no feature gate {name!r}{guess}"
        fact = facts[0]
        if fact.locked and fact.default is not None and value != fact.default:
            return (f"feature gate {name} is {fact.stage} and locked to {str(fact.default).lower()} in "
                    f"Kubernetes {minor}; remove it from the spec")
        return None

    def config_api_changes(self, old: str, new: str) -> list[tuple[str, str | None, str | None]]:
        """(kind, API version at `old`, at `new`) of each configuration document whose API differs."""
        return [(kind, table.get(old), table.get(new)) for kind, table in sorted(self._config_apis.items())
                if table.get(old) != table.get(new)]

    def config_api(self, kind: str, minor: str) -> str:
        api = self._config_apis[kind].get(minor)
        if api is None:
            raise KeyError(f"{kind} does not exist in Kubernetes {minor}")
        return api

    def _removal(self, binary: str, flag: str, minor: str) -> str | None:
        changes = [c for c in self._binaries[binary].history if c.flag == flag and c.removed_in]
        removed = [RemovedFlag(binary, c.flag, c.removed_in, c.replacement, c.note)  # type: ignore[arg-type]
                   for c in changes if minor_key(c.removed_in) <= minor_key(minor)]  # type: ignore[arg-type]
        removed += [r for r in self._removed if r.binary == binary and r.flag == flag]
        if not removed:
            return None
        entry = removed[0]
        instead = f"; use {entry.replacement} instead" if entry.replacement else (f"; {entry.note}" if entry.note else "")
        return f"{binary} --{flag} was removed in Kubernetes {entry.removed_in}{instead}"

    def _release(self, binary: str, minor: str) -> str:
        """The release whose flags apply: etcd is versioned on its own, the rest with Kubernetes."""
        documented_in = self._binaries[binary].documented_in
        return f"Kubernetes {minor}" if documented_in in self.minors else f"{binary} {documented_in}"

    def _added_later(self, binary: str, flag: str, minor: str) -> str | None:
        for change in self._binaries[binary].history:
            if change.flag == flag and change.added_in and minor_key(change.added_in) > minor_key(minor):
                return change.added_in
        return None


def _binary(entry: dict[str, Any]) -> BinaryFlags:
    return BinaryFlags(
        documented_in=entry["documented_in"],
        flags=frozenset(entry["flags"]),
        deprecated=frozenset(entry.get("deprecated", ())),
        history=tuple(FlagChange(item["flag"], item.get("added_in"), item.get("removed_in"),
                                 item.get("replacement"), item.get("note"))
                      for item in entry.get("history", ())),
        types=dict(entry.get("types", {})),
    )


@cache
def load_registry() -> VersionRegistry:
    """The bundled registry (read once per process; it is immutable data)."""
    text = resources.files("kubesmith.versions").joinpath("data/k8s_flags.json").read_text(encoding="utf-8")
    return VersionRegistry(json.loads(text))
