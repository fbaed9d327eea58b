"""Upgrades on the lab, with the real binaries of both releases: h1..h3 applied at 1.35.6 (first on
their lab, tests/conftest.py; reset first where another module applied them),
refusals that touch no host, then the upgrade to 1.36.2 under two client loops: one through the
control-plane VIP, one through a Service whose pods (with a PodDisruptionBudget) the drains move.

The module leaves the cluster as examples/lab.yaml applies it (1.36.2), as the other lab modules expect.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from images_support import busybox_archive, web_manifest
from k8s_support import OLDER_RELEASE, older_binaries
from lab_cluster import Cluster
from polling import poll

pytestmark = [pytest.mark.lab, pytest.mark.slow]
OLD, NEW = OLDER_RELEASE, "1.36.2"
VIP = "https://10.213.0.10:6443"
WATCHER = "h3"  # the host that asks Service web during the upgrade
COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy")


def spec_at(cluster: Cluster, directory: Path, version: str) -> Path:
    document = yaml.safe_load(cluster.spec.read_text())
    document["spec"]["kubernetesVersion"] = version
    path = directory / f"lab-{version}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def apply_with(cluster: Cluster, spec: Path, binaries: Path) -> subprocess.CompletedProcess[str]:
    return cluster.kubesmith("apply", "--binaries", str(binaries), "--deadline", "240", spec=spec)


def fresh_at_old_release(cluster: Cluster, old_spec: Path) -> None:
    """Reset the hosts another module applied (a downgrade is refused by design), then apply 1.35.6."""
    applied = [name for name in cluster.hosts
               if cluster.lab.ssh(name, "test -e /var/lib/kubesmith/applied.json", check=False).returncode == 0]
    if applied:
        reset = cluster.kubesmith("reset", "--yes", "--hosts", ",".join(applied), spec=old_spec)
        assert reset.returncode == 0, reset.stdout + reset.stderr
    result = apply_with(cluster, old_spec, older_binaries())
    assert result.returncode == 0, result.stdout + result.stderr


class OutageLoop:
    """Runs `answers` about once a second in a thread; records the longest outage, from the start of a
    try that failed to the next success (or to the loop's end). A try that times out is a failure:
    a request that hangs is an outage, not a crash of the loop."""

    def __init__(self, answers: Callable[[], bool]) -> None:
        self.answers = answers
        self.stop = threading.Event()
        self.longest = 0.0
        self.failures = 0
        self.tries = 0
        self.down_since: float | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                ok = self.answers()
            except subprocess.TimeoutExpired:
                ok = False
            self.tries += 1
            if ok and self.down_since is not None:
                self.longest = max(self.longest, time.monotonic() - self.down_since)
                self.down_since = None
            elif not ok:
                self.failures += 1
                self.down_since = self.down_since or started
            self.stop.wait(1.0)

    def __enter__(self) -> OutageLoop:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the outage loop did not end"
        if self.down_since is not None:  # still out when the loop ended
            self.longest = max(self.longest, time.monotonic() - self.down_since)


def api_answers(cluster: Cluster, kubeconfig: Path) -> Callable[[], bool]:
    """The API's /readyz through the control-plane VIP, asked from inside the lab."""
    return lambda: cluster.kubectl(kubeconfig, "get", "--raw", "/readyz", server=VIP, timeout=20).returncode == 0


def service_answers(cluster: Cluster, address: str) -> Callable[[], bool]:
    """Service `web` at its cluster IP, asked from h3 (upgraded last, so its kube-proxy is the old
    one's rules, then the new one's)."""
    command = f"curl -sf -m 2 -o /dev/null http://{address}/"
    return lambda: cluster.lab.exec(WATCHER, command, check=False, timeout=20).returncode == 0


WEB_PDB = """apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: web}}
"""


@contextmanager
def web_service(cluster: Cluster, admin: Path, directory: Path) -> Iterator[str]:
    """Deployment `web` (two busybox httpd pods, one per node, on h1..h3), its PodDisruptionBudget
    (one must stay up) and its Service; yields the Service's cluster IP, and deletes them after."""
    imported = cluster.kubesmith("images import", str(busybox_archive(directory)), state=False, timeout=300)
    assert imported.returncode == 0, imported.stderr
    manifest = directory / "web.yaml"
    manifest.write_text(web_manifest("web", 2, spread_over=cluster.hosts) + "---\n" + WEB_PDB)
    # --validate=false: this build answers protobuf /openapi/v2 with 503 (../shared/k8s/README.md)
    created = cluster.kubectl(admin, "create", "--validate=false", "-f", str(manifest))
    assert created.returncode == 0, created.stderr
    try:
        poll(lambda: available_replicas(cluster, admin) == 2, 180, "both web pods available")
        address = cluster.kubectl(admin, "get", "service", "web", "-o", "jsonpath={.spec.clusterIP}").stdout
        poll(service_answers(cluster, address), 60, "Service web to answer from h3")
        yield address
    finally:
        cluster.kubectl(admin, "delete", "--wait=false", "-f", str(manifest))


def available_replicas(cluster: Cluster, admin: Path) -> int:
    answer = cluster.kubectl(admin, "get", "deployment", "web", "-o", "jsonpath={.status.availableReplicas}")
    return int(answer.stdout or 0) if answer.returncode == 0 else 0


def component_releases(cluster: Cluster) -> dict[str, dict[str, str | None]]:
    """`kubesmith upgrade plan --output json`: what each host's components report (`--version`)."""
    plan = cluster.kubesmith("upgrade plan", "--output", "json", state=False, timeout=300)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    report = json.loads(plan.stdout)
    return {host: {name: entry["release"] for name, entry in components.items() if name != "etcd"}
            for host, components in report["hosts"].items()}


@pytest.fixture(scope="module")
def cluster_at_old(lab_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path]]:
    """The session's cluster applied at 1.35.6 (reset first if a module before applied it). Left as the
    tests leave it: a module after this one on the same lab puts examples/lab.yaml back with its own
    first `applied()`."""
    directory = tmp_path_factory.mktemp("upgrade")
    # the hosts pass each release on to each other (docs/fleet.md): the module's applies relay it
    original = lab_cluster.spec.read_text()
    document = yaml.safe_load(original)
    document["spec"].setdefault("ssh", {})["relayFanout"] = 1
    lab_cluster.spec.write_text(yaml.safe_dump(document))
    try:
        old_spec = spec_at(lab_cluster, directory, OLD)
        fresh_at_old_release(lab_cluster, old_spec)
        yield lab_cluster, old_spec
    finally:
        lab_cluster.spec.write_text(original)


