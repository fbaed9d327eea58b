"""The pod network: a bridge per node and plain routes between nodes, no overlay.

Each node gets a pod range (`podCidr`: its own, else the lowest free range of
`spec.network.clusterCidr` in host order), known to the plan up front. On each node:

* the CNI configuration (`/etc/cni/net.d/10-kubesmith.conflist`): bridge with host-local
  addresses from the node's range and the bridge as the pods' gateway, then portmap (hostPort);
  containerd runs the loopback plugin itself. Debian's containernetworking-plugins provide them.
* `kubesmith network up` (a oneshot unit, `kubesmith-network`): the sysctls, masquerading of pod
  traffic that leaves the cluster range, and the routes last learned; stopping the unit runs
  `network down`, which takes them away again but leaves the pods' bridge to the pods, which outlive
  the unit (`reset` removes it once they are stopped: `network down --bridge`).
* `kubesmith network follow` (`kubesmith-routes`, long-running): announces the node's range on its
  Node object and keeps a route to each other Node's announced range via its address (the nodes
  must share a link, as hosts on one subnet do). The routes come from the cluster rather than the
  plan, so adding or removing a node changes no file on the other hosts (`node/routes.py`).
* the sysctls the bridge and kube-proxy need (`net.ipv4.ip_forward`,
  `net.bridge.bridge-nf-call-iptables`, with the `br_netfilter` module): in sysctl.d and
  modules-load.d on hosts, set at once by `network up`; `kubesmith run` only checks them.

Another CNI later is another `plugin` value here: nothing else reads the bridge's settings.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from kubesmith import layout
from kubesmith.modules.base import Module, OptionProblem
from kubesmith.vocabulary.facts import Contribution, HostContext
from kubesmith.vocabulary.model import File, RestartPolicy, Service
from kubesmith.ranges import RangeIndex
from kubesmith.vocabulary.types import InterfaceName, StrictModel

if TYPE_CHECKING:
    from kubesmith.spec.model import Cluster
    from kubesmith.versions.registry import VersionRegistry

CNI_CONFIG = "/etc/cni/net.d/10-kubesmith.conflist"
NETWORK_CONFIG = f"{layout.KUBESMITH_ETC}/network.json"
ROUTES_STATE = f"{layout.LIB}/kubesmith/network"  # the routes last learned from the cluster, for the next boot
SYSCTL_FILE = "/etc/sysctl.d/90-kubesmith.conf"
MODULES_FILE = "/etc/modules-load.d/kubesmith.conf"
SYSCTLS = {"net.ipv4.ip_forward": "1", "net.bridge.bridge-nf-call-iptables": "1"}
KERNEL_MODULES = ("br_netfilter",)


class PodNetworkOptions(StrictModel):
    enabled: bool = Field(default=True, description="Give pods a network: a bridge on every node and routes "
                          "between nodes; off when you bring your own CNI plugin.")
    plugin: Literal["bridge"] = Field(default="bridge", description="How pods are connected (bridge: one "
                                      "bridge per node, routes between nodes, no overlay).")
    node_cidr_mask_size: int = Field(default=24, ge=8, le=28, description="Prefix length of each node's pod range.")
    bridge: InterfaceName = Field(default="cni0", description="Name of the pods' bridge (an interface name: at "
                                 "most 15 of letters, digits, '_', '.', '-').")
    masquerade: bool = Field(default=True, description="Masquerade pod traffic that leaves "
                             "spec.network.clusterCidr (pods reach the outside with their node's address).")
    mtu: int | None = Field(default=None, ge=576, le=9000, description="MTU of the bridge and the pods' "
                            "interfaces; default: the kernel's (1500).")


class PodNetworkModule(Module):
    key = "pod_network"
    position = 60
    title = "Pod network (bridge and routes, no overlay)"
    options = PodNetworkOptions
    roles = frozenset({"node"})

    def contribute(self, ctx: HostContext, options: PodNetworkOptions) -> Contribution:
        if not options.enabled or ctx.host.pod_cidr is None:
            return Contribution()
        host = ctx.host
        on_hosts = host.environment.init_system == "systemd"  # `kubesmith run` checks sysctls, hosts set them
        services = ctx.shared(("pod-network-services", on_hosts), lambda: self._services(on_hosts))
        files = [
            File(CNI_CONFIG, 0o644, data=cni_configuration(options, host.pod_cidr), format="json"),
            File(NETWORK_CONFIG, 0o644, data=network_settings(ctx, options), format="json"),
            *ctx.shared("pod-network-kernel-files", _kernel_files),
        ]
        return Contribution(services=list(services), files=files)

    def _services(self, on_hosts: bool) -> tuple[Service, Service]:
        """The same on every node of one init system (only the pod range differs, in the files)."""
        down = ("network", "down", "--config", NETWORK_CONFIG)
        service = Service(
            name="kubesmith-network",
            component=self.key,
            description="kubesmith: routes to other nodes' pods, masquerading, sysctls",
            binary="kubesmith",
            argv=("network", "up", "--config", NETWORK_CONFIG, *(("--set-sysctls",) if on_hosts else ())),
            undo=down,  # the pods' bridge stays: they outlive the unit
            leave=(*down, "--bridge"),  # `run` stops the pods too
            reload=("network", "up", "--config", NETWORK_CONFIG),  # changed settings: the pods keep their bridge
            user="root",
            group="root",
            wanted_by="node-online.target",
            after=("network-online.target",),
            restart=RestartPolicy("on-failure", 5.0, 60.0),
            needs_files=(NETWORK_CONFIG,),
            hardening=False,
            oneshot=True,
        )
        follower = Service(
            name="kubesmith-routes",
            component=self.key,
            description="kubesmith: routes to other nodes' pods, as their Node objects announce them",
            binary="kubesmith",
            argv=("network", "follow", "--config", NETWORK_CONFIG),
            user="root",
            group="root",
            wanted_by="node-online.target",
            after=("network-online.target", "kubesmith-network.service"),
            restart=RestartPolicy(delay_seconds=5),
            needs_files=(NETWORK_CONFIG,),
            state_directory=ROUTES_STATE,
            hardening=False,  # changes the host's routing table
        )
        return service, follower

    def check(self, spec: Cluster, options: PodNetworkOptions, registry: VersionRegistry) -> list[OptionProblem]:
        if not options.enabled:
            return []
        try:
            pod_cidrs(spec, options)
        except ValueError as exc:
            return [OptionProblem(("nodeCidrMaskSize",), str(exc))]
        return []


def _kernel_files() -> tuple[File, File]:
    return (File(SYSCTL_FILE, 0o644, content="".join(f"{name} = {value}\n" for name, value in SYSCTLS.items())),
            File(MODULES_FILE, 0o644, content="".join(f"{name}\n" for name in KERNEL_MODULES)))


def cni_configuration(options: PodNetworkOptions, pod_cidr: str) -> dict[str, Any]:
    bridge: dict[str, Any] = {
        "type": "bridge", "bridge": options.bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": pod_cidr}]], "routes": [{"dst": "0.0.0.0/0"}],
                 "dataDir": f"{layout.LIB}/cni/networks"},
    }
    if options.mtu:
        bridge["mtu"] = options.mtu
    return {"cniVersion": "1.0.0", "name": "kubesmith",
            "plugins": [bridge, {"type": "portmap", "capabilities": {"portMappings": True}}]}


def network_settings(ctx: HostContext, options: PodNetworkOptions) -> dict[str, Any]:
    """What `kubesmith network up` and `network follow` make true on this node: nothing in it names
    another host, so a host added or removed changes no other host's file."""
    host = ctx.host
    masquerade = {"from": host.pod_cidr, "except": ctx.cluster.cluster_cidr} if options.masquerade else None
    return {"node": host.name, "podCidr": host.pod_cidr, "clusterCidr": ctx.cluster.cluster_cidr,
            "masquerade": masquerade, "bridge": options.bridge, "sysctls": SYSCTLS, "modules": list(KERNEL_MODULES),
            "kubeconfig": layout.kubeconfig_path("kubelet"), "nodesKubeconfig": layout.kubeconfig_path("kube-proxy"),
            "routesFile": f"{ROUTES_STATE}/routes.json"}


