"""`kubesmith addons apply`: keep the add-ons of a directory applied, as the seed's addon manager.

Server-side apply with the field manager `kubesmith` (forced: kubesmith's state wins over other
managers of the same fields) for `Reconcile` objects; `EnsureExists` objects are created when absent
and never touched again. What the last run applied is kept in the ConfigMap
`kube-system/kubesmith-addons` (an inventory, as kubectl's applysets): a `Reconcile` object that was
in it and is in no add-on any more is deleted, unless its label now says EnsureExists (the user took
it over). With `wait`, the run ends when every Deployment and DaemonSet it changed has rolled out, and
Deployments asking for a spread over the nodes have it (`backends.spread`). Nodes
listed in a `*.labels.json` file are labelled first (which nodes hold kubesmith's CoreDNS image).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from kubesmith import layout
from kubesmith.apiclient import ApiError, Credentials, api_request
from kubesmith.backends.spread import asks_for_spread, spread_deployments

FIELD_MANAGER = "kubesmith"
ROLLOUTS_MANAGER = "kubesmith-rollouts"  # owns the inventory's record of roll-outs seen done
MODE_LABEL = "addonmanager.kubernetes.io/mode"
INVENTORY = ("kube-system", "kubesmith-addons")
APPLY_FIRST = ("Namespace", "CustomResourceDefinition", "PriorityClass", "ServiceAccount", "ClusterRole",
               "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "Secret")
ROLLED_OUT = ("Deployment", "DaemonSet")
Say = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Resource:
    """Where the API serves one kind: its plural name and whether it lives in namespaces."""

    api_version: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None, name: str | None = None) -> str:
        group = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        where = f"/namespaces/{quote(namespace or 'default')}" if self.namespaced else ""
        return f"{group}{where}/{self.plural}" + (f"/{quote(name, safe=':')}" if name else "")


@dataclass(slots=True)
class Discovery:
    """The API's kinds per group version, asked once per run (again after CRDs were applied)."""

    credentials: Credentials
    timeout: float
    known: dict[str, dict[str, Resource]] = field(default_factory=dict)

    async def resource(self, api_version: str, kind: str, retry_for: float = 0.0) -> Resource | None:
        end = time.monotonic() + retry_for
        while True:
            if api_version not in self.known or kind not in self.known[api_version]:
                self.known[api_version] = await self._ask(api_version)
            found = self.known[api_version].get(kind)
            if found is not None or time.monotonic() >= end:
                return found
            await asyncio.sleep(1.0)  # a CRD applied a moment ago is served within seconds

    async def _ask(self, api_version: str) -> dict[str, Resource]:
        path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        status, body = await api_request(self.credentials, "GET", path, None, self.timeout, accept=(404,))
        if status == 404:
            return {}
        return {item["kind"]: Resource(api_version, item["name"], bool(item.get("namespaced")))
                for item in body.get("resources", []) if "/" not in item["name"]}


def read_dir(directory: Path) -> list[dict[str, Any]]:
    """Every object of the add-on files (`List` documents) in `directory`, Namespaces and RBAC first."""
    objects: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("kind") == "List":
                objects += document.get("items") or []
            elif isinstance(document, dict):
                objects.append(document)
    order = {kind: index for index, kind in enumerate(APPLY_FIRST)}
    return sorted(objects, key=lambda o: order.get(o.get("kind", ""), len(order)))  # stable: file order stays


def ref(document: dict[str, Any]) -> str:
    """An object's identity in the inventory: apiVersion|kind|namespace|name."""
    metadata = document["metadata"]
    return "|".join((document["apiVersion"], document["kind"], metadata.get("namespace") or "", metadata["name"]))


def mode(document: dict[str, Any]) -> str:
    return ((document.get("metadata") or {}).get("labels") or {}).get(MODE_LABEL, "Reconcile")


async def apply_addons(credentials: Credentials, directory: Path, wait: float | None, say: Say,
                       timeout: float = 20.0, node_wait: float = 0.0, more_nodes: tuple[str, ...] = ()) -> None:
    """Label the nodes the add-ons need labelled (those the files name and `more_nodes`), apply every
    add-on object, prune the ones gone, then (with `wait`) wait for the roll-outs not seen done yet."""
    discovery = Discovery(credentials, timeout)
    for labels in read_node_labels(directory):
        nodes = tuple(dict.fromkeys((*labels.nodes, *more_nodes)))
        await label_nodes(credentials, NodeLabels(labels.label, nodes), node_wait, say, timeout)
    objects = read_dir(directory)
    generations: dict[str, str] = {}
    for document in objects:
        generation = await _apply_one(credentials, discovery, document, say, timeout)
        if generation is not None:
            generations[ref(document)] = generation
    current = [ref(o) for o in objects if mode(o) == "Reconcile"]
    inventory = await _inventory(credentials, timeout)
    for gone in [entry for entry in inventory.objects if entry not in current]:
        await _prune(credentials, discovery, gone, say, timeout)
    await _save_inventory(credentials, current, timeout)
    if wait is not None:
        seen = inventory.rolled_out
        pending = [o for o in objects if ref(o) in generations and seen.get(ref(o)) != generations[ref(o)]]
        await wait_for_rollouts(credentials, discovery, pending, wait, say, timeout)
        await _save_rolled_out(credentials, generations, timeout)
        spread = [(o["metadata"].get("namespace", "default"), o["metadata"]["name"]) for o in objects
                  if o["kind"] == "Deployment" and o["apiVersion"] == "apps/v1" and asks_for_spread(o)]
        await spread_deployments(credentials, spread, wait, say, timeout)


