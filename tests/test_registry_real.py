"""The version registry agrees with the real v1.36.2 binaries: their flags, deprecated flags and
feature gates (alpha and beta from `--help`; GA, locked and deprecated ones as the binaries take them),
and with the v1.35.6 binaries' feature gates. Where they disagree the binary is the truth:
`tools/registry_from_binaries.py` updates the data."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from binary_facts import HelpFacts, probe_gate, read_help
from k8s_support import BINARIES, OLDER_RELEASE, older_binaries, real_binaries, real_release

from kubesmith.versions.registry import load_registry

REGISTRY = load_registry()


@pytest.fixture(scope="module")
def minor() -> str:
    return ".".join(real_release().split(".")[:2])


@pytest.fixture(scope="module")
def help_of() -> dict[str, HelpFacts]:
    return {binary: read_help(real_binaries() / binary) for binary in BINARIES}


def unknown_flag(binary: Path, flag: str) -> bool:
    result = subprocess.run([str(binary), f"--{flag}=1", "--version"], capture_output=True, text=True, timeout=60,
                            check=False)
    return f"unknown flag: --{flag}" in result.stdout + result.stderr


@pytest.mark.parametrize("binary", BINARIES)
def test_every_flag_the_binary_lists_is_in_the_registry_and_every_other_is_hidden_but_accepted(
        binary: str, minor: str, help_of: dict[str, HelpFacts]) -> None:
    registry_flags = REGISTRY.flags(binary, minor)
    listed = help_of[binary].flags
    assert len(listed) > 50
    assert sorted(listed - registry_flags) == []
    hidden = sorted(registry_flags - listed)
    assert [flag for flag in hidden if unknown_flag(real_binaries() / binary, flag)] == []


@pytest.mark.parametrize("binary", BINARIES)
def test_deprecated_flags_are_the_ones_the_binary_marks(binary: str, help_of: dict[str, HelpFacts]) -> None:
    entry = REGISTRY._binaries[binary]  # noqa: SLF001 - the data under test
    listed = help_of[binary]
    assert entry.deprecated & listed.flags == listed.deprecated


# release -> its binaries' directory: the tested release, and the previous minor (gates only)
RELEASES = {"tested": real_binaries, "older": older_binaries}


def _minor(release: str) -> str:
    return ".".join((real_release() if release == "tested" else OLDER_RELEASE).split(".")[:2])


@pytest.mark.parametrize("release", sorted(RELEASES))
@pytest.mark.parametrize("binary", BINARIES)
def test_alpha_and_beta_gates_are_the_ones_the_binary_lists(binary: str, release: str) -> None:
    gates = REGISTRY.gates(binary, _minor(release))
    assert gates is not None
    listed = read_help(RELEASES[release]() / binary).gates
    assert len(listed) > 100
    registry_view = {name: (fact.stage, fact.default) for name, fact in gates.items()
                     if fact.stage in ("ALPHA", "BETA")}
    assert registry_view == listed


@pytest.mark.parametrize("release", sorted(RELEASES))
@pytest.mark.parametrize("binary", ["kube-apiserver", "kubelet", "kube-proxy"])
def test_ga_locked_and_deprecated_gates_are_taken_as_the_registry_says(binary: str, release: str) -> None:
    gates = REGISTRY.gates(binary, _minor(release))
    assert gates is not None
    path = RELEASES[release]() / binary
    unlisted = {name: fact for name, fact in gates.items() if fact.stage in ("GA", "DEPRECATED")}
    assert len(unlisted) > 40 and sum(fact.locked for fact in unlisted.values()) > 30
    for name, fact in sorted(unlisted.items())[::4]:  # a quarter of them: each probe starts the binary
        if fact.locked:
            assert probe_gate(path, name, not fact.default) == "locked", name
            assert probe_gate(path, name, bool(fact.default)) != "locked", name
        else:
            assert probe_gate(path, name, True) in ("settable", "deprecated"), name
        if fact.stage == "DEPRECATED":
            assert probe_gate(path, name, True) == "deprecated", name
    assert probe_gate(path, "NoSuchGate", True) == "unknown"
    assert probe_gate(path, "ServerSideApply", False) == "unknown"  # GA, locked, then removed: neither knows it


def test_unknown_gates_are_warnings_and_locked_gates_located_errors(tmp_path: Path) -> None:
    """As the v1.36.2 binaries have it: "unrecognized feature gate" is a warning, a locked gate stops them."""
    from conftest import kubesmith

    (tmp_path / "gates.yaml").write_text(
        "apiVersion: kubesmith.io/v1alpha1\nkind: Cluster\nmetadata: {name: fg}\nspec:\n"
        "  kubernetesVersion: '1.36.2'\n"
        "  featureGates: {NoSuchGate: true, APIResponseCompresion: true, ImageVolume: true}\n"
        "  hosts:\n    - {name: h1, address: 10.0.0.11, roles: [control-plane, etcd, node]}\n"
        "  components:\n    kubelet:\n      featureGates: {NodeSwap: false}\n")
    result = kubesmith("validate", "gates.yaml", cwd=tmp_path)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert [line for line in lines if line.startswith(("error:", "warning: spec.featureGates"))] == [
        "warning: spec.featureGates.NoSuchGate: Kubernetes 1.36 has no feature gate 'NoSuchGate': its binaries "
        "ignore it with a warning, so it does nothing (gates.yaml:6:18)",
        "warning: spec.featureGates.APIResponseCompresion: Kubernetes 1.36 has no feature gate "
        "'APIResponseCompresion': its binaries ignore it with a warning, so it does nothing; did you mean "
        "'APIResponseCompression'? (gates.yaml:6:36)",
        "error: spec.components.kubelet.featureGates.NodeSwap: feature gate NodeSwap is GA and locked to true in "
        "Kubernetes 1.36; remove it from the spec (gates.yaml:11:22)"]


def test_a_release_without_gate_facts_says_its_gates_go_unchecked(tmp_path: Path) -> None:
    """The registry read gates from the 1.35 and 1.36 binaries only: for another release it must not pretend."""
    from conftest import kubesmith

    text = ("apiVersion: kubesmith.io/v1alpha1\nkind: Cluster\nmetadata: {name: fg}\nspec:\n"
            "  kubernetesVersion: '1.33.0'\n  featureGates: {NoSuchGate: true}\n"
            "  hosts:\n    - {name: h1, address: 10.0.0.11, roles: [control-plane, etcd, node]}\n")
    (tmp_path / "old.yaml").write_text(text)
    result = kubesmith("validate", "old.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert ("warning: spec.kubernetesVersion: kubesmith knows the feature gates of Kubernetes 1.35 and 1.36 only: "
            "the gates in this file are passed on unchecked for 1.33") in result.stderr
    (tmp_path / "plain.yaml").write_text(text.replace("  featureGates: {NoSuchGate: true}\n", ""))
    assert "feature gates" not in kubesmith("validate", "plain.yaml", cwd=tmp_path).stderr


def test_a_cluster_gate_reaches_only_the_components_that_know_it(tmp_path: Path) -> None:
    from pki_support import write_spec
    from plan_support import plan_of

    spec = write_spec(tmp_path / "one.yaml", "gated", [{"name": "h1", "address": "10.0.0.11",
                                                         "roles": ["control-plane", "etcd", "node"]}])
    text = spec.read_text().replace("spec:\n", "spec:\n  featureGates: {ControllerManagerReleaseLeaderElectionLockOnExit: true}\n", 1)
    spec.write_text(text)
    host = plan_of(spec).host("h1")
    assert any("ControllerManagerReleaseLeaderElectionLockOnExit=true" in a
               for a in host.service("kube-controller-manager").argv)
    assert not any("feature-gates" in a for a in host.service("kube-scheduler").argv)  # 1.36's scheduler knows it not


@pytest.mark.parametrize("binary", BINARIES)
def test_flag_types_are_the_ones_the_binary_shows(binary: str, help_of: dict[str, HelpFacts]) -> None:
    """The types extraArgs values are checked against (booleans, durations, integers, lists)."""
    entry = REGISTRY._binaries[binary]  # noqa: SLF001 - the data under test
    assert help_of[binary].types == entry.types
    assert entry.types.get("profiling", "bool") == "bool"
