"""Hostile values, round 4: values a binary refuses at its start, each an exit-1 located error at validate,
next to the legitimate neighbour that stays valid. Facts checked against the real binaries where they could run
(kube-apiserver v1.36.2, etcd 3.5.1): the messages quoted in the code are theirs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT, kubesmith
from test_hostile_values import APISERVER, HEAD, HOSTS, V6_NETWORK, component
from test_spec_hostile import BOUND_SECONDS, assert_one_located_error, bounded

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
                               f"{APISERVER}.extraArgs.audit-log-format", "legacy or json only"),
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
    "balancer-idle-timeout-longest": HOSTS + component("apiLoadBalancer", "{idleTimeoutSeconds: 2147483}"),
    "coredns-15-upstreams": HOSTS + component("coreDns", "{upstream: [%s]}" % RESOLVERS_16.rpartition(", ")[0]),
}


@pytest.fixture(scope="module", autouse=True)
def warm() -> None:
    """Imports and the release registry load once, outside the bounded runs."""
    assert kubesmith("validate", str(ROOT / "examples" / "single-node.yaml")).returncode == 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_value_the_binary_refuses_is_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = CASES[name]
    (tmp_path / f"{name}.yaml").write_text(HEAD + text)
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", f"{name}.yaml", cwd=tmp_path)
    assert_one_located_error(result, f"{name}.yaml", path, fragment)


@pytest.mark.parametrize("name", sorted(LEGITIMATE))
def test_the_legitimate_neighbour_stays_valid(name: str, tmp_path: Path) -> None:
    (tmp_path / f"{name}.yaml").write_text(HEAD + LEGITIMATE[name])
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", f"{name}.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr, result.stderr
