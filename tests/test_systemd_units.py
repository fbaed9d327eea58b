"""Unit files of every example host: `systemd-analyze verify` without warnings, and their wiring."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from k8s_support import link_real_executables
from plan_support import plan_of
from kubesmith.backends.systemd import UnitOptions, unit_files, write_units
from kubesmith.health.probespec import parse_probe
from kubesmith.vocabulary.model import HostPlan, Plan

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
UNITS = "etc/systemd/system"

pytestmark = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")


def real_bin(directory: Path, plan: Plan) -> UnitOptions:
    """The real executables, linked into one directory, so verify can check every ExecStart= (it does
    not run them). A binary named by its absolute path is the host's own (containerd): it is installed."""
    link_real_executables(directory, {"kubesmith"} | {s.binary for h in plan.hosts for s in h.services
                                                      if not s.binary.startswith("/")})
    return UnitOptions(bin_dir=str(directory), kubesmith=str(directory / "kubesmith"))


def sections(text: str) -> dict[str, list[tuple[str, str]]]:
    """Unit file as section -> [(key, value)], keeping repeated keys and joining continuations."""
    result: dict[str, list[tuple[str, str]]] = {}
    current = ""
    logical = text.replace("\\\n", " ")
    for line in logical.splitlines():
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            result[current] = []
        elif "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            result[current].append((key, " ".join(value.split())))
    return result


def values(unit: dict[str, list[tuple[str, str]]], section: str, key: str) -> list[str]:
    return [v for k, v in unit.get(section, []) if k == key]


