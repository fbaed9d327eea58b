"""How apply rolls a change over running hosts, without hosts: the waves (control-plane and etcd
hosts one by one, nodes by maxUnavailable), which hosts roll, and which components it waits for.
The lab test (test_rollout_lab) rolls real changes over three control-plane hosts."""

from __future__ import annotations

import pytest
import yaml

from kubesmith.backends.apply import HostChanges, HostState, rolling_hosts
from kubesmith.backends.rollout import on_trial, trial_seconds, waves
from kubesmith.plan.evaluate import evaluate
from kubesmith.vocabulary.model import Plan
from kubesmith.vocabulary.errors import SpecError
from kubesmith.spec.load import load_spec_text
from kubesmith.versions.registry import load_registry
from test_membership import ROOT, lab_spec


def plan_with(keep_configs: bool, nodes: int = 0) -> Plan:
    cluster = lab_spec(3, extra=nodes)
    agent = cluster.spec.components.agent.model_copy(update={"keep_configs": keep_configs})
    components = cluster.spec.components.model_copy(update={"agent": agent})
    return evaluate(cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"components": components})}),
                    load_registry())


def running(plan: Plan, host: str, restart: tuple[str, ...]) -> HostState:
    changes = HostChanges(host, (), ("/etc/kubernetes/config/x",), (), (), restart, ())
    return HostState(plan.host(host), (), {}, {"/etc/kubernetes/config/x": "0" * 64}, frozenset(), changes)


def test_control_plane_hosts_roll_one_at_a_time_and_nodes_by_max_unavailable() -> None:
    plan = plan_with(False, nodes=5)
    assert [[h.name for h in wave] for wave in waves(plan.hosts, 2)] == \
        [["h1"], ["h2"], ["h3"], ["n0", "n1"], ["n2", "n3"], ["n4"]]
    assert [len(wave) for wave in waves(plan.hosts, 10)] == [1, 1, 1, 5]


def test_the_components_a_roll_out_waits_for_are_those_the_agent_keeps_on_trial() -> None:
    off, on = plan_with(False), plan_with(True)
    assert trial_seconds(off.host("h1")) == {} and on_trial(off.host("h1"), ("kube-apiserver",)) == []
    assert trial_seconds(on.host("h1"))["kube-apiserver"] == 60.0
    assert on_trial(on.host("h1"), ("kube-apiserver", "kubesmith-agent", "etcd")) == ["kube-apiserver", "etcd"]


def test_running_hosts_whose_services_restart_roll_and_new_hosts_do_not() -> None:
    off, on = plan_with(False), plan_with(True)
    two = [running(off, "h1", ("kube-apiserver",)), running(off, "h2", ("kube-apiserver",))]
    assert rolling_hosts(two) == two
    new_host = HostState(off.host("h3"), (), {}, {}, frozenset(),
                         HostChanges("h3", ("/etc/x",), (), (), ("kube-apiserver",), (), ()))
    unchanged = running(off, "h3", ())
    assert rolling_hosts([*two, new_host, unchanged]) == two
    # one running host alone goes with the others, unless it has a trial to wait for
    assert rolling_hosts([two[0], new_host]) == []
    alone = running(on, "h1", ("kube-apiserver",))
    assert rolling_hosts([alone]) == [alone]
    assert rolling_hosts([running(on, "h1", ("kubesmith-agent",))]) == []


def test_max_unavailable_is_a_positive_count() -> None:
    document = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    document["spec"]["rollout"] = {"maxUnavailable": 0}
    with pytest.raises(SpecError) as raised:
        load_spec_text(yaml.safe_dump(document), "lab.yaml")
    assert "spec.rollout.maxUnavailable: Input should be greater than or equal to 1 (lab.yaml:" in str(raised.value)


@pytest.mark.parametrize("value", [1, 3])
def test_max_unavailable_is_read(value: int) -> None:
    document = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    document["spec"]["rollout"] = {"maxUnavailable": value}
    loaded = load_spec_text(yaml.safe_dump(document), "lab.yaml")
    assert loaded.cluster is not None and loaded.cluster.spec.rollout.max_unavailable == value
