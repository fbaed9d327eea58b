"""The PKI state directory knows its cluster: another cluster's state is refused, trust roots are
minted only in a directory that has none yet, and every command says when it mints or adopts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import kubesmith
from kubesmith.backends.render import render
from kubesmith.pki.store import ForeignStateError, PkiError, read_record, store_root
from pki_support import write_spec, snapshot
from plan_support import plan_of

HOST = [{"name": "cp1", "address": "10.1.0.1", "roles": ["control-plane", "etcd"]}]


@pytest.fixture(scope="module")
def demo_state(tmp_path_factory) -> Path:
    """Cluster 'demo' rendered once; tests copy its state directory."""
    base = tmp_path_factory.mktemp("demo")
    run = kubesmith("render", str(write_spec(base / "demo.yaml", "demo", HOST)), "--out-dir", str(base / "out"),
                    "--state-dir", str(base / "state"))
    assert run.returncode == 0, run.stderr
    return base / "state"


def test_a_new_directory_gets_cas_a_record_and_says_so(tmp_path, demo_state):
    record = read_record(store_root(demo_state))
    assert record is not None and record.name == "demo" and len(record.id) == 32
    spec = write_spec(tmp_path / "c.yaml", "demo", HOST)
    again = kubesmith("render", str(spec), "--out-dir", str(tmp_path / "out"), "--state-dir", str(tmp_path / "typo"))
    assert again.returncode == 0, again.stderr
    said = [line for line in again.stderr.splitlines() if "created new CAs" in line]
    assert len(said) == 1 and "'demo'" in said[0] and str(tmp_path / "typo") in said[0]
    other = read_record(store_root(tmp_path / "typo"))
    assert other is not None and other.id != record.id  # two clusters of one name stay apart
    quiet = kubesmith("render", str(spec), "--out-dir", str(tmp_path / "out"), "--state-dir", str(tmp_path / "typo"))
    assert quiet.returncode == 0 and "created new CAs" not in quiet.stderr and "no cluster record" not in quiet.stderr


@pytest.mark.parametrize("command", [("render", "{spec}", "--out-dir", "{out}"), ("certs", "renew", "{spec}", "all"),
                                     ("certs", "check-expiration", "{spec}")])
def test_another_clusters_state_is_refused_naming_both(tmp_path, demo_state, command):
    state = tmp_path / "state"
    shutil.copytree(demo_state, state)
    before = snapshot(state)
    spec = write_spec(tmp_path / "prod.yaml", "prod", HOST)
    values = {"spec": str(spec), "out": str(tmp_path / "out")}
    run = kubesmith(*(part.format(**values) for part in command), "--state-dir", str(state))
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "'demo'" in lines[0] and "'prod'" in lines[0] and "Traceback" not in run.stderr
    assert snapshot(state) == before and not (tmp_path / "out").exists()


def test_example_ha_refuses_the_demo_state(tmp_path, demo_state):
    """The issue's own case: `render examples/ha.yaml --state-dir .kubesmith/demo`."""
    shutil.copytree(demo_state, tmp_path / ".kubesmith" / "demo")
    run = kubesmith("render", str(Path(__file__).parents[1] / "examples" / "ha.yaml"), "--out-dir", str(tmp_path / "out"),
                    "--state-dir", ".kubesmith/demo", cwd=tmp_path)
    assert run.returncode == 2 and "'prod'" in run.stderr and "'demo'" in run.stderr


def test_an_older_directory_is_adopted_once(tmp_path, demo_state):
    state = tmp_path / "state"
    shutil.copytree(demo_state, state)
    (state / "pki" / "cluster.json").unlink()  # as an older kubesmith left it
    cas = {p.name: p.read_bytes() for p in (state / "pki" / "cas").iterdir()}
    spec = write_spec(tmp_path / "c.yaml", "demo", HOST)
    first = kubesmith("render", str(spec), "--out-dir", str(tmp_path / "out"), "--state-dir", str(state))
    assert first.returncode == 0, first.stderr
    assert "no cluster record" in first.stderr and "now belongs to cluster 'demo'" in first.stderr
    assert "created new CAs" not in first.stderr
    assert {p.name: p.read_bytes() for p in (state / "pki" / "cas").iterdir()} == cas  # its CAs, kept
    assert read_record(store_root(state)).name == "demo"
    second = kubesmith("render", str(spec), "--out-dir", str(tmp_path / "out"), "--state-dir", str(state))
    assert second.returncode == 0 and "no cluster record" not in second.stderr


def test_a_lost_ca_key_is_not_silently_replaced(tmp_path, demo_state):
    state = tmp_path / "state"
    shutil.copytree(demo_state, state)
    (state / "pki" / "cas" / "kubernetes-ca.key").unlink()
    plan = plan_of(write_spec(tmp_path / "c.yaml", "demo", HOST))
    with pytest.raises(PkiError, match="kubernetes-ca.key is missing"):
        render(plan, state, tmp_path / "out")
    assert not (state / "pki" / "cas" / "kubernetes-ca.key").exists()


def test_a_foreign_state_is_refused_in_process(tmp_path, demo_state):
    plan = plan_of(write_spec(tmp_path / "c.yaml", "prod", HOST))
    with pytest.raises(ForeignStateError):
        render(plan, demo_state, tmp_path / "out")
    assert json.loads((demo_state / "pki" / "cluster.json").read_text())["cluster"] == "demo"
