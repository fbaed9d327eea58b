"""Which routes a node's follower keeps, from the Node objects the API lists (`node/routes.py`):
each other Node's announced pod range via its InternalIP, and nothing for an announcement that is
malformed, outside the cluster's range, over this node's own range, or contested by another Node."""

from __future__ import annotations

from typing import Any

from kubesmith.node.network import Route
from kubesmith.node.routes import POD_CIDR_ANNOTATION, routes_of

CLUSTER = "10.244.0.0/16"


def node(name: str, pod_cidr: str | None, *addresses: tuple[str, str]) -> dict[str, Any]:
    annotations = {POD_CIDR_ANNOTATION: pod_cidr} if pod_cidr else {}
    return {"metadata": {"name": name, "annotations": annotations},
            "status": {"addresses": [{"type": kind, "address": address} for kind, address in addresses]}}


def test_every_other_node_s_announced_range_is_routed_via_its_internal_address() -> None:
    nodes = [node("w1", "10.244.1.0/24", ("InternalIP", "10.0.0.11")),
             node("w2", "10.244.2.0/24", ("Hostname", "w2"), ("ExternalIP", "203.0.113.2"), ("InternalIP", "10.0.0.12")),
             node("w3", "10.244.0.0/24", ("InternalIP", "10.0.0.13")),
             node("cp", None, ("InternalIP", "10.0.0.10"))]  # no pod network of kubesmith's (yet): no route
    routes, problems = routes_of(nodes, "w1", "10.244.1.0/24", CLUSTER)
    assert routes == (Route("10.244.0.0/24", "10.0.0.13"), Route("10.244.2.0/24", "10.0.0.12"))
    assert problems == []


def test_announcements_that_could_hijack_traffic_are_not_routed_and_named() -> None:
    nodes = [node("w1", "10.244.1.0/24", ("InternalIP", "10.0.0.11")),
             node("outside", "192.168.0.0/24", ("InternalIP", "10.0.0.20")),
             node("everything", "0.0.0.0/0", ("InternalIP", "10.0.0.21")),
             node("mine", "10.244.1.128/25", ("InternalIP", "10.0.0.22")),
             node("garbage", "ten.244", ("InternalIP", "10.0.0.23")),
             node("a", "10.244.8.0/24", ("InternalIP", "10.0.0.24")),
             node("b", "10.244.8.0/23", ("InternalIP", "10.0.0.25")),
             node("v6only", "10.244.9.0/24", ("InternalIP", "fd00::9")),
             node("fine", "10.244.10.0/24", ("InternalIP", "10.0.0.26"))]
    routes, problems = routes_of(nodes, "w1", "10.244.1.0/24", CLUSTER)
    assert routes == (Route("10.244.10.0/24", "10.0.0.26"),)
    named = {problem.split(":")[0] for problem in problems}
    assert named == {"outside", "everything", "mine", "garbage", "a", "b", "v6only"}, problems
    assert any("overlaps this node's 10.244.1.0/24" in p for p in problems)
    assert any("outside the cluster's 10.244.0.0/16" in p for p in problems)


def test_a_node_that_has_not_announced_or_is_gone_has_no_route() -> None:
    before, _ = routes_of([node("w2", "10.244.2.0/24", ("InternalIP", "10.0.0.12"))], "w1", None, CLUSTER)
    after, _ = routes_of([node("w2", None, ("InternalIP", "10.0.0.12"))], "w1", None, CLUSTER)
    assert before == (Route("10.244.2.0/24", "10.0.0.12"),) and after == ()
