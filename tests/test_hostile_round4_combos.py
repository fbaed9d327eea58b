"""Hostile combinations (audit round 4): options that are each fine alone but combine into a broken or
weakened cluster. Each hostile file ends in one located error and exit code 1; the legitimate neighbour
next to it stays valid.

Every case runs in this process under a 2-second alarm, as in test_spec_hostile.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT, kubesmith
from test_hostile_values import HEAD, HOSTS
from test_spec_hostile import BOUND_SECONDS, assert_one_located_error, bounded

HA = ("  hosts:\n"
      "    - {name: cp1, address: 10.0.0.11, roles: [control-plane, etcd]}\n"
      "    - {name: cp2, address: 10.0.0.12, roles: [control-plane, etcd]}\n"
      "    - {name: cp3, address: 10.0.0.13, roles: [control-plane, etcd]}\n"
      "    - {name: w1, address: 10.0.0.21, roles: [node]}\n")
APISERVER = "spec.components.apiserver"

# name: (file body after HEAD, error path, message fragment)
CASES: dict[str, tuple[str, str, str]] = {
    # 1. a fixed apiserver address in HA, or a bind address no host can bind
    "ha_advertise_one_host": (HA + "  components: {apiserver: {advertiseAddress: 10.0.0.12}}\n",
                              f"{APISERVER}.advertiseAddress", "advertised by all 3 API servers"),
    "ha_advertise_foreign": (HA + "  components: {apiserver: {advertiseAddress: 10.0.0.99}}\n",
                             f"{APISERVER}.advertiseAddress", "advertised by all 3 API servers"),
    "ha_bind_one_host": (HA + "  components: {apiserver: {bindAddress: 10.0.0.12}}\n",
                         f"{APISERVER}.bindAddress", "host cp2's address, but 3 hosts run the API server"),
    "ha_bind_loopback": (HA + "  components: {apiserver: {bindAddress: 127.0.0.1}}\n",
                         f"{APISERVER}.bindAddress", "is a loopback address: with 3 control-plane hosts"),
    "bind_multicast": (HOSTS + "  components: {apiserver: {bindAddress: 224.0.0.1}}\n",
                       f"{APISERVER}.bindAddress", "no host can bind it"),
    "kubelet_address_multicast": (HOSTS + "  components: {kubelet: {extraConfig: {address: 224.0.0.1}}}\n",
                                  "spec.components.kubelet.extraConfig.address", "no host can bind it"),
    # 2. the cluster DNS pointed at the API server's service IP, or CoreDNS forwarding to itself
    "cluster_dns_api_service_ip": (HOSTS + "  components: {kubelet: {clusterDns: ['10.32.0.1']}}\n",
                                   "spec.components.kubelet.clusterDns[0]", "the API server's service IP"),
    "coredns_upstream_itself": (HOSTS + "  components: {coreDns: {upstream: ['10.32.0.10']}}\n",
                                "spec.components.coreDns.upstream[0]", "CoreDNS itself"),
    "coredns_stub_itself": (HOSTS + "  components: {coreDns: {stubDomains: {example.com: ['10.32.0.10:53']}}}\n",
                            "spec.components.coreDns.stubDomains.example.com[0]", "CoreDNS itself"),
    # 3. the endpoint inside a cluster range, or on a host's port another listener holds
    "endpoint_service_ip": (HOSTS + "  controlPlaneEndpoint: '10.32.0.1:443'\n", "spec.controlPlaneEndpoint",
                            "inside serviceCidr"),
    "endpoint_pod_range": (HOSTS + "  controlPlaneEndpoint: '10.200.0.5:6443'\n", "spec.controlPlaneEndpoint",
                           "inside clusterCidr"),
    "endpoint_etcd_port": (HOSTS + "  controlPlaneEndpoint: '10.0.0.11:2379'\n", "spec.controlPlaneEndpoint",
                           "where etcd's client port listens"),
    "endpoint_kubelet_port": (HOSTS + "  controlPlaneEndpoint: '10.0.0.11:10250'\n", "spec.controlPlaneEndpoint",
                              "where the kubelet API listens"),
    # 4. more pods than the node's range holds, through the flag or a host's own range
    "max_pods_flag": (HOSTS + "  components: {kubelet: {extraArgs: {max-pods: 254}}}\n",
                      "spec.components.kubelet.extraArgs.max-pods", "holds 253 pod addresses"),
    "host_pod_cidr_small": ("  hosts:\n    - {name: h1, address: 10.0.0.11, roles: [control-plane, etcd, node], "
                            "podCidr: 10.200.0.0/28}\n", "spec.hosts[0].podCidr", "holds 13 pod addresses"),
    # 5. lifetimes past what the token store and the CA service's own bound take
    "token_ttl_past_a_year": (HOSTS + "  components: {caService: {tokenTtl: 87600h}}\n",
                              "spec.components.caService.tokenTtl", "longer than 365 days"),
    "service_validity_past_ten_years": (HOSTS + "  components: {caService: {validity: 87601h}}\n",
                                        "spec.components.caService.validity", "longer than 3650 days"),
}

# name: body after HEAD that must stay valid
ACCEPTED: dict[str, str] = {
    "single_advertise_own": HOSTS + "  components: {apiserver: {advertiseAddress: 10.0.0.11}}\n",
    "single_bind_own": HOSTS + "  components: {apiserver: {bindAddress: 10.0.0.11}}\n",
    "ha_bind_unspecified": HA + "  components: {apiserver: {bindAddress: 0.0.0.0}}\n",
    "ha_bind_unspecified_v6": HA + "  components: {apiserver: {bindAddress: '::'}}\n",
    "kubelet_address_unspecified": HOSTS + "  components: {kubelet: {extraConfig: {address: 0.0.0.0}}}\n",
    "cluster_dns_service": HOSTS + "  components: {kubelet: {clusterDns: ['10.32.0.10']}}\n",
    "coredns_upstream_elsewhere": HOSTS + "  components: {coreDns: {upstream: ['10.32.0.11', '192.0.2.53']}}\n",
    "endpoint_own_api_server": HOSTS + "  controlPlaneEndpoint: '10.0.0.11:6443'\n",
    "endpoint_load_balancer": HA + "  controlPlaneEndpoint: '10.0.0.100:8443'\n",
    "max_pods_flag_fits": HOSTS + "  components: {kubelet: {extraArgs: {max-pods: 200}}}\n",
    "host_pod_cidr_large": ("  hosts:\n    - {name: h1, address: 10.0.0.11, roles: [control-plane, etcd, node], "
                            "podCidr: 10.200.0.0/22}\n  components: {kubelet: {maxPods: 500}}\n"),
    "token_ttl_a_year": HOSTS + "  components: {caService: {tokenTtl: 365d}}\n",
    "service_validity_ten_years": HOSTS + "  components: {caService: {validity: 3650d}}\n",
}


def test_the_bounds_are_the_ones_the_consumers_apply() -> None:
    from kubesmith.ca.tokens import MAX_TTL
    from kubesmith.cli.common import SERVICE_VALIDITY
    from kubesmith.spec.types import SERVICE_VALIDITY_MAX_DAYS, TOKEN_MAX_DAYS
    assert MAX_TTL == TOKEN_MAX_DAYS * 86400
    assert SERVICE_VALIDITY.maximum == SERVICE_VALIDITY_MAX_DAYS * 86400


@pytest.fixture(scope="module", autouse=True)
def warm() -> None:
    """Imports and the release registry load once, outside the bounded runs."""
    assert kubesmith("validate", str(ROOT / "examples" / "single-node.yaml")).returncode == 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_combination_gets_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = CASES[name]
    (tmp_path / f"{name}.yaml").write_text(HEAD + text)
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", f"{name}.yaml", cwd=tmp_path)
    assert_one_located_error(result, f"{name}.yaml", path, fragment)


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_legitimate_neighbour_stays_valid(name: str, tmp_path: Path) -> None:
    (tmp_path / f"{name}.yaml").write_text(HEAD + ACCEPTED[name])
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", f"{name}.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr, result.stderr

