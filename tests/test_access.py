"""`kubesmith kubeconfig --merge`: the new cluster, user and context join a kubeconfig without
disturbing its other entries, and real kubectl reads the result."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from kubesmith.backends.access import binding, group_of, merge_into
from kubesmith.pki.documents import kubeconfig

EXISTING = """\
apiVersion: v1
kind: Config
clusters:
- name: staging
  cluster: {server: 'https://staging.example:6443', insecure-skip-tls-verify: true}
- name: dev
  cluster: {server: 'https://dev.example:6443', insecure-skip-tls-verify: true}
users:
- name: bob
  user: {token: abc}
- name: carol
  user: {token: def}
contexts:
- name: staging
  context: {cluster: staging, user: bob, namespace: web}
- name: dev
  context: {cluster: dev, user: carol}
current-context: dev
preferences: {colors: true}
"""


def entries(document: dict, section: str) -> dict[str, str]:
    return {item["name"]: yaml.safe_dump(item) for item in document[section]}


def test_merge_keeps_every_other_entry_and_switches_to_the_new_context(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(EXISTING)
    before = yaml.safe_load(EXISTING)
    new = kubeconfig("lab", "https://10.213.0.11:6443", "alice", b"ca", b"cert", b"key")
    merge_into(path, new)
    merge_into(path, new)  # again: replaced in place, not duplicated
    after = yaml.safe_load(path.read_text())
    for section in ("clusters", "users", "contexts"):
        kept = entries(after, section)
        assert {name: kept[name] for name in entries(before, section)} == entries(before, section)
        assert list(kept) == [*entries(before, section), new[section][0]["name"]]
    assert after["current-context"] == "alice@lab" and after["preferences"] == {"colors": True}
    assert path.stat().st_mode & 0o777 == 0o600
    listed = subprocess.run(["kubectl", "--kubeconfig", str(path), "config", "get-contexts", "-o", "name"],
                            capture_output=True, text=True, check=True, timeout=30).stdout.split()
    assert listed == ["alice@lab", "dev", "staging"]


def test_a_persons_binding_ties_only_their_own_group_to_the_role() -> None:
    document = binding("alice", "view")
    assert document["metadata"]["name"] == group_of("alice") == "kubesmith:user:alice"
    assert document["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}
    assert document["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                     "name": "kubesmith:user:alice"}]