# short, as test_rollout_lab's (whose comment says why a trial may be shorter than a start)
TRIALS = {"etcd": 10, "kube-apiserver": 10, "kubelet": 10, "kube-controller-manager": 5, "kube-scheduler": 5,
          "kube-proxy": 5}
KEPT = (*TRIALS, "containerd")  # every component the keeper keeps (containerd's trial at its default length)
RELEASES = "/usr/local/lib/kubesmith/releases"
# A stand-in for a broken build of kube-apiserver 1.36.2 (a real binary cannot be made to fail on demand):
# it names its release, so preflight's binary-version check passes as it would for a build that fails
# only when it runs, and it exits at every start.
BROKEN_APISERVER = f"""#!/bin/sh
case "$1" in --version) echo "Kubernetes v{NEW}"; exit 0;; esac
echo "kube-apiserver: a broken build (tests/test_upgrade_lab.py)" >&2
exit 1
"""


def with_trials(source: Path, directory: Path, name: str) -> Path:
    """`source` with the configuration keeper on (short trials)."""
    document = yaml.safe_load(source.read_text())
    document["spec"]["components"]["agent"] = {"keepConfigs": True, "configTrials": TRIALS}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def broken_binaries(cluster: Cluster, directory: Path) -> Path:
    """The 1.36.2 binaries with a kube-apiserver that does not come up."""
    broken = directory / "broken-binaries"
    broken.mkdir()
    for entry in cluster.binaries.iterdir():
        if entry.name != "kube-apiserver":
            (broken / entry.name).symlink_to(entry)
    (broken / "kube-apiserver").write_text(BROKEN_APISERVER)
    (broken / "kube-apiserver").chmod(0o755)
    return broken


