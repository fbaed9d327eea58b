"""The plan holds every service's full command line, and every flag is one the chosen release accepts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import EXAMPLES, ROOT, kubesmith, kubesmith_process
from kubesmith.versions.registry import load_registry

REGISTRY = load_registry()
HA = ROOT / "examples" / "ha.yaml"
# services each role brings, by the binary they run
ROLE_SERVICES = {"etcd": {"etcd"}, "control-plane": {"kube-apiserver", "kube-controller-manager", "kube-scheduler"},
                 "node": {"kubelet", "kube-proxy"}}


# the host's own (Debian's containerd, HAProxy and keepalived), not versioned with Kubernetes
HOST_BINARIES = {"/usr/bin/containerd", "/usr/sbin/haproxy", "/usr/sbin/keepalived"}


def kubernetes_services(host: dict) -> dict[str, dict]:
    """Services that run a Kubernetes (or etcd) binary; the rest must be kubesmith's own runtime pieces or
    the host's container runtime."""
    services = {}
    for service in host["services"]:
        if service["binary"] in REGISTRY.binaries:
            services[service["name"]] = service
        else:
            assert service["binary"] in {"kubesmith", *HOST_BINARIES}, \
                f"{service['binary']} is unknown to the version registry"
    return services


def plan_json(path: Path, *extra: str) -> dict:
    result = kubesmith("plan", "--offline", str(path), "--output", "json", *extra)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def flag_names(argv: list[str]) -> list[str]:
    names = []
    for arg in argv:
        assert re.fullmatch(r"--[a-z0-9][-a-z0-9_.]*=.*", arg, re.S), f"not a --name=value argument: {arg!r}"
        names.append(arg[2:].partition("=")[0])
    return names


def test_ha_plan_has_every_service_with_full_argv() -> None:
    plan = plan_json(HA)
    assert [host["name"] for host in plan["hosts"]] == ["cp1", "cp2", "cp3", "w1", "w2"]
    for host in plan["hosts"]:
        expected = set().union(*(ROLE_SERVICES[role] for role in host["roles"]))
        services = kubernetes_services(host)
        assert set(services) == expected
        for service in services.values():
            assert service["binary"] == service["name"]
            assert service["user"] and service["group"] and service["readiness"]
            assert service["argv"] and service["argv"][0].startswith("--")
    cp1 = kubernetes_services(plan["hosts"][0])
    apiserver = cp1["kube-apiserver"]["argv"]
    assert "--advertise-address=10.0.0.11" in apiserver
    assert "--etcd-servers=https://10.0.0.11:2379" in apiserver  # stacked: its own member only
    assert "--audit-log-maxage=40" in apiserver  # auditLog.maxAge from the example wins over the default 30
    assert "--max-requests-inflight=800" in apiserver  # extraArgs adds a flag kubesmith does not set
    assert "--anonymous-auth=false" in apiserver and "--authorization-mode=Node,RBAC" in apiserver
    etcd = cp1["etcd"]["argv"]
    assert "--initial-cluster=cp1=https://10.0.0.11:2380,cp2=https://10.0.0.12:2380,cp3=https://10.0.0.13:2380" in etcd
    w1 = kubernetes_services(plan["hosts"][3])
    assert "--node-ip=10.0.0.21" in w1["kubelet"]["argv"]
    assert "--node-labels=tier=general" in w1["kubelet"]["argv"]


def _examples_at(minor: str, tmp_path: Path) -> list[Path]:
    paths = []
    for example in EXAMPLES:
        text, count = re.subn(r'(?m)^(\s*kubernetesVersion:\s*)"[^"]*"', rf'\g<1>"{minor}.0"', example.read_text())
        assert count == 1
        path = tmp_path / f"{minor}-{example.name}"
        path.write_text(text)
        paths.append(path)
    return paths


@pytest.mark.parametrize("minor", REGISTRY.minors)
def test_every_flag_is_accepted_by_the_release(minor: str, tmp_path: Path) -> None:
    for path in _examples_at(minor, tmp_path):
        plan = plan_json(path)
        assert plan["kubernetes_version"] == f"{minor}.0"
        checked = 0
        for host in plan["hosts"]:
            for service in kubernetes_services(host).values():
                accepted = REGISTRY.flags(service["binary"], minor)
                for name in flag_names(service["argv"]):
                    assert name in accepted, f"{path.name}: {host['name']} {service['binary']} --{name}"
                    assert REGISTRY.check_flag(service["binary"], name, minor) is None
                    checked += 1
        assert checked > 50


def test_the_registry_would_catch_a_removed_flag() -> None:
    """The check above is only worth something if the registry rejects flags per release."""
    assert "authentication-config" not in REGISTRY.flags("kube-apiserver", "1.28")
    assert "authentication-config" in REGISTRY.flags("kube-apiserver", "1.30")
    assert "pod-infra-container-image" in REGISTRY.flags("kubelet", "1.34")
    assert "pod-infra-container-image" not in REGISTRY.flags("kubelet", "1.35")


def test_same_spec_gives_byte_identical_json_across_processes() -> None:
    first = kubesmith_process("plan", "--offline", str(HA), "--output", "json")
    second = kubesmith_process("plan", "--offline", str(HA), "-o", "json")
    assert first.returncode == second.returncode == 0
    assert first.stdout == second.stdout
    assert first.stdout == kubesmith("plan", "--offline", str(HA), "-o", "json").stdout
    assert json.loads(first.stdout)["kind"] == "Plan"


def test_host_filter() -> None:
    plan = plan_json(HA, "--host", "w2", "--host", "cp1")
    assert [host["name"] for host in plan["hosts"]] == ["cp1", "w2"]
    assert plan["authorities"][0]["key_holders"] == ["cp1", "cp2", "cp3"]  # cluster-wide parts stay whole
    text = kubesmith("plan", "--offline", str(HA), "--host", "w1")
    assert text.returncode == 0
    assert "host w1 (10.0.0.21)" in text.stdout and "host cp1" not in text.stdout
    unknown = kubesmith("plan", "--offline", str(HA), "--host", "nope")
    assert unknown.returncode == 2
    assert "no host named 'nope'" in unknown.stderr and "hosts: cp1, cp2, cp3, w1, w2" in unknown.stderr


def test_text_output_mentions_every_service() -> None:
    result = kubesmith("plan", "--offline", str(HA))
    assert result.returncode == 0
    plan = plan_json(HA)
    for host in plan["hosts"]:
        assert f"host {host['name']} ({host['address']})" in result.stdout
        for service in host["services"]:
            assert f"service {service['name']} (user {service['user']}" in result.stdout
            assert f"exec: {service['binary']} {' '.join(service['argv'])}\n" in result.stdout


def test_ipv6_addresses_are_bracketed_in_every_url_of_the_plan(tmp_path: Path) -> None:
    init = kubesmith("init", "--name", "six", "--host", "h1=[fd00::1]:control-plane,etcd,node")
    assert init.returncode == 0, init.stderr
    spec = tmp_path / "six.yaml"
    spec.write_text(init.stdout)
    services = kubernetes_services(plan_json(spec)["hosts"][0])
    assert "--etcd-servers=https://[fd00::1]:2379" in services["kube-apiserver"]["argv"]
    assert "--advertise-client-urls=https://[fd00::1]:2379" in services["etcd"]["argv"]
