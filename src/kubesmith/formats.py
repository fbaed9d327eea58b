"""Deterministic bytes for the plan's documents: YAML, JSON and TOML, the same on every run.

render, join and the agent write documents through these, so a file's bytes (and its hash, which
apply compares) never depend on which of them wrote it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import tomli_w
import yaml

try:
    _Dumper: type = yaml.CSafeDumper
except AttributeError:  # PyYAML without libyaml
    _Dumper = yaml.SafeDumper


def yaml_bytes(data: Any) -> bytes:
    """Deterministic YAML: sorted keys, block style, plain Python types only."""
    return yaml.dump(_plain(data), Dumper=_Dumper, sort_keys=True, default_flow_style=False,
                     allow_unicode=True).encode()


def json_bytes(data: Any) -> bytes:
    """Sorted, one line per document: the C encoder (indent forces the pure-Python one, 10x slower)."""
    return (json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n").encode()


def toml_bytes(data: Any) -> bytes:
    """TOML (containerd's configuration), keys in the plan's order."""
    return tomli_w.dumps(_plain(data)).encode()


DOCUMENT_WRITERS: dict[str, Callable[[Any], bytes]] = {
    "yaml": yaml_bytes, "json": lambda data: json_bytes(_plain(data)), "toml": toml_bytes}


def _plain(data: Any) -> Any:
    if isinstance(data, Mapping):
        return {str(key): _plain(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_plain(item) for item in data]
    return data
