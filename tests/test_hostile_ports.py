"""Hostile ports (issue 32): each listener on a host has a port of its own (sshd's included), a unit that
runs unprivileged gets none below 1024, and no port of the cluster's own lies in the NodePort range on a
node. Each case ends in one located error on the option the file sets, exit code 1 and no traceback; the
legitimate neighbours stay valid. The listener table itself is checked against the plan.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT
from hostile_support import assert_refused_alone, assert_valid
from hostile_support import warm  # noqa: F401 (the module's autouse fixture)
from plan_support import plan_of, plan_of_text, registry
from test_hostile_values import HEAD, HOSTS, component

from kubesmith.spec.load import load_spec_text
from kubesmith.spec.ports import UNPRIVILEGED, host_listeners

C = "spec.components"
WORKER = "    - {name: w1, address: 10.0.0.21, roles: [node]}\n"
SPLIT = ("  hosts:\n    - {name: h1, address: 10.0.0.11, roles: [control-plane, etcd]}\n" + WORKER)
CLASH = "already taken on host h1 by"
NODE_PORT = "lies in the NodePort range 30000-32767"


def two(first: tuple[str, str], second: tuple[str, str]) -> str:
    return f"  components:\n    {first[0]}: {first[1]}\n    {second[0]}: {second[1]}\n"


# name -> (what follows `spec.kubernetesVersion`, option path of the error, message fragment)
CASES: dict[str, tuple[str, str, str]] = {
    # one port, two listeners on one host (the audit's P02-P16)
    "clash-apiserver-on-kubelet": (HOSTS + component("apiserver", "{securePort: 10250}"), f"{C}.apiserver.securePort",
                                   f"{CLASH} the kubelet API ({C}.kubelet.port)"),
    "clash-apiserver-on-etcd-client": (HOSTS + component("apiserver", "{securePort: 2379}"),
                                       f"{C}.apiserver.securePort", f"{CLASH} etcd's client port ({C}.etcd.clientPort)"),
    "clash-apiserver-on-sshd": (HOSTS + component("apiserver", "{securePort: 22}"), f"{C}.apiserver.securePort",
                                f"{CLASH} sshd, kubesmith's way in (spec.ssh.port)"),
    "clash-kubelet-on-apiserver": (HOSTS + component("kubelet", "{port: 6443}"), f"{C}.kubelet.port",
                                   f"{CLASH} the API server ({C}.apiserver.securePort)"),
    "clash-kubelet-healthz-on-own-port": (HOSTS + component("kubelet", "{healthzPort: 10250}"),
                                          f"{C}.kubelet.healthzPort", f"{CLASH} the kubelet API ({C}.kubelet.port)"),
    "clash-ca-on-apiserver": (HOSTS + component("caService", "{port: 6443}"), f"{C}.caService.port",
                              f"{CLASH} the API server"),
    "clash-controller-manager-on-scheduler": (HOSTS + component("controllerManager", "{securePort: 10259}"),
                                              f"{C}.controllerManager.securePort",
                                              f"{CLASH} the scheduler ({C}.scheduler.securePort)"),
    "clash-proxy-healthz-on-kubelet-healthz": (HOSTS + component("proxy", "{healthzPort: 10248}"),
                                               f"{C}.proxy.healthzPort", f"{CLASH} the kubelet's health port"),
    "clash-proxy-metrics-on-kubelet-healthz": (HOSTS + component("proxy", "{metricsBindAddress: '127.0.0.1:10248'}"),
                                               f"{C}.proxy.metricsBindAddress", f"{CLASH} the kubelet's health port"),
    "clash-containerd-metrics-on-etcd-metrics": (HOSTS + component("containerRuntime", "{metricsPort: 2381}"),
                                                 f"{C}.containerRuntime.metricsPort", f"{CLASH} etcd's metrics port"),
    "clash-etcd-metrics-on-controller-manager": (HOSTS + component("etcd", "{metricsPort: 10257}"),
                                                 f"{C}.etcd.metricsPort", f"{CLASH} the controller manager"),
    "clash-etcd-client-on-proxy-healthz": (HOSTS + component("etcd", "{clientPort: 10256}"), f"{C}.etcd.clientPort",
                                           f"{CLASH} kube-proxy's health port"),
    "clash-ca-on-etcd-peer": (HOSTS + component("caService", "{port: 2380}"), f"{C}.caService.port",
                              f"{CLASH} etcd's peer port"),
    "clash-etcd-client-on-own-peer": (HOSTS + component("etcd", "{clientPort: 2380}"), f"{C}.etcd.clientPort",
                                      f"{CLASH} etcd's peer port ({C}.etcd.peerPort)"),
    # the API server moved to the CA service's default port
    "clash-apiserver-on-ca-default": (HOSTS + component("apiserver", "{securePort: 8443}"), f"{C}.apiserver.securePort",
                                      f"{CLASH} kubesmith's CA service ({C}.caService.port)"),
    # both written: the later option (in the listener table's order) carries the error
    "clash-both-written": (HOSTS + two(("apiserver", "{securePort: 7000}"), ("caService", "{port: 7000}")),
                           f"{C}.caService.port", f"{CLASH} the API server ({C}.apiserver.securePort)"),
    "clash-ssh-written": (HOSTS + "  ssh: {port: 6443}\n", "spec.ssh.port", f"{CLASH} the API server"),
    "clash-ssh-and-kubelet-written": (HOSTS + "  ssh: {port: 2222}\n" + component("kubelet", "{port: 2222}"),
                                      f"{C}.kubelet.port", f"{CLASH} sshd"),
    # HAProxy runs on node-only hosts, against the kubelet and kube-proxy there
    "clash-kubelet-on-load-balancer": (SPLIT + component("kubelet", "{port: 7443}"), f"{C}.kubelet.port",
                                       "already taken on host w1 by the local API load balancer (HAProxy)"),
    "clash-load-balancer-on-kubelet": (SPLIT + component("apiLoadBalancer", "{monitorPort: 10250}"),
                                       f"{C}.apiLoadBalancer.monitorPort", "already taken on host w1 by the kubelet API"),
    # below 1024, for a unit without the privilege to bind it
    "privileged-apiserver-80": (HOSTS + component("apiserver", "{securePort: 80}"), f"{C}.apiserver.securePort",
                                "80 is below 1024: the API server runs as kube-apiserver without CAP_NET_BIND_SERVICE"),
    "privileged-apiserver-443": (HOSTS + component("apiserver", "{securePort: 443}"), f"{C}.apiserver.securePort",
                                 "443 is below 1024"),
    "privileged-etcd-client": (HOSTS + component("etcd", "{clientPort: 1023}"), f"{C}.etcd.clientPort",
                               "runs as etcd without CAP_NET_BIND_SERVICE"),
    "privileged-scheduler": (HOSTS + component("scheduler", "{securePort: 259}"), f"{C}.scheduler.securePort",
                             "runs as kube-scheduler"),
    "privileged-controller-manager": (HOSTS + component("controllerManager", "{securePort: 257}"),
                                      f"{C}.controllerManager.securePort", "runs as kube-controller-manager"),
    "privileged-load-balancer": (SPLIT + component("apiLoadBalancer", "{port: 443}"), f"{C}.apiLoadBalancer.port",
                                 "runs as a dynamic user (HAProxy) without CAP_NET_BIND_SERVICE"),
    # the NodePort range: a port of the cluster's own in it, or a range over them (the audit's P15, PR*)
    "node-port-kubelet": (HOSTS + component("kubelet", "{port: 30080}"), f"{C}.kubelet.port", NODE_PORT),
    "node-port-ssh": (HOSTS + "  ssh: {port: 30001}\n", "spec.ssh.port", f"{NODE_PORT} ({C}.apiserver."
                      "serviceNodePortRange): a Service given that NodePort would take it from sshd"),
    "node-port-ca": (HOSTS + component("caService", "{port: 30500}"), f"{C}.caService.port", NODE_PORT),
    "node-port-written-range": (HOSTS + two(("apiserver", "{serviceNodePortRange: 20000-21000}"),
                                            ("kubelet", "{port: 20500}")),
                                f"{C}.kubelet.port", "lies in the NodePort range 20000-21000"),
    "node-port-range-over-ssh": (HOSTS + component("apiserver", "{serviceNodePortRange: 1-1000}"),
                                 f"{C}.apiserver.serviceNodePortRange",
                                 "1-1000 covers port 22 of sshd, kubesmith's way in (spec.ssh.port) on host h1"),
    "node-port-range-over-apiserver": (HOSTS + component("apiserver", "{serviceNodePortRange: 6000-7000}"),
                                       f"{C}.apiserver.serviceNodePortRange", "covers port 6443 of the API server"),
    "node-port-range-over-kubelet": (HOSTS + component("apiserver", "{serviceNodePortRange: 10000-11000}"),
                                     f"{C}.apiserver.serviceNodePortRange", "covers port 10250 of the kubelet API"),
    "node-port-range-over-etcd": (HOSTS + component("apiserver", "{serviceNodePortRange: 2300-2400}"),
                                  f"{C}.apiserver.serviceNodePortRange", "covers port 2379 of etcd's client port"),
    "node-port-range-over-ca": (HOSTS + component("apiserver", "{serviceNodePortRange: 8000-9000}"),
                                f"{C}.apiserver.serviceNodePortRange", "covers port 8443 of kubesmith's CA service"),
    "node-port-range-over-load-balancer": (SPLIT + component("apiLoadBalancer", "{port: 31000}"),
                                           f"{C}.apiLoadBalancer.port", NODE_PORT),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_port_gets_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = CASES[name]
    assert_refused_alone(tmp_path, name, HEAD + text, path, fragment)


# name -> what follows `spec.kubernetesVersion`
ACCEPTED: dict[str, str] = {
    "custom-secure-port": HOSTS + component("apiserver", "{securePort: 9443}"),
    "secure-port-8443-ca-moved": HOSTS + two(("apiserver", "{securePort: 8443}"), ("caService", "{port: 9443}")),
    "narrower-node-port-range": HOSTS + component("apiserver", "{serviceNodePortRange: 31000-32000}"),
    "default-node-port-range-written": HOSTS + component("apiserver", "{serviceNodePortRange: 30000-32767}"),
    "ssh-2222": HOSTS + "  ssh: {port: 2222}\n",
    # root units may bind below 1024
    "ca-service-443": HOSTS + component("caService", "{port: 443}"),
    "kubelet-below-1024": HOSTS + component("kubelet", "{port: 1000}"),
    # listeners on different hosts do not meet
    "kubelet-on-api-port-elsewhere": SPLIT + component("kubelet", "{port: 6443}"),
    # a port in the range on a host without kube-proxy: no NodePort rules there
    "ca-in-range-on-control-plane-only": SPLIT + component("caService", "{port: 30500}"),
    # a component that does not run holds no port
    "containerd-off": HOSTS + component("containerRuntime", "{enabled: false, metricsPort: 2381}"),
    "load-balancer-off": SPLIT + component("apiLoadBalancer", "{enabled: false, port: 10250}"),
    "load-balancer-without-workers": HOSTS + component("apiLoadBalancer", "{port: 10250}"),
    "proxy-metrics-off": HOSTS + component("proxy", "{metricsBindAddress: '127.0.0.1:0'}"),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_legitimate_ports_stay_valid(name: str, tmp_path: Path) -> None:
    assert_valid(tmp_path, name, HEAD + ACCEPTED[name])


PLANNED = {"single-node": (ROOT / "examples" / "single-node.yaml").read_text(),
           "ha": (ROOT / "examples" / "ha.yaml").read_text(),
           "split": HEAD + SPLIT,
           "moved": HEAD + SPLIT + two(("kubelet", "{port: 11250, healthzPort: 11248}"),
                                      ("apiLoadBalancer", "{port: 8444, monitorPort: 8445}"))}


@pytest.mark.parametrize("name", sorted(PLANNED))
def test_the_listener_table_is_the_plans(name: str) -> None:
    """Every port a planned service listens on is in the table for its host, and back (sshd aside); a unit
    the table calls unprivileged runs as a user of its own without CAP_NET_BIND_SERVICE, and the others as
    root. A new listener, or a unit given the capability, fails here until the table follows."""
    text = PLANNED[name]
    cluster = load_spec_text(text, f"{name}.yaml", registry()).cluster
    plan = plan_of_text(text, f"{name}.yaml") if name not in ("single-node", "ha") else \
        plan_of(ROOT / "examples" / f"{name}.yaml")
    for host, planned in zip(cluster.spec.hosts, plan.hosts, strict=True):
        table = {(bound.listener.component, bound.port) for bound in host_listeners(cluster, host)
                 if bound.listener.component != "ssh"}
        services = {(service.component, port) for service in planned.services for port in service.ports}
        assert services == table, host.name
        for service in planned.services:
            if not service.ports:
                continue
            unprivileged = service.user != "root" and "CAP_NET_BIND_SERVICE" not in service.capabilities
            assert unprivileged == (service.component in UNPRIVILEGED), service.name
