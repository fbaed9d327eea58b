"""Checks that need more than one option: overlaps, uniqueness, counts, supported versions, flags."""

from __future__ import annotations

import ipaddress
import unicodedata
from typing import Any

from kubesmith.durations import go_duration_ns
from kubesmith.modules import MODULES
from kubesmith.modules.core_dns import forward_targets
from kubesmith.pki.certlist import apiserver_name_problem
from kubesmith.ranges import RangeIndex
from kubesmith.spec.addresses import address_findings, unusable
from kubesmith.vocabulary.types import THIS_NETWORK, canonical_ip
from kubesmith.spec.configvalues import config_value_findings
from kubesmith.spec.effective import (admission_plugin_problem, cipher_problem, config_duration_findings,
                                      config_type_findings, config_value, effective, flag_value_problem,
                                      go_strings, setting_findings, tls_version_problem)
from kubesmith.vocabulary.errors import LocPart, yaml_key, yaml_text
from kubesmith.spec.managed import ignored_flag_problem, managed_config_findings, managed_flag_problem
from kubesmith.spec.security import weakenings
from kubesmith.vocabulary.types import MAX_EXTRA_ARGS, MAX_FEATURE_GATES, MAX_GATE_HINTS, gate_count_problem
from kubesmith.spec.model import Cluster, Components, nth_address
from kubesmith.spec.paths import path_findings
from kubesmith.spec.ports import endpoint_findings, port_findings
from kubesmith.versions.registry import VersionRegistry

Finding = tuple[tuple[LocPart, ...], str, str]  # (location, message, severity)


def semantic_findings(cluster: Cluster, registry: VersionRegistry) -> list[Finding]:
    findings: list[Finding] = []
    findings += _version(cluster, registry)
    findings += _network(cluster)
    findings += _hosts(cluster)
    findings += _pod_ranges(cluster)
    findings += _cluster_dns(cluster)
    findings += _advertised_addresses(cluster)
    findings += address_findings(cluster)
    findings += endpoint_findings(cluster)
    findings += port_findings(cluster)  # one listener per port and host, privileged ports, NodePorts
    findings += setting_findings(cluster.spec.components, {"kubelet": "kubelet", "proxy": "proxy"})
    findings += config_duration_findings(cluster.spec.components, {"kubelet": "kubelet", "proxy": "proxy",
                                                                    "scheduler": "scheduler"})
    findings += config_type_findings(cluster.spec.components, {"kubelet": "kubelet", "proxy": "proxy",
                                                                "scheduler": "scheduler"})
    findings += config_value_findings(cluster.spec.components, cluster.minor,
                                      lambda flag: registry.flag_type("kubelet", flag))
    findings += _leader_election(cluster)
    findings += _idle_timeout(cluster)
    findings += _admission(cluster)
    findings += _ciphers(cluster)
    findings += _apiserver_values(cluster)
    findings += _security(cluster)
    findings += path_findings(cluster)  # system directories, overlaps, files on this machine
    if registry.supports(cluster.minor):
        findings += _components(cluster, registry)
        gates = _feature_gates(cluster, registry)
        refused = {finding[0] for finding in gates}
        findings += gates + [finding for finding in _kubelet_defaults(cluster) if finding[0] not in refused]
    return findings


def _version(cluster: Cluster, registry: VersionRegistry) -> list[Finding]:
    if registry.supports(cluster.minor):
        return []
    supported = f"{registry.minors[0]} to {registry.newest}"
    return [(("spec", "kubernetesVersion"),
             f"Kubernetes {cluster.spec.kubernetes_version} is not supported; supported releases: {supported}",
             "error")]


def _network(cluster: Cluster) -> list[Finding]:
    network = cluster.spec.network
    pods, services = ipaddress.ip_network(network.cluster_cidr), ipaddress.ip_network(network.service_cidr)
    findings: list[Finding] = []
    if pods.version == services.version and pods.overlaps(services):
        findings.append((("spec", "network", "serviceCidr"),
                         f"{services} overlaps clusterCidr {pods}; pods and services need separate ranges", "error"))
    if services.num_addresses < 16:
        findings.append((("spec", "network", "serviceCidr"),
                         f"{services} is too small: it needs room for the API and DNS service IPs", "error"))
    if network.dns_service_ip:
        findings += _dns_service_ip(ipaddress.ip_address(network.dns_service_ip), services)
    findings += _service_family(cluster, services)
    if problem := dns_domain_problem(network.dns_domain):
        findings.append((("spec", "network", "dnsDomain"), problem, "error"))
    for index, host in enumerate(cluster.spec.hosts):
        address = ipaddress.ip_address(host.address)
        for name, cidr in (("clusterCidr", pods), ("serviceCidr", services)):
            if address.version == cidr.version and address in cidr:
                findings.append((("spec", "hosts", index, "address"),
                                 f"{address} lies inside {name} {cidr}", "error"))
    return findings


def _service_family(cluster: Cluster, services: ipaddress.IPv4Network | ipaddress.IPv6Network) -> list[Finding]:
    """The API server's advertised address (advertiseAddress, else each control-plane host's) is of the service
    range's family: kube-apiserver stops with `service IP family "..." must match public address family "..."`,
    since the kubernetes Service is single-stack in that range and its endpoint is the advertised address."""
    family = f"IPv{services.version}"
    advertised = cluster.spec.components.apiserver.advertise_address
    if advertised is not None:  # an address no one can reach is named as that (_advertised_addresses)
        if ipaddress.ip_address(advertised).version == services.version or _unreachable_from_others(advertised):
            return []
        return [(("spec", "components", "apiserver", "advertiseAddress"), f"{advertised} is not an {family} address "
                 f"like serviceCidr {services}: kube-apiserver refuses to start (service IP family must match public "
                 "address family)", "error")]
    return [(("spec", "hosts", index, "address"), f"{host.address} is not an {family} address like serviceCidr "
             f"{services}: this control-plane host's API server advertises it and refuses to start (service IP "
             f"family must match public address family); give serviceCidr an IPv{host_version} range, or set "
             "spec.components.apiserver.advertiseAddress", "error")
            for index, host in enumerate(cluster.spec.hosts)
            if "control-plane" in host.roles and not _unreachable_from_others(host.address)
            and (host_version := ipaddress.ip_address(host.address).version) != services.version]


