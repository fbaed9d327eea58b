"""Which pod apply moves so a Deployment asking for a spread gets it (`backends.spread`), decided on
the objects the API gives; the eviction itself runs in tests/test_dns_lab.py against real nodes."""

from __future__ import annotations

from typing import Any

from kubesmith.backends.spread import fits, pod_to_move, selector_text
from kubesmith.modules.core_dns import IMAGE_LABEL, CoreDnsOptions, deployment

CORE_DNS = deployment(CoreDnsOptions(), 2, "hash", labelled_nodes=True)
POD_SPEC = CORE_DNS["spec"]["template"]["spec"]


def node(name: str, ready: bool = True, labelled: bool = True, **spec: Any) -> dict[str, Any]:
    labels = {"kubernetes.io/os": "linux", "kubernetes.io/hostname": name, **({IMAGE_LABEL: "true"} if labelled else {})}
    return {"metadata": {"name": name, "labels": labels}, "spec": spec,
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def pod(name: str, on: str, ready: bool = True, leaving: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, **({"deletionTimestamp": "2026-11-27T10:00:00Z"} if leaving else {})}
    return {"metadata": metadata, "spec": {"nodeName": on},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_pods_on_one_node_move_when_another_node_fits() -> None:
    together = [pod("coredns-a", "h3"), pod("coredns-b", "h3")]
    assert pod_to_move(CORE_DNS, together, [node("h1"), node("h3")]) == "coredns-b"
    assert pod_to_move(CORE_DNS, [pod("coredns-a", "h1"), pod("coredns-b", "h3")], [node("h1"), node("h3")]) is None


def test_no_move_where_no_other_node_would_take_the_pod() -> None:
    together = [pod("coredns-a", "h3"), pod("coredns-b", "h3")]
    assert pod_to_move(CORE_DNS, together, [node("h3")]) is None
    for elsewhere in (node("h1", ready=False), node("h1", labelled=False), node("h1", unschedulable=True),
                      node("h1", taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}])):
        assert pod_to_move(CORE_DNS, together, [elsewhere, node("h3")]) is None, elsewhere
    # a taint its tolerations name, or one that only prefers, keeps nothing off
    tolerated = node("h1", taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
                                   {"key": "x", "effect": "PreferNoSchedule"}])
    assert fits(tolerated, POD_SPEC)


def test_no_move_while_the_deployment_is_not_whole_or_asks_no_spread() -> None:
    nodes = [node("h1"), node("h3")]
    assert pod_to_move(CORE_DNS, [pod("coredns-a", "h3"), pod("coredns-b", "h3", ready=False)], nodes) is None
    assert pod_to_move(CORE_DNS, [pod("coredns-a", "h3"), pod("coredns-b", "h3", leaving=True)], nodes) is None
    unspread = {**CORE_DNS, "spec": {**CORE_DNS["spec"], "template": {"spec": {
        key: value for key, value in POD_SPEC.items() if key != "topologySpreadConstraints"}}}}
    assert pod_to_move(unspread, [pod("coredns-a", "h3"), pod("coredns-b", "h3")], nodes) is None
    single = deployment(CoreDnsOptions(), 1, "hash", labelled_nodes=True)
    assert pod_to_move(single, [pod("coredns-a", "h3")], nodes) is None


def test_the_pods_are_asked_for_with_the_whole_selector() -> None:
    """matchExpressions too: with matchLabels alone, a selector of expressions only would list every pod."""
    selector = {"matchLabels": {"k8s-app": "kube-dns"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]},
                                     {"key": "env", "operator": "NotIn", "values": ["dev"]},
                                     {"key": "ready", "operator": "Exists"},
                                     {"key": "legacy", "operator": "DoesNotExist"}]}
    assert selector_text(selector) == "k8s-app=kube-dns,tier in (a,b),env notin (dev),ready,!legacy"
