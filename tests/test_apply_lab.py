"""`kubesmith apply` over SSH to three lab hosts (real systemd, sshd, etcd and Kubernetes v1.36 binaries).

The tests run in order on one session-scoped lab: apply, no-op re-apply, a change, faults.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from lab_cluster import SERVICES, Cluster
from lab_fixture import LabHosts
from polling import poll

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(lab_cluster: Cluster) -> Cluster:
    return lab_cluster


def test_apply_brings_up_an_ha_control_plane(cluster: Cluster) -> None:
    result = cluster.apply()
    assert result.returncode == 0, result.stdout + result.stderr
    for host in cluster.hosts:
        assert cluster.lab.ssh(host, "systemctl is-active kubernetes.target").stdout.strip() == "active"
    health = cluster.etcd_health()
    assert health.count("is healthy") == 3, health
    for address in ("10.213.0.11", "10.213.0.12", "10.213.0.13"):
        assert f"https://{address}:2379 is healthy" in health
    cluster.assert_healthy()
    reports = poll(lambda: _agent_reports(cluster), 120, "every host's agent to report (status over SSH)")
    for host, agent in reports.items():
        assert agent["certificates"] >= 5 and agent["errors"] == [] and agent["next_renewal"], (host, agent)


def _agent_reports(cluster: Cluster) -> dict[str, dict] | None:
    """The agent's report per host as `kubesmith status` reads it over SSH; None until all have one."""
    report = json.loads(cluster.kubesmith("status", "--output", "json", timeout=300).stdout)
    reports = {host["host"]: host["agent"] for host in report["hosts"]}
    return reports if all(reports.values()) else None


def _monotonic(cluster: Cluster, host: str, units: list[str]) -> dict[str, int]:
    out = cluster.lab.ssh(host, "systemctl show -p Id,ActiveEnterTimestampMonotonic " + " ".join(units)).stdout
    blocks = [dict(line.split("=", 1) for line in block.splitlines()) for block in out.strip().split("\n\n")]
    return {block["Id"]: int(block["ActiveEnterTimestampMonotonic"]) for block in blocks}


def on_every_host(cluster: Cluster, command: str, timeout: float = 120) -> None:
    with ThreadPoolExecutor(len(cluster.hosts)) as pool:
        list(pool.map(lambda host: cluster.lab.ssh(host, command, timeout=timeout), cluster.hosts))


def test_start_of_kubernetes_target_follows_the_planned_order(cluster: Cluster) -> None:
    """From everything stopped, `systemctl start kubernetes.target` on every host at once: the
    gates and targets order the start-up across hosts, and no target is active before its probes."""
    units = [f"{name}{suffix}" for name in SERVICES for suffix in (".service", "-online.service")]
    units += ["etcd-online.target", "kube-apiserver-online.target", "kubernetes.target"]
    # stopped as an operator would: every API server while etcd still has its quorum, then the rest, all
    # hosts at once (host after host, with etcd members going first, this test took 127 s instead of 57 s)
    api = "kube-apiserver-online.target kube-controller-manager.service kube-scheduler.service kube-apiserver.service"
    rest = "kubernetes.target etcd-online.target " + " ".join(f"{name}.service" for name in SERVICES)
    on_every_host(cluster, f"systemctl stop {api}")
    on_every_host(cluster, f"systemctl stop {rest}")
    on_every_host(cluster, "systemctl start --no-block kubernetes.target")
    on_every_host(cluster, "systemctl start kubernetes.target", timeout=300)
    stamps = {host: _monotonic(cluster, host, units) for host in cluster.hosts}
    etcd_ready = max(stamps[h]["etcd-online.service"] for h in stamps)
    # etcd answers /health only with a leader, so a member is ready no earlier than the start of
    # the second of three members (the etcd-online probes poll on their own clock, so they are no witness)
    etcd_quorum = sorted(stamps[h]["etcd.service"] for h in stamps)[1]
    for host, at in stamps.items():
        assert all(value > 0 for value in at.values()), (host, at)
        onlines = [at[f"{name}-online.service"] for name in SERVICES]
        assert at["kubernetes.target"] >= max(onlines + [at["kube-apiserver-online.target"]]), (host, at)
        assert at["etcd-online.target"] >= at["etcd-online.service"] >= at["etcd.service"]
        assert at["kube-apiserver-online.target"] >= max(onlines[1:])
        for name in SERVICES:
            assert at[f"{name}-online.service"] >= at[f"{name}.service"]
        # the API server passed its etcd gate: it became active only once etcd had a quorum
        assert at["kube-apiserver.service"] >= etcd_quorum, (host, at)
        # its API gate (the endpoint is h1) passed only once h1's API server was running
        assert at["kube-controller-manager.service"] >= stamps["h1"]["kube-apiserver.service"]
    assert etcd_ready > 0


