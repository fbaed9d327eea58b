"""The node-local load balancer (issue 22, part 2): which hosts get it, where their components point,
and Debian's real HAProxy taking the configuration kubesmith writes. Its behaviour against real API
servers (a control-plane host lost, the node's Lease still renewed) is in test_join_lab.py."""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from net_support import free_port
from pki_support import render_spec, write_spec
from plan_support import plan_of, plan_of_text

from kubesmith.modules.api_load_balancer import BACKEND, CONFIG_PATH, CREDENTIALS, SERVICE, backend_states
from kubesmith.vocabulary.model import Plan

HOSTS = [{"name": "cp1", "address": "10.0.0.11", "roles": ["control-plane", "etcd", "node"]},
         {"name": "cp2", "address": "10.0.0.12", "roles": ["control-plane", "etcd"]},
         {"name": "w1", "address": "10.0.0.21", "roles": ["node"]}]


def kubeconfig_server(plan: Plan, host: str, name: str) -> str:
    file = next(f for f in plan.host(host).files if f.path == f"/etc/kubernetes/{name}.conf")
    assert file.source is not None
    return dict(file.source.options)["server"]


def gate_url(plan: Plan, host: str, service: str) -> str:
    return plan.host(host).service(service).gates[0].any_of[0].url


def test_only_hosts_without_an_api_server_get_it_and_their_components_use_it(tmp_path: Path) -> None:
    plan = plan_of(write_spec(tmp_path / "c.yaml", "lb", HOSTS))
    assert [h.name for h in plan.hosts if any(s.name == SERVICE for s in h.services)] == ["w1"]
    for name, service in (("kubelet", "kubelet"), ("kube-proxy", "kube-proxy")):
        assert kubeconfig_server(plan, "w1", name) == "https://127.0.0.1:7443"
        assert gate_url(plan, "w1", service) == "https://127.0.0.1:7443/readyz"
        assert f"{SERVICE}.service" in plan.host("w1").service(service).after
    assert kubeconfig_server(plan, "cp1", "kubelet") == "https://10.0.0.11:6443"  # its own API server
    assert "127.0.0.1" in plan.host("cp1").certificate("apiserver").ip_addresses  # what the balancer forwards to
    lb = plan.host("w1").service(SERVICE)
    assert lb.binary == "/usr/sbin/haproxy" and lb.hardening and lb.user != "root"
    assert ("DynamicUser", "yes") in lb.unit_settings and lb.wanted_by == "node-online.target"
    config = next(f for f in plan.host("w1").files if f.path == CONFIG_PATH).content or ""
    assert [line.split()[1:3] for line in config.splitlines() if line.startswith("    server ")] == \
        [["cp1", "10.0.0.11:6443"], ["cp2", "10.0.0.12:6443"]]


@pytest.mark.parametrize("change, server", [
    ({"controlPlaneEndpoint": "10.0.0.100:6443"}, "https://10.0.0.100:6443"),  # an external load balancer
    ({"components": {"apiLoadBalancer": {"enabled": False}}}, "https://10.0.0.11:6443"),  # the first host
])
def test_without_it_nodes_use_the_cluster_endpoint(tmp_path: Path, change: dict, server: str) -> None:
    document = yaml.safe_load(write_spec(tmp_path / "c.yaml", "lb", HOSTS).read_text())
    document["spec"].update(change)
    plan = plan_of_text(yaml.safe_dump(document))
    assert not any(s.name == SERVICE for s in plan.host("w1").services)
    assert kubeconfig_server(plan, "w1", "kubelet") == server


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("lb")
    render_spec(write_spec(base / "c.yaml", "lb", HOSTS), base / "state", base / "out")
    return base / "out" / "w1"


def local_config(rendered: Path, ports: dict[str, int]) -> str:
    """The rendered configuration with its files where render put them and loopback ports of this test;
    the API servers' ports are closed (nothing listens there): a down server is what a real HAProxy
    can show here without a cluster."""
    pki = rendered / "etc/kubernetes/pki"
    text = (rendered / CONFIG_PATH.lstrip("/")).read_text()
    text = text.replace("/etc/kubernetes/pki", str(pki)).replace(CREDENTIALS, str(pki))
    text = text.replace("127.0.0.1:7443", f"127.0.0.1:{ports['api']}").replace(
        "127.0.0.1:7444", f"127.0.0.1:{ports['monitor']}")
    for name, address in (("cp1", "10.0.0.11"), ("cp2", "10.0.0.12")):
        text = text.replace(f"{address}:6443", f"127.0.0.1:{ports[name]}")
    return text


def test_real_haproxy_takes_the_configuration_and_reports_down_servers(rendered: Path, tmp_path: Path) -> None:
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    assert Path(haproxy).exists(), "haproxy is not installed (bash .ci/install.sh)"
    ports = {name: free_port() for name in ("api", "monitor", "cp1", "cp2")}
    config = tmp_path / "haproxy.cfg"
    config.write_text(local_config(rendered, ports))
    check = subprocess.run([haproxy, "-c", "-f", str(config)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    process = subprocess.Popen([haproxy, "-db", "-f", str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        monitor = f"http://127.0.0.1:{ports['monitor']}"
        deadline, states = time.monotonic() + 15, ()
        while time.monotonic() < deadline:
            try:
                states = backend_states(urllib.request.urlopen(f"{monitor}/stats;csv;norefresh", timeout=2).read()
                                        .decode())
            except OSError:
                states = ()
            if states and all(s.status == "DOWN" for s in states):
                break
            time.sleep(0.2)
        assert [(s.server, s.status) for s in states] == [("cp1", "DOWN"), ("cp2", "DOWN")], states
        assert all("L4CON" in s.check for s in states), states  # connection refused, as HAProxy words it
        with pytest.raises(urllib.error.HTTPError) as refused:  # not ready: no API server is up
            urllib.request.urlopen(f"{monitor}/readyz", timeout=2)
        assert refused.value.code == 503
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert BACKEND in config.read_text()


def test_validation_notes_what_clients_use_and_warns_only_without_the_balancer(tmp_path: Path) -> None:
    from kubesmith.spec.load import load_spec_file

    spec = write_spec(tmp_path / "c.yaml", "lb", HOSTS)
    [note] = [p for p in load_spec_file(spec).warnings if p.path == "spec.controlPlaneEndpoint"]
    assert note.severity == "note"
    assert "local load balancer" in note.message and "first ready control-plane host" in note.message
    document = yaml.safe_load(spec.read_text())
    document["spec"]["components"] = {"apiLoadBalancer": {"enabled": False}}
    spec.write_text(yaml.safe_dump(document))
    [warning] = [p for p in load_spec_file(spec).warnings if p.path == "spec.controlPlaneEndpoint"]
    assert warning.severity == "warning" and "first control-plane host only" in warning.message
