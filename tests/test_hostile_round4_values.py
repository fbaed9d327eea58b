"""Hostile values, round 4: values a binary refuses at its start, each an exit-1 located error at validate,
next to the legitimate neighbour that stays valid. Facts checked against the real binaries where they could run
(kube-apiserver v1.36.2, etcd 3.5.1): the messages quoted in the code are theirs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostile_support import assert_refused, assert_valid
from hostile_support import warm  # noqa: F401 (the module's autouse fixture)
from test_hostile_values import APISERVER, HEAD, HOSTS, V6_NETWORK, component

ETCD = "spec.components.etcd"
V6_HOST = "  hosts:\n    - {name: h1, address: 'fd00::11', roles: [control-plane, etcd, node]}\n"

RESOLVERS_16 = ", ".join(f"10.1.0.{n}" for n in range(1, 17))

# name -> (what follows `spec.kubernetesVersion`, option path of the first error, message fragment)
CASES: dict[str, tuple[str, str, str]] = {
    # kube-apiserver: service IP family "10.32.0.0/16" must match public address family "fd00::11"
    "family-v6-host-v4-services": (V6_HOST, "spec.hosts[0].address", "is not an IPv4 address like serviceCidr"),
    "family-v4-host-v6-services": (HOSTS + "  network: {serviceCidr: 'fd20::/108'}\n", "spec.hosts[0].address",
                                   "is not an IPv6 address like serviceCidr fd20::/108"),
    "family-v6-advertised-v4-services": (HOSTS + component("apiserver", "{advertiseAddress: 'fd00::11'}"),
                                         f"{APISERVER}.advertiseAddress", "must match public address family"),
    # etcd: "--election-timeout[1000000ms] is too long, and should be set less than 50000ms"
    "etcd-election-too-long": (HOSTS + component("etcd", "{electionTimeout: 1000000}"), f"{ETCD}.electionTimeout",
                               "more than 50000 ms"),
    "etcd-heartbeat-too-long": (HOSTS + component("etcd", "{heartbeatInterval: 100000}"), f"{ETCD}.electionTimeout",
                                "less than 5 times"),
    # etcd's flags are Go uints: "-1" is a parse error
    "etcd-flag-uint-negative": (HOSTS + component("etcd", "{extraArgs: {max-request-bytes: -1}}"),
                                f"{ETCD}.extraArgs.max-request-bytes", "as an integer (uint"),
    "etcd-flag-int-fraction": (HOSTS + component("etcd", "{extraArgs: {backend-batch-limit: '1.5'}}"),
                               f"{ETCD}.extraArgs.backend-batch-limit", "as an integer (int"),
    # "multiple discovery or bootstrap flags are set" next to kubesmith's --initial-cluster
    "etcd-discovery-srv": (HOSTS + component("etcd", "{extraArgs: {discovery-srv: example.com}}"),
                           f"{ETCD}.extraArgs.discovery-srv", "kubesmith sets --discovery-srv itself"),
    "etcd-discovery": (HOSTS + component("etcd", "{extraArgs: {discovery: 'https://discovery.etcd.io/x'}}"),
                       f"{ETCD}.extraArgs.discovery", "as --initial-cluster"),
    # kube-apiserver v1.36.2: 'authorization-mode [...] has mode specified more than once', 'the
    # service-account-max-token-expiration must be between 1 hour and 2^32 seconds', 'invalid audit log format xml'
    "apiserver-mode-twice": (HOSTS + component("apiserver", "{authorizationMode: [Node, RBAC, RBAC]}"),
                             f"{APISERVER}.authorizationMode[2]", "RBAC is listed twice"),
    "apiserver-token-expiration-short": (HOSTS + component("apiserver", "{extraArgs: "
                                                                        "{service-account-max-token-expiration: 1s}}"),
                                         f"{APISERVER}.extraArgs.service-account-max-token-expiration",
                                         "not between 1 hour and 2^32 seconds"),
    "apiserver-audit-format": (HOSTS + component("apiserver", "{extraArgs: {audit-log-format: xml}}"),
                               f"{APISERVER}.extraArgs.audit-log-format", "as 'legacy' or 'json'"),
    # --terminated-pod-gc-threshold is an int32 flag
    "controller-manager-gc-threshold": (HOSTS + component("controllerManager", "{terminatedPodGcThreshold: 2147483648}"),
                                        "spec.components.controllerManager.terminatedPodGcThreshold", "2147483647"),
    "proxy-metrics-port": (HOSTS + component("proxy", "{metricsBindAddress: '127.0.0.1:99999'}"),
                           "spec.components.proxy.metricsBindAddress", "port from 0 to 65535"),
    "proxy-metrics-port-config": (HOSTS + component("proxy", "{extraConfig: {metricsBindAddress: '127.0.0.1:99999'}}"),
                                  "spec.components.proxy.extraConfig.metricsBindAddress", "port from 0 to 65535"),
    # HAProxy: "timer overflow ... maximum value is 2147483647 ms (~24.8 days)"
    "balancer-idle-timeout": (HOSTS + component("apiLoadBalancer", "{idleTimeoutSeconds: 2147484}"),
                              "spec.components.apiLoadBalancer.idleTimeoutSeconds", "2147483"),
    # CoreDNS's forward plugin: at most 15 resolvers
    "coredns-16-upstreams": (HOSTS + component("coreDns", f"{{upstream: [{RESOLVERS_16}]}}"),
                             "spec.components.coreDns.upstream", "at most 15"),
    "coredns-16-stub-resolvers": (HOSTS + component("coreDns", f"{{stubDomains: {{corp.example: [{RESOLVERS_16}]}}}}"),
                                  "spec.components.coreDns.stubDomains.corp.example", "at most 15"),
    # kube-scheduler v1.36.2: "leaderElection.leaseDuration: Invalid value: "10s": must be greater than
    # `RenewDeadline`"; client-go: "renewDeadline must be greater than retryPeriod*JitterFactor"
    "scheduler-lease-shorter": (HOSTS + component("scheduler", "{extraConfig: {leaderElection: "
                                                               "{leaseDuration: 1s, renewDeadline: 10s}}}"),
                                "spec.components.scheduler.extraConfig.leaderElection.renewDeadline",
                                "must be greater than renewDeadline"),
    "scheduler-renew-retry": (HOSTS + component("scheduler", "{extraConfig: {leaderElection: {renewDeadline: 2s}}}"),
                              "spec.components.scheduler.extraConfig.leaderElection.renewDeadline",
                              "1.2 x retryPeriod"),
    # kube-proxy v1.36.2: "must be a valid CIDR", "can't use both 'primary' and CIDRs"
    "proxy-node-port-address": (HOSTS + component("proxy", "{extraConfig: {nodePortAddresses: [bogus]}}"),
                                "spec.components.proxy.extraConfig.nodePortAddresses[0]", "is no CIDR"),
    "proxy-node-port-address-ip": (HOSTS + component("proxy", "{extraConfig: {nodePortAddresses: ['10.0.0.1']}}"),
                                   "spec.components.proxy.extraConfig.nodePortAddresses[0]", "is no CIDR"),
    "proxy-node-port-primary-and-cidr": (HOSTS + component("proxy", "{extraConfig: {nodePortAddresses: "
                                                                    "[primary, 10.0.0.0/8]}}"),
                                         "spec.components.proxy.extraConfig.nodePortAddresses[0]", "stands alone"),
    # the kubelet: "grace period must be specified for the soft eviction threshold memory.available"
    "kubelet-soft-eviction-no-grace": (HOSTS + component("kubelet", "{extraConfig: {evictionSoft: "
                                                                    "{memory.available: 100Mi}}}"),
                                       "spec.components.kubelet.extraConfig.evictionSoft.memory.available",
                                       "no evictionSoftGracePeriod for memory.available"),
}

# kube-proxy's nftables mode by release: (kubernetesVersion, what follows it, path, fragment)
VERSIONED: dict[str, tuple[str, str, str, str]] = {
    "nftables-1.28": ("1.28.5", HOSTS + component("proxy", "{mode: nftables}"), "spec.components.proxy.mode",
                      "has no nftables mode"),
    "nftables-1.29": ("1.29.5", HOSTS + component("proxy", "{mode: nftables}"), "spec.components.proxy.mode",
                      "NFTablesProxyMode feature gate on"),
    "nftables-1.30-config": ("1.30.5", HOSTS + component("proxy", "{extraConfig: {mode: nftables}}"),
                             "spec.components.proxy.extraConfig.mode", "alpha and off by default"),
    "nftables-1.31-gate-off": ("1.31.5", HOSTS + component("proxy", "{mode: nftables, featureGates: "
                                                                    "{NFTablesProxyMode: false}}"),
                               "spec.components.proxy.mode", "turned off here"),
}
VERSIONED_LEGITIMATE: dict[str, tuple[str, str]] = {
    "nftables-1.30-gate": ("1.30.5", HOSTS + "  featureGates: {NFTablesProxyMode: true}\n" +
                           component("proxy", "{mode: nftables}")),
    "nftables-1.30-config-gate": ("1.30.5", HOSTS + component("proxy", "{extraConfig: {mode: nftables, featureGates: "
                                                                       "{NFTablesProxyMode: true}}}")),
    "nftables-1.31": ("1.31.5", HOSTS + component("proxy", "{mode: nftables}")),
    "iptables-1.28": ("1.28.5", HOSTS + component("proxy", "{mode: iptables}")),
}

# name -> what follows `spec.kubernetesVersion`: the neighbours that stay valid
LEGITIMATE: dict[str, str] = {
    "family-v6-everywhere": V6_HOST + V6_NETWORK,
    "family-v4-everywhere": HOSTS,
    # a dual-homed control-plane host advertising its IPv4 address to an IPv4 service range
    "family-v6-host-v4-advertised": V6_HOST + component("apiserver", "{advertiseAddress: 10.0.0.11}"),
    # an IPv6 worker does not run the API server
    "family-v6-worker": HOSTS + "    - {name: w1, address: 'fd00::21', roles: [node]}\n",
    "etcd-election-longest": HOSTS + component("etcd", "{electionTimeout: 50000, heartbeatInterval: 10000}"),
    "etcd-flag-uint": HOSTS + component("etcd", "{extraArgs: {max-request-bytes: 10485760, max-txn-ops: 0x200}}"),
    "etcd-flag-int-negative": HOSTS + component("etcd", "{extraArgs: {backend-batch-limit: -1}}"),
    "apiserver-modes": HOSTS + component("apiserver", "{authorizationMode: [Node, RBAC]}"),
    "apiserver-token-expiration": HOSTS + component("apiserver", "{extraArgs: {service-account-max-token-expiration: "
                                                                 "1h, audit-log-format: legacy}}"),
    "apiserver-token-expiration-none": HOSTS + component("apiserver", "{extraArgs: "
                                                                      "{service-account-max-token-expiration: 0s}}"),
    "controller-manager-gc-threshold-int32": HOSTS + component("controllerManager",
                                                               "{terminatedPodGcThreshold: 2147483647}"),
    "proxy-metrics-config-port": HOSTS + component("proxy", "{extraConfig: {metricsBindAddress: '127.0.0.1:10249'}}"),
    # kube-proxy completes an address alone with its default port (v1.36.2 starts with it)
    "proxy-metrics-bare-address": HOSTS + component("proxy", "{metricsBindAddress: '127.0.0.1'}"),
    "balancer-idle-timeout-longest": HOSTS + component("apiLoadBalancer", "{idleTimeoutSeconds: 2147483}"),
    "coredns-15-upstreams": HOSTS + component("coreDns", "{upstream: [%s]}" % RESOLVERS_16.rpartition(", ")[0]),
    "scheduler-lease-longer": HOSTS + component("scheduler", "{extraConfig: {leaderElection: {leaseDuration: 60s, "
                                                            "renewDeadline: 40s, retryPeriod: 5s}}}"),
    "scheduler-no-election": HOSTS + component("scheduler", "{leaderElect: false, extraConfig: {leaderElection: "
                                                           "{leaseDuration: 1s}}}"),
    "proxy-node-port-cidrs": HOSTS + component("proxy", "{extraConfig: {nodePortAddresses: ['10.0.0.0/8', "
                                                        "'fd00::/64']}}"),
    "kubelet-soft-eviction-grace": HOSTS + component("kubelet", "{extraConfig: {evictionSoft: {memory.available: "
                                                                "100Mi}, evictionSoftGracePeriod: "
                                                                "{memory.available: 1m30s}}}"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_value_the_binary_refuses_is_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = CASES[name]
    assert_refused(tmp_path, name, HEAD + text, path, fragment)


@pytest.mark.parametrize("name", sorted(LEGITIMATE))
def test_the_legitimate_neighbour_stays_valid(name: str, tmp_path: Path) -> None:
    assert_valid(tmp_path, name, HEAD + LEGITIMATE[name])


@pytest.mark.parametrize("name", sorted(VERSIONED))
def test_a_mode_the_release_lacks_is_one_located_error(name: str, tmp_path: Path) -> None:
    version, text, path, fragment = VERSIONED[name]
    assert_refused(tmp_path, name, HEAD.replace("1.33.2", version) + text, path, fragment)


@pytest.mark.parametrize("name", sorted(VERSIONED_LEGITIMATE))
def test_a_mode_the_release_has_stays_valid(name: str, tmp_path: Path) -> None:
    version, text = VERSIONED_LEGITIMATE[name]
    assert_valid(tmp_path, name, HEAD.replace("1.33.2", version) + text, bound=False)
