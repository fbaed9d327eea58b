"""Property tests: for random valid specs the plan is deterministic, derived defaults are consistent,
no flag appears twice in an argv, and a value the user sets always wins over a derived default."""

from __future__ import annotations

import ipaddress
import json
from collections import Counter
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plan_support import plan_of_text
from kubesmith.plan.jsonout import plan_json
from kubesmith.vocabulary.model import HostPlan, Plan
from kubesmith.versions.registry import load_registry

REGISTRY = load_registry()
ROLES = ("control-plane", "etcd", "node")
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def hosts(draw: st.DrawFn) -> list[dict[str, Any]]:
    count = draw(st.integers(1, 6))
    roles = [draw(st.sets(st.sampled_from(ROLES), min_size=1)) for _ in range(count)]
    roles[draw(st.integers(0, count - 1))].add("control-plane")
    roles[draw(st.integers(0, count - 1))].add("etcd")
    octets = draw(st.lists(st.integers(1, 254), min_size=count, max_size=count, unique=True))
    result = []
    for index, (host_roles, octet) in enumerate(zip(roles, octets, strict=True)):
        host: dict[str, Any] = {"name": f"host-{index}", "address": f"192.168.7.{octet}",
                                "roles": [role for role in ROLES if role in host_roles]}
        if draw(st.booleans()):
            host["labels"] = {"zone": draw(st.sampled_from(["a", "b", "c"]))}
        result.append(host)
    return result


@st.composite
def cluster_documents(draw: st.DrawFn) -> dict[str, Any]:
    pods = f"10.{draw(st.integers(0, 127))}.0.0/16"
    service_prefix = draw(st.integers(12, 24))
    services = ipaddress.ip_network((f"10.{draw(st.integers(128, 255))}.0.0", service_prefix), strict=False)
    network: dict[str, Any] = {"clusterCidr": pods, "serviceCidr": str(services)}
    if draw(st.booleans()):
        network["dnsServiceIp"] = str(services.network_address + draw(st.integers(2, 14)))
    components: dict[str, Any] = {}
    if draw(st.booleans()):
        components["controllerManager"] = {"clusterCidr": f"172.{draw(st.integers(16, 31))}.0.0/16"}
    if draw(st.booleans()):
        components["apiserver"] = {"auditLog": {"maxAge": draw(st.integers(1, 400))}}
    kubelet: dict[str, Any] = {}
    # at most what the default /24 node range holds (253 pods): more is refused
    if draw(st.booleans()):
        kubelet["maxPods"] = draw(st.integers(1, 253))
    if draw(st.booleans()):
        kubelet["extraConfig"] = {"maxPods": draw(st.integers(1, 253))}
    if draw(st.booleans()):
        kubelet["clusterDns"] = ["169.254.20.10"]
    if kubelet:
        components["kubelet"] = kubelet
    spec: dict[str, Any] = {"kubernetesVersion": f"{draw(st.sampled_from(REGISTRY.minors))}.{draw(st.integers(0, 9))}",
                            "network": network, "hosts": draw(hosts()), "components": components}
    if draw(st.booleans()):
        spec["controlPlaneEndpoint"] = "lb.example.internal:6443"
    return {"apiVersion": "kubesmith.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "prop"}, "spec": spec}


def plan_of(document: dict[str, Any]) -> Plan:
    return plan_of_text(yaml.safe_dump(document), "prop.yaml")


def flags(host: HostPlan, service: str) -> dict[str, str]:
    argv = host.service(service).argv
    return dict(arg[2:].split("=", 1) for arg in argv)


def file_data(host: HostPlan, suffix: str) -> Any:
    return next(file.data for file in host.files if file.path.endswith(suffix))


@SETTINGS
@given(cluster_documents())
def test_plan_is_deterministic(document: dict[str, Any]) -> None:
    first = plan_of(document)
    assert first == plan_of(document)
    assert plan_json(first) == plan_json(plan_of(document))
    # streamed host by host, the text is still exactly json.dumps of the whole plan
    assert plan_json(first) == json.dumps(first.to_dict(), indent=2, sort_keys=True) + "\n"


@SETTINGS
@given(cluster_documents())
def test_no_flag_twice_and_every_flag_accepted(document: dict[str, Any]) -> None:
    plan = plan_of(document)
    minor = plan.kubernetes_version.rsplit(".", 1)[0]
    for host in plan.hosts:
        for service in host.services:
            names = [arg[2:].partition("=")[0] for arg in service.argv if arg.startswith("--")]
            assert not [name for name, count in Counter(names).items() if count > 1], service.argv
            if service.binary in REGISTRY.binaries:  # kubesmith's own services are not in the registry
                assert set(names) <= REGISTRY.flags(service.binary, minor)


@SETTINGS
@given(cluster_documents())
def test_derived_defaults_and_user_values(document: dict[str, Any]) -> None:
    spec = document["spec"]
    network, components = spec["network"], spec["components"]
    services = ipaddress.ip_network(network["serviceCidr"])
    api_service_ip = str(services.network_address + 1)
    dns_ip = network.get("dnsServiceIp", str(services.network_address + 10))
    kubelet = components.get("kubelet", {})
    plan = plan_of(document)
    for host in plan.hosts:
        if "control-plane" in host.roles:
            assert api_service_ip in host.certificate("apiserver").ip_addresses
            apiserver = flags(host, "kube-apiserver")
            assert apiserver["service-cluster-ip-range"] == network["serviceCidr"]
            user_maxage = components.get("apiserver", {}).get("auditLog", {}).get("maxAge")
            assert apiserver["audit-log-maxage"] == str(user_maxage if user_maxage is not None else 30)
            expected_cidr = components.get("controllerManager", {}).get("clusterCidr", network["clusterCidr"])
            assert flags(host, "kube-controller-manager")["cluster-cidr"] == expected_cidr
            if "controlPlaneEndpoint" in spec:
                assert "lb.example.internal" in host.certificate("apiserver").dns_names
        if "node" in host.roles:
            config = file_data(host, "/kubelet.yaml")
            assert config["clusterDNS"] == kubelet.get("clusterDns", [dns_ip])
            assert config["maxPods"] == kubelet.get("extraConfig", {}).get("maxPods", kubelet.get("maxPods", 110))
            assert file_data(host, "/kube-proxy.yaml")["clusterCIDR"] == network["clusterCidr"]
            assert flags(host, "kubelet")["node-ip"] == host.address