# The generic top-level domains the whole Internet resolves names under (every two-letter label is a
# country's, or reserved for one); a cluster zone of one of them answers all its names from the cluster
PUBLIC_TLDS = frozenset({
    "com", "org", "net", "edu", "gov", "mil", "int", "info", "biz", "name", "pro", "aero", "coop", "museum",
    "mobi", "asia", "tel", "travel", "jobs", "cat", "app", "dev", "page", "cloud", "online", "site", "shop",
    "store", "tech", "xyz", "top", "blog", "io", "ai", "co", "me", "tv", "arpa",
})


def dns_domain_problem(domain: str) -> str | None:
    """Why CoreDNS may not serve `domain` as the cluster zone: a public top-level domain or a reverse
    zone (`in-addr.arpa`, `ip6.arpa`) takes every lookup under it from the world's DNS."""
    zone = domain.lower().rstrip(".")
    if zone in PUBLIC_TLDS or (zone.isascii() and zone.isalpha() and len(zone) == 2):
        return (f"{domain!r} is a public top-level domain: CoreDNS would answer every .{zone} lookup of the "
                "cluster's pods from the cluster zone; use a private name (cluster.local, corp.internal, or a "
                "subdomain of your own)")
    if zone in ("in-addr.arpa", "ip6.arpa") or zone.endswith((".in-addr.arpa", ".ip6.arpa")):
        return (f"{domain!r} is a reverse-lookup zone: CoreDNS would answer the pods' reverse lookups of "
                "addresses outside the cluster from the cluster zone; use a name such as cluster.local")
    return None


def _pod_ranges(cluster: Cluster) -> list[Finding]:
    """A node's own pod range lies in the cluster's and overlaps no other node's (the first in host order is
    named; RangeIndex keeps this linear for 10,000 hosts)."""
    pods = ipaddress.ip_network(cluster.spec.network.cluster_cidr)
    findings: list[Finding] = []
    seen: RangeIndex[int] = RangeIndex()
    for index, host in enumerate(cluster.spec.hosts):
        if host.pod_cidr is None:
            continue
        where, own = ("spec", "hosts", index, "podCidr"), ipaddress.ip_network(host.pod_cidr)
        if "node" not in host.roles:
            findings.append((where, "only hosts with the node role run pods; remove podCidr", "error"))
        elif own.version != pods.version or not own.subnet_of(pods):  # type: ignore[arg-type]
            findings.append((where, f"{own} lies outside clusterCidr {pods}", "error"))
        elif (other := min(seen.overlapping(own), default=None)) is not None:
            findings.append((where, f"{own} overlaps the pod range of spec.hosts[{other}]", "error"))
        seen.add(own, index)
    return findings


def _dns_service_ip(address: ipaddress.IPv4Address | ipaddress.IPv6Address,
                    services: ipaddress.IPv4Network | ipaddress.IPv6Network) -> list[Finding]:
    where = ("spec", "network", "dnsServiceIp")
    if address not in services:
        return [(where, f"{address} is outside serviceCidr {services}", "error")]
    if address == services.network_address:
        return [(where, f"{address} is the network address of serviceCidr {services}", "error")]
    if address.version == 4 and address == services.broadcast_address:
        return [(where, f"{address} is the broadcast address of serviceCidr {services}", "error")]
    if problem := api_service_ip_problem(address, services):
        return [(where, f"{problem}; use another address, by default the tenth", "error")]
    return []


def api_service_ip_problem(address: ipaddress.IPv4Address | ipaddress.IPv6Address,
                           services: ipaddress.IPv4Network | ipaddress.IPv6Network) -> str | None:
    """The kubernetes Service's address (the first of the service range) answers no DNS query."""
    if address.version == services.version and address == services.network_address + 1:
        return f"{address} is the API server's service IP (first address of serviceCidr {services})"
    return None


def _cluster_dns(cluster: Cluster) -> list[Finding]:
    """The kubelet's DNS servers are what pods query: not the API server's service IP (as dnsServiceIp);
    CoreDNS's resolvers are where it forwards: not the cluster DNS service itself (its loop check exits)."""
    network = cluster.spec.network
    try:
        services = ipaddress.ip_network(network.service_cidr)
        dns = ipaddress.ip_address(network.dns_service_ip or nth_address(network.service_cidr, 10))
    except (ValueError, IndexError):
        return []  # the range's own check names it
    findings: list[Finding] = []
    for index, server in enumerate(cluster.spec.components.kubelet.cluster_dns or ()):
        if problem := api_service_ip_problem(ipaddress.ip_address(server), services):
            findings.append((("spec", "components", "kubelet", "clusterDns", index), f"{problem}, which answers no "
                             "DNS query: pods would have no cluster DNS; remove it (the default is "
                             "spec.network.dnsServiceIp)", "error"))
    core_dns = cluster.spec.components.core_dns
    targets = [(("upstream", index), server) for index, server in enumerate(core_dns.upstream)]
    targets += [(("stubDomains", domain, index), server) for domain, servers in core_dns.stub_domains.items()
                for index, server in enumerate(servers)]
    targets += [(("extraServerBlocks", zone, index), server) for zone, lines in core_dns.extra_server_blocks.items()
                for index, server in forward_targets(lines)]
    for where, server in targets:
        host = server[1:].partition("]")[0] if server.startswith("[") else \
            server.split(":")[0] if server.count(":") == 1 else server
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            continue  # core_dns.resolver_problem names it
        if address == dns:
            findings.append((("spec", "components", "coreDns", *where), f"{server} is the cluster DNS "
                             "service (spec.network.dnsServiceIp), CoreDNS itself: it would forward to itself, "
                             "and its loop check stops it (a block without `loop` sends each query round until it "
                             "times out); name resolvers outside the cluster", "error"))
        elif problem := api_service_ip_problem(address, services):
            findings.append((("spec", "components", "coreDns", *where), f"{problem}, where kube-proxy forwards "
                             "only the API server's port 443/TCP: no DNS query would be answered; name resolvers "
                             "outside the cluster", "error"))
    return findings


