"""Drain a node through the API before its host leaves the cluster, as `kubectl drain` does.

Cordon it, then evict its pods with the Eviction API, so PodDisruptionBudgets are honoured: an
eviction they refuse (429) is asked again until the timeout. DaemonSet pods (their controller
ignores cordons and would put them back) and static pods (their kubelet owns them) stay, and so
do pods that already ended. The node is drained once every evicted pod is gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from kubesmith.apiclient import Credentials, api_request

MIRROR = "kubernetes.io/config.mirror"
Progress = Callable[[str], None]


class DrainError(Exception):
    """The node could not be drained in time; the message names the pods left and why."""


class _Pending(Exception):
    """Some pods are still there (or their eviction was refused); asked again until the timeout."""


def evictable(pod: dict[str, Any]) -> bool:
    metadata, status = pod.get("metadata", {}), pod.get("status", {})
    owners = metadata.get("ownerReferences", [])
    if any(owner.get("kind") == "DaemonSet" for owner in owners) or MIRROR in metadata.get("annotations", {}):
        return False
    return status.get("phase") not in ("Succeeded", "Failed")


def _pod_path(pod: dict[str, Any], tail: str = "") -> str:
    metadata = pod["metadata"]
    return f"/api/v1/namespaces/{quote(metadata['namespace'])}/pods/{quote(metadata['name'])}{tail}"


async def drain(credentials: Credentials, node: str, timeout: float, progress: Progress) -> int:
    """Cordon `node` and evict its pods; returns how many were evicted. A node that is gone is drained."""
    from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_fixed  # not for `delete`

    node_path = f"/api/v1/nodes/{quote(node)}"
    status, _ = await api_request(credentials, "PATCH", node_path, {"spec": {"unschedulable": True}}, 30,
                                  accept=(404,), content_type="application/merge-patch+json")
    if status == 404:
        progress(f"{node}: no such Node; nothing to drain")
        return 0
    _, found = await api_request(credentials, "GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{quote(node)}",
                                 None, 30)
    pods = [pod for pod in found.get("items", []) if evictable(pod)]
    progress(f"{node}: cordoned; evicting {len(pods)} pod{'s' if len(pods) != 1 else ''}")
    try:
        async for attempt in AsyncRetrying(stop=stop_after_delay(timeout), wait=wait_fixed(2), reraise=True,
                                           retry=retry_if_exception_type(_Pending)):
            with attempt:
                reasons = await asyncio.gather(*(_evicted(credentials, pod) for pod in pods))
                left = [f"{_name(pod)}: {why}" for pod, why in zip(pods, reasons) if why]
                if left:
                    raise _Pending("; ".join(left))
    except _Pending as pending:
        raise DrainError(f"{node}: not drained in {timeout:.0f}s: {pending}") from None
    return len(pods)


async def uncordon(credentials: Credentials, node: str) -> bool:
    """Let pods be scheduled on `node` again (after an upgrade brought it back Ready); False if it is gone."""
    status, _ = await api_request(credentials, "PATCH", f"/api/v1/nodes/{quote(node)}",
                                  {"spec": {"unschedulable": False}}, 30, accept=(404,),
                                  content_type="application/merge-patch+json")
    return status != 404


def _name(pod: dict[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


async def _evicted(credentials: Credentials, pod: dict[str, Any]) -> str:
    """'' once the pod is gone (or replaced: another uid); else why it is still there."""
    status, current = await api_request(credentials, "GET", _pod_path(pod), None, 30, accept=(404,))
    if status == 404 or current.get("metadata", {}).get("uid") != pod["metadata"]["uid"]:
        return ""
    if current.get("metadata", {}).get("deletionTimestamp"):
        return "terminating"
    body = {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"]}}
    status, answer = await api_request(credentials, "POST", _pod_path(pod, "/eviction"), body, 30,
                                       accept=(404, 429))
    if status == 429:
        return f"eviction refused: {answer.get('message', 'a PodDisruptionBudget')}"
    return "evicted, terminating" if status != 404 else ""


async def delete_node(credentials: Credentials, node: str) -> bool:
    """Delete the Node object (its kubelet stopped first, or it registers again); False if it was gone."""
    status, _ = await api_request(credentials, "DELETE", f"/api/v1/nodes/{quote(node)}", None, 30, accept=(404,))
    return status != 404
