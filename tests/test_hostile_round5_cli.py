"""Hostile command lines and host names, audit round 5: a blank $KUBESMITH_STATE_DIR, a state directory
inside the rendered tree (every CA's private key in a node's tree), and the names every
API server certificate carries (`localhost`, `kubernetes`) as a host or a token's node. Each is refused
with one line naming its flag, variable or option (exit 2 on the command line, 1 with file:line:col in
the cluster file), before anything is written; the legitimate neighbours still work.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ca_support import ca_args, make_ca
from conftest import ROOT, kubesmith
from test_hostile_values import HEAD
from test_spec_hostile import BOUND_SECONDS, assert_one_located_error, bounded

SINGLE = ROOT / "examples" / "single-node.yaml"
OVERLAP = "the rendered tree (DIR/<host>/<path on host>) is copied to the hosts"


def test_a_blank_state_dir_variable_is_refused_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBESMITH_STATE_DIR", "   ")
    result = kubesmith("render", str(SINGLE), "--out-dir", "out", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr == ("error: $KUBESMITH_STATE_DIR: '   ' is empty: give a path (for the current directory, "
                             "write .), or unset it\n")
    assert list(tmp_path.iterdir()) == []


def test_the_state_dir_variable_still_names_the_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBESMITH_STATE_DIR", str(tmp_path / "state"))
    result = kubesmith("render", str(SINGLE), "--out-dir", "out", "--host", "node1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "state" / "pki" / "cas" / "kubernetes-ca.key").exists()
    # and a --state-dir flag wins over a blank variable, as it wins over any
    monkeypatch.setenv("KUBESMITH_STATE_DIR", " ")
    again = kubesmith("render", str(SINGLE), "--out-dir", "out", "--state-dir", "state", "--host", "node1",
                      cwd=tmp_path)
    assert again.returncode == 0, again.stderr


# --out-dir, --state-dir (None: the variable or the default), what the error names
OVERLAPS: dict[str, tuple[str, str | None, str]] = {
    "state-in-a-host-tree": ("out", "out/node1", "--state-dir 'out/node1' lies inside --out-dir 'out'"),
    "state-is-the-tree": ("st", "st", "--state-dir 'st' lies inside --out-dir 'st'"),
    "tree-holds-the-default-state": (".", None, "the default state directory"),
}


@pytest.mark.parametrize("name", sorted(OVERLAPS))
def test_a_state_dir_and_a_rendered_tree_that_overlap_are_refused(name: str, tmp_path: Path) -> None:
    out_dir, state_dir, says = OVERLAPS[name]
    (tmp_path / "c.yaml").write_text(SINGLE.read_text())
    state = ("--state-dir", state_dir) if state_dir else ()
    result = kubesmith("render", "c.yaml", "--out-dir", out_dir, *state, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert says in result.stderr and OVERLAP in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


@pytest.mark.parametrize("out_dir", ["out/trees", "state/rendered"])
def test_a_state_dir_beside_or_holding_the_rendered_tree_works(out_dir: str, tmp_path: Path) -> None:
    """`kubesmith run` itself renders into STATE/rendered: a tree inside the state directory ships no key."""
    result = kubesmith("render", str(SINGLE), "--out-dir", out_dir, "--state-dir", "state", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "state" / "pki" / "cas").is_dir() and (tmp_path / out_dir / "node1").is_dir()


# names every API server certificate carries (pki/certlist.py APISERVER_NAMES)
@pytest.mark.parametrize("name", ["localhost", "kubernetes"])
def test_a_host_named_as_the_api_server_is_one_located_error(name: str, tmp_path: Path) -> None:
    hosts = f"  hosts:\n    - {{name: {name}, address: 10.0.0.11, roles: [control-plane, etcd, node]}}\n"
    (tmp_path / "c.yaml").write_text(HEAD + hosts)
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", "c.yaml", cwd=tmp_path)
    assert_one_located_error(result, "c.yaml", "spec.hosts[0].name", f"{name!r} names the cluster's API server")


@pytest.mark.parametrize("name", ["localhost", "kubernetes"])
def test_a_token_for_the_api_servers_name_is_refused_without_settings(name: str, tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "ca")
    result = kubesmith("token", "create", "--node", name, *ca_args(ca))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and not result.stdout, result.stderr
    assert f"--node: {name!r} names the cluster's API server" in result.stderr
    assert not (ca.directory / "state" / "tokens.json").exists()


def test_neighbouring_names_stay_valid(tmp_path: Path) -> None:
    hosts = ("  hosts:\n    - {name: kubernetes-1, address: 10.0.0.11, roles: [control-plane, etcd, node]}\n"
             "    - {name: local, address: 10.0.0.12, roles: [node]}\n")
    (tmp_path / "c.yaml").write_text(HEAD + hosts)
    result = kubesmith("validate", "c.yaml", cwd=tmp_path)
    assert result.returncode == 0 and "error" not in result.stderr, result.stderr
    ca = make_ca(tmp_path / "ca")
    assert kubesmith("token", "create", "--node", "kube-w1", *ca_args(ca)).returncode == 0