# The kubelet's rule for its own labels (k8s.io/kubelet/pkg/apis, KubeletLabels and KubeletLabelNamespaces):
# in the kubernetes.io and k8s.io namespaces only these, or a prefix below; it refuses to start with any
# other (node-role.kubernetes.io/... included: NodeRestriction keeps a kubelet from setting it on itself)
KUBELET_LABELS = frozenset({
    "kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch", "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/zone", "topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
})
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


# The labels the kubelet sets on its Node itself (from the host name and the binary's GOOS and GOARCH);
# --node-labels overrides them, so `kubernetes.io/os: windows` keeps every Linux pod (CoreDNS) off the node
KUBELET_OWN_LABELS = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os",
                      "beta.kubernetes.io/arch")


def label_problem(key: str) -> str | None:
    """Why the kubelet refuses to register with the label `key`, or why it must not, or None."""
    if key in KUBELET_OWN_LABELS:
        return (f"the kubelet sets {key} itself (from the host name and its binary's platform), and a label here "
                "would override it: node selectors and topology rules would read a false value")
    namespace = key.rpartition("/")[0]
    reserved = any(namespace == root or namespace.endswith("." + root) for root in ("kubernetes.io", "k8s.io"))
    allowed = key in KUBELET_LABELS or any(namespace == allowed or namespace.endswith("." + allowed)
                                           for allowed in KUBELET_LABEL_NAMESPACES)
    if reserved and not allowed:
        return (f"the kubelet refuses to start with the label {key}: in the kubernetes.io and k8s.io namespaces "
                f"it registers only {', '.join(p + '/*' for p in KUBELET_LABEL_NAMESPACES)} and the well-known "
                "topology, os and arch labels (NodeRestriction keeps node-role.kubernetes.io/* to the cluster's "
                "administrators: set it with kubectl label)")
    return None


def _hosts(cluster: Cluster) -> list[Finding]:
    hosts = cluster.spec.hosts
    findings: list[Finding] = [(("spec", "hosts", index, "labels", key), problem, "error")
                               for index, host in enumerate(hosts) for key in host.labels
                               if (problem := label_problem(key))]
    findings += [(("spec", "hosts", index, "name"), problem, "error") for index, host in enumerate(hosts)
                 if (problem := apiserver_name_problem(host.name))]
    for field, values in (("name", [h.name for h in hosts]), ("address", [h.address for h in hosts])):
        first_index: dict[str, int] = {}
        for index, value in enumerate(values):
            if first_index.setdefault(value, index) != index:
                findings.append((("spec", "hosts", index, field),
                                 f"{field} {value!r} is already used by spec.hosts[{first_index[value]}]", "error"))
    if not cluster.control_plane_hosts:
        findings.append((("spec", "hosts"), "no host has the control-plane role; at least one is needed", "error"))
    members = len(cluster.etcd_hosts)
    if members == 0:
        findings.append((("spec", "hosts"), "no host has the etcd role; at least one is needed", "error"))
    elif members % 2 == 0:
        findings.append((("spec", "hosts"), f"{members} etcd members tolerate no more failures than {members - 1}; "
                         "use an odd number", "warning"))
    endpoint, vip = cluster.spec.control_plane_endpoint, cluster.spec.control_plane_vip
    if len(cluster.control_plane_hosts) > 1 and endpoint is None and vip is None:
        findings.append(_endpoint_finding(cluster))
    findings += _vip_findings(cluster)
    return findings


def _endpoint_finding(cluster: Cluster) -> Finding:
    """What clients use without an endpoint: a note while nodes balance over every API server themselves,
    a warning when the local load balancer is off (then nodes lose the API with the first host)."""
    balancer = cluster.spec.components.api_load_balancer
    if not balancer.enabled:
        return (("spec", "controlPlaneEndpoint"), "several control-plane hosts, no endpoint and "
                "components.apiLoadBalancer.enabled is false: nodes will use the first control-plane host only; "
                "set a load-balanced HOST:PORT for HA", "warning")
    return (("spec", "controlPlaneEndpoint"), "not set: control-plane hosts use their own API server; every other host "
            f"reaches all {len(cluster.control_plane_hosts)} API servers through its local load balancer "
            f"(127.0.0.1:{balancer.port}); operators' kubeconfigs (`kubesmith kubeconfig`) use the first ready "
            "control-plane host. Set controlPlaneVIP (an address the control-plane hosts share) or a HOST:PORT "
            "(an external load balancer) for one address that survives a host", "note")


def _vip_findings(cluster: Cluster) -> list[Finding]:
    """A virtual IP is one more address on the hosts' network: neither a host's own nor beside an endpoint."""
    vip = cluster.spec.control_plane_vip
    if vip is None:
        return []
    where = ("spec", "controlPlaneVIP")
    if cluster.spec.control_plane_endpoint is not None:
        return [(where, "set either controlPlaneVIP or controlPlaneEndpoint: both name the API endpoint", "error")]
    owner = next((host.name for host in cluster.spec.hosts if host.address == vip), None)
    if owner is not None:
        return [(where, f"{vip} is host {owner}'s address; the virtual IP must be one no host has", "error")]
    families = {":" in host.address for host in cluster.control_plane_hosts}
    if families != {":" in vip}:
        return [(where, f"{vip} is not of the control-plane hosts' address family (VRRP runs between them)",
                 "error")]
    return []


