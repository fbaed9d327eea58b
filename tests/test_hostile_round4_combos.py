"""Hostile combinations (audit round 4): options that are each fine alone but combine into a broken or
weakened cluster. Each hostile file ends in one located error and exit code 1; the legitimate neighbour
next to it stays valid.

Every case runs in this process under a 2-second alarm, as in test_spec_hostile.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import kubesmith
from hostile_support import BOUND_SECONDS, assert_one_located_error, assert_refused, assert_valid, bounded
from hostile_support import warm  # noqa: F401 (the module's autouse fixture)
from test_hostile_values import HEAD, HOSTS

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
    # 7. the pods' bridge on an interface the host has; a cluster zone that is a public or reverse zone
    "bridge_vip_interface": (HOSTS + "  components: {podNetwork: {bridge: ens3}, controlPlaneVip: {interface: ens3}}\n",
                             "spec.components.podNetwork.bridge", "the hosts' network interface"),
    "bridge_default_uplink": (HOSTS + "  components: {podNetwork: {bridge: eth0}}\n",
                              "spec.components.podNetwork.bridge", "the hosts' network interface"),
    "bridge_loopback": (HOSTS + "  components: {podNetwork: {bridge: lo}}\n",
                        "spec.components.podNetwork.bridge", "the loopback interface"),
    "dns_domain_com": (HOSTS + "  network: {dnsDomain: com}\n", "spec.network.dnsDomain", "public top-level domain"),
    "dns_domain_country": (HOSTS + "  network: {dnsDomain: de}\n", "spec.network.dnsDomain",
                           "public top-level domain"),
    "dns_domain_reverse": (HOSTS + "  network: {dnsDomain: in-addr.arpa}\n", "spec.network.dnsDomain",
                           "reverse-lookup zone"),
    "dns_domain_ip6_arpa": (HOSTS + "  network: {dnsDomain: ip6.arpa}\n", "spec.network.dnsDomain",
                            "reverse-lookup zone"),
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
    "bridge_own_name": HOSTS + "  components: {podNetwork: {bridge: kube0}}\n",
    "dns_domain_cluster_local": HOSTS + "  network: {dnsDomain: cluster.local}\n",
    "dns_domain_corp_internal": HOSTS + "  network: {dnsDomain: corp.internal}\n",
    "dns_domain_subdomain": HOSTS + "  network: {dnsDomain: k8s.example.com}\n",
}


def test_the_bounds_are_the_ones_the_consumers_apply() -> None:
    from kubesmith.ca.tokens import MAX_TTL
    from kubesmith.cli.common import SERVICE_VALIDITY
    from kubesmith.lifetimes import SERVICE_VALIDITY_MAX_DAYS, TOKEN_MAX_DAYS
    assert MAX_TTL == TOKEN_MAX_DAYS * 86400
    assert SERVICE_VALIDITY.maximum == SERVICE_VALIDITY_MAX_DAYS * 86400


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_combination_gets_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = CASES[name]
    assert_refused(tmp_path, name, HEAD + text, path, fragment)


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_legitimate_neighbour_stays_valid(name: str, tmp_path: Path) -> None:
    assert_valid(tmp_path, name, HEAD + ACCEPTED[name])


# 6. add-ons: the name a label cannot hold, kubesmith's own objects, one object under two namespaces
CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}{namespace}}}\ndata: {{a: b}}\n"
ADDON_CASES: dict[str, tuple[dict[str, str], str]] = {
    "addon_name_too_long": ({"a" * 70 + ".yaml": CONFIGMAP.format(name="x", namespace="")},
                            "is the kubesmith.io/addon label of each object"),
    "addon_file_name_250": ({"b" * 250 + ".yaml": CONFIGMAP.format(name="x", namespace="")},
                            "a label value holds at most 63"),
    "addon_own_coredns_configmap": ({"a.yaml": CONFIGMAP.format(name="coredns", namespace=", namespace: kube-system")},
                                    "one of kubesmith's own objects"),
    "addon_own_admins_binding": ({"a.yaml": "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n"
                                  "metadata: {name: 'kubesmith:cluster-admins'}\nroleRef: {apiGroup: "
                                  "rbac.authorization.k8s.io, kind: ClusterRole, name: view}\nsubjects: []\n"},
                                 "one of kubesmith's own objects"),
    "addon_default_namespace_twice": ({"a.yaml": CONFIGMAP.format(name="x", namespace="") + "---\n" +
                                       CONFIGMAP.format(name="x", namespace=", namespace: default")},
                                      "is also in"),
}
ADDON_ACCEPTED: dict[str, dict[str, str]] = {
    "addon_name_63": {"a" * 58 + ".yaml": CONFIGMAP.format(name="x", namespace="")},
    "addon_configmap_elsewhere": {"a.yaml": CONFIGMAP.format(name="coredns", namespace=", namespace: other") +
                                  "---\n" + CONFIGMAP.format(name="coredns-custom", namespace=", namespace: kube-system")},
    "addon_two_namespaces": {"a.yaml": CONFIGMAP.format(name="x", namespace="") + "---\n" +
                             CONFIGMAP.format(name="x", namespace=", namespace: other")},
}


def _write_addon(tmp_path: Path, name: str, files: dict[str, str]) -> None:
    (tmp_path / "m").mkdir()
    for file, text in files.items():
        (tmp_path / "m" / file).write_text(text)
    entries = ", ".join(f"m/{file}" for file in files)
    (tmp_path / f"{name}.yaml").write_text(HEAD + HOSTS + f"  addons: [{entries}]\n")


@pytest.mark.parametrize("name", sorted(ADDON_CASES))
def test_hostile_addon_gets_one_located_error(name: str, tmp_path: Path) -> None:
    files, fragment = ADDON_CASES[name]
    _write_addon(tmp_path, name, files)
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", f"{name}.yaml", cwd=tmp_path)
    assert_one_located_error(result, f"{name}.yaml", "spec.addons[0]", fragment)


@pytest.mark.parametrize("name", sorted(ADDON_ACCEPTED))
def test_legitimate_addon_stays_valid(name: str, tmp_path: Path) -> None:
    _write_addon(tmp_path, name, ADDON_ACCEPTED[name])
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", f"{name}.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def test_own_objects_are_the_ones_the_plan_applies(tmp_path: Path) -> None:
    from kubesmith.spec.addons import OWN_OBJECTS, object_key
    (tmp_path / "c.yaml").write_text(HEAD + HOSTS)
    result = kubesmith("plan", "c.yaml", "--offline", "-o", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    applied = {object_key(item) for host in json.loads(result.stdout)["hosts"] for file in host["files"]
               if file["path"].startswith("/etc/kubernetes/addons/") and file["path"].endswith(".yaml")
               for item in (file["data"] or {}).get("items", [])}
    assert applied == set(OWN_OBJECTS)