def test_a_failing_upgrade_puts_its_first_host_back_on_the_old_release_by_itself(
        cluster_at_old: tuple[Cluster, Path], tmp_path: Path) -> None:
    """h1's new kube-apiserver does not come up: h1's agent puts its whole release back (the old binaries
    are still there), apply names host, component and cause in one line, h2 and h3 are untouched."""
    cluster, old_spec = cluster_at_old
    kept = apply_with(cluster, with_trials(old_spec, tmp_path, "old-kept"), older_binaries())
    assert kept.returncode == 0, kept.stdout + kept.stderr
    cluster.wait_for_trials(cluster.hosts, KEPT, 300, "every first configuration to graduate")
    cluster.wait_healthy(180, "the cluster healthy once its first configurations graduated")  # as an upgrade asks
    others = {name: cluster.unit_state(name) for name in cluster.hosts if name != "h1"}

    try:
        failed = apply_with(cluster, with_trials(cluster.spec, tmp_path, "new-kept"),
                            broken_binaries(cluster, tmp_path))
        print(failed.stderr)
        assert failed.returncode == 5, failed.stdout + failed.stderr
        errors = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and errors[0].startswith("error: h1: "), failed.stderr
        assert "kube-apiserver's new configuration" in errors[0], errors[0]
        assert "kube-apiserver exited" in errors[0] or "did not become ready" in errors[0], errors[0]  # the cause
        assert f"h1 is back on Kubernetes {OLD}" in errors[0] and "uncordoned" in errors[0], errors[0]
        assert "went back with it" in errors[0] and "kubelet" in errors[0], errors[0]
        assert "  h2: untouched" in failed.stderr and "  h3: untouched" in failed.stderr, failed.stderr

        assert component_releases(cluster) == {name: dict.fromkeys(COMPONENTS, OLD) for name in cluster.hosts}
        assert cluster.lab.ssh("h1", f"ls {RELEASES}").stdout.split() == [OLD, NEW]  # both, until NEW graduates
        assert {name: cluster.unit_state(name) for name in others} == others
        cluster.wait_healthy(180, "the cluster healthy")
        admin = cluster.admin_kubeconfig(tmp_path)
        cordoned = cluster.kubectl(admin, "get", "node", "h1", "-o", "jsonpath={.spec.unschedulable}")
        assert cordoned.returncode == 0 and cordoned.stdout == "", cordoned.stdout + cordoned.stderr
    finally:  # as the module found it (trials off), whatever failed above: the next test starts from there
        back = apply_with(cluster, old_spec, older_binaries())
    assert back.returncode == 0, back.stdout + back.stderr
    assert cluster.lab.ssh("h1", f"ls {RELEASES}").stdout.split() == [OLD]  # the abandoned upload is gone