def _advertised_addresses(cluster: Cluster) -> list[Finding]:
    """A control-plane address is published to the whole cluster (the `kubernetes` Service's
    endpoints, certificates, every kubeconfig): one only this machine can reach breaks every
    in-cluster client, and the API server refuses loopback endpoints outright."""
    findings: list[Finding] = []
    for index, host in enumerate(cluster.spec.hosts):
        if "control-plane" in host.roles and (reason := _unreachable_from_others(host.address)):
            findings.append((("spec", "hosts", index, "address"),
                             f"{host.address} is {reason}: a control-plane host needs an address other hosts and "
                             "pods can reach (kubesmith init without --host writes this machine's)", "error"))
    advertised = cluster.spec.components.apiserver.advertise_address
    if advertised and (reason := _unreachable_from_others(advertised)):
        findings.append((("spec", "components", "apiserver", "advertiseAddress"),
                         f"{advertised} is {reason}: the API server publishes it as the kubernetes Service's "
                         "endpoint, which pods must reach", "error"))
    elif advertised and len(cluster.control_plane_hosts) > 1:
        findings.append((("spec", "components", "apiserver", "advertiseAddress"),
                         f"{advertised} would be advertised by all {len(cluster.control_plane_hosts)} API servers as "
                         "their own address: the kubernetes Service would hold one endpoint, and the other API "
                         "servers would publish an address that is not theirs; remove it (each API server "
                         "advertises its host's address)", "error"))
    findings += _bind_addresses(cluster)
    return findings


def _spelling_problem(text: str) -> str | None:
    """Why an address has another spelling than its one canonical text (a zone suffix, an IPv6 spelling of an
    IPv4 address), or None (not an address at all: the type checks name that)."""
    try:
        ipaddress.ip_address(text.partition("%")[0])
    except ValueError:
        return None
    try:
        canonical_ip(text)
    except ValueError as error:
        return str(error)
    return None


def _bind_addresses(cluster: Cluster) -> list[Finding]:
    """A fixed bind address is one every host running the component can bind: the unspecified address
    (0.0.0.0, ::) always; a multicast, broadcast or reserved address never; with several hosts, not one
    host's address (the others cannot bind it), nor, for the API server, loopback (the other hosts'
    load balancers and every pod would lose the API); the kubelet never loopback (the API server dials it)."""
    components = cluster.spec.components
    candidates: list[tuple[tuple[LocPart, ...], Any, str, list[Any]]] = [
        (("spec", "components", "apiserver", "bindAddress"), components.apiserver.bind_address, "API server",
         cluster.control_plane_hosts)]
    nodes = [host for host in cluster.spec.hosts if "node" in host.roles]
    for loc, value in ((("extraConfig", "address"), components.kubelet.extra_config.get("address")),
                       (("extraArgs", "address"), components.kubelet.extra_args.get("address"))):
        if value is not None:
            candidates.append((("spec", "components", "kubelet", *loc), value, "kubelet", nodes))
    findings: list[Finding] = []
    for where, value, what, hosts in candidates:
        if (problem := _spelling_problem(str(value))) and not ("extraArgs" in where and "%" in str(value)):
            # (a zone in a flag: the flag's type check names it, as netutils.ParseIPSloppy refuses it)
            findings.append((where, f"{problem} (one address has one spelling here, as in every address option)",
                             "error"))
            continue
        try:
            address = ipaddress.ip_address(str(value))
        except ValueError:
            if where[-2:] == ("extraConfig", "address") and str(value):
                # (a flag's type check names a flag's; the configuration file's field has none): the kubelet
                # would listen on '[[::1]]:10250' and exit
                findings.append((where, f"{yaml_text(value)} is no IP address: the kubelet listens on "
                                 "ADDRESS:port and would not start; use 0.0.0.0 (or ::) or an address of the host, "
                                 "without brackets", "error"))
            continue  # the type checks name it
        if address.is_unspecified:
            continue
        owner = next((host.name for host in hosts if host.address == str(address)), None)
        if address.is_multicast or (address.version == 4 and (address.is_reserved or address in THIS_NETWORK)):
            findings.append((where, f"{address} is {unusable(address)}: no host can bind it, so the {what} "
                             "would not start; use 0.0.0.0 (or ::) or an address of the host", "error"))
        elif address.is_loopback and what == "kubelet":
            findings.append((where, f"{address} is a loopback address: the API server reaches each kubelet at its "
                             "node's address (logs, exec, port-forward, metrics), which nothing would answer; use "
                             "0.0.0.0 (or ::) or leave it unset", "error"))
        elif len(hosts) > 1 and address.is_loopback and what == "API server":
            findings.append((where, f"{address} is a loopback address: with {len(hosts)} control-plane hosts, the "
                             "other hosts' load balancers and every pod would lose the API; use 0.0.0.0 (or ::)",
                             "error"))
        elif len(hosts) > 1 and not address.is_loopback:
            holder = f"host {owner}'s address" if owner else "an address no host in the file has"
            findings.append((where, f"{address} is {holder}, but {len(hosts)} hosts run the {what}: each would "
                             "bind it and only the host holding it can, so the others would not start; use "
                             "0.0.0.0 (or ::)", "error"))
    return findings


def _unreachable_from_others(text: str) -> str | None:
    return unusable(ipaddress.ip_address(text))


# admission plugins the CIS benchmark wants on (1.2.12-1.2.14) and ones kubesmith enables by default
_REQUIRED_ADMISSION = {"ServiceAccount": "CIS 1.2.12", "NamespaceLifecycle": "CIS 1.2.13",
                       "NodeRestriction": "CIS 1.2.14"}
# on by default in every supported release, and what kubesmith points to instead of PodSecurityPolicy
# (spec/addons.py): without it a namespace's pod-security.kubernetes.io labels enforce nothing
_DEFAULT_ON_ADMISSION = {"PodSecurity": "it enforces the Pod Security Standards that namespaces ask for with "
                                        "pod-security.kubernetes.io labels: without it any pod would be admitted, "
                                        "privileged or on the host's namespaces"}


# plugins kube-apiserver still registers that no cluster of kubesmith's can run with
_REFUSED_ADMISSION = {
    "AlwaysAdmit": "AlwaysAdmit admits every request and is deprecated (CIS 1.2.10); remove it",
    "AlwaysDeny": ("AlwaysDeny refuses every request that writes (it exists for tests): no controller, kubelet or "
                   "kubesmith's own apply could change an object; remove it"),
}


