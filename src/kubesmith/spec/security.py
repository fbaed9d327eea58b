"""Settings that weaken a secure default, each named by the CIS Kubernetes Benchmark (v1.12) check
it breaks. Such a setting is an error unless the cluster file opts out by that check's id in
`spec.security.allowInsecure`; with the opt-out, `validate` and `plan` still say which check breaks.

Each module declares its own rules (`Module.cis_rules`, in modules/<component>.py); this file
applies them to the typed component options.

tests/test_cis.py proves each id here: the plan of a spec with the setting (and the opt-out) fails
exactly that check when evaluated as kube-bench does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubesmith.modules import MODULES
from kubesmith.modules.base import CisRule
from kubesmith.spec.effective import effective, go_bool
from kubesmith.vocabulary.errors import LocPart
from kubesmith.spec.model import Components
from kubesmith.versions.registry import load_registry

Loc = tuple[LocPart, ...]


@dataclass(frozen=True, slots=True)
class Weakening:
    loc: Loc  # under spec.components.<component>
    check: str  # CIS id
    title: str


TITLES = {rule.check: rule.title for module in MODULES for rule in module.cis_rules}


def weakenings(components: Any) -> Iterator[tuple[str, Weakening]]:
    """(component alias, weakening) for every insecure setting in the typed component options."""
    for module in MODULES:
        alias = Components.model_fields[module.key].alias or module.key
        options = getattr(components, module.key)
        for rule in module.cis_rules:
            for loc in _found(rule, options, alias, module.binary):
                yield alias, Weakening(loc, rule.check, rule.title)


def _found(rule: CisRule, options: Any, component: str, binary: str | None = None) -> list[Loc]:
    """Where the file weakens what `rule` guards: its typed option, or the setting of its flag (typed option,
    flag or configuration field) when the value given there, as the binary reads it, is weak (the defaults
    are not)."""
    if rule.flag is None:
        return [rule.loc] if rule.weak is not None and rule.weak(options) else []
    found = effective(options, component, rule.flag)
    if found is not None and rule.secure is not None and (
            "extraConfig" in found[0] and not isinstance(found[1], bool) or go_bool(found[1]) is None and
            binary is not None and load_registry().flag_type(binary, rule.flag) == "bool"):
        # a configuration field of another JSON type, or a boolean flag Go refuses: the type check names it,
        # the one error of that value (the binary would not start)
        return []
    return [found[0]] if found is not None and _weak(rule, found[1]) else []


def _weak(rule: CisRule, value: Any) -> bool:
    """A boolean setting: anything but its secure value as Go reads it; a value Go refuses counts as weak
    too where no type check names it."""
    if rule.secure is not None:
        return go_bool(value) is not rule.secure
    return rule.weak is not None and rule.weak(value)
