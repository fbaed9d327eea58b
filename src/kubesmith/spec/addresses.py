"""Addresses fit for their role. The types (spec/types.py) already hold every address in one canonical form
(`fd00:0::1` is `fd00::1`; zones and IPv4-mapped IPv6 are refused), so duplicates are found by text; here,
what an address may not be where it is used.

A host's address is how every other host and kubesmith reach it: a multicast, broadcast, unspecified,
loopback or link-local address reaches no other machine (or all of them). The virtual IP is one more
address on the control-plane hosts' own network: kubesmith knows that network only from the hosts'
addresses (keepalived's interface has no prefix option), so the VIP must share a /24 (IPv4) or /64 (IPv6)
with a control-plane host, the usual size of one layer-2 segment; and it may not be an address the
cluster routes elsewhere (the pod and service ranges). The pod and service ranges may not be loopback,
multicast or link-local: the kernel routes those itself.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from kubesmith.spec.errors import LocPart
from kubesmith.spec.model import Cluster

Finding = tuple[tuple[LocPart, ...], str, str]
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
BROADCAST = ipaddress.IPv4Address("255.255.255.255")
SEGMENT_PREFIX = {4: 24, 6: 64}


def address_findings(cluster: Cluster) -> list[Finding]:
    return [*_host_addresses(cluster), *_ranges(cluster), *_vip(cluster)]


def unusable(address: Address) -> str | None:
    """Why no other machine can reach `address`, or None."""
    if address == BROADCAST:
        return "the broadcast address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    return None


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
        if reason := _reserved_range(ipaddress.ip_network(cidr)):
            yield (("spec", "network", field), f"{cidr} {reason}: pods and services need ordinary unicast "
                   "addresses", "error")


def _reserved_range(network: Network) -> str | None:
    for test, what in ((lambda n: n.is_loopback, "loopback"), (lambda n: n.is_multicast, "multicast"),
                       (lambda n: n.is_link_local, "link-local")):
        if test(network) or test(network.network_address) or test(network.broadcast_address):
            return f"holds {what} addresses"
    if network.network_address.is_unspecified:
        return "holds the unspecified address"
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
