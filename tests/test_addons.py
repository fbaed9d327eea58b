"""spec.addons: manifests read and checked with the spec (located errors before anything connects),
labelled with their add-on and mode, and planned as files for the add-on step; the step's own
ordering and roll-out judgement. (Applied against real API servers: tests/test_dns_lab.py.)"""

from __future__ import annotations

from pathlib import Path

from conftest import kubesmith

from kubesmith.backends.addons import read_dir, ref, rollout_waiting
from kubesmith.formats import yaml_bytes
from kubesmith.plan.evaluate import evaluate
from kubesmith.spec.load import load_spec_file
from kubesmith.versions.registry import load_registry

SPEC = """apiVersion: kubesmith.io/v1alpha1
kind: Cluster
metadata: {name: addons}
spec:
  kubernetesVersion: "1.36.2"
  hosts:
    - {name: cp, address: 10.0.0.11, roles: [control-plane, etcd, node]}
  addons:
%s
"""
GOOD = """apiVersion: v1
kind: Namespace
metadata: {name: team}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: team
  labels: {addonmanager.kubernetes.io/mode: EnsureExists}
data: {a: "1"}
"""


def write(tmp_path: Path, entries: str, **files: str) -> Path:
    for name, text in files.items():
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC % entries)
    return spec


def test_manifests_are_planned_with_their_mode_and_addon_label(tmp_path: Path) -> None:
    spec = write(tmp_path, "    - team.yaml\n    - more", **{"team.yaml": GOOD, "more/a.yaml": GOOD.replace(
        "team", "other"), "more/notes.txt": "not a manifest"})
    loaded = load_spec_file(spec)
    plan = evaluate(loaded.cluster, load_registry())
    files = {f.path: f.data for f in plan.host("cp").files if f.path.startswith("/etc/kubernetes/addons/spec-")}
    assert set(files) == {"/etc/kubernetes/addons/spec-team.yaml", "/etc/kubernetes/addons/spec-more.yaml"}
    items = files["/etc/kubernetes/addons/spec-team.yaml"]["items"]
    assert [(o["kind"], o["metadata"]["labels"]["addonmanager.kubernetes.io/mode"]) for o in items] == [
        ("Namespace", "Reconcile"), ("ConfigMap", "EnsureExists")]
    assert {o["metadata"]["labels"]["kubesmith.io/addon"] for o in items} == {"spec-team"}


def test_malformed_manifests_are_located_errors_each(tmp_path: Path) -> None:
    spec = write(tmp_path, "    - bad.yaml\n    - missing.yaml\n    - twice.yaml\n    - broken.yaml",
                 **{"bad.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: default}\n---\n"
                                "kind: Secret\nmetadata: {name: s}\n---\n- a list\n---\n"
                                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: m\n"
                                "  labels: {addonmanager.kubernetes.io/mode: Sometimes}\n",
                    "twice.yaml": GOOD + "---\n" + GOOD.split("---\n")[0],
                    "broken.yaml": "apiVersion: v1\nkind: [\n"})
    result = kubesmith("validate", str(spec))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    errors = result.stderr.splitlines()
    expected = [
        f"error: spec.addons[0]: {tmp_path}/bad.yaml:1: ConfigMap '(no name)': metadata.name is missing ({spec}:9:7)",
        f"error: spec.addons[0]: {tmp_path}/bad.yaml:5: apiVersion is missing (every object names its apiVersion "
        f"and kind) ({spec}:9:7)",
        f"error: spec.addons[0]: {tmp_path}/bad.yaml:8: a manifest document must be a mapping (a Kubernetes "
        f"object), got a list ({spec}:9:7)",
        f"error: spec.addons[0]: {tmp_path}/bad.yaml:10: ConfigMap 'm': label addonmanager.kubernetes.io/mode="
        f"'Sometimes': expected Reconcile or EnsureExists ({spec}:9:7)",
        f"error: spec.addons[1]: {tmp_path}/missing.yaml: no such file or directory ({spec}:10:7)",
        f"error: spec.addons[2]: {tmp_path}/twice.yaml:13: Namespace 'team' is also in {tmp_path}/twice.yaml:1 "
        f"({spec}:11:7)",
    ]
    for line in expected:
        assert line in errors, (line, errors)
    assert any(line.startswith(f"error: spec.addons[3]: {tmp_path}/broken.yaml:3:1: not valid YAML") for line in errors)
    # apply refuses the same spec before it connects to anything
    refused = kubesmith("apply", str(spec), "--ssh-config", str(tmp_path / "no-such-ssh-config"))
    assert refused.returncode == 1 and expected[0] in refused.stderr.splitlines()


def test_the_step_applies_namespaces_and_rbac_first_and_judges_rollouts(tmp_path: Path) -> None:
    workload = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "n"}}
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}}
    (tmp_path / "a.yaml").write_bytes(yaml_bytes({"apiVersion": "v1", "kind": "List", "items": [workload, role]}))
    (tmp_path / "b.yaml").write_bytes(yaml_bytes({"apiVersion": "v1", "kind": "List", "items": [namespace]}))
    assert [o["kind"] for o in read_dir(tmp_path)] == ["Namespace", "ClusterRole", "Deployment"]
    assert ref(workload) == "apps/v1|Deployment|n|d" and ref(role) == "rbac.authorization.k8s.io/v1|ClusterRole||r"
    done = {"kind": "Deployment", "metadata": {"generation": 2}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}}
    assert rollout_waiting(done) is None
    assert rollout_waiting({**done, "status": {**done["status"], "observedGeneration": 1}})
    assert rollout_waiting({**done, "status": {**done["status"], "replicas": 3}})  # an old pod still runs
    assert rollout_waiting({**done, "status": {**done["status"], "availableReplicas": 1}})