async def _apply_one(credentials: Credentials, discovery: Discovery, document: dict[str, Any], say: Say,
                     timeout: float) -> str | None:
    """Apply one object; a workload's `uid/generation` after it (None for other kinds and for objects
    left alone; a workload deleted and created again is a new one). apply waits only for one no
    earlier wait saw rolled out (`Inventory`): an apply that changes nothing never waits on a pod a
    down node holds, and a change the boot-time unit applied first is still waited for."""
    kind, metadata = document["kind"], document["metadata"]
    resource = await discovery.resource(document["apiVersion"], kind, retry_for=30.0)
    if resource is None:
        raise ApiError(f"{kind} {metadata['name']}: the API serves no {kind} in {document['apiVersion']}")
    namespace = metadata.get("namespace") if resource.namespaced else None
    path = resource.path(namespace, metadata["name"])
    if mode(document) == "EnsureExists":
        status, _ = await api_request(credentials, "GET", path, None, timeout, accept=(404,))
        if status != 404:
            return None
        say(f"creating {kind} {metadata['name']} (EnsureExists)")
    own = {key: value for key, value in metadata.items() if key != "namespace"}
    body = {**document, "metadata": {**own, **({"namespace": namespace} if namespace else {})}}
    after = await _server_side_apply(credentials, path, body, timeout)
    return f"{(after.get('metadata') or {}).get('uid', '')}/{_generation(after)}" if kind in ROLLED_OUT else None


async def _server_side_apply(credentials: Credentials, path: str, body: dict[str, Any], timeout: float
                             ) -> dict[str, Any]:
    """One server-side apply. Every control-plane host's add-on step runs at boot: two may create the
    same object at once, and the loser is refused (409, or 422 for a Service whose cluster IP the winner
    just took). The object exists then, and a second apply is an update like any other."""
    url = f"{path}?fieldManager={FIELD_MANAGER}&force=true"
    status, after = await api_request(credentials, "PATCH", url, body, timeout, accept=(409, 422),
                                      content_type="application/apply-patch+yaml")
    if status in (409, 422):
        exists, _ = await api_request(credentials, "GET", path, None, timeout, accept=(404,))
        if exists == 404:  # not a lost race: the object itself is refused
            raise ApiError(f"PATCH {credentials.server}{url}: HTTP {status}: {after.get('message', after)}")
        _, after = await api_request(credentials, "PATCH", url, body, timeout,
                                     content_type="application/apply-patch+yaml")
    return after


def _generation(body: dict[str, Any]) -> int:
    return int((body.get("metadata") or {}).get("generation") or 0)


@dataclass(frozen=True, slots=True)
class NodeLabels:
    """`label=true` on these nodes (`modules.addons.node_labels_file`)."""

    label: str
    nodes: tuple[str, ...]


def read_node_labels(directory: Path) -> list[NodeLabels]:
    found = []
    for path in sorted(directory.glob(f"*{layout.ADDON_LABELS_SUFFIX}")):
        document = json.loads(path.read_text())
        found.append(NodeLabels(str(document["label"]), tuple(str(n) for n in document["nodes"])))
    return found


async def label_nodes(credentials: Credentials, labels: NodeLabels, wait: float, say: Say, timeout: float) -> None:
    """Label every listed Node, waiting up to `wait` seconds for the ones not registered yet; one
    still missing is said and left for the next run (apply runs the step again)."""
    end = time.monotonic() + wait
    pending = list(labels.nodes)
    while True:
        for node in list(pending):
            status, _ = await api_request(credentials, "PATCH", f"/api/v1/nodes/{quote(node)}",
                                          {"metadata": {"labels": {labels.label: "true"}}}, timeout, accept=(404,),
                                          content_type="application/strategic-merge-patch+json")
            if status != 404:
                pending.remove(node)
        if not pending or time.monotonic() > end:
            break
        await asyncio.sleep(2.0)
    for node in pending:
        say(f"{node}: no Node registered yet; it gets {labels.label} from a later run of this step")