def _admission(cluster: Cluster) -> list[Finding]:
    """`disable-admission-plugins` in extraArgs, as the API server reads it, may not turn off a plugin that
    enableAdmissionPlugins turns on or that the benchmark requires; AlwaysAdmit admits everything, AlwaysDeny
    nothing."""
    options = cluster.spec.components.apiserver
    findings: list[Finding] = []
    if "NodeRestriction" not in options.enable_admission_plugins:
        findings.append((("spec", "components", "apiserver", "enableAdmissionPlugins"),
                         "NodeRestriction is missing: it keeps each kubelet to its own Node and pods (CIS 1.2.14), "
                         "and it is not on by default; list it with the plugins you add", "error"))
    for plugin, why in _REFUSED_ADMISSION.items():
        if plugin in options.enable_admission_plugins:
            index = options.enable_admission_plugins.index(plugin)
            findings.append((("spec", "components", "apiserver", "enableAdmissionPlugins", index), why, "error"))
    if "disable-admission-plugins" not in options.extra_args:
        return findings
    where = ("spec", "components", "apiserver", "extraArgs", "disable-admission-plugins")
    for plugin in go_strings(options.extra_args["disable-admission-plugins"]):
        if plugin in options.enable_admission_plugins:
            findings.append((where, f"disables {plugin}, which spec.components.apiserver.enableAdmissionPlugins "
                             "enables: remove it there instead", "error"))
        elif plugin in _REQUIRED_ADMISSION:
            findings.append((where, f"disables {plugin}, which {_REQUIRED_ADMISSION[plugin]} requires on; "
                             "kubesmith does not turn it off", "error"))
        elif plugin in _DEFAULT_ON_ADMISSION:
            findings.append((where, f"disables {plugin}, which kube-apiserver runs by default and kubesmith keeps "
                             f"on: {_DEFAULT_ON_ADMISSION[plugin]}", "error"))
    return findings


def _ciphers(cluster: Cluster) -> list[Finding]:
    """Cipher suites named in the typed option or the kubelet's configuration (flags: flag_value_problem)."""
    components = cluster.spec.components
    lists = [(("spec", "components", "apiserver", "tlsCipherSuites"), components.apiserver.tls_cipher_suites)]
    present, configured = config_value(components.kubelet, ("tlsCipherSuites",))
    if present and isinstance(configured, list):
        lists.append((("spec", "components", "kubelet", "extraConfig", "tlsCipherSuites"), configured))
    return [((*where, index), problem, "error") for where, names in lists for index, name in enumerate(names)
            if (problem := cipher_problem(name))]


# what --kubelet-preferred-address-types takes (k8s.io/api/core/v1 NodeAddressType)
NODE_ADDRESS_TYPES = ("Hostname", "InternalDNS", "InternalIP", "ExternalDNS", "ExternalIP")
# each authorization mode kube-apiserver knows, and the flag it refuses to start without
AUTHORIZATION_MODES = {"AlwaysAllow": None, "AlwaysDeny": None, "Node": None, "RBAC": None,
                       "ABAC": "authorization-policy-file", "Webhook": "authorization-webhook-config-file"}


def _leader_election(cluster: Cluster) -> list[Finding]:
    """With several control-plane hosts each runs a scheduler and a controller manager: without leader election
    all are active at once, schedulers racing for the same node capacity and controllers creating and deleting
    the same objects. The scheduler's extraConfig leaderElection.leaderElect wins over the typed option."""
    hosts = len(cluster.control_plane_hosts)
    if hosts < 2:
        return []
    components = cluster.spec.components
    present, configured = config_value(components.scheduler, ("leaderElection", "leaderElect"))
    places = [(("scheduler", "extraConfig", "leaderElection", "leaderElect"), configured) if present else
              (("scheduler", "leaderElect"), components.scheduler.leader_elect),
              (("controllerManager", "leaderElect"), components.controller_manager.leader_elect)]
    harm = {"scheduler": "schedulers placing pods on the same node capacity, overcommitting nodes",
            "controllerManager": "controllers creating and deleting the same objects"}
    return [(("spec", "components", *where), f"leader election off, but {hosts} control-plane hosts each run one: "
             f"all {hosts} would act at once ({harm[where[0]]}); keep it on", "error")
            for where, value in places if value is False]


def _oidc(flags: dict[str, Any]) -> list[Finding]:
    """kube-apiserver v1.36.2 stops with "oidc-issuer-url and oidc-client-id must be specified together when
    any oidc-* flags are set" (an issuer URL it refuses outright is named by the flag checks alone)."""
    oidc = [flag for flag in flags if str(flag).startswith("oidc-")]
    issuer = flags.get("oidc-issuer-url")
    if not oidc or (issuer is not None and not str(issuer).startswith("https://")):
        return []
    missing = [flag for flag in ("oidc-issuer-url", "oidc-client-id") if flag not in flags]
    return [(("spec", "components", "apiserver", "extraArgs", oidc[0]), f"oidc-* flags need "
             f"{' and '.join(missing)} as well: kube-apiserver refuses OIDC without both the issuer URL and the "
             "client id", "error")] if missing else []