def verify(unit_dir: Path) -> subprocess.CompletedProcess[str]:
    files = sorted(str(p) for p in unit_dir.iterdir())
    return subprocess.run(["systemd-analyze", "verify", "--man=no", *files], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("spec", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_systemd_analyze_verify_accepts_every_unit_without_warnings(spec: Path, tmp_path: Path) -> None:
    plan = plan_of(spec)
    options = real_bin(tmp_path / "bin", plan)
    for host in plan.hosts:
        root = tmp_path / host.name
        write_units(root, unit_files(host, options))
        result = verify(root / UNITS)
        assert result.returncode == 0 and result.stderr == "", f"{host.name}:\n{result.stderr}"


def test_verify_would_catch_a_bad_unit(tmp_path: Path) -> None:
    """The verify test above can fail: an unknown key or a missing binary is reported."""
    plan = plan_of(REPO / "examples" / "single-node.yaml")
    options = real_bin(tmp_path / "bin", plan)
    files = unit_files(plan.hosts[0], options)
    files[f"{UNITS}/etcd.service"] = files[f"{UNITS}/etcd.service"].replace("[Service]\n", "[Service]\nRestartSteps=3\n")
    write_units(tmp_path / "root", files)
    (tmp_path / "bin" / "kube-proxy").unlink()
    result = verify(tmp_path / "root" / UNITS)
    assert "Unknown key" in result.stderr and "RestartSteps" in result.stderr
    assert "kube-proxy" in result.stderr


def test_sysusers_and_tmpfiles_snippets_apply_in_a_scratch_root(tmp_path: Path) -> None:
    if not shutil.which("systemd-sysusers") or not shutil.which("systemd-tmpfiles"):
        pytest.skip("needs systemd-sysusers and systemd-tmpfiles")
    plan = plan_of(REPO / "examples" / "single-node.yaml")
    files = unit_files(plan.hosts[0])
    write_units(tmp_path / "snippets", files)
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    subprocess.run(["systemd-sysusers", f"--root={root}", str(tmp_path / "snippets/usr/lib/sysusers.d/kubesmith.conf")],
                   check=True, capture_output=True, timeout=60)
    passwd = (root / "etc/passwd").read_text()
    for user in plan.hosts[0].users:
        assert f"\n{user.name}:" in "\n" + passwd
    subprocess.run(["systemd-tmpfiles", f"--root={root}", "--create",
                    str(tmp_path / "snippets/usr/lib/tmpfiles.d/kubesmith.conf")], check=True, capture_output=True,
                   timeout=60)
    audit = root / "var/log/kubernetes/audit"
    uid = next(int(line.split(":")[2]) for line in passwd.splitlines() if line.startswith("kube-apiserver:"))
    assert audit.is_dir() and audit.stat().st_uid == uid and (audit.stat().st_mode & 0o777) == 0o750
    assert ((root / "etc/kubesmith/env").stat().st_mode & 0o777) == 0o750


def host_units(spec: str, host: str) -> tuple[HostPlan, dict[str, dict[str, list[tuple[str, str]]]]]:
    plan = plan_of(REPO / "examples" / spec)
    files = unit_files(plan.host(host))
    return plan.host(host), {Path(p).name: sections(t) for p, t in files.items() if p.startswith(UNITS)}


def test_service_unit_contents() -> None:
    host, units = host_units("single-node.yaml", "node1")
    api = units["kube-apiserver.service"]
    assert values(api, "Unit", "StartLimitIntervalSec") == ["0"]
    assert values(api, "Unit", "ConditionPathExists") == list(host.service("kube-apiserver").needs_files)
    assert "etcd.service" in values(api, "Unit", "After")
    assert values(api, "Service", "Restart") == ["on-failure"] and values(api, "Service", "RestartSec") == ["5s"]
    assert values(api, "Service", "Slice") == ["kubernetes.slice"]
    assert values(api, "Service", "User") == ["kube-apiserver"]
    assert values(api, "Service", "EnvironmentFile") == ["-/etc/kubesmith/env/kube-apiserver.env"]
    assert values(api, "Service", "ProtectSystem") == ["strict"]
    assert values(api, "Service", "ReadWritePaths") == ["-/var/log/kubernetes/audit"]
    gate = values(api, "Service", "ExecStartPre")
    # "+": the gate reads the root-only client key; the API server itself runs as its own user
    assert len(gate) == 1 and gate[0].startswith("+/usr/local/bin/kubesmith wait --deadline 300")
    assert "etcd://10.0.0.11:2379/health?ca=etcd/ca.crt&cert=apiserver-etcd-client.crt" in gate[0]
    assert values(api, "Service", "ExecStart")[0].startswith("/usr/local/bin/kube-apiserver --advertise-address=")
    etcd = units["etcd.service"]
    assert values(etcd, "Service", "StateDirectory") == ["etcd"]
    assert values(etcd, "Service", "ExecStartPre") == []
    for unhardened in ("kubelet.service", "kube-proxy.service"):
        keys = {k for k, _ in units[unhardened]["Service"]}
        assert not keys & {"ProtectSystem", "NoNewPrivileges", "PrivateDevices", "CapabilityBoundingSet"}


def test_online_units_and_targets_mean_ready() -> None:
    host, units = host_units("single-node.yaml", "node1")
    for service in host.services:
        if service.readiness is None:  # nothing to wait for: the target requires the service itself
            target = units[service.wanted_by]
            assert f"{service.name}.service" in values(target, "Unit", "Wants")
            # ... unless it is a step whose failure is reported elsewhere (the add-ons: by apply)
            assert (f"{service.name}.service" in values(target, "Unit", "Requisite")) == service.holds_target
            assert service.holds_target or service.name == "kubesmith-addons"
            assert f"{service.name}-online.service" not in units
            continue
        online = units[f"{service.name}-online.service"]
        assert values(online, "Service", "Type") == ["oneshot"]
        assert values(online, "Service", "RemainAfterExit") == ["yes"]
        assert values(online, "Unit", "BindsTo") == [f"{service.name}.service"]
        assert values(online, "Unit", "After") == [f"{service.name}.service"]
        command = values(online, "Service", "ExecStart")[0].split()
        assert command[:2] == ["/usr/local/bin/kubesmith", "wait"] and "--any" not in command
        assert parse_probe(command[-1]).port == service.readiness.port  # type: ignore[union-attr]
        target = units[service.wanted_by]
        assert f"{service.name}-online.service" in values(target, "Unit", "Requisite")
        assert f"{service.name}-online.service" in values(target, "Unit", "Wants")
        assert f"{service.name}-online.service" in values(target, "Unit", "After")
    top = units["kubernetes.target"]
    sub_targets = {f"{t.name}.target" for t in host.targets if t.wanted_by == "kubernetes.target"}
    assert sub_targets >= {"etcd-online.target", "kube-apiserver-online.target", "node-online.target"}
    assert sub_targets <= set(values(top, "Unit", "Requisite"))
    assert values(units["kube-apiserver-online.target"], "Unit", "After")[-1] == "etcd-online.target"


def test_certificate_changes_restart_the_component() -> None:
    host, units = host_units("single-node.yaml", "node1")
    path = units["etcd-certs.path"]
    assert values(path, "Path", "PathChanged") == list(host.service("etcd").watch_files)
    assert values(path, "Path", "Unit") == ["etcd-certs-changed.service"]
    assert values(units["etcd-certs-changed.service"], "Service", "ExecStart") == ["systemctl try-restart etcd.service"]
    assert "etcd-certs.path" in values(units["etcd.service"], "Unit", "Wants")


def test_cross_host_dependencies_are_gates_not_systemd_dependencies() -> None:
    plan = plan_of(REPO / "examples" / "ha.yaml")
    for host in plan.hosts:
        local = {f"{s.name}.service" for s in host.services} | {f"{s.name}-online.service" for s in host.services}
        local |= {f"{t.name}.target" for t in host.targets} | {f"{s.name}-certs.path" for s in host.services}
        for name, text in unit_files(host).items():
            if not name.startswith(UNITS):
                continue
            unit = sections(text)
            for key in ("Requires", "Requisite", "BindsTo", "Wants", "Upholds"):
                for value in values(unit, "Unit", key):
                    assert value in local or value == "network-online.target", (host.name, name, key, value)
        worker = [s for s in host.services if s.gates]
        for service in worker:
            gates = [line for line in values(sections(unit_files(host)[f"{UNITS}/{service.name}.service"]), "Service",
                                             "ExecStartPre") if " wait " in line]  # not the kubelet's logind step
            assert len(gates) == len(service.gates)
            for gate, planned in zip(gates, service.gates):
                arguments = [parse_probe(word) for word in gate.split() if "://" in word]
                assert [(a.host, a.port) for a in arguments] == [(p.host, p.port) for p in planned.any_of]
                assert "--any" in gate.split()
