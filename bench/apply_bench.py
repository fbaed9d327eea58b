"""Benchmark: `apply` of the lab example to three fresh lab hosts, against two baselines.

Measured in one run, each on freshly booted hosts (real systemd, sshd, etcd, the real v1.36.2
Kubernetes binaries):
* parallel apply (kubesmith's way): time until `kubernetes.target` is active on every host,
  split into inspect, upload, start and wait; then the time until a first pod (of the sandbox
  image kubesmith imported) is Running, from the start of the apply; then a no-op re-apply;
* the floor: each host applied alone as a one-host cluster (its own etcd and control plane),
  one after another; the slowest of them is what three hosts in parallel cannot beat;
* sequential baseline: the three-host apply, one host after another at every step.
Prints the times and the ratios. Needs root, systemd-nspawn and mmdebstrap.
Run: python bench/apply_bench.py
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from k8s_support import coredns_on_path, real_binaries  # noqa: E402
import yaml  # noqa: E402

from kubesmith.backends import apply as applying  # noqa: E402
from kubesmith.backends.runtime_bundle import build_bundle  # noqa: E402
from kubesmith.binaries import binary_paths  # noqa: E402
from kubesmith.lab import lifecycle  # noqa: E402
from kubesmith.lab.config import LabConfig  # noqa: E402
from lab_support import own_lab  # noqa: E402
from kubesmith.lab.errors import quiet  # noqa: E402
from kubesmith.spec.load import load_spec_file  # noqa: E402
from kubesmith.transport.ssh import SshOptions, SshTransport  # noqa: E402
from kubesmith.versions.registry import load_registry  # noqa: E402


def lab_config() -> LabConfig:
    return own_lab("bench-lab", "ks-bench")


def solo_spec(work: Path, host: str) -> Path:
    """examples/lab.yaml reduced to one host: a one-host cluster of its own."""
    document = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    document["metadata"]["name"] = f"solo-{host}"
    document["spec"]["hosts"] = [h for h in document["spec"]["hosts"] if h["name"] == host]
    path = work / f"solo-{host}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


FIRST_POD = """apiVersion: v1
kind: Pod
metadata: {name: first}
spec:
  containers: [{name: pause, image: kubesmith.local/pause:1, imagePullPolicy: Never}]
"""


def one_apply(config: LabConfig, work: Path, parallel: bool, repeat_noop: bool,
              spec: Path = ROOT / "examples" / "lab.yaml") -> dict[str, float]:
    cluster, registry = load_spec_file(spec).cluster, load_registry()
    paths = binary_paths(real_binaries())
    bundle = build_bundle(work / "cache")
    options = SshOptions(config_file=config.ssh_config, known_hosts=config.known_hosts,
                         identity_files=(config.client_key,))

    async def scenario() -> dict[str, float]:
        async with SshTransport(options) as transport:
            started, cpu = time.perf_counter(), busy_cpu_seconds()
            plan = await applying.observed_plan(transport, cluster, registry, [h.name for h in cluster.spec.hosts])
            files = applying.desired_files(plan, work / "state", applying.Binaries(paths), bundle)
            report = await applying.apply_plan(transport, plan, files, bundle, lambda _: None, 300.0, parallel)
            timings = dict(report.timings) | {"wall": time.perf_counter() - started,
                                               "cpu": busy_cpu_seconds() - cpu}
            if repeat_noop:
                timings["first pod"] = await first_pod(config, transport, plan.hosts[0].address, work) + \
                    timings["wall"]
                started = time.perf_counter()
                again = await applying.apply_plan(transport, plan, files, bundle, lambda _: None, 300.0, parallel)
                assert not again.changed, "the re-apply changed something"
                timings["noop"] = time.perf_counter() - started
            return timings

    return asyncio.run(scenario())


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine spent busy (every lab host, kubesmith, sshd): with 2 cores, a
    3-host apply cannot take less wall time than its CPU seconds / 2, however well it overlaps."""
    times = psutil.cpu_times()
    return sum(getattr(times, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))


