"""The components are found, not listed: every file of kubesmith/modules that exports a `MODULE` is one, in
its `position` order, and the agent's configTrials follow the trials the modules declare. Adding a
component is one file plus its test (docs/architecture.md, "Where to add what")."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from kubesmith.modules import MODULES, TRIAL_SECONDS
from kubesmith.modules.agent import TRIALS, AgentOptions, TrialComponent, defaults_text
from kubesmith.modules.base import Module, Trial
from kubesmith.modules.discovery import _in_order
from kubesmith.modules.etcd import EtcdOptions

SOURCE = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SOURCE / "kubesmith" / "modules"


def _module_classes(path: Path) -> list[str]:
    """The classes a file defines that derive from Module by name (what a component file does)."""
    tree = ast.parse(path.read_text())
    return [node.name for node in tree.body if isinstance(node, ast.ClassDef)
            and any(isinstance(base, ast.Name) and base.id == "Module" for base in node.bases)]


def test_every_file_that_defines_a_component_exports_it_and_is_found() -> None:
    """A component class without `MODULE = ...` would silently be no component at all."""
    defining = {path.stem: classes for path in sorted(PACKAGE.glob("*.py")) if (classes := _module_classes(path))}
    assert defining, "no component files found"
    found = {type(module).__module__.rpartition(".")[2]: type(module).__name__ for module in MODULES}
    assert found == {stem: classes[0] for stem, classes in defining.items()}
    assert all(len(classes) == 1 for classes in defining.values())


def test_the_order_is_the_positions_and_helpers_are_no_components() -> None:
    assert [module.position for module in MODULES] == sorted(module.position for module in MODULES)
    assert MODULES[0].key == "etcd" and MODULES[-1].key == "core_dns"
    assert not {"base", "cluster", "merge", "kubeconfigs", "discovery"} & {module.key for module in MODULES}


def _fake(key: str, position: int) -> Module:
    return type(f"Fake{position}", (Module,), {"key": key, "position": position, "title": key,
                                               "options": EtcdOptions, "roles": frozenset()})()


@pytest.mark.parametrize(("modules", "clash"), [
    ([("a", 10), ("b", 10)], "position 10"),
    ([("a", 10), ("a", 20)], "key 'a'"),
])
def test_two_components_in_one_place_are_refused(modules: list[tuple[str, int]], clash: str) -> None:
    with pytest.raises(ValueError, match=clash):
        _in_order([_fake(key, position) for key, position in modules])


def test_configtrials_keys_are_the_declared_trials_by_rank() -> None:
    """The schema lists configTrials' keys by rank (the longer trials first), as before they were found."""
    assert get_args(TrialComponent) == ("etcd", "kube-apiserver", "kubelet", "kube-controller-manager",
                                        "kube-scheduler", "kube-proxy", "containerd")
    assert [trial.service for trial in TRIALS] == list(get_args(TrialComponent))
    assert set(TRIAL_SECONDS) == set(get_args(TrialComponent))
    schema = AgentOptions.model_json_schema()["properties"]["configTrials"]
    assert schema["propertyNames"]["enum"] == list(get_args(TrialComponent))
    assert "Defaults: 60 for etcd, kube-apiserver and kubelet, 30 for the others." in schema["description"]


@pytest.mark.parametrize(("trials", "text"), [
    ((Trial("a", 60.0, 1), Trial("b", 60.0, 2), Trial("c", 30.0, 3)), "60 for a and b, 30 for the others"),
    ((Trial("a", 90.0, 1), Trial("b", 45.5, 2), Trial("c", 30.0, 3)), "90 for a, 45.5 for b, 30 for the others"),
    ((Trial("a", 30.0, 1), Trial("b", 30.0, 2), Trial("c", 30.0, 3)), "30 for a, b and c"),
])
def test_the_defaults_description_follows_the_declared_lengths(trials: tuple[Trial, ...], text: str) -> None:
    assert defaults_text(trials) == text


PLANTED = '''
from kubesmith.modules.base import Module, Trial
from kubesmith.vocabulary.facts import Contribution
from kubesmith.vocabulary.types import StrictModel


class PlantedOptions(StrictModel):
    enable: bool = False


class PlantedModule(Module):
    key = "planted_thing"
    position = POSITION
    title = "a component planted by the test"
    options = PlantedOptions
    roles = frozenset({"etcd"})
    trial = Trial("planted-thing", 45.0, rank=8)

    def contribute(self, ctx, options):
        return Contribution()


MODULE = PlantedModule()
'''


def _camel(key: str) -> str:
    first, *rest = key.split("_")
    return first + "".join(word.title() for word in rest)


def test_one_new_file_is_a_new_component_with_its_trial(tmp_path: Path) -> None:
    """A copy of the tree with one file added: the component is in `options` where its position puts it
    (between the first two components), and its trial among configTrials' keys where its rank does, with
    no other file touched."""
    first, second = MODULES[0], MODULES[1]
    position = (first.position + second.position) // 2
    assert first.position < position < second.position, "no room between the first two components"
    shutil.copytree(SOURCE / "kubesmith", tmp_path / "kubesmith", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "kubesmith" / "modules" / "planted_thing.py").write_text(PLANTED.replace("POSITION", str(position)))
    run = subprocess.run([sys.executable, "-c", "from kubesmith.cli import main; main()", "options", "-o", "json"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    paths = [doc["path"] for doc in json.loads(run.stdout)]
    sections = list(dict.fromkeys(path.split(".")[2] for path in paths if path.startswith("spec.components.")))
    assert sections[:3] == [_camel(first.key), "plantedThing", _camel(second.key)]
    trials = next(doc for doc in json.loads(run.stdout) if doc["path"] == "spec.components.agent.configTrials")
    assert "60 for etcd, kube-apiserver and kubelet, 45 for planted-thing, 30 for the others" in trials["description"]