def _apiserver_values(cluster: Cluster) -> list[Finding]:
    """Typed values the API server (or the kubelet) refuses at start, or that weaken TLS below 1.2."""
    components = cluster.spec.components
    options = components.apiserver
    where = ("spec", "components", "apiserver")
    findings: list[Finding] = [((*where, "enableAdmissionPlugins", index), problem, "error")
                               for index, plugin in enumerate(options.enable_admission_plugins)
                               if (problem := admission_plugin_problem(plugin))]
    for index, mode in enumerate(options.authorization_mode):
        if mode in options.authorization_mode[:index]:
            findings.append(((*where, "authorizationMode", index), f"{mode} is listed twice: kube-apiserver refuses "
                             "a mode specified more than once", "error"))
        elif mode not in AUTHORIZATION_MODES:
            findings.append(((*where, "authorizationMode", index), f"kube-apiserver has no authorization mode "
                             f"{mode!r} (modes: {', '.join(AUTHORIZATION_MODES)})", "error"))
        elif (needed := AUTHORIZATION_MODES[mode]) and needed not in options.extra_args:
            findings.append(((*where, "authorizationMode", index), f"{mode} needs its configuration: set "
                             f"extraArgs {needed} as well, or kube-apiserver refuses to start", "error"))
    findings += [((*where, "kubeletPreferredAddressTypes", index), f"{kind!r} is no node address type (types: "
                  f"{', '.join(NODE_ADDRESS_TYPES)}): kube-apiserver refuses to start", "error")
                 for index, kind in enumerate(options.kubelet_preferred_address_types) if kind not in NODE_ADDRESS_TYPES]
    findings += _oidc(options.extra_args)
    present, version = config_value(components.kubelet, ("tlsMinVersion",))
    if present and isinstance(version, str) and (problem := tls_version_problem(version)):
        findings.append((("spec", "components", "kubelet", "extraConfig", "tlsMinVersion"), problem, "error"))
    # a typed option's field repeated in extraConfig wins (documented precedence), but not with a value the
    # typed option refuses: that would route around its check
    kubelet_config, proxy_config = components.kubelet.extra_config, components.proxy.extra_config
    for field, low, option in (("podPidsLimit", -1, "-1 (no limit) or more"), ("maxPods", 1, "1 or more")):
        value = kubelet_config.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value < low:
            findings.append((("spec", "components", "kubelet", "extraConfig", field), f"{value} is refused by the "
                             f"typed option spec.components.kubelet.{field}, which takes {option}", "error"))
    mode = proxy_config.get("mode")
    if isinstance(mode, str) and mode not in ("", "iptables", "ipvs", "nftables"):
        findings.append((("spec", "components", "proxy", "extraConfig", "mode"), f"kube-proxy has no mode {mode!r} "
                         "(iptables, ipvs or nftables): it refuses to start", "error"))
    domain = components.kubelet.cluster_domain
    if domain is not None and domain != cluster.spec.network.dns_domain:
        findings.append((("spec", "components", "kubelet", "clusterDomain"), f"{domain!r} is not "
                         f"spec.network.dnsDomain ({cluster.spec.network.dns_domain}), the zone CoreDNS serves: pods "
                         "would search a domain nothing answers; set spec.network.dnsDomain instead", "error"))
    findings += _runtime_endpoint(cluster)
    findings += _max_pods(cluster)
    findings += _bridge(cluster)
    return findings


def _runtime_endpoint(cluster: Cluster) -> list[Finding]:
    """The kubelet's CRI socket: where the containerd kubesmith runs listens, or (a runtime of the hosts'
    own) a unix socket path the kernel can bind (sun_path holds 107 bytes and a NUL)."""
    runtime = cluster.spec.components.container_runtime
    endpoint = cluster.spec.components.kubelet.container_runtime_endpoint
    where = ("spec", "components", "kubelet", "containerRuntimeEndpoint")
    if endpoint is None:
        return []
    if runtime.enabled and endpoint != f"unix://{runtime.socket}":
        return [(where, f"{yaml_text(endpoint)} is not unix://{runtime.socket}, where the containerd kubesmith runs "
                 "listens: the kubelet would start pods elsewhere; set spec.components.containerRuntime.socket "
                 "instead, or turn containerRuntime off when the hosts bring their own runtime", "error")]
    path = endpoint.removeprefix("unix://")
    if not endpoint.startswith("unix:///") or len(path.encode()) > 107 or any(c.isspace() for c in path):
        return [(where, f"{yaml_text(endpoint)} is not unix:///PATH of a CRI socket (an absolute path of at most "
                 "107 bytes)", "error")]
    return []


def _max_pods(cluster: Cluster) -> list[Finding]:
    """More pods per node than the IPv4 range kubesmith's pod network gives each node holds addresses
    (less the network, broadcast and gateway addresses): the pods past it never start, waiting for an
    address. The flag wins over extraConfig, which wins over the typed option; a host's own podCidr is
    its range. A CNI of the hosts' own sizes its ranges itself."""
    kubelet = cluster.spec.components.kubelet
    present, configured = config_value(kubelet, ("maxPods",))
    value, where = (configured, ("extraConfig", "maxPods")) if present else (kubelet.max_pods, ("maxPods",))
    if "max-pods" in kubelet.extra_args:
        flag = kubelet.extra_args["max-pods"]
        try:
            value = int(str(flag), 0) if not isinstance(flag, bool) else None
        except ValueError:
            value = None  # the flag's type check names it
        where = ("extraArgs", "max-pods")
    if not cluster.spec.components.pod_network.enabled:
        return []
    mask = cluster.spec.components.pod_network.node_cidr_mask_size
    try:
        ipv4 = ipaddress.ip_network(cluster.spec.network.cluster_cidr).version == 4
    except ValueError:
        return []  # the range's own check names it
    if not ipv4 or not isinstance(value, int) or isinstance(value, bool):
        return []
    room = (1 << (32 - mask)) - 3
    nodes = [(index, host) for index, host in enumerate(cluster.spec.hosts) if "node" in host.roles]
    if value > room and any(host.pod_cidr is None for _, host in nodes):
        return [(("spec", "components", "kubelet", *where), f"{value} pods per node, but each node's pod range "
                 f"(/{mask}) holds {room} pod addresses: the rest would never start; set it to {room} or less, "
                 "or give nodes larger ranges (spec.components.podNetwork.nodeCidrMaskSize)", "error")]
    findings: list[Finding] = []
    for index, host in nodes:
        if host.pod_cidr is None:
            continue
        try:
            own = ipaddress.ip_network(host.pod_cidr)
        except ValueError:
            continue
        if own.version == 4 and value > (own_room := max(own.num_addresses - 3, 0)):
            findings.append((("spec", "hosts", index, "podCidr"), f"{own} holds {own_room} pod addresses, but the "
                             f"kubelet takes {value} pods per node (spec.components.kubelet.{'.'.join(where)}): "
                             "the rest would never start; give the host a larger range or lower maxPods", "error"))
    return findings


