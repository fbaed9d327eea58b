"""`kubesmith network follow`: the routes to the other nodes' pods, as the cluster's Nodes say.

Each node announces its own pod range on its Node object (the annotation `kubesmith.io/pod-cidr`,
written with the kubelet's credential: a node may change only its own Node) and keeps one route
per other Node: its announced range via its InternalIP. The routes come from the cluster, not
from the plan, so that adding a node changes nothing on the other hosts, a node that joined with
a token is reached like one from the spec, and the route to a deleted Node goes with it.

Trust: a node can announce only on its own Node, but a compromised one could announce any range.
A range outside the cluster's pod range, overlapping this node's own, or overlapping another
node's announcement is not routed, and the follower says why.

The follower lists the Nodes, makes the routes exactly those (`network.sync_routes`), saves them
for `network up` at the next boot (before the API answers), then watches the Nodes and does it
again at every change, and at least once a minute (a link that went down took its routes along).
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from kubesmith.apiclient import ApiError, Credentials, api_request, first_watch_event
from kubesmith.node.network import (NetworkError, NetworkSettings, Route, learned_routes, save_routes, sync_routes,
                                    within)

POD_CIDR_ANNOTATION = "kubesmith.io/pod-cidr"
NODES = "/api/v1/nodes"
Say = Callable[[str], None]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def routes_of(nodes: list[dict[str, Any]], me: str, own_cidr: str | None, cluster_cidr: str
              ) -> tuple[tuple[Route, ...], list[str]]:
    """(the routes to the other Nodes' announced pod ranges, why some Nodes get none)."""
    cluster = ipaddress.ip_network(cluster_cidr)
    own = ipaddress.ip_network(own_cidr) if own_cidr else None
    claims: list[tuple[str, Network, str]] = []
    problems: list[str] = []
    for node in nodes:
        name = str(node.get("metadata", {}).get("name", ""))
        announced = (node.get("metadata", {}).get("annotations") or {}).get(POD_CIDR_ANNOTATION)
        if name == me or not announced:
            continue  # not announced: a node without kubesmith's pod network, or one still starting
        claim = _claim(name, str(announced), node, cluster, own)
        if isinstance(claim, str):
            problems.append(claim)
        else:
            claims.append((name, *claim))
    contested = {name for name, network, _ in claims
                 for other, theirs, _ in claims if other != name and network.overlaps(theirs)}  # type: ignore[arg-type]
    problems += [f"{name}: its pod range overlaps another node's; neither is routed" for name in sorted(contested)]
    routes = tuple(sorted(Route(str(network), address) for name, network, address in claims if name not in contested))
    return routes, problems


def _claim(name: str, announced: str, node: dict[str, Any], cluster: Network, own: Network | None
           ) -> tuple[Network, str] | str:
    """(range, address) of one Node's announcement, or why it is not routed."""
    try:
        network = ipaddress.ip_network(announced)
    except ValueError:
        return f"{name}: {POD_CIDR_ANNOTATION}={announced!r} is not a network range"
    if not within(announced, cluster):
        return f"{name}: its pod range {network} is outside the cluster's {cluster}"
    if own is not None and network.overlaps(own):
        return f"{name}: its pod range {network} overlaps this node's {own}"
    address = internal_address(node, cluster.version)
    if address is None:
        return f"{name}: no InternalIP address of IPv{cluster.version} to route {network} through"
    return network, address


def internal_address(node: dict[str, Any], version: int) -> str | None:
    for entry in node.get("status", {}).get("addresses", ()):
        if entry.get("type") == "InternalIP":
            try:
                if ipaddress.ip_address(str(entry.get("address"))).version == version:
                    return str(entry["address"])
            except ValueError:
                continue
    return None


class Follower:
    """One node's route follower; `sync` once, or `run` until stopped."""

    def __init__(self, settings: NetworkSettings, say: Say, watch_seconds: int = 60, retry_seconds: float = 5.0,
                 route_patience: float = 5.0) -> None:
        missing = [key for key in ("node", "cluster_cidr", "kubeconfig", "nodes_kubeconfig", "routes_file")
                   if getattr(settings, key) is None]
        if missing:
            raise NetworkError(f"the network settings lack {', '.join(missing)}: not a file for `network follow`")
        self.settings, self.say = settings, say
        self.watch_seconds, self.retry_seconds, self.route_patience = watch_seconds, retry_seconds, route_patience
        self._routes = learned_routes(settings.routes_file)
        self._said: set[str] = set()

    def reader(self) -> Credentials:
        """kube-proxy's credentials, read again each time (the agent renews them in place)."""
        assert self.settings.nodes_kubeconfig is not None
        return Credentials.of_kubeconfig(self.settings.nodes_kubeconfig)

    async def sync(self, reader: Credentials) -> str:
        """Announce this node's range, make the routes follow the Nodes; returns the list's resourceVersion."""
        settings = self.settings
        assert settings.node and settings.cluster_cidr and settings.kubeconfig
        _, listing = await api_request(reader, "GET", NODES, None, 30)
        items: list[dict[str, Any]] = listing.get("items", [])
        await self._announce(next((n for n in items if n.get("metadata", {}).get("name") == settings.node), None))
        routes, problems = routes_of(items, settings.node, settings.pod_cidr, settings.cluster_cidr)
        for problem in sorted(set(problems) - self._said):
            self.say(problem)
        self._said = set(problems)
        await asyncio.to_thread(sync_routes, routes, settings.cluster_cidr, self.say, self.route_patience)
        if routes != self._routes:
            for route in sorted(set(routes) - set(self._routes)):
                self.say(f"route to {route.to} via {route.via}")
            assert settings.routes_file is not None
            save_routes(settings.routes_file, routes)
            self._routes = routes
        return str(listing.get("metadata", {}).get("resourceVersion", ""))

    async def _announce(self, node: dict[str, Any] | None) -> None:
        """Put this node's range on its Node, once the kubelet registered it (a later event brings it)."""
        settings = self.settings
        if node is None or settings.pod_cidr is None:
            return
        if (node.get("metadata", {}).get("annotations") or {}).get(POD_CIDR_ANNOTATION) == settings.pod_cidr:
            return
        assert settings.kubeconfig is not None
        patch = {"metadata": {"annotations": {POD_CIDR_ANNOTATION: settings.pod_cidr}}}
        await api_request(Credentials.of_kubeconfig(settings.kubeconfig), "PATCH", f"{NODES}/{quote(str(settings.node))}",
                          patch, 30, content_type="application/merge-patch+json")
        self.say(f"announced pod range {settings.pod_cidr} on Node {settings.node}")

    async def run(self) -> None:
        """Sync at every change of the Nodes and at least every `watch_seconds`; an unreachable API is
        said once and asked again every `retry_seconds` (the routes stay as they were meanwhile)."""
        failing = ""
        while True:
            try:
                reader = self.reader()
                version = await self.sync(reader)
                if failing:
                    self.say("the API answers again")
                    failing = ""
                await first_watch_event(reader, NODES, version, self.watch_seconds)
            except (ApiError, NetworkError) as exc:
                if str(exc) != failing:
                    self.say(f"{exc} (asking again every {self.retry_seconds:.0f}s)")
                failing = str(exc)
                await asyncio.sleep(self.retry_seconds)
