"""spec.controlPlaneVIP (issue 22, part 2): keepalived on the control-plane hosts, the address in the API
server certificate and in operators' kubeconfigs; nodes keep their local load balancer. The failover itself,
with the real keepalived in the lab, is in test_ha_lab.py."""

from __future__ import annotations

import py_compile
import subprocess
from pathlib import Path

import pytest
import yaml
from pki_support import write_spec
from plan_support import plan_of_text

from kubesmith.modules.control_plane_vip import CHECK_PATH, CONFIG_PATH, SERVICE
from kubesmith.vocabulary.errors import SpecError
from kubesmith.spec.load import load_spec_text

HOSTS = [{"name": "cp1", "address": "10.0.0.11", "roles": ["control-plane", "etcd"]},
         {"name": "cp2", "address": "10.0.0.12", "roles": ["control-plane", "etcd"]},
         {"name": "cp3", "address": "10.0.0.13", "roles": ["control-plane", "etcd"]},
         {"name": "w1", "address": "10.0.0.21", "roles": ["node"]}]


def spec_text(tmp_path: Path, **changes: object) -> str:
    document = yaml.safe_load(write_spec(tmp_path / "c.yaml", "vip", HOSTS).read_text())
    document["spec"].update(changes)
    return yaml.safe_dump(document)


def content(plan_host: object, path: str) -> str:
    return next(f.content for f in plan_host.files if f.path == path) or ""  # type: ignore[attr-defined]


def test_the_control_plane_hosts_share_the_address_and_clients_outside_use_it(tmp_path: Path) -> None:
    plan = plan_of_text(spec_text(tmp_path, controlPlaneVIP="10.0.0.10",
                                  components={"controlPlaneVip": {"interface": "ens3"}}))
    assert plan.api_endpoint == "10.0.0.10:6443"  # what `kubesmith kubeconfig` names
    assert [h.name for h in plan.hosts if any(s.name == SERVICE for s in h.services)] == ["cp1", "cp2", "cp3"]
    for host in ("cp1", "cp2", "cp3"):
        assert "10.0.0.10" in plan.host(host).certificate("apiserver").ip_addresses
    configs = {host: content(plan.host(host), CONFIG_PATH) for host in ("cp1", "cp2", "cp3")}
    assert "unicast_src_ip 10.0.0.12" in configs["cp2"] and "        10.0.0.11\n        10.0.0.13\n" in configs["cp2"]
    assert all("10.0.0.10/32 dev ens3" in text and "nopreempt" in text for text in configs.values())
    priorities = {line.split()[1] for text in configs.values() for line in text.splitlines()
                  if line.strip().startswith("priority")}
    assert len(priorities) == 3  # a fresh election has one winner
    assert f'script "{CHECK_PATH}"' in configs["cp1"]
    script = tmp_path / "check"
    script.write_text(content(plan.host("cp1"), CHECK_PATH))
    text = script.read_text()
    assert subprocess.run(["sh", "-n", str(script)]).returncode == 0  # curl where the host has it, else Python
    fallback = tmp_path / "fallback.py"
    fallback.write_text(text.split("<<'EOF'\n", 1)[1].rsplit("EOF\n", 1)[0])
    py_compile.compile(str(fallback), doraise=True)
    assert "https://10.0.0.11:6443/readyz" in text and "('10.0.0.11', 6443)" in text
    lb = next(f for f in plan.host("w1").files if f.path == "/etc/kubernetes/kubelet.conf")
    assert lb.source is not None and dict(lb.source.options)["server"] == "https://127.0.0.1:7443"


def test_without_the_address_no_keepalived(tmp_path: Path) -> None:
    plan = plan_of_text(spec_text(tmp_path))
    assert not any(s.name == SERVICE for h in plan.hosts for s in h.services)


@pytest.mark.parametrize("changes, message", [
    ({"controlPlaneVIP": "10.0.0.12"}, "is host cp2's address"),
    ({"controlPlaneVIP": "10.0.0.10", "controlPlaneEndpoint": "10.0.0.100:6443"}, "set either controlPlaneVIP"),
    ({"controlPlaneVIP": "fd00::10"}, "address family"),
])
def test_a_wrong_address_is_refused(tmp_path: Path, changes: dict, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec_text(spec_text(tmp_path, **changes), "c.yaml")
    assert any(p.path == "spec.controlPlaneVIP" and message in p.message for p in caught.value.errors)


def test_with_the_address_no_note_about_the_endpoint(tmp_path: Path) -> None:
    loaded = load_spec_text(spec_text(tmp_path, controlPlaneVIP="10.0.0.10"), "c.yaml")
    assert not [p for p in loaded.warnings if p.path == "spec.controlPlaneEndpoint"]


@pytest.mark.parametrize("interface", ["eth0:1", "-eth0", "a" * 16, "..", "eth 0"])
def test_an_interface_keepalived_cannot_take_is_refused_where_it_is_written(tmp_path: Path, interface: str) -> None:
    """An alias label (`eth0:1`) is no interface of the kernel's: keepalived would fail on every host."""
    with pytest.raises(SpecError) as caught:
        load_spec_text(spec_text(tmp_path, controlPlaneVIP="10.0.0.10",
                                 components={"controlPlaneVip": {"interface": interface}}), "c.yaml")
    assert [p.path for p in caught.value.errors] == ["spec.components.controlPlaneVip.interface"]
    assert "network interface name" in caught.value.errors[0].message or "at most 15" in caught.value.errors[0].message