def _bridge(cluster: Cluster) -> list[Finding]:
    """The pods' bridge is an interface of its own: the bridge plugin refuses to take over one the host
    has ("already exists but is not a bridge"), so no pod would get a network."""
    components = cluster.spec.components
    bridge = components.pod_network.bridge
    if not components.pod_network.enabled:
        return []
    if bridge == "lo":
        reason = "the loopback interface"
    elif bridge == components.control_plane_vip.interface:
        reason = (f"the hosts' network interface as kubesmith takes it (spec.components.controlPlaneVip.interface"
                  f"{', the default' if 'interface' not in components.control_plane_vip.model_fields_set else ''})")
    else:
        return []
    return [(("spec", "components", "podNetwork", "bridge"), f"{bridge!r} is {reason}: the bridge plugin "
             "cannot turn an interface the host already has into a bridge, so no pod would get a network; keep the "
             "default cni0 or name a new interface", "error")]


def kubelet_gate(cluster: Cluster, name: str) -> tuple[tuple[LocPart, ...], bool] | None:
    """Where the kubelet's gate `name` is set and to what, as the kubelet gets it (its configuration's
    featureGates over its own featureGates over the cluster's), or None when the file leaves it unset."""
    kubelet = cluster.spec.components.kubelet
    present, config = config_value(kubelet, ("featureGates",))
    if present and isinstance(config, dict) and isinstance(config.get(name), bool):
        return ("spec", "components", "kubelet", "extraConfig", "featureGates", name), config[name]
    if name in (kubelet.feature_gates or {}):
        return ("spec", "components", "kubelet", "featureGates", name), kubelet.feature_gates[name]
    if name in cluster.spec.feature_gates:
        return ("spec", "featureGates", name), cluster.spec.feature_gates[name]
    return None


def _kubelet_defaults(cluster: Cluster) -> list[Finding]:
    """Settings the kubelet refuses next to the graceful shutdown period kubesmith writes (30s unless told
    0s): "specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate
    GracefulNodeShutdown", and "Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod
    at the same time"."""
    kubelet = cluster.spec.components.kubelet
    grace = config_value(kubelet, ("shutdownGracePeriod",))[1] or kubelet.shutdown_grace_period
    try:
        on = go_duration_ns(str(grace)) > 0
    except ValueError:
        return []  # the duration check names it
    if not on:
        return []
    shown = f"{grace}{'' if 'shutdown_grace_period' in kubelet.model_fields_set else ' (kubesmith default)'}"
    fix = "set spec.components.kubelet.shutdownGracePeriod: 0s as well"
    if (found := kubelet_gate(cluster, "GracefulNodeShutdown")) is not None and not found[1]:
        return [(found[0], f"GracefulNodeShutdown off, while the kubelet's shutdownGracePeriod is {shown}: the "
                 f"kubelet refuses a shutdown grace period without the gate; {fix}", "error")]
    present, by_priority = config_value(kubelet, ("shutdownGracePeriodByPodPriority",))
    if present and isinstance(by_priority, list) and by_priority:
        return [(("spec", "components", "kubelet", "extraConfig", "shutdownGracePeriodByPodPriority"),
                 f"shutdownGracePeriodByPodPriority replaces shutdownGracePeriod ({shown}), and the kubelet refuses "
                 f"both at once; {fix}", "error")]
    return []


def _feature_gates(cluster: Cluster, registry: VersionRegistry) -> list[Finding]:
    """Gates against what the release's binaries know: the cluster's against every component that takes
    gates, a component's own against its binary."""
    takers = {module.key: module.binary for module in MODULES if module.binary and
              "feature_gates" in module.options.model_fields}
    findings: list[Finding] = []
    components = cluster.spec.components
    if cluster.minor not in registry.gate_minors and (cluster.spec.feature_gates or any(
            getattr(components, key).feature_gates for key in takers) or any(
            config_value(getattr(components, key), ("featureGates",))[1] for key in ("kubelet", "proxy"))):
        findings.append((("spec", "kubernetesVersion"), f"kubesmith knows the feature gates of Kubernetes "
                         f"{' and '.join(registry.gate_minors)} only: the gates in this file are passed on unchecked for "
                         f"{cluster.minor} (a locked gate set against its lock stops the component at start; an "
                         "unknown gate the v1.35 and v1.36 binaries only warn about may stop an older release's)",
                         "warning"))
    hints = [MAX_GATE_HINTS]  # the close-name search is the costly part: only for the first few unknown gates

    def check(binaries: tuple[str, ...], name: str, value: bool) -> tuple[str, str] | None:
        """(message, severity): a locked gate stops the binary ("cannot set feature gate X to false, feature
        is locked to true"); an unknown one the v1.35.6 and v1.36.2 binaries log ("unrecognized feature gate")
        and ignore, on the command line and in a configuration file alike, so it is a warning."""
        problem = registry.check_gate(binaries, name, value, cluster.minor, hint=hints[0] > 0)
        if problem and "has no feature gate" in problem:
            hints[0] -= 1
            unknown, _, hint = problem.partition("; ")
            hint = f"; {hint}" if hint else ""
            return f"{unknown}: its binaries ignore it with a warning, so it does nothing{hint}", "warning"
        return (problem, "error") if problem else None

    for name, value in cluster.spec.feature_gates.items():
        if found := check(tuple(takers.values()), name, value):
            findings.append((("spec", "featureGates", name), *found))
    for key, binary in takers.items():
        own = getattr(components, key).feature_gates or {}
        for name, value in own.items():
            if found := check((binary,), name, value):
                findings.append((("spec", "components", _alias(key), "featureGates", name), *found))
    # the gates of a configuration document (extraConfig featureGates) are the binary's own gates too
    for key, binary in (("kubelet", "kubelet"), ("proxy", "kube-proxy")):
        present, gates = config_value(getattr(components, key), ("featureGates",))
        if not (present and isinstance(gates, dict)):
            continue
        if len(gates) > MAX_FEATURE_GATES:
            findings.append((("spec", "components", _alias(key), "extraConfig", "featureGates"),
                             gate_count_problem(len(gates)), "error"))
            continue
        for name, value in gates.items():
            if value is not None and not isinstance(value, bool):
                # 'json: cannot unmarshal string into Go struct field KubeletConfiguration.featureGates of type
                # bool' (v1.36.2 kubelet; kube-proxy alike): the binary stops reading its configuration
                findings.append((("spec", "components", _alias(key), "extraConfig", "featureGates", name),
                                 f"{binary} reads a feature gate in its configuration file as a boolean (true or "
                                 f"false), not {yaml_text(value)}: it refuses to start", "error"))
            elif isinstance(value, bool) and (found := check((binary,), str(name), value)):
                findings.append((("spec", "components", _alias(key), "extraConfig", "featureGates", name), *found))
    return findings


