"""The components are the files of this package that export a `MODULE`: nothing lists them by hand, so
adding a component is one file (and its test). Helpers (base, cluster, merge...) export none."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from kubesmith.modules.base import Module

PACKAGE = __name__.rpartition(".")[0]


def component_modules(besides: str = "") -> tuple[Module, ...]:
    """Every component module's `MODULE` in `position` order, but the one of the file named `besides` (a
    module that needs the others' declarations while it is itself being imported: the agent's trials)."""
    found: list[Module] = []
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda info: info.name):
        name = f"{PACKAGE}.{info.name}"
        if name != besides and (module := getattr(importlib.import_module(name), "MODULE", None)) is not None:
            found.append(_checked(name, module))
    return _in_order(found)


def _checked(name: str, module: object) -> Module:
    if not isinstance(module, Module):
        raise TypeError(f"{name}.MODULE is {module!r}, not a component Module")
    return module


def _in_order(found: list[Module]) -> tuple[Module, ...]:
    """By position; two components in one place, or under one key, have no order: a programming error."""
    for attribute in ("position", "key"):
        values = [getattr(module, attribute) for module in found]
        if clash := sorted({value for value in values if values.count(value) > 1}):
            raise ValueError(f"two component modules share the {attribute} {clash[0]!r}")
    return tuple(sorted(found, key=lambda module: module.position))
