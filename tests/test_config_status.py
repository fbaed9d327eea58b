"""The ConfigOK-style condition per component: recorded in the agent's report by the keeper, kept by
the renewal passes, and shown by `kubesmith status` (text and JSON)."""

from __future__ import annotations

import json
from pathlib import Path

from kubesmith import layout
from kubesmith.agent.keeper import condition_document
from kubesmith.agent.report import AgentState, load_state, write_state
from kubesmith.agent.trial import Active, Record, Records
from kubesmith.health.status import ClusterStatus, HostStatus, local_agent_report, status_lines
from kubesmith.layout import RunPaths
from conftest import kubesmith
from plan_support import plan_of_text

H, L = "b" * 64, "a" * 64
ROLLED_BACK = Records(Record(H, 100.0), Active(L, "rolled-back", 140.0, failed=H,
                                                reason="kube-apiserver exited 3 times in 40s"), Record(L, 0.0))
SPEC = """apiVersion: kubesmith.io/v1alpha1
kind: Cluster
metadata: {name: demo}
spec:
  kubernetesVersion: "1.36.2"
  hosts:
    - {name: h1, address: 10.0.0.11, roles: [control-plane, etcd]}
"""


def test_status_shows_which_configuration_runs_and_why(tmp_path: Path) -> None:
    plan = plan_of_text(SPEC)
    host = plan.hosts[0]
    state_file = RunPaths(tmp_path, host.name).root / layout.AGENT_STATE_FILE.lstrip("/")
    state = AgentState("h1", configs={
        "kube-apiserver": condition_document("kube-apiserver", ROLLED_BACK, "2026-11-25T21:00:00+00:00"),
        "kube-scheduler": condition_document("kube-scheduler", Records(Record(L, 0), Active(L, "good", 60.0),
                                                                       Record(L, 60)), "2026-11-25T21:00:00+00:00")})
    write_state(state_file, state)
    report = local_agent_report(tmp_path, host)
    assert report is not None and [c.component for c in report.configs] == ["kube-apiserver", "kube-scheduler"]
    text = "\n".join(status_lines(ClusterStatus("demo", (HostStatus("h1", (), agent=report),))))
    assert (f"config kube-apiserver: ConfigOK=False, using last-known-good config {L[:12]}: assigned config "
            f"{H[:12]} failed its trial: kube-apiserver exited 3 times in 40s") in text
    assert f"config kube-scheduler: ConfigOK=True, using assigned config {L[:12]}, which passed its trial" in text
    document = json.loads(json.dumps(ClusterStatus("demo", (HostStatus("h1", (), agent=report),)).to_dict()))
    apiserver = document["hosts"][0]["agent"]["configs"][0]
    assert (apiserver["assigned"], apiserver["active"], apiserver["last_known_good"]) == (H, L, L)
    assert apiserver["status"] == "False" and apiserver["phase"] == "rolled-back"
    assert apiserver["reason"] == "kube-apiserver exited 3 times in 40s"


def test_a_renewal_pass_keeps_the_configuration_conditions(tmp_path: Path) -> None:
    """The agent's report is one file: a certificate pass (the real `kubesmith agent --once`) must
    not drop what the configuration keeper recorded in it."""
    state_file = tmp_path / "state.json"
    condition = condition_document("kube-apiserver", ROLLED_BACK, "2026-11-25T21:00:00+00:00")
    write_state(state_file, AgentState("h1", configs={"kube-apiserver": condition}))
    empty = tmp_path / "empty"
    empty.mkdir()
    config = tmp_path / "agent.json"
    config.write_text(json.dumps({"host": "h1", "pki_dir": str(empty), "kubeconfig_dir": str(empty),
                                  "state_file": str(state_file)}))
    ran = kubesmith("agent", "--once", "--config", str(config))
    assert ran.returncode == 0, ran.stderr
    after = json.loads(state_file.read_text())
    assert after["last_check"] is not None and after["configs"] == [condition]
    state_file.write_text(json.dumps({**after, "configs": [{"component": 3}, "x", condition]}))
    assert load_state(state_file, "h1").configs == {"kube-apiserver": condition}  # the damaged entries go