async def first_pod(config: LabConfig, transport: SshTransport, address: str, work: Path) -> float:
    """Seconds from now until a pod of the imported sandbox image is Running (kubectl in the lab's netns)."""
    admin = work / "admin.conf"
    admin.write_text((await transport.run(address, "cat /etc/kubernetes/admin.conf")).stdout)
    manifest = work / "first.yaml"
    manifest.write_text(FIRST_POD)
    kubectl = ["nsenter", f"--net={config.netns_path}", "kubectl", "--kubeconfig", str(admin)]
    started = time.perf_counter()
    # asked again until accepted: a fresh cluster has no `default` service account for a moment
    while subprocess.run([*kubectl, "create", "--validate=false", "-f", str(manifest)], capture_output=True).returncode:
        if time.perf_counter() - started > 300:
            raise SystemExit("the first pod was not accepted within 300 s")
        await asyncio.sleep(0.1)
    while subprocess.run([*kubectl, "get", "pod", "first", "-o", "jsonpath={.status.phase}"], capture_output=True,
                         text=True).stdout != "Running":
        if time.perf_counter() - started > 300:
            raise SystemExit("the first pod did not run within 300 s")
        await asyncio.sleep(0.1)
    return time.perf_counter() - started


def fresh_lab_apply(parallel: bool, repeat_noop: bool) -> dict[str, float]:
    config = lab_config()
    lifecycle.down(config, quiet)
    try:
        lifecycle.up(config, 3, quiet)
        with tempfile.TemporaryDirectory() as work:
            return one_apply(config, Path(work), parallel, repeat_noop)
    finally:
        lifecycle.down(config, quiet)


def slowest_alone() -> dict[str, dict[str, float]]:
    """Each lab host applied alone as a one-host cluster on a fresh lab; the wall time of each."""
    config = lab_config()
    lifecycle.down(config, quiet)
    try:
        lifecycle.up(config, 3, quiet)
        with tempfile.TemporaryDirectory() as work:
            return {host: one_apply(config, Path(work) / host, True, False, solo_spec(Path(work), host))
                    for host in ("h1", "h2", "h3")}  # a state directory each: each is a cluster of its own
    finally:
        lifecycle.down(config, quiet)


def main() -> None:
    coredns_on_path()  # examples/lab.yaml runs cluster DNS: kubesmith builds its image from this binary
    alone = slowest_alone()
    parallel = fresh_lab_apply(parallel=True, repeat_noop=True)
    sequential = fresh_lab_apply(parallel=False, repeat_noop=False)
    slowest = max(t["wall"] for t in alone.values())
    cores = psutil.cpu_count() or 1
    floor = max(slowest, parallel["cpu"] / cores)
    print("each host applied alone (one-host cluster): " + ", ".join(
        f"{h} {t['wall']:.2f}s ({t['cpu']:.1f} CPU-s)" for h, t in alone.items()))
    print(f"3-host apply {parallel['wall']:.2f}s against the slowest host alone {slowest:.2f}s: "
          f"{parallel['wall'] / slowest:.2f}x (goal <= 1.3x), gap {parallel['wall'] - slowest:+.2f}s")
    print(f"the 3-host apply kept this machine's {cores} cores busy for {parallel['cpu']:.1f} CPU-s: it cannot end "
          f"before {parallel['cpu'] / cores:.2f}s; against that floor ({floor:.2f}s) it took "
          f"{parallel['wall'] / floor:.2f}x")
    print("apply of examples/lab.yaml to 3 fresh lab hosts (real etcd and Kubernetes binaries)")
    print(f"{'phase':<10}{'parallel':>12}{'sequential':>14}{'ratio':>9}")
    for phase in ("inspect", "upload", "start", "wait", "total"):
        ratio = sequential[phase] / parallel[phase] if parallel[phase] else float("nan")
        print(f"{phase:<10}{parallel[phase]:>11.2f}s{sequential[phase]:>13.2f}s{ratio:>8.2f}x")
    print(f"from the start of apply to a first pod Running: {parallel['first pod']:.2f}s")
    print(f"no-op re-apply: {parallel['noop']:.2f}s ({parallel['total'] / parallel['noop']:.1f}x faster than the "
          "first apply)")


if __name__ == "__main__":
    main()
