"""The plan as JSON, written as it is encoded: `plan -o json` of 10,000 hosts is about 300 MB of text.

Building the whole document first (the plan as dicts, then one string from json.dumps with an indent,
which CPython encodes in pure Python) took 2 GB and half a minute. Here each host is encoded and written
in turn, and a dataclass the plan shares between hosts (the same kubelet configuration file, certificate
files, CA requests...) is encoded once per nesting depth: the plan is immutable, so its text cannot differ.
The bytes are exactly those of `json.dumps(plan.to_dict(), indent=2, sort_keys=True)`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import fields
from functools import cache, lru_cache
from operator import attrgetter
from typing import Any, TextIO

from kubesmith.vocabulary.model import HostPlan, Plan

INDENT = "  "
_SCALAR = json.JSONEncoder(sort_keys=True)
SHARED_FRAGMENTS = 4096  # fragments kept for reuse; the shared ones recur on every host


def plan_json(plan: Plan) -> str:
    """The whole JSON text (tests, benchmarks); `plan -o json` streams it with write_plan_json."""
    return "".join(plan_json_chunks(plan))


def write_plan_json(plan: Plan, out: TextIO, hosts: Iterable[HostPlan] | None = None) -> None:
    """Write `plan` to `out` as JSON, host by host; `hosts`: its hosts, when they are planned as they are
    written (plan.evaluate_lazily)."""
    for chunk in plan_json_chunks(plan, hosts):
        out.write(chunk)


def plan_json_chunks(plan: Plan, hosts: Iterable[HostPlan] | None = None) -> Iterator[str]:
    encoder = _Encoder()
    top = {"apiVersion": "kubesmith.io/v1alpha1", "kind": "Plan",
           **{name: getattr(plan, name) for name in _field_names(type(plan))}}
    yield "{"
    for position, key in enumerate(sorted(top)):
        yield ("," if position else "") + "\n" + INDENT + _key(key)
        if key == "hosts":
            text = "["
            for host in plan.hosts if hosts is None else hosts:
                yield text + "\n" + INDENT * 2 + encoder.fields(host, 2)
                text = ","
            yield "[]" if text == "[" else "\n" + INDENT + "]"
        else:
            yield encoder.encode(top[key], 1)
    yield "\n}\n"


class _Encoder:
    """json.dumps(indent=2, sort_keys=True) of plan values, with shared dataclasses encoded once. Scalars are
    encoded inline as the json module does (its C string encoder, int and float repr): a call per value
    was most of the time. A dataclass's fields are read at once (operator.attrgetter) and its text kept
    by identity: what the hosts share (a restart policy, a kubeconfig file) is written from that text."""

    def __init__(self) -> None:
        self._fragments: dict[tuple[int, int], tuple[Any, str]] = {}

    def encode(self, value: Any, level: int) -> str:
        kind = type(value)
        if kind is str:
            return _string(value)
        if kind is tuple or kind is list:
            return self._array(value, level) if value else "[]"
        if (layout := _LAYOUTS.get(kind)) is not None:
            return self._dataclass(value, level, layout)
        if (scalar := _SCALARS.get(kind)) is not None:
            return scalar(value)  # type: ignore[no-any-return]
        if kind is dict:
            return self._items([(_key(key), value[key]) for key in sorted(value)], level)
        if hasattr(kind, "__dataclass_fields__"):
            return self._dataclass(value, level, _layout(kind))
        return _SCALAR.encode(value)

    def _array(self, value: tuple[Any, ...] | list[Any], level: int) -> str:
        inner = _NEWLINE[level + 1]
        if type(value[0]) is str:  # argv and other lists of text: no call per item
            try:
                return "[" + inner + ("," + inner).join(map(_string, value)) + _NEWLINE[level] + "]"
            except TypeError:  # not text all along
                pass
        encode = self.encode
        return "[" + inner + ("," + inner).join([encode(item, level + 1) for item in value]) + _NEWLINE[level] + "]"

    def _dataclass(self, value: Any, level: int, layout: tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]
                   ) -> str:
        key = (id(value), level)
        if (kept := self._fragments.get(key)) is not None and kept[0] is value:
            return kept[1]  # type: ignore[no-any-return]
        text = self.fields(value, level, layout)
        if len(self._fragments) >= SHARED_FRAGMENTS:  # most are one host's own: start again, the shared come back
            self._fragments.clear()
        self._fragments[key] = (value, text)  # the value is kept with its text: its id stays its own
        return text

    def fields(self, value: Any, level: int,
               layout: tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]] | None = None) -> str:
        """A dataclass's text, not kept (a host's: it is written once)."""
        keys, values = layout or _LAYOUTS.get(type(value)) or _layout(type(value))
        if not keys:
            return "{}"
        encode, sub = self.encode, level + 1
        inner = _NEWLINE[sub]
        return "{" + inner + ("," + inner).join([
            name + (_string(item) if type(item) is str else encode(item, sub)) for name, item in zip(keys, values(value))
        ]) + _NEWLINE[level] + "}"

    def _items(self, items: list[tuple[str, Any]], level: int) -> str:
        if not items:
            return "{}"
        encode, sub = self.encode, level + 1
        inner = _NEWLINE[sub]
        return "{" + inner + ("," + inner).join([
            key + (_string(item) if type(item) is str else encode(item, sub)) for key, item in items
        ]) + _NEWLINE[level] + "}"


def _float(value: float) -> str:
    return float.__repr__(value) if math.isfinite(value) else _SCALAR.encode(value)


_string = json.encoder.encode_basestring_ascii  # what json.dumps uses for every string (ensure_ascii)
# how json.dumps writes each scalar type (int.__repr__ and float.__repr__ are what it calls)
_SCALARS: dict[type, Any] = {str: _string, int: int.__repr__, float: _float,
                             bool: lambda value: "true" if value else "false", type(None): lambda value: "null"}
_NEWLINE = tuple("\n" + INDENT * level for level in range(64))  # the plan nests about a dozen levels


@lru_cache(maxsize=4096)
def _key(key: Any) -> str:
    """A mapping key and its separator as json.dumps writes them (true/false/null/numbers as text)."""
    return _string(key if isinstance(key, str) else _SCALAR.encode(key)) + ": "


_LAYOUTS: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}


def _layout(kind: type) -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]:
    """A plan dataclass's keys as written (sorted, with their separator) and a reader of its fields' values
    in that order."""
    names = tuple(sorted(_field_names(kind)))
    values = attrgetter(*names) if len(names) > 1 else lambda value: tuple(getattr(value, name) for name in names)
    _LAYOUTS[kind] = (tuple(map(_key, names)), values)
    return _LAYOUTS[kind]


@cache
def _field_names(kind: type) -> tuple[str, ...]:
    """The fields a plan dataclass shows (those marked plan=False are internal)."""
    return tuple(f.name for f in fields(kind) if f.metadata.get("plan", True))