def _security(cluster: Cluster) -> list[Finding]:
    """A weakened default is an error unless spec.security.allowInsecure names its CIS check; then a warning."""
    allowed = cluster.spec.security.allow_insecure
    findings: list[Finding] = []
    used: set[str] = set()
    for alias, weak in weakenings(cluster.spec.components):
        where = ("spec", "components", alias, *weak.loc)
        if weak.check in allowed:
            used.add(weak.check)
            findings.append((where, f"breaks CIS {weak.check} ({weak.title}), allowed by "
                             "spec.security.allowInsecure", "warning"))
        else:
            findings.append((where, f"weakens a secure default: breaks CIS {weak.check} ({weak.title}); to accept "
                             f"that, list \"{weak.check}\" in spec.security.allowInsecure", "error"))
    for index, check in enumerate(allowed):
        if check not in used:
            findings.append((("spec", "security", "allowInsecure", index),
                             f"nothing in this file breaks CIS {check}; remove it", "warning"))
    return findings


def _components(cluster: Cluster, registry: VersionRegistry) -> list[Finding]:
    findings: list[Finding] = []
    components = cluster.spec.components
    for module in MODULES:
        alias = _alias(module.key)
        for problem in module.check(cluster, getattr(components, module.key), registry):
            findings.append((("spec", "components", alias, *problem.loc), problem.message, problem.severity))
    return findings


def flag_findings(data: Any, registry: VersionRegistry) -> list[Finding]:
    """extraArgs against the release's flags; works on raw data so it runs even when types are wrong."""
    spec = data.get("spec") if isinstance(data, dict) else None
    if not isinstance(spec, dict):
        return []
    components = spec.get("components")
    findings: list[Finding] = list(managed_config_findings(components, spec))
    if not isinstance(spec.get("kubernetesVersion"), str):
        return findings
    minor = ".".join(spec["kubernetesVersion"].removeprefix("v").split(".")[:2])
    if not registry.supports(minor) or not isinstance(components, dict):
        return findings
    for module in MODULES:
        section = components.get(_alias(module.key))
        extra = section.get("extraArgs") if isinstance(section, dict) else None
        if module.binary is None or not isinstance(extra, dict) or len(extra) > MAX_EXTRA_ARGS:
            continue  # too many: the type check names that once, and no flag is searched for
        for flag, value in extra.items():
            if value is None:
                continue  # the type check names it: a null sets nothing, so it breaks no managed setting
            message = managed_flag_problem(module.binary, _alias(module.key), str(flag), value) or \
                registry.check_flag(module.binary, str(flag), minor) or \
                ignored_flag_problem(module.binary, _alias(module.key), str(flag)) or \
                (flag_value_problem(module.binary, str(flag), registry.flag_type(module.binary, str(flag)), value,
                                    minor)
                 if isinstance(value, (str, int)) else None)  # other types: the type check names them
            if message:
                findings.append((("spec", "components", _alias(module.key), "extraArgs", str(flag)), message, "error"))
    return findings


def _alias(key: str) -> str:
    return Components.model_fields[key].alias or key


_REFUSED_CATEGORIES = {"Cc": "a control character", "Cs": "an unpaired surrogate", "Zl": "a line separator",
                       "Zp": "a paragraph separator",
                       # invisible: a bidi override (U+202E), zero-width space (U+200B) or byte-order mark
                       # (U+FEFF) makes the value read one way and reach argv or a file as another
                       "Cf": "an invisible format character"}
# free-form text that reaches no command line or file: only control characters are refused there
_FREE_TEXT = (("metadata", "labels"),)


def character_findings(data: Any, loc: tuple[LocPart, ...] = ()) -> list[Finding]:
    """No option, key or value, holds a control or invisible format character: values reach command lines,
    unit files and node labels, where a newline or an escape starts something else, and a bidi override
    hides what the value is. Works on raw data, so it runs even when types are wrong."""
    findings: list[Finding] = []
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    free = any(loc[:len(prefix)] == prefix for prefix in _FREE_TEXT)
    for key, value in items:
        where = (*loc, yaml_key(key) if isinstance(data, dict) else key)
        for text in (key, value) if isinstance(data, dict) else (value,):
            if isinstance(text, str) and (problem := _refused_character(text, format_ok=free)):
                findings.append((where, problem, "error"))
                break
        findings += character_findings(value, where)
    return findings


def _refused_character(text: str, format_ok: bool = False) -> str | None:
    for character in text:
        kind = _REFUSED_CATEGORIES.get(unicodedata.category(character))
        if kind is not None and not (format_ok and kind == _REFUSED_CATEGORIES["Cf"]):
            return (f"contains {kind} (U+{ord(character):04X}) at position {text.index(character) + 1}; "
                    "no option accepts control characters or invisible format characters")
    return None


def _idle_timeout(cluster: Cluster) -> list[Finding]:
    """The typed option's minimum (types.StreamingIdleTimeout) holds for the flag and the configuration
    field too."""
    found = effective(cluster.spec.components.kubelet, "kubelet", "streaming-connection-idle-timeout")
    if found is None or found[0] == ("streamingConnectionIdleTimeout",):
        return []
    try:
        nanoseconds = go_duration_ns(str(found[1]))
    except ValueError:
        return []  # the flag and field type checks name it
    if 0 < nanoseconds < go_duration_ns("1m"):
        return [(("spec", "components", "kubelet", *found[0]), f"{yaml_text(found[1])} is shorter than 1m, the "
                 "shortest kubesmith takes here: an exec, attach or port-forward would drop while its user reads",
                 "error")]
    return []
