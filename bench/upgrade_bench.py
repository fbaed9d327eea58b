"""Benchmark: the 3-host upgrade of `examples/lab.yaml` from 1.35.6 to 1.36.2, against its floor.

On freshly booted lab hosts (real systemd, sshd, etcd, the real binaries of both releases): apply
the spec at 1.35.6, then time `kubesmith apply` of the spec at 1.36.2 (snapshot, control-plane
hosts one at a time, each drained and uncordoned). The floor is what no upgrade can beat: the
restarts that must happen one after another, measured on the upgraded cluster by restarting each
host's Kubernetes services and waiting (the host's own `kubesmith wait`, the probes the units use)
until each is ready, host after host. Prints both and their ratio. Needs root, systemd-nspawn and
mmdebstrap. Run: python bench/upgrade_bench.py
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import yaml  # noqa: E402
from k8s_support import OLDER_RELEASE, coredns_on_path, older_binaries, real_binaries  # noqa: E402

from kubesmith.health.probespec import probe_argument  # noqa: E402
from kubesmith.lab import access, lifecycle  # noqa: E402
from kubesmith.lab.config import LabConfig  # noqa: E402
from lab_support import own_lab  # noqa: E402
from kubesmith.lab.errors import quiet  # noqa: E402
from kubesmith.spec.load import load_spec_file  # noqa: E402
from kubesmith.plan.evaluate import evaluate  # noqa: E402
from kubesmith.versions.registry import load_registry  # noqa: E402

OLD = OLDER_RELEASE
RESTARTED = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy")


def lab_config() -> LabConfig:
    return own_lab("bench-lab", "ks-bench")


def spec_at(work: Path, version: str) -> Path:
    document = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    document["spec"]["kubernetesVersion"] = version
    path = work / f"lab-{version}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def kubesmith(config: LabConfig, work: Path, *args: str) -> float:
    """Seconds one `kubesmith` command took; exits with its output when it fails."""
    argv = ["kubesmith", *args, "--state-dir", str(work / "state"), "--ssh-config", str(config.ssh_config),
            "--known-hosts", str(config.known_hosts), "--identity", str(config.client_key)]
    started = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode:
        raise SystemExit(f"{' '.join(args[:2])} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return time.perf_counter() - started


def floor(config: LabConfig, spec: Path) -> float:
    """The restarts that must follow one another: each host's Kubernetes services restarted and ready
    (API server first), one host after the next."""
    plan = evaluate(load_spec_file(spec).cluster, load_registry())
    total = 0.0
    for host in plan.hosts:
        steps = []
        for service in (s for s in host.services if s.name in RESTARTED):
            wait = f" && kubesmith wait --quiet {shlex.quote(probe_argument(service.readiness, host))}" \
                if service.readiness else ""
            steps.append(f"systemctl restart {service.name}.service{wait}")
        started = time.perf_counter()
        subprocess.run(access.ssh_argv(config, host.name, [" && ".join(steps)]), check=True, capture_output=True)
        total += time.perf_counter() - started
    return total


def main() -> None:
    coredns_on_path()  # examples/lab.yaml runs cluster DNS: kubesmith builds its image from this binary
    config = lab_config()
    lifecycle.down(config, quiet)
    try:
        lifecycle.up(config, 3, quiet)
        with tempfile.TemporaryDirectory() as directory:
            work = Path(directory)
            new_spec = spec_at(work, load_spec_file(ROOT / "examples" / "lab.yaml").cluster.spec.kubernetes_version)
            kubesmith(config, work, "apply", str(spec_at(work, OLD)), "--binaries", str(older_binaries()))
            upgrade = kubesmith(config, work, "apply", str(new_spec), "--binaries", str(real_binaries()))
            least = floor(config, new_spec)
    finally:
        lifecycle.down(config, quiet)
    print(f"upgrade {OLD} -> 1.36.2 of 3 hosts: {upgrade:.1f} s")
    print(f"floor (each host's restarts until ready, one host after another): {least:.1f} s")
    print(f"ratio: {upgrade / least:.2f}x")


if __name__ == "__main__":
    main()
