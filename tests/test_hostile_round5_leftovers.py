"""Hostile input, round 5: round 4's leftovers. Feature gates on 1.35 as the v1.35.6 binaries take them (a gate
set against its lock stops them, GA gates 1.36 removed included), and on 1.36 the GA gates the first table
missed; kube-scheduler v1.36.2 on plugins it lacks outside `enabled` (it starts and ignores them: a warning)
and on an extender whose certificate it would not check (a weakening, refused).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT, kubesmith
from test_hostile_values import HEAD, HOSTS, component
from test_spec_hostile import BOUND_SECONDS, assert_one_located_error, bounded

SCHEDULER = "spec.components.scheduler.extraConfig"


def head(version: str) -> str:
    return HEAD.replace('"1.33.2"', f'"{version}"')


def profile(body: str) -> str:
    return HOSTS + component("scheduler", f"{{extraConfig: {{profiles: [{body}]}}}}")


# name -> (kubernetesVersion, what follows it, option path of the one error, message fragment)
CASES: dict[str, tuple[str, str, str, str]] = {
    # kubelet v1.35.6: 'cannot set feature gate NodeSwap to false, feature is locked to true'
    "gate-locked-135": ("1.35.6", HOSTS + "  featureGates: {NodeSwap: false}\n", "spec.featureGates.NodeSwap",
                        "locked to true in Kubernetes 1.35"),
    # GA and locked in 1.35, removed in 1.36 (v1.36.2: 'unrecognized feature gate')
    "gate-locked-135-removed-136": ("1.35.6", HOSTS + component("kubelet", "{featureGates: "
                                                                          "{HonorPVReclaimPolicy: false}}"),
                                    "spec.components.kubelet.featureGates.HonorPVReclaimPolicy", "locked to true"),
    "gate-locked-135-kubelet-config": ("1.35.6", HOSTS + component("kubelet", "{extraConfig: {featureGates: "
                                                                              "{MemoryManager: false}}}"),
                                       "spec.components.kubelet.extraConfig.featureGates.MemoryManager",
                                       "locked to true"),
    # kube-apiserver v1.36.2: 'cannot set feature gate ServiceAccountTokenNodeBinding to false, feature is
    # locked to true' (a GA gate the first 1.36 table lacked)
    "gate-locked-136-was-missing": ("1.36.2", HOSTS + "  featureGates: {ServiceAccountTokenNodeBinding: false}\n",
                                    "spec.featureGates.ServiceAccountTokenNodeBinding", "locked to true"),
    # kube-scheduler v1.36.2 starts with tlsConfig.insecure: true and checks no certificate
    "extender-insecure-tls": ("1.36.2", HOSTS + component("scheduler", "{extraConfig: {extenders: [{urlPrefix: "
                                                                       "'https://e.example', filterVerb: f, "
                                                                       "tlsConfig: {insecure: true}}]}}"),
                              f"{SCHEDULER}.extenders[0].tlsConfig.insecure", "not check the extender's certificate"),
}

# name -> (kubernetesVersion, what follows it, the warning's option path): valid, with that located warning
WARNED: dict[str, tuple[str, str, str]] = {
    # v1.35.6 binaries: 'unrecognized feature gate: NoSuchGate', then go on (no longer "passed on unchecked")
    "gate-unknown-135": ("1.35.6", HOSTS + "  featureGates: {NoSuchGate: true}\n", "spec.featureGates.NoSuchGate"),
    "gate-removed-136": ("1.36.2", HOSTS + "  featureGates: {HonorPVReclaimPolicy: true}\n",
                         "spec.featureGates.HonorPVReclaimPolicy"),
    # kube-scheduler v1.36.2 starts with these and ignores the names
    "scheduler-disabled-unknown": ("1.36.2", profile("{plugins: {score: {disabled: [{name: ImageLocalit}]}}}"),
                                   f"{SCHEDULER}.profiles[0].plugins.score.disabled[0].name"),
    "scheduler-multipoint-disabled-unknown": ("1.36.2", profile("{plugins: {multiPoint: {disabled: "
                                                                "[{name: NoSuchPlugin}]}}}"),
                                              f"{SCHEDULER}.profiles[0].plugins.multiPoint.disabled[0].name"),
    "scheduler-plugin-config-unknown": ("1.36.2", profile("{pluginConfig: [{name: NodeResourcesFitt, args: {}}]}"),
                                        f"{SCHEDULER}.profiles[0].pluginConfig[0].name"),
    "scheduler-plugin-config-unknown-135": ("1.35.6", profile("{pluginConfig: [{name: PodGroupPodsCount}]}"),
                                            f"{SCHEDULER}.profiles[0].pluginConfig[0].name"),
}

# name -> (kubernetesVersion, what follows it): valid, without a warning
LEGITIMATE: dict[str, tuple[str, str]] = {
    "gate-locked-135-at-its-value": ("1.35.6", HOSTS + "  featureGates: {NodeSwap: true, HonorPVReclaimPolicy: "
                                               "true}\n"),
    "gate-beta-135": ("1.35.6", HOSTS + component("kubelet", "{featureGates: {ImageVolume: true}}")),
    "scheduler-disabled-known": ("1.36.2", profile("{plugins: {score: {disabled: [{name: '*'}, {name: "
                                                   "ImageLocality}]}, multiPoint: {disabled: [{name: "
                                                   "NodeResourcesBalancedAllocation}]}}}")),
    "scheduler-plugin-config-known": ("1.36.2", profile("{pluginConfig: [{name: NodeResourcesFit, args: "
                                                        "{scoringStrategy: {type: MostAllocated}}}]}")),
    "extender-checked-tls": ("1.36.2", HOSTS + component("scheduler", "{extraConfig: {extenders: [{urlPrefix: "
                                                                      "'https://e.example', filterVerb: f, "
                                                                      "tlsConfig: {insecure: false, caFile: "
                                                                      "/etc/kubesmith/extender-ca.pem}}]}}")),
}


@pytest.fixture(scope="module", autouse=True)
def warm() -> None:
    """Imports and the release registry load once, outside the bounded runs."""
    assert kubesmith("validate", str(ROOT / "examples" / "single-node.yaml")).returncode == 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_what_the_binary_refuses_or_what_weakens_it_is_one_located_error(name: str, tmp_path: Path) -> None:
    version, text, path, fragment = CASES[name]
    (tmp_path / f"{name}.yaml").write_text(head(version) + text)
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", f"{name}.yaml", cwd=tmp_path)
    assert_one_located_error(result, f"{name}.yaml", path, fragment)
    assert result.stderr.splitlines()[-1] == "1 error found", result.stderr


@pytest.mark.parametrize("name", sorted(WARNED))
def test_what_the_binary_ignores_is_a_located_warning(name: str, tmp_path: Path) -> None:
    version, text, path = WARNED[name]
    (tmp_path / f"{name}.yaml").write_text(head(version) + text)
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", f"{name}.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: {path}: "), result.stderr
    assert f"({name}.yaml:" in warnings[0], result.stderr


@pytest.mark.parametrize("name", sorted(LEGITIMATE))
def test_the_legitimate_neighbour_stays_valid(name: str, tmp_path: Path) -> None:
    version, text = LEGITIMATE[name]
    (tmp_path / f"{name}.yaml").write_text(head(version) + text)
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", f"{name}.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr and "warning" not in result.stderr, result.stderr


@pytest.mark.parametrize("name", ["gate-locked-135", "extender-insecure-tls"])
def test_plan_offline_refuses_them_too(name: str, tmp_path: Path) -> None:
    version, text, path, _ = CASES[name]
    (tmp_path / f"{name}.yaml").write_text(head(version) + text)
    result = kubesmith("plan", f"{name}.yaml", "--offline", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert f"error: {path}: " in result.stderr and "Traceback" not in result.stderr, result.stderr