def test_upgrade_refusals_then_a_rolling_upgrade_keeps_the_api_and_data(cluster_at_old: tuple[Cluster, Path],
                                                                           tmp_path: Path) -> None:
    cluster, old_spec = cluster_at_old
    admin = cluster.admin_kubeconfig(tmp_path)
    written = cluster.kubectl(admin, "create", "configmap", "before-upgrade", f"--from-literal=release={OLD}")
    assert written.returncode == 0, written.stderr
    before = {name: cluster.unit_state(name) for name in cluster.hosts}

    skipped = apply_with(cluster, spec_at(cluster, tmp_path, "1.37.0"), cluster.binaries)
    assert skipped.returncode == 6 and "skips 1.36" in skipped.stderr, skipped.stderr
    wrong = apply_with(cluster, cluster.spec, older_binaries())  # the spec says 1.36.2, the binaries 1.35.6
    assert wrong.returncode == 6 and "binary-version" in wrong.stderr, wrong.stderr
    cluster.lab.ssh("h3", "systemctl stop kubelet")
    try:
        sick = apply_with(cluster, cluster.spec, cluster.binaries)
        assert sick.returncode == 6 and "h3: kubelet is not ready" in sick.stderr, sick.stderr
        assert "must be healthy" in sick.stderr
    finally:
        cluster.lab.ssh("h3", "systemctl start kubelet")
    cluster.wait_healthy(180, "the cluster healthy again")
    assert {name: cluster.unit_state(name) for name in cluster.hosts} == before  # no refusal touched a host

    plan = cluster.kubesmith("upgrade plan", state=False, timeout=300)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert f"target: Kubernetes {NEW} (minor-upgrade)" in plan.stdout, plan.stdout
    assert "order: etcd snapshot, then h1 -> h2 -> h3" in plan.stdout, plan.stdout
    print(plan.stdout)

    with web_service(cluster, admin, tmp_path) as address:
        started = time.monotonic()
        with OutageLoop(api_answers(cluster, admin)) as api, OutageLoop(service_answers(cluster, address)) as web:
            upgraded = apply_with(cluster, cluster.spec, cluster.binaries)
        took = time.monotonic() - started
        assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
        print(upgraded.stderr)
        print(f"upgrade took {took:.0f}s; longest API outage through the VIP {api.longest:.1f}s "
              f"({api.failures} of {api.tries} requests failed); longest outage of Service web "
              f"{web.longest:.1f}s ({web.failures} of {web.tries} requests failed, while its pods moved)")
        assert "etcd snapshot" in upgraded.stderr and "draining (through h2)" in upgraded.stderr, upgraded.stderr
        assert "uncordoned" in upgraded.stderr, upgraded.stderr
        # the new release left this machine once per file; the hosts passed the rest on
        relayed = re.search(r"release relay: (\d+)/(\d+) hosts done, (\d+) files passed on by hosts, "
                            r"(\d+) sent from here", upgraded.stderr)
        wanted = re.search(r"release relay: \d+ hosts want (\d+) files", upgraded.stderr)
        assert relayed and wanted, upgraded.stderr
        assert relayed[1] == relayed[2] == str(len(cluster.hosts)) and int(relayed[3]) > 0, relayed[0]
        assert int(relayed[4]) <= int(wanted[1]), (relayed[0], wanted[0])
        assert api.longest < 30, f"the API was unreachable for {api.longest:.1f}s through the VIP"
        # two replicas, one per node, and a budget of one: a drain never takes both
        assert web.longest < 30, f"Service web did not answer for {web.longest:.1f}s"
        poll(lambda: available_replicas(cluster, admin) == 2, 180, "both web pods available after the upgrade")

    assert component_releases(cluster) == {name: dict.fromkeys(COMPONENTS, NEW) for name in cluster.hosts}
    kubelets = cluster.kubectl(admin, "get", "nodes", "-o", "jsonpath={.items[*].status.nodeInfo.kubeletVersion}")
    assert kubelets.stdout.split() == [f"v{NEW}"] * 3, kubelets.stdout
    kept = cluster.kubectl(admin, "get", "configmap", "before-upgrade", "-o", "jsonpath={.data.release}")
    assert kept.stdout == OLD, kept.stderr
    snapshots = cluster.lab.ssh("h1", "ls /var/backups/kubesmith/etcd/", check=False).stdout
    assert f"-upgrade-{OLD}-to-{NEW}.db" in snapshots, snapshots

    status = cluster.kubesmith("status", timeout=300)
    assert f"Kubernetes {NEW}" in status.stdout and "in progress" not in status.stdout, status.stdout
    units = {name: cluster.unit_state(name) for name in cluster.hosts}
    downgrade = apply_with(cluster, old_spec, older_binaries())
    assert downgrade.returncode == 6 and "minor downgrade" in downgrade.stderr, downgrade.stderr
    assert {name: cluster.unit_state(name) for name in cluster.hosts} == units  # no host touched
