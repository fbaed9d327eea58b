"""The plan of a cluster file, as `kubesmith plan` evaluates it: one helper for every test."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from kubesmith.plan.evaluate import evaluate
from kubesmith.vocabulary.model import Plan
from kubesmith.spec.load import load_spec_file, load_spec_text
from kubesmith.versions.registry import VersionRegistry, load_registry


@cache
def registry() -> VersionRegistry:
    return load_registry()


def plan_of(spec: Path) -> Plan:
    return evaluate(load_spec_file(spec).cluster, registry())


def plan_of_text(text: str, name: str = "cluster.yaml") -> Plan:
    return evaluate(load_spec_text(text, name, registry()).cluster, registry())
