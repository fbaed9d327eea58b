"""A configuration change rolled over the session's three control-plane hosts (real binaries, real
systemd): one host at a time, each through its trial, and a bad change halted on the first host,
which its agent puts back on its last-known-good configuration.

The module turns the agent's configuration keeper on (`keepConfigs`, short trials) and leaves it on:
the next module's `applied()` puts examples/lab.yaml back. Its first test lands a bad flag while the
keeper's first configurations are still on trial.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from lab_cluster import Cluster
from polling import poll
from test_faults_lab import Faults
from test_ha_lab import Attempt, kubectl_loop, longest_outage

from kubesmith import layout

pytestmark = [pytest.mark.lab, pytest.mark.slow]

# Short: the roll-outs here are about order, verdicts and rollback, not a trial's length. A trial shorter
# than its component's start still watches it: the first readiness may come up to 120 s late
# (TrialPolicy.ready_within), and the configuration graduates only once it stayed ready for the drop
# window after that (an API server takes 15-25 s to be ready on two shared cores).
TRIALS = {"etcd": 10, "kube-apiserver": 10, "kubelet": 10, "kube-controller-manager": 5, "kube-scheduler": 5,
          "kube-proxy": 5, "containerd": 10}
# The API server's far longer than the apply that follows a first one: that one must land while the first
# is still on trial (40 s was not, once, on a slow machine: 50 s). The bad configuration supersedes it and
# fails on its exits, so the length costs nothing; the others pass theirs while the module goes on.
FIRST_TRIALS = {"etcd": 30, "kube-apiserver": 300, "kubelet": 30, "kube-controller-manager": 20,
                "kube-scheduler": 20, "kube-proxy": 20}
CONTROL_PLANE = ("h1", "h2", "h3")
SETTLING = ("etcd", "kube-apiserver", "kubelet")  # the kept components a roll-out here waits for
GOOD_ETCD = {"extraArgs": {"max-txn-ops": 256}}  # the good change restarts etcd too (the default is 128)
UNIT = "/etc/systemd/system/kube-apiserver.service"


def spec_with(cluster: Cluster, directory: Path, name: str, extra_args: dict[str, Any],
              trials: dict[str, int] = TRIALS, **others: dict[str, Any]) -> Path:
    """examples/lab.yaml with the keeper on (short trials unless `trials`), these kube-apiserver flags and
    other components' options; etcd's flags are those of the good change unless `others` names etcd."""
    document = yaml.safe_load(cluster.spec.read_text())
    components = document["spec"]["components"]
    components["agent"] = {"keepConfigs": True, "configTrials": trials}
    components["apiserver"] = {**components.get("apiserver", {}), "extraArgs": extra_args}
    for component, options in {"etcd": GOOD_ETCD, **others}.items():
        components[component] = {**components.get(component, {}), **options}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def config_conditions(cluster: Cluster) -> dict[str, dict[str, Any]]:
    status = cluster.kubesmith("status", "--output", "json", timeout=300)
    report = json.loads(status.stdout)
    return {host["host"]: {c["component"]: c for c in (host["agent"] or {}).get("configs", [])}
            for host in report["hosts"]}


@pytest.fixture(scope="module")
def keeping(lab_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path]]:
    cluster = lab_cluster.applied()
    work = tmp_path_factory.mktemp("rollout")
    on = cluster.apply(spec_with(cluster, work, "keeping", {}, etcd={}))
    assert on.returncode == 0, on.stdout + on.stderr
    # the first checkpoint of every kept component passes its trial: the good roll-out checks them all, and
    # an agent it kills restarts a trial still running (run t: h3's containerd was still on trial at its end)
    cluster.wait_for_trials(CONTROL_PLANE, tuple(TRIALS), 240, "the components' first trials to pass")
    yield cluster, work


RECORDS = f"{layout.CONFIG_CHECKPOINTS}/kube-apiserver"  # the keeper's records of the API server's configurations


def first_trial(cluster: Cluster, host: str) -> dict[str, Any] | None:
    """The host's kube-apiserver active record once its first configuration is on trial, with nothing to go
    back to (no last-known-good record)."""
    found = cluster.lab.ssh(host, f"cat {RECORDS}/active.json && ! test -e {RECORDS}/last-known-good.json",
                            check=False)
    active = json.loads(found.stdout) if found.returncode == 0 else {}
    return active if active.get("phase") == "trial" else None


def test_a_bad_flag_applied_right_after_the_first_apply_leaves_every_api_server_healthy(
        lab_cluster: Cluster, tmp_path: Path) -> None:
    """The first configuration is still on trial when the bad one lands: it came up ready, so it is
    the one h1 goes back to (before, there was no last-known-good and h1's API server stayed down).
    First in the module: the apply that turns the keeper on puts each component's configuration on its
    first trial with no last-known-good, the keeper's state after a cluster's first apply, without a
    reset and an apply from nothing (the day-2 module rebuilds from nothing). On h1 alone, where the roll-out
    begins and halts: no other host is left with a long first trial to wait for."""
    cluster = lab_cluster.applied()
    applied = cluster.apply(spec_with(cluster, tmp_path, "first", {}, trials=FIRST_TRIALS, etcd={}),
                            extra=("--hosts", "h1"))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    first = poll(lambda: first_trial(cluster, "h1"), 60, "h1's first configuration on trial")
    bad = cluster.apply(spec_with(cluster, tmp_path, "bad", {"cors-allowed-origins": "("}, trials=FIRST_TRIALS,
                                  etcd={}))
    assert bad.returncode == 5, bad.stdout + bad.stderr
    errors = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: h1: "), bad.stderr
    assert "kube-apiserver's new configuration" in errors[0] and "runs its last-known-good configuration" in errors[0]
    assert "  h2: untouched" in bad.stderr and "  h3: untouched" in bad.stderr, bad.stderr
    poll(lambda: cluster.kubesmith("status", timeout=300).returncode == 0, 90, "every API server healthy",
         interval=3)
    good = json.loads(cluster.lab.ssh("h1", f"cat {RECORDS}/last-known-good.json").stdout)
    # the first configuration became last-known-good when the bad one superseded it, within its trial
    assert good["hash"] == first["hash"] and good["at"] < first["since"] + first["trial_seconds"], (good, first)


def kill_agents(cluster: Cluster, kills: int, seed: int) -> list[str]:
    """SIGKILL a random control-plane host's agent `kills` times, 0.5-3 s apart (systemd restarts it)."""
    rng = random.Random(seed)
    killed = []
    for _ in range(kills):
        time.sleep(rng.uniform(0.5, 3.0))
        host = rng.choice(CONTROL_PLANE)
        cluster.lab.exec(host, "systemctl kill -s KILL kubesmith-agent.service", check=False)
        killed.append(host)
    return killed


def killed_at_stop(cluster: Cluster, host: str) -> int:
    """How many times systemd killed `host`'s API server because it outlived its stop timeout."""
    journal = "journalctl -q --no-pager -u kube-apiserver.service"
    found = cluster.lab.ssh(host, f"{journal} | grep -c \"stop-sigterm' timed out\"", check=False)
    return int(found.stdout.strip() or 0)


def test_a_good_change_rolls_over_the_control_plane_one_host_at_a_time(keeping: tuple[Cluster, Path]) -> None:
    """A kube-apiserver flag and an etcd flag, with a kubectl loop through the virtual IP, and the agents
    SIGKILLed at 20 random moments of the roll-out: it still goes host by host, each through its trials,
    every etcd member healthy before the next restarts, and no checkpoint or record is torn. Each API
    server stops on its SIGTERM: open watches held each stop until systemd killed it, 30 s later."""
    cluster, work = keeping
    kills_before = {host: killed_at_stop(cluster, host) for host in CONTROL_PLANE}
    admin = cluster.admin_kubeconfig(work)
    stop, attempts = threading.Event(), list[Attempt]()
    loop = threading.Thread(target=kubectl_loop, args=(cluster, admin, "https://10.213.0.10:6443", stop, attempts))
    seed = random.randrange(1 << 30)
    print(f"agent kills: seed {seed}")
    with ThreadPoolExecutor(1) as pool:
        loop.start()
        try:
            rolled = pool.submit(cluster.apply, spec_with(cluster, work, "good", {"max-mutating-requests-inflight": 250}))
            killed = kill_agents(cluster, 20, seed)
            result = rolled.result()
        finally:
            stop.set()
            loop.join(timeout=60)
    print(f"agents killed on {killed}")
    assert result.returncode == 0, result.stdout + result.stderr
    for host in CONTROL_PLANE:
        checked = cluster.lab.ssh(host, "kubesmith config status --output json", check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        for entry in json.loads(checked.stdout)["components"]:
            assert entry["problems"] == [] and entry["phase"] == "good", (host, entry)
            assert entry["active"] == entry["assigned"] == entry["last_known_good"], (host, entry)
    out = result.stdout + result.stderr
    both = r"(?:etcd|kube-apiserver) [0-9a-f]{12}"
    events = re.findall(rf"rolling out to (h\d)|(h\d): {both}, {both} passed their trial|(h\d): etcd member back; "
                        r"all 3 members healthy", out)
    assert events == [event for host in CONTROL_PLANE for event in
                      ((host, "", ""), ("", host, ""), ("", "", host))], out  # each host done before the next
    for host in CONTROL_PLANE:
        assert "--max-mutating-requests-inflight=250" in cluster.lab.ssh(host, f"cat {UNIT}").stdout
        assert "--max-txn-ops=256" in cluster.lab.ssh(host, "cat /etc/systemd/system/etcd.service").stdout
    conditions = config_conditions(cluster)
    for host in CONTROL_PLANE:
        apiserver = conditions[host]["kube-apiserver"]
        assert apiserver["status"] == "True" and apiserver["last_known_good"] == apiserver["assigned"], apiserver
    nodes = json.loads(cluster.kubectl(admin, "get", "nodes", "-o", "json").stdout)["items"]
    for node in nodes:  # the agents put the kubelet's condition on their Nodes (with the kubelet's credential)
        if node["metadata"]["name"] in CONTROL_PLANE:
            kubelet = {c["type"]: c for c in node["status"]["conditions"]}["KubeletConfigOK"]
            assert (kubelet["status"], kubelet["reason"]) == ("True", "TrialPassed"), kubelet
    assert {host: killed_at_stop(cluster, host) for host in CONTROL_PLANE} == kills_before
    outage = longest_outage(attempts)
    print(f"longest outage through the virtual IP during the roll-out: {outage:.1f}s over {len(attempts)} requests")
    assert sum(a.ok for a in attempts) > 10, attempts
    assert outage < 15, outage  # one host restarting at most (all three at once: the whole restart)


def test_a_bad_change_fails_its_trial_on_the_first_host_and_halts_the_roll_out(keeping: tuple[Cluster, Path]) -> None:
    cluster, work = keeping
    before = {host: cluster.lab.ssh(host, f"cat {UNIT}").stdout for host in CONTROL_PLANE}
    result = cluster.apply(spec_with(cluster, work, "bad", {"cors-allowed-origins": "("}))
    assert result.returncode == 5, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: h1: running its new configuration on trial failed: "), \
        result.stderr
    assert "kube-apiserver's new configuration" in errors[0] and "failed its trial" in errors[0], errors
    assert "runs its last-known-good configuration" in errors[0], errors
    assert "  h2: untouched" in result.stderr and "  h3: untouched" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    # h1 runs its last-known-good configuration again, and the others never saw the change
    assert cluster.lab.ssh("h1", f"cat {UNIT}").stdout == before["h1"]
    for host in ("h2", "h3"):
        assert cluster.lab.ssh(host, f"cat {UNIT}").stdout == before[host]
    cluster.wait_healthy(120, "h1 healthy again")
    apiserver = config_conditions(cluster)["h1"]["kube-apiserver"]
    assert apiserver["status"] == "False" and apiserver["active"] == apiserver["last_known_good"], apiserver
    assert "failed its trial" in apiserver["message"], apiserver
    text = cluster.kubesmith("status", timeout=300).stdout
    assert "config kube-apiserver: ConfigOK=False, using last-known-good config" in text, text


def test_a_kubelet_configuration_and_an_etcd_option_that_fail_are_rolled_back_on_the_first_host(
        keeping: tuple[Cluster, Path]) -> None:
    """A KubeletConfiguration the keeper's dry load refuses and an etcd flag etcd cannot parse, in one
    roll-out: h1 fails both trials and is back on its last-known-good configuration; its Node says so;
    h2 and h3 never get them. The bad values are ones only a host can refuse, as the spec takes what
    the binaries take: a misspelt field (the kubelet would ignore it with a log line, the keeper calls
    it a problem) and an etcd --proxy mode etcd's flag parsing refuses. Values the spec's validation
    knows to be wrong never reach a trial (a negative nodeLeaseDurationSeconds once did)."""
    cluster, work = keeping
    files = "/etc/systemd/system/etcd.service /etc/kubernetes/config/kubelet.yaml"
    before = {host: cluster.lab.exec(host, f"cat {files}").stdout for host in CONTROL_PLANE}
    spec = spec_with(cluster, work, "bad-node", {"max-mutating-requests-inflight": 250},
                     kubelet={"extraConfig": {"nodeLeaseDurationSecond": 40}}, etcd={"extraArgs": {"proxy": "bogus"}})
    result = cluster.apply(spec)
    assert result.returncode == 5, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: h1: running its new configuration on trial failed: "), \
        result.stderr
    assert "  h2: untouched" in result.stderr and "  h3: untouched" in result.stderr, result.stderr
    # apply waited for both verdicts, and a failed one is given once its files are back. Twice h1's kubelet
    # kept the bad field: by our reading the apply restarted h1's agent (its components file changed) while
    # it validated the kubelet's configuration, the killed load counted as no objection and the kubelet ran
    # the misspelt field through its trial. A validation cut short is done again now (test_config_keeper)
    for host in CONTROL_PLANE:
        assert cluster.lab.exec(host, f"cat {files}").stdout == before[host], host
    cluster.wait_healthy(120, "h1 healthy again")
    conditions = config_conditions(cluster)["h1"]
    for component in ("kubelet", "etcd"):
        assert conditions[component]["status"] == "False", conditions[component]
        assert conditions[component]["active"] == conditions[component]["last_known_good"], conditions[component]
    assert 'unknown field "nodeLeaseDurationSecond"' in conditions["kubelet"]["reason"], conditions["kubelet"]
    admin = cluster.admin_kubeconfig(work)

    def kubelet_condition() -> dict[str, str] | None:
        found = json.loads(cluster.kubectl(admin, "get", "node", "h1", "-o", "json").stdout)
        condition = {c["type"]: c for c in found["status"]["conditions"]}.get("KubeletConfigOK")
        return condition if condition and condition["status"] == "False" else None

    condition = poll(kubelet_condition, 30, "KubeletConfigOK=False on Node h1")
    assert condition["reason"] == "RolledBack" and "failed its trial" in condition["message"], condition


def test_a_host_rebooted_during_its_trial_resumes_it_and_the_next_apply_goes_on(
        keeping: tuple[Cluster, Path]) -> None:
    cluster, work = keeping
    faults = Faults(cluster, cluster.admin_kubeconfig(work), work)
    spec = spec_with(cluster, work, "rebooted", {"max-mutating-requests-inflight": 300})
    process, marker = faults.paused_apply("trial:h1", spec)  # h1 restarted its API server on the new flags
    faults.reboot("h1")
    code, err = faults.go_on(process, marker)
    assert code == 5 and "error: h1: " in err and "Traceback" not in err, err
    # the agent resumes the trial once h1 is up (a full length: it did not watch the start), and it passes
    cluster.wait_for_trials(("h1",), SETTLING, 240, "h1's resumed trial to pass")
    checked = cluster.lab.ssh("h1", "kubesmith config status --output json", check=False)
    assert checked.returncode == 0, checked.stdout
    apiserver = {e["component"]: e for e in json.loads(checked.stdout)["components"]}["kube-apiserver"]
    assert apiserver["phase"] == "good" and apiserver["active"] == apiserver["last_known_good"], apiserver
    assert "--max-mutating-requests-inflight=300" in cluster.lab.ssh("h1", f"cat {UNIT}").stdout
    result = cluster.apply(spec)  # goes on with h2 and h3
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rolling out to h1" not in result.stdout + result.stderr
    for host in ("h2", "h3"):
        assert "--max-mutating-requests-inflight=300" in cluster.lab.ssh(host, f"cat {UNIT}").stdout
