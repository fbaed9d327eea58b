"""Deterministic bytes for the plan's documents: YAML, JSON and TOML, the same on every run.

render, join and the agent write documents through these, so a file's bytes (and its hash, which
apply compares) never depend on which of them wrote it.

PyYAML and tomli_w are imported by the writers that use them: the hosts' short commands (`config
status`, `config wait`) hash JSON and strings only, and start without them.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any


@functools.cache
def _yaml_dumper() -> Any:
    import yaml

    try:
        return yaml.CSafeDumper
    except AttributeError:  # PyYAML without libyaml
        return yaml.SafeDumper


def yaml_bytes(data: Any) -> bytes:
    """Deterministic YAML: sorted keys, block style, plain Python types only."""
    import yaml

    return yaml.dump(_plain(data), Dumper=_yaml_dumper(), sort_keys=True, default_flow_style=False,
                     allow_unicode=True).encode()


def json_bytes(data: Any) -> bytes:
    """Sorted, one line per document: the C encoder (indent forces the pure-Python one, 10x slower)."""
    return (json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n").encode()


def toml_bytes(data: Any) -> bytes:
    """TOML (containerd's configuration), keys in the plan's order."""
    import tomli_w

    return tomli_w.dumps(_plain(data)).encode()


DOCUMENT_WRITERS: dict[str, Callable[[Any], bytes]] = {
    "yaml": yaml_bytes, "json": lambda data: json_bytes(_plain(data)), "toml": toml_bytes}


def _plain(data: Any) -> Any:
    if isinstance(data, Mapping):
        return {str(key): _plain(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_plain(item) for item in data]
    return data


def map_strings(document: Any, change: Callable[[str], str]) -> Any:
    """`document` with every string value (not key) passed through `change`; lists for tuples."""
    if isinstance(document, Mapping):
        return {key: map_strings(value, change) for key, value in document.items()}
    if isinstance(document, (list, tuple)):
        return [map_strings(item, change) for item in document]
    if isinstance(document, str):
        return change(document)
    return document


def argument_value(argument: str) -> str:
    """The value of an argv word: that of `--flag=value`, else the whole word."""
    name, sep, value = argument.partition("=")
    return value if sep and name.startswith("-") else argument


def map_argument(argument: str, change: Callable[[str], str]) -> str:
    """An argv word with `change` applied to its value (see `argument_value`)."""
    value = argument_value(argument)
    return argument[:len(argument) - len(value)] + change(value)


def strings_in(document: Any) -> Iterator[str]:
    """Every string value of `document`, depth first."""
    if isinstance(document, str):
        yield document
    elif isinstance(document, Mapping):
        for value in document.values():
            yield from strings_in(value)
    elif isinstance(document, (list, tuple)):
        for item in document:
            yield from strings_in(item)
