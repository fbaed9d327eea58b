"""Growing and shrinking a cluster, without hosts: how etcd members first start (the record kept
in the state directory), which removals are refused, which hosts a changed spec touches, and which
pods a drain evicts. The lab test (test_day2_lab) does it with the real binaries."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kubesmith.backends import etcd_members
from kubesmith.backends.drain import evictable
from kubesmith.backends.removal import (RemovalRefused, forget_host_keys, forget_hosts, history_of,
                                        load_applied, load_removed_keys, refusals, removal, save_applied)
from kubesmith.backends.render import render
from kubesmith.pki import keys
from kubesmith.pki.store import store_root
from kubesmith.plan.evaluate import evaluate
from kubesmith.vocabulary.history import History
from kubesmith.vocabulary.membership import Bootstrap, bootstraps
from kubesmith.spec.load import load_spec_text
from kubesmith.versions.registry import load_registry

ROOT = Path(__file__).resolve().parents[1]
URL = "https://{}:2380".format


def lab_spec(hosts: int, roles: tuple[str, ...] = ("control-plane", "etcd", "node"), extra: int = 0):
    """examples/lab.yaml with its first `hosts` hosts, plus `extra` node-only hosts."""
    document = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    document["spec"]["hosts"] = [dict(h, roles=list(roles)) for h in document["spec"]["hosts"][:hosts]]
    document["spec"]["hosts"] += [{"name": f"n{i}", "address": f"10.213.0.{21 + i}", "roles": ["node"]}
                                  for i in range(extra)]
    loaded = load_spec_text(yaml.safe_dump(document), "lab.yaml")
    assert loaded.cluster is not None, loaded.problems
    return loaded.cluster


def etcd_argv(plan, host: str) -> dict[str, str]:
    return plan.host(host).service("etcd").flags


def test_a_new_cluster_starts_every_member_together() -> None:
    found = bootstraps(["a", "b", "c"], URL, {})
    assert {b.state for b in found.values()} == {"new"}
    assert found["a"].initial_cluster == "a=https://a:2380,b=https://b:2380,c=https://c:2380"


def test_members_added_later_join_the_recorded_ones_in_spec_order() -> None:
    recorded = {"a": Bootstrap("new", "a=https://a:2380")}
    found = bootstraps(["a", "b", "c"], URL, recorded)
    assert found["a"] == recorded["a"]  # unchanged: its etcd is not restarted
    assert found["b"] == Bootstrap("existing", "a=https://a:2380,b=https://b:2380")
    assert found["c"] == Bootstrap("existing", "a=https://a:2380,b=https://b:2380,c=https://c:2380")


def test_a_record_of_members_all_gone_is_a_new_cluster() -> None:
    assert bootstraps(["x"], URL, {"a": Bootstrap("new", "a=https://a:2380")}) == {
        "x": Bootstrap("new", "x=https://x:2380")}


def test_the_record_survives_a_round_trip_and_forget(tmp_path: Path) -> None:
    assert etcd_members.load_record(tmp_path) == {}
    record = {"h1": Bootstrap("new", "h1=u1"), "h2": Bootstrap("existing", "h1=u1,h2=u2")}
    etcd_members.save_record(tmp_path, record)
    assert etcd_members.load_record(tmp_path) == record
    assert (tmp_path / etcd_members.RECORD_FILE).stat().st_mode & 0o777 == 0o600
    etcd_members.forget(tmp_path, ["h2"])
    assert etcd_members.load_record(tmp_path) == {"h1": record["h1"]}


def test_growing_from_one_host_changes_nothing_h1s_etcd_and_api_server_read() -> None:
    """The first host's etcd flags (from the record), API server flags and serving certificate
    SANs are the same before and after two control-plane hosts join."""
    registry = load_registry()
    one = evaluate(lab_spec(1), registry)
    record = {"h1": etcd_members.bootstrap_of(one.host("h1"))}
    three = evaluate(lab_spec(3), registry, None, History(record))
    for service in ("etcd", "kube-apiserver"):
        assert one.host("h1").service(service).argv == three.host("h1").service(service).argv, service
    assert one.host("h1").certificate("apiserver") == three.host("h1").certificate("apiserver")
    h3 = etcd_argv(three, "h3")
    assert h3["initial-cluster-state"] == "existing"
    assert h3["initial-cluster"].split(",") == [f"h{i}=https://10.213.0.1{i}:2380" for i in (1, 2, 3)]
    assert "--etcd-servers=https://10.213.0.13:2379" in three.host("h3").service("kube-apiserver").argv
    without_record = evaluate(lab_spec(3), registry)  # what an apply before the record knew: all new
    assert etcd_argv(without_record, "h1")["initial-cluster-state"] == "new"


def test_an_api_server_without_a_local_member_uses_every_member() -> None:
    document = yaml.safe_load((ROOT / "examples" / "ha.yaml").read_text())
    document["spec"]["hosts"][0]["roles"] = ["control-plane"]
    cluster = load_spec_text(yaml.safe_dump(document), "ha.yaml").cluster
    argv = evaluate(cluster, load_registry()).host("cp1").service("kube-apiserver").argv
    assert "--etcd-servers=https://10.0.0.12:2379,https://10.0.0.13:2379" in argv


def test_removals_below_quorum_or_of_every_control_plane_are_refused() -> None:
    three = lab_spec(3)
    record = {f"h{i}": Bootstrap("new", "") for i in (1, 2, 3)}
    assert refusals(three, lab_spec(2), record) == []  # 3 -> 2 keeps a quorum of 3
    two = {name: record[name] for name in ("h1", "h2")}
    refused = refusals(lab_spec(2), lab_spec(1), two)
    assert len(refused) == 1 and "would leave 1 of etcd's 2 members, fewer than its quorum (2)" in refused[0]
    refused = refusals(three, lab_spec(1), record)
    assert "removing h2, h3 would leave 1 of etcd's 3 members" in refused[0]
    renamed = lab_spec(1).model_copy(deep=True)
    hosts = [renamed.spec.hosts[0].model_copy(update={"name": "other"})]
    renamed = renamed.model_copy(update={"spec": renamed.spec.model_copy(update={"hosts": hosts})})
    refused = refusals(lab_spec(1), renamed, {"h1": record["h1"]})
    assert any("no control-plane host of the running cluster" in p for p in refused)


def test_a_removal_is_planned_from_the_last_applied_spec(tmp_path: Path) -> None:
    registry = load_registry()
    assert load_applied(tmp_path) is None
    save_applied(tmp_path, lab_spec(3, extra=1))
    previous = load_applied(tmp_path)
    assert previous == lab_spec(3, extra=1)
    record = {f"h{i}": Bootstrap("new", "") for i in (1, 2, 3)}
    gone = removal(previous, lab_spec(2), registry, record)
    assert gone.names == ["h3", "n0"]
    assert {s.name for s in gone.hosts[1].services} >= {"kubelet", "kube-proxy"}
    assert removal(previous, lab_spec(3, extra=1), registry, record).names == []
    with pytest.raises(RemovalRefused, match="nothing was changed"):
        removal(previous, lab_spec(1), registry, record)
    forget_hosts(tmp_path, ["h3"])  # reset by hand: no apply removes it any more
    assert removal(load_applied(tmp_path), lab_spec(2), registry, record).names == ["n0"]
    forget_hosts(tmp_path, ["h1", "h2", "n0"])
    assert load_applied(tmp_path) is None


def test_a_removed_host_s_keys_are_remembered_its_leaves_forgotten_and_every_ca_service_told(tmp_path: Path) -> None:
    """Removal keeps the hashes of the host's public keys (before it takes its leaves out of the PKI
    state), the plan gives them to each control-plane host's CA service, and the host added again
    gets new keys."""
    registry = load_registry()
    state = tmp_path / "state"
    render(evaluate(lab_spec(3), registry), state, tmp_path / "out", shipped=None, notify=lambda _: None)
    leaves = store_root(state) / "hosts" / "h3"
    public = {keys.spki_hash(keys.load(path.read_bytes(), str(path)).public_key()) for path in leaves.glob("*.key")}
    assert len(public) >= 5  # kubelet, kube-proxy, agent, etcd, API server... each its own key
    gone = removal(lab_spec(3), lab_spec(2), registry, {})
    during = history_of(state, {}, gone)  # while h3 is being removed: its keys count as removed already
    assert set(during.removed_keys) == public and set(during.removed_keys.values()) == {"h3"}
    forget_host_keys(state, "h3")
    assert not leaves.exists() and set(load_removed_keys(state)) == public
    assert (state / "removed-keys.json").stat().st_mode & 0o777 == 0o600
    plan = evaluate(lab_spec(2), registry, None, history_of(state, {}))
    for host in ("h1", "h2"):
        settings = next(f.data for f in plan.host(host).files if f.path == "/etc/kubesmith/ca-service.json")
        assert settings["removed_keys"] == dict.fromkeys(sorted(public), "h3")
    render(evaluate(lab_spec(3), registry), state, tmp_path / "again", shipped=None, notify=lambda _: None)
    again = {keys.spki_hash(keys.load(path.read_bytes(), str(path)).public_key()) for path in leaves.glob("*.key")}
    assert again and not again & public  # h3 added again: new keys, which its CA services renew


@pytest.mark.parametrize(("pod", "evicted"), [
    ({"metadata": {}, "status": {"phase": "Running"}}, True),
    ({"metadata": {"ownerReferences": [{"kind": "ReplicaSet"}]}, "status": {"phase": "Pending"}}, True),
    ({"metadata": {"ownerReferences": [{"kind": "DaemonSet"}]}, "status": {"phase": "Running"}}, False),
    ({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}, "status": {"phase": "Running"}}, False),
    ({"metadata": {}, "status": {"phase": "Succeeded"}}, False),
])
def test_a_drain_evicts_what_kubectl_drain_evicts(pod: dict, evicted: bool) -> None:
    assert evictable(pod) is evicted
