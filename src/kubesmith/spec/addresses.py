"""Addresses fit for their role. The types (vocabulary/types.py) already hold every address in one canonical form
(`fd00:0::1` is `fd00::1`; zones and IPv4-mapped IPv6 are refused), so duplicates are found by text; here,
what an address may not be where it is used.

A host's address is how every other host and kubesmith reach it: a multicast, broadcast, unspecified,
loopback or link-local address reaches no other machine (or all of them). The virtual IP is one more
address on the control-plane hosts' own network: kubesmith knows that network only from the hosts'
addresses (keepalived's interface has no prefix option), so the VIP must share a /24 (IPv4) or /64 (IPv6)
with a control-plane host, the usual size of one layer-2 segment; and it may not be an address the
cluster routes elsewhere (the pod and service ranges), nor the network or broadcast address of that /24.
The pod and service ranges may not be loopback, multicast, link-local, reserved or in 0.0.0.0/8: the kernel
routes those itself; and the service range may not be larger than the API server takes. The same holds
wherever else the file names an address: the components' pod ranges, the kubelet's DNS servers, the
endpoint, the agent's CA URLs, and CoreDNS's resolvers (which a pod must reach: not the host's loopback).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from urllib.parse import urlsplit

from kubesmith.vocabulary.errors import LocPart
from kubesmith.spec.model import Cluster
from kubesmith.vocabulary.types import THIS_NETWORK, unusable

Finding = tuple[tuple[LocPart, ...], str, str]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
SEGMENT_PREFIX = {4: 24, 6: 64}
# kube-apiserver refuses a larger service range (cmd/kube-apiserver/app/options/validation.go,
# validateMaxCIDRRange with maxCIDRBits = 20: "for 32-bit addresses, the mask must be >= 12", 108 for IPv6)
SERVICE_RANGE_MIN_PREFIX = {4: 12, 6: 108}


def address_findings(cluster: Cluster) -> list[Finding]:
    return [*_host_addresses(cluster), *_ranges(cluster), *_vip(cluster), *_component_addresses(cluster)]


def host_problem(host: str) -> str | None:
    """Why the host part of a URL or HOST:PORT cannot be reached, or None (names are not checked here)."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    return unusable(address, translated=True)  # a destination: NAT64 may carry it to an IPv4 endpoint


def _host_addresses(cluster: Cluster) -> Iterator[Finding]:
    for index, host in enumerate(cluster.spec.hosts):
        if "control-plane" in host.roles:
            continue  # checks.py names those with what the control plane needs (the same reasons)
        if reason := unusable(ipaddress.ip_address(host.address)):
            yield (("spec", "hosts", index, "address"), f"{host.address} is {reason}: a host needs an address "
                   "the other hosts and kubesmith can reach", "error")


def _ranges(cluster: Cluster) -> Iterator[Finding]:
    network = cluster.spec.network
    for field, cidr in (("clusterCidr", network.cluster_cidr), ("serviceCidr", network.service_cidr)):
        if reason := reserved_range(ipaddress.ip_network(cidr)):
            yield (("spec", "network", field), f"{cidr} {reason}: pods and services need ordinary unicast "
                   "addresses", "error")
        elif field == "serviceCidr" and (range_ := ipaddress.ip_network(cidr)).prefixlen < \
                (shortest := SERVICE_RANGE_MIN_PREFIX[range_.version]):
            yield (("spec", "network", field), f"{cidr} is larger than the API server takes: an IPv{range_.version} "
                   f"service range needs a prefix of /{shortest} or longer", "error")


def reserved_range(network: Network) -> str | None:
    """Why `network` cannot hold pod or service addresses, or None."""
    for test, what in ((lambda n: n.is_loopback, "loopback"), (lambda n: n.is_multicast, "multicast"),
                       (lambda n: n.is_link_local, "link-local"),
                       (lambda n: n.version == 4 and n.is_reserved, "reserved (240.0.0.0/4)")):
        if test(network) or test(network.network_address) or test(network.broadcast_address):
            return f"holds {what} addresses"
    if network.network_address.is_unspecified or (network.version == 4 and network.overlaps(THIS_NETWORK)):
        return "holds the unspecified address" if network.network_address.is_unspecified else \
            "holds addresses of 0.0.0.0/8 (\"this network\")"
    return None