@dataclass(frozen=True, slots=True)
class Inventory:
    """What earlier runs left in the inventory ConfigMap: the `Reconcile` objects applied (to prune
    the ones gone) and, per workload, the last generation apply saw rolled out."""

    objects: list[str]
    rolled_out: dict[str, str]


async def _inventory(credentials: Credentials, timeout: float) -> Inventory:
    namespace, name = INVENTORY
    status, body = await api_request(credentials, "GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}", None,
                                     timeout, accept=(404,))
    data = (body.get("data") or {}) if status != 404 else {}
    try:
        objects = [str(entry) for entry in json.loads(data.get("objects", "[]"))]
    except ValueError:
        objects = []
    try:
        rolled_out = {str(key): str(value) for key, value in json.loads(data.get("rolledOut", "{}")).items()}
    except (ValueError, TypeError, AttributeError):
        rolled_out = {}
    return Inventory(objects, rolled_out)


async def _save_inventory(credentials: Credentials, current: list[str], timeout: float) -> None:
    await _save_inventory_key(credentials, FIELD_MANAGER, "objects", sorted(current), timeout)


async def _save_rolled_out(credentials: Credentials, generations: dict[str, str], timeout: float) -> None:
    """Under a field manager of its own: the unit's saves of `objects` (kubesmith's manager) leave it be."""
    await _save_inventory_key(credentials, ROLLOUTS_MANAGER, "rolledOut", generations, timeout)


async def _save_inventory_key(credentials: Credentials, manager: str, key: str, value: Any, timeout: float) -> None:
    namespace, name = INVENTORY
    body = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/managed-by": "kubesmith"}},
            "data": {key: json.dumps(value, indent=1, sort_keys=True)}}
    await api_request(credentials, "PATCH", f"/api/v1/namespaces/{namespace}/configmaps/{name}"
                      f"?fieldManager={manager}&force=true", body, timeout,
                      content_type="application/apply-patch+yaml")


async def _prune(credentials: Credentials, discovery: Discovery, entry: str, say: Say, timeout: float) -> None:
    """Delete an object no add-on has any more, unless it is gone already or the user took it over."""
    api_version, kind, namespace, name = entry.split("|")
    resource = await discovery.resource(api_version, kind)
    if resource is None:
        return  # its kind is gone (a CRD removed): so is the object
    path = resource.path(namespace or None, name)
    status, body = await api_request(credentials, "GET", path, None, timeout, accept=(404,))
    if status == 404 or mode(body) != "Reconcile":
        return
    say(f"deleting {kind} {name}{f' in {namespace}' if namespace else ''}: no add-on has it any more")
    await api_request(credentials, "DELETE", path, {"propagationPolicy": "Background"}, timeout, accept=(404,))


async def wait_for_rollouts(credentials: Credentials, discovery: Discovery, objects: list[dict[str, Any]],
                            deadline: float, say: Say, timeout: float) -> None:
    """Until every Deployment and DaemonSet applied runs its current template on all its pods, Ready."""
    end = time.monotonic() + deadline
    for document in objects:
        if document["kind"] not in ROLLED_OUT:
            continue
        resource = await discovery.resource(document["apiVersion"], document["kind"])
        assert resource is not None  # applied above
        path = resource.path(document["metadata"].get("namespace"), document["metadata"]["name"])
        while True:
            _, body = await api_request(credentials, "GET", path, None, timeout)
            waiting = rollout_waiting(body)
            if waiting is None:
                break
            if time.monotonic() > end:
                raise ApiError(f"{document['kind']} {document['metadata']['name']} did not roll out within "
                               f"{deadline:g}s: {waiting}")
            await asyncio.sleep(1.0)
        say(f"{document['kind']} {document['metadata']['name']} rolled out")


def rollout_waiting(body: dict[str, Any]) -> str | None:
    """What a Deployment or DaemonSet still waits for (as `kubectl rollout status`), or None when done."""
    metadata, spec, status = body.get("metadata", {}), body.get("spec", {}), body.get("status", {})
    if status.get("observedGeneration", 0) < metadata.get("generation", 0):
        return "its controller has not seen the new spec yet"
    if body.get("kind") == "DaemonSet":
        desired = status.get("desiredNumberScheduled", 0)
        if status.get("updatedNumberScheduled", 0) < desired or status.get("numberAvailable", 0) < desired:
            return f"{status.get('numberAvailable', 0)} of {desired} pods updated and available"
        return None
    replicas = spec.get("replicas", 1)
    updated, available = status.get("updatedReplicas", 0), status.get("availableReplicas", 0)
    if updated < replicas or status.get("replicas", 0) > updated or available < replicas:
        return f"{updated} of {replicas} pods updated, {available} available, {status.get('replicas', 0)} in all"
    return None