def test_a_killed_component_is_restarted_and_the_target_stays_truthful(cluster: Cluster) -> None:
    lab = cluster.lab
    restarts = int(lab.ssh("h1", "systemctl show -p NRestarts --value kube-apiserver").stdout)
    lab.ssh("h1", "systemctl kill -s KILL kube-apiserver.service")
    seen: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state = lab.ssh("h1", "systemctl is-active kube-apiserver-online.service kubernetes.target",
                        check=False).stdout.split()
        seen.append(",".join(state))
        if len(seen) > 1 and state == ["active", "active"] and any("inactive" in s or "activating" in s
                                                                   for s in seen):
            break
        time.sleep(0.2)
    assert any(s.split(",")[1] != "active" for s in seen), f"kubernetes.target never left active: {seen[:5]}"
    assert seen[-1] == "active,active", f"did not recover: {seen[-5:]}"
    assert int(lab.ssh("h1", "systemctl show -p NRestarts --value kube-apiserver").stdout) == restarts + 1
    # an operator's stop is respected: nothing pulls the component back
    lab.ssh("h1", "systemctl stop kube-scheduler.service")
    time.sleep(8)
    states = lab.ssh("h1", "systemctl is-active kube-scheduler.service kubernetes.target", check=False).stdout.split()
    assert states == ["inactive", "inactive"], states
    lab.ssh("h1", "systemctl start kubernetes.target", timeout=300)


def test_no_ca_key_where_nobody_signs(cluster: Cluster) -> None:
    """etcd-ca and front-proxy-ca keys stay in the PKI state; no lab host signs with them."""
    for host in cluster.hosts:
        listing = cluster.lab.ssh(host, "find /etc/kubernetes -name '*.key' | sort").stdout.split()
        assert "/etc/kubernetes/pki/etcd/ca.key" not in listing
        assert "/etc/kubernetes/pki/front-proxy-ca.key" not in listing
        assert "/etc/kubernetes/pki/apiserver.key" in listing  # the listing itself works


def test_second_apply_changes_and_restarts_nothing(cluster: Cluster) -> None:
    before = {host: cluster.unit_state(host) for host in cluster.hosts}
    result = cluster.apply()
    assert result.returncode == 0, result.stderr
    assert "no changes: nothing uploaded, nothing restarted" in result.stdout
    assert {host: cluster.unit_state(host) for host in cluster.hosts} == before


def test_apply_from_another_state_directory_refuses_the_hosts_of_another_cluster(cluster: Cluster,
                                                                                  tmp_path: Path) -> None:
    """A spec copied elsewhere gets a state directory of its own, and so new CAs: applied to running hosts,
    it must not write them there (h1's etcd would refuse its peers' certificates half-way through)."""
    def held() -> dict[str, str]:
        return {host: cluster.lab.ssh(host, "sha256sum /etc/kubernetes/pki/ca.crt /var/lib/kubesmith/applied.json")
                .stdout for host in cluster.hosts}

    before, units = held(), {host: cluster.unit_state(host) for host in cluster.hosts}
    result = cluster.kubesmith("apply", "--binaries", str(cluster.binaries), state=False,
                               extra=("--state-dir", str(tmp_path / "elsewhere")))
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors[:-1] == [f"error: {host}: holds another cluster's certificate authority (/etc/kubernetes/pki/ca.crt "
                           "is not this state directory's kubernetes-ca)" for host in cluster.hosts], result.stderr
    assert errors[-1].startswith(f"error: {len(cluster.hosts)} hosts of another cluster; no host was changed"), errors
    assert "Traceback" not in result.stderr
    assert held() == before
    assert {host: cluster.unit_state(host) for host in cluster.hosts} == units
    plan = cluster.kubesmith("plan", "--binaries", str(cluster.binaries), "--output", "json", state=False,
                             extra=("--state-dir", str(tmp_path / "elsewhere")))
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert json.loads(plan.stdout)["foreignHosts"] == [line.removeprefix("error: ") for line in errors[:-1]]


def test_live_plan_shows_a_change_and_apply_restarts_only_what_it_touches(cluster: Cluster) -> None:
    document = yaml.safe_load(cluster.spec.read_text())
    document["spec"].setdefault("components", {})["scheduler"] = {"verbosity": 3}
    changed = cluster.spec.with_name("changed.yaml")
    changed.write_text(yaml.safe_dump(document))
    plan = cluster.kubesmith("plan", "--binaries", str(cluster.binaries), spec=changed)
    assert plan.returncode == 0, plan.stderr
    for host in cluster.hosts:  # the scheduler's unit, and the configuration keeper's list of argvs
        assert f"{host}: files 2 changed" in plan.stdout and "restart: kube-scheduler" in plan.stdout
    before = cluster.unit_state("h1")
    result = cluster.apply(changed)
    assert result.returncode == 0, result.stderr
    after = cluster.unit_state("h1")
    assert after["kube-scheduler.service"] != before["kube-scheduler.service"]
    for name in ("etcd", "kube-apiserver", "kube-controller-manager"):
        assert after[f"{name}.service"] == before[f"{name}.service"]
    assert "--v=3" in cluster.lab.ssh("h2", "systemctl cat kube-scheduler.service").stdout
    restored = cluster.apply()
    assert restored.returncode == 0, restored.stderr