def _component_addresses(cluster: Cluster) -> Iterator[Finding]:
    """Addresses components take from the file: the pod range of the controller manager and kube-proxy,
    the kubelet's DNS servers, the endpoint, the agent's CA URLs."""
    components = cluster.spec.components
    where = ("spec", "components")
    ranges = [((*where, "controllerManager", "clusterCidr"), components.controller_manager.cluster_cidr),
              ((*where, "proxy", "clusterCidr"), components.proxy.cluster_cidr)]
    # (kube-proxy ignores its --cluster-cidr next to kubesmith's --config: managed.ignored_flag_problem)
    if "cluster-cidr" in (manager := components.controller_manager).extra_args:
        for text in str(manager.extra_args["cluster-cidr"]).split(","):
            ranges.append(((*where, "controllerManager", "extraArgs", "cluster-cidr"), text))
    for loc, cidr in ranges:
        try:
            network = ipaddress.ip_network(cidr, strict=False) if cidr else None
        except ValueError:
            yield loc, f"{cidr!r} is not a range (CIDR)", "error"
            continue
        if network is not None and (reason := reserved_range(network)):
            yield loc, f"{cidr} {reason}: pods need ordinary unicast addresses", "error"
    for index, server in enumerate(components.kubelet.cluster_dns or ()):
        if reason := unusable(ipaddress.ip_address(server), link_local=True, translated=True):  # NodeLocal DNSCache: 169.254.20.10
            yield (*where, "kubelet", "clusterDns", index), f"{server} is {reason}: pods send DNS queries there", \
                "error"
    endpoint = cluster.spec.control_plane_endpoint
    if endpoint and (reason := host_problem(endpoint.rpartition(":")[0])):
        yield ("spec", "controlPlaneEndpoint"), f"{endpoint}: the host is {reason}: every client dials it", "error"
    elif endpoint and (reason := _in_cluster_range(cluster, endpoint.rpartition(":")[0])):
        yield ("spec", "controlPlaneEndpoint"), (f"{endpoint}: the host {reason}: kubelets and kube-proxy need "
                                                 "the endpoint before kube-proxy's rules exist; use an address of "
                                                 "the hosts' network"), "error"
    for index, url in enumerate(components.agent.ca_urls or ()):  # its form: spec.types.HttpsUrl
        host = urlsplit(url).hostname or ""
        if reason := host_problem(host):
            yield (*where, "agent", "caUrls", index), f"{url}: the host is {reason}: the agent dials it", "error"


def _in_cluster_range(cluster: Cluster, host: str) -> str | None:
    """Where in the pod or service range `host` lies (the cluster routes those addresses itself), or None."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None  # a name
    network = cluster.spec.network
    for field, cidr in (("clusterCidr", network.cluster_cidr), ("serviceCidr", network.service_cidr)):
        try:
            range_ = ipaddress.ip_network(cidr)
        except ValueError:
            continue
        if address.version == range_.version and address in range_:
            return f"lies inside {field} {cidr}, which the cluster routes itself"
    return None


def _vip(cluster: Cluster) -> Iterator[Finding]:
    vip_text = cluster.spec.control_plane_vip
    if vip_text is None or cluster.spec.control_plane_endpoint is not None:
        return
    vip, where = ipaddress.ip_address(vip_text), ("spec", "controlPlaneVIP")
    if reason := unusable(vip):
        yield where, f"{vip} is {reason}: the virtual IP must be an ordinary address of the hosts' network", "error"
        return
    network = cluster.spec.network
    for field, cidr in (("clusterCidr", network.cluster_cidr), ("serviceCidr", network.service_cidr)):
        if vip in ipaddress.ip_network(cidr):
            yield where, f"{vip} lies inside {field} {cidr}: the cluster routes those addresses elsewhere", "error"
            return
    hosts = [ipaddress.ip_address(host.address) for host in cluster.control_plane_hosts]
    same_family = [address for address in hosts if address.version == vip.version]
    if not same_family:
        return  # checks.py names the family mismatch
    prefix = SEGMENT_PREFIX[vip.version]
    segment = ipaddress.ip_network(f"{vip}/{prefix}", strict=False)
    if not any(address in segment for address in same_family):
        yield where, (f"{vip} is outside every control-plane host's network: kubesmith takes that network to be "
                      f"the /{prefix} around each host's address ({segment} has none), and keepalived can move the "
                      "address only between hosts of one segment"), "error"
    elif vip.version == 4 and vip in (segment.network_address, segment.broadcast_address):
        what = "network" if vip == segment.network_address else "broadcast"
        yield where, (f"{vip} is the {what} address of {segment}, the hosts' network as kubesmith takes it: no "
                      "host can hold it"), "error"
