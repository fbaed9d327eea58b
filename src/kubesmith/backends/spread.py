"""Spread a Deployment again when all its pods sit on one node while another could take some.

The scheduler spreads pods only when it places them: a Deployment created while one node was Ready
(a fresh cluster's first minutes, a host back from a reboot) keeps every pod there, and a fault of
that node takes them all. `apply` asks for a spread (`topologySpreadConstraints` on the hostname), so
after the roll-outs it evicts one pod of such a Deployment (the Eviction API: the PodDisruptionBudget
is respected) and waits for its replacement, which the scheduler places on another node.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from kubesmith.apiclient import Credentials, api_request

HOSTNAME = "kubernetes.io/hostname"
Say = Callable[[str], None]


def asks_for_spread(deployment: dict[str, Any]) -> bool:
    pod = deployment.get("spec", {}).get("template", {}).get("spec", {})
    return any(c.get("topologyKey") == HOSTNAME for c in pod.get("topologySpreadConstraints") or [])


def _ready(conditions: list[dict[str, Any]] | None) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions or [])


def live_pods(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods Running and Ready, not on their way out."""
    return [p for p in pods if not p["metadata"].get("deletionTimestamp") and p.get("spec", {}).get("nodeName")
            and p.get("status", {}).get("phase") == "Running" and _ready(p["status"].get("conditions"))]


def _tolerated(taint: dict[str, Any], tolerations: list[dict[str, Any]]) -> bool:
    if taint.get("effect") not in ("NoSchedule", "NoExecute"):
        return True  # PreferNoSchedule does not keep a pod off
    for toleration in tolerations:
        if toleration.get("effect") not in (None, "", taint.get("effect")):
            continue
        if toleration.get("operator") == "Exists" and toleration.get("key") in (None, "", taint.get("key")):
            return True
        if toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def _matches(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False  # Gt, Lt: not worth modelling; such a node is not counted as a place to go


def fits(node: dict[str, Any], pod_spec: dict[str, Any]) -> bool:
    """Whether the scheduler may place the pod on this node, as far as labels, taints and readiness
    say (resources are its business: a pod evicted for nothing goes back where it was)."""
    if node.get("spec", {}).get("unschedulable") or not _ready(node.get("status", {}).get("conditions")):
        return False
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(key) != value for key, value in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    tolerations = pod_spec.get("tolerations") or []
    if not all(_tolerated(taint, tolerations) for taint in node.get("spec", {}).get("taints") or []):
        return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(all(_matches(e, labels) for e in term.get("matchExpressions") or []) for term in terms)


def pod_to_move(deployment: dict[str, Any], pods: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> str | None:
    """One pod of a Deployment asking for a spread whose live pods (two or more, all it wants) share
    one node while another node fits them; None when it is spread, or cannot be."""
    replicas = deployment.get("spec", {}).get("replicas", 1)
    live = live_pods(pods)
    if not asks_for_spread(deployment) or replicas < 2 or len(live) < replicas:
        return None
    where = {p["spec"]["nodeName"] for p in live}
    if len(where) > 1:
        return None
    pod_spec = deployment["spec"]["template"]["spec"]
    if not any(fits(node, pod_spec) for node in nodes if node["metadata"]["name"] not in where):
        return None
    return max(p["metadata"]["name"] for p in live)


async def spread_deployments(credentials: Credentials, deployments: list[tuple[str, str]], wait: float, say: Say,
                             timeout: float) -> None:
    """For each (namespace, name): move one pod when `pod_to_move` says so, then wait (up to `wait`
    seconds) for the Deployment to be whole again, the evicted pod gone."""
    for namespace, name in deployments:
        path = f"/apis/apps/v1/namespaces/{quote(namespace)}/deployments/{quote(name)}"
        status, deployment = await api_request(credentials, "GET", path, None, timeout, accept=(404,))
        if status == 404:
            continue
        pods = await _pods_of(credentials, namespace, deployment, timeout)
        _, nodes = await api_request(credentials, "GET", "/api/v1/nodes", None, timeout)
        pod = pod_to_move(deployment, pods, nodes.get("items", []))
        if pod is None:
            continue
        node = next(p["spec"]["nodeName"] for p in pods if p["metadata"]["name"] == pod)
        say(f"Deployment {name}: all its pods run on {node}; evicting {pod} so the scheduler spreads them")
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
        status, _ = await api_request(credentials, "POST", f"/api/v1/namespaces/{quote(namespace)}/pods/"
                                      f"{quote(pod)}/eviction", eviction, timeout, accept=(404, 429))
        if status == 429:
            say(f"Deployment {name}: its disruption budget allows no eviction now; left for a later apply")
            continue
        await _wait_spread(credentials, namespace, path, pod, wait, say, timeout)


async def _pods_of(credentials: Credentials, namespace: str, deployment: dict[str, Any], timeout: float
                   ) -> list[dict[str, Any]]:
    """The Deployment's own pods: those its selector picks that one of its ReplicaSets controls (another
    workload's pods with the same labels are never counted, nor moved)."""
    query = quote(selector_text(deployment["spec"]["selector"]))
    _, body = await api_request(credentials, "GET", f"/api/v1/namespaces/{quote(namespace)}/pods"
                                f"?labelSelector={query}", None, timeout)
    prefix = f"{deployment['metadata']['name']}-"
    return [pod for pod in body.get("items", []) if any(
        owner.get("kind") == "ReplicaSet" and owner.get("controller") and str(owner.get("name", "")).startswith(prefix)
        for owner in pod["metadata"].get("ownerReferences") or [])]


def selector_text(selector: dict[str, Any]) -> str:
    """A LabelSelector as the API's `labelSelector` query reads it (`app=x,tier in (a,b),!legacy`)."""
    parts = [f"{key}={value}" for key, value in (selector.get("matchLabels") or {}).items()]
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        parts.append({"In": f"{key} in ({','.join(values)})", "NotIn": f"{key} notin ({','.join(values)})",
                      "Exists": key, "DoesNotExist": f"!{key}"}[operator])
    return ",".join(parts)


async def _wait_spread(credentials: Credentials, namespace: str, path: str, evicted: str, wait: float, say: Say,
                       timeout: float) -> None:
    end = time.monotonic() + wait
    while True:
        _, deployment = await api_request(credentials, "GET", path, None, timeout)
        pods = await _pods_of(credentials, namespace, deployment, timeout)
        live = live_pods(pods)
        nodes = sorted({p["spec"]["nodeName"] for p in live})
        gone = all(p["metadata"]["name"] != evicted for p in pods)  # its lame-duck time over: settled
        if len(live) >= deployment["spec"].get("replicas", 1) and gone:
            name = deployment["metadata"]["name"]
            say(f"Deployment {name}: its pods run on {', '.join(nodes)}")
            return
        if time.monotonic() > end:  # status tells how it stands: the cluster changed, not this apply's work
            say(f"warning: Deployment {deployment['metadata']['name']}: {evicted} not replaced and gone within "
                f"{wait:g}s ({len(live)} live, on {', '.join(nodes) or 'no node'}); see `kubesmith status`")
            return
        await asyncio.sleep(1.0)