def test_a_host_lost_in_the_middle_of_apply_is_named_then_apply_converges(cluster: Cluster) -> None:
    document = yaml.safe_load(cluster.spec.read_text())
    document["spec"].setdefault("components", {})["controllerManager"] = {"verbosity": 2}
    changed = cluster.spec.with_name("fault.yaml")
    changed.write_text(yaml.safe_dump(document))
    argv = ["kubesmith", "apply", str(changed), "--binaries", str(cluster.binaries), "--deadline", "120",
            "--state-dir", str(cluster.state_dir), "--ssh-config", str(cluster.lab.ssh_config),
            "--known-hosts", str(cluster.lab.config.known_hosts), "--identity", str(cluster.lab.config.client_key)]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        for line in process.stderr:
            if "uploading" in line:  # changes are under way: h3's sshd and its sessions die
                cluster.lab.exec("h3", "systemctl stop ssh.service ssh.socket; pkill -KILL -x sshd", check=False)
                break
        _, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 5
    assert "h3" in err or "10.213.0.13" in err, err
    assert "Traceback" not in err
    cluster.lab.exec("h3", "systemctl start ssh.service", check=False)
    _wait_for_ssh(cluster.lab, "h3")
    result = cluster.apply(changed)
    assert result.returncode == 0, result.stderr
    for host in cluster.hosts:
        assert cluster.lab.ssh(host, "systemctl is-active kubernetes.target").stdout.strip() == "active"
        assert "--v=2" in cluster.lab.ssh(host, "systemctl cat kube-controller-manager.service").stdout
    again = cluster.apply(changed).stdout
    assert all(f"{host}: no changes" in again for host in cluster.hosts), again
    cluster.apply()


def test_unreachable_host_fails_before_anything_changes(cluster: Cluster, tmp_path: Path) -> None:
    document = yaml.safe_load(cluster.spec.read_text())
    document["spec"]["hosts"].append({"name": "h9", "address": "10.213.0.19", "roles": ["etcd"]})
    document["spec"]["ssh"] = {"connectRetrySeconds": 0}  # one attempt: nothing answers there, ever
    bigger = cluster.spec.with_name("unreachable.yaml")
    bigger.write_text(yaml.safe_dump(document))
    manifest = cluster.lab.ssh("h1", "sha256sum /var/lib/kubesmith/applied.json").stdout
    result = cluster.apply(bigger, extra=("--ssh-config", str(_config_with_absent_host(cluster, tmp_path))))
    assert result.returncode == 5
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "10.213.0.19" in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    assert cluster.lab.ssh("h1", "sha256sum /var/lib/kubesmith/applied.json").stdout == manifest


def test_wrong_host_key_is_refused(cluster: Cluster, tmp_path: Path) -> None:
    lines = cluster.lab.config.known_hosts.read_text().splitlines()
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    forged = [line if not line.startswith(("h1", "10.213.0.11")) else
              f"{line.split()[0]} {(tmp_path / 'other.pub').read_text().strip()}" for line in lines]
    known = tmp_path / "known_hosts"
    known.write_text("\n".join(forged) + "\n")
    result = cluster.kubesmith("apply", "--binaries", str(cluster.binaries), extra=("--known-hosts", str(known)))
    assert result.returncode == 5
    assert "host key not trusted" in result.stderr and "Traceback" not in result.stderr


def test_missing_binary_is_refused_before_connecting(cluster: Cluster, tmp_path: Path) -> None:
    partial = tmp_path / "bin"
    partial.mkdir()
    shutil.copy(cluster.binaries / "kube-apiserver", partial / "kube-apiserver")
    result = cluster.kubesmith("apply", "--binaries", str(partial))
    assert result.returncode == 2
    assert "missing binaries kube-controller-manager, kube-proxy, kube-scheduler, kubelet" in result.stderr


def _config_with_absent_host(cluster: Cluster, tmp_path: Path) -> Path:
    """The lab's ssh_config plus an entry for 10.213.0.19, reached (and missed) inside the lab's netns."""
    text = cluster.lab.ssh_config.read_text()
    first = text.split("Host ")[1]
    entry = "Host " + first.replace("10.213.0.11", "10.213.0.19").replace("h1 ", "h9 ", 1)
    config = tmp_path / "ssh_config"
    config.write_text(text + "\n" + entry)
    return config


def _wait_for_ssh(lab: LabHosts, host: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if lab.ssh(host, "true", check=False, timeout=15).returncode == 0:
            return
        time.sleep(1)
    raise AssertionError(f"{host}: ssh did not come back")


def test_lab_environment_is_clean_of_our_variables() -> None:
    assert "KUBESMITH_STATE_DIR" not in os.environ  # the tests pass --state-dir explicitly