def pod_cidrs(spec: Cluster, options: PodNetworkOptions) -> dict[str, str]:
    """Each node host's pod range: its own `podCidr`, else the lowest range of the cluster's that no
    other node has, in host order (append new hosts at the end, or pin `podCidr`, to keep ranges)."""
    cluster = ipaddress.ip_network(spec.spec.network.cluster_cidr)
    nodes = [host for host in spec.spec.hosts if "node" in host.roles]
    assigned = {host.name: ipaddress.ip_network(host.pod_cidr) for host in nodes if host.pod_cidr}
    if options.node_cidr_mask_size < cluster.prefixlen:
        raise ValueError(f"/{options.node_cidr_mask_size} node ranges do not fit in clusterCidr {cluster}")
    pinned: RangeIndex[str] = RangeIndex()  # ranges handed out below come in order and never meet each other
    for name, taken in assigned.items():
        pinned.add(taken, name)
    free = (subnet for subnet in cluster.subnets(new_prefix=options.node_cidr_mask_size)
            if not pinned.overlapping(subnet))
    for host in nodes:
        if host.name not in assigned:
            subnet = next(free, None)
            if subnet is None:
                raise ValueError(f"clusterCidr {cluster} has no free /{options.node_cidr_mask_size} for node "
                                 f"{host.name}: widen the cluster range or narrow the node ranges")
            assigned[host.name] = subnet
    return {name: str(subnet) for name, subnet in assigned.items()}


MODULE = PodNetworkModule()
