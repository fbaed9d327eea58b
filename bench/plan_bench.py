"""Benchmark: validate + plan a 1,000-host spec, against merely parsing it with PyYAML's CSafeLoader.

Run: python bench/plan_bench.py [--hosts N] [--repeat R] [--profile]
Prints medians of R runs and the ratio to the baseline measured in the same run (target: <= 3x).
Not part of the pass/fail test run.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

import yaml

from kubesmith.plan.evaluate import evaluate
from kubesmith.plan.jsonout import plan_json
from kubesmith.spec.load import load_spec_text
from kubesmith.versions.registry import load_registry

CONTROL_PLANE = 3


def spec_yaml(hosts: int) -> str:
    """A cluster of `hosts` machines: 3 control-plane + etcd hosts, the rest nodes."""
    lines = [
        "apiVersion: kubesmith.io/v1alpha1",
        "kind: Cluster",
        "metadata:",
        "  name: bench",
        "spec:",
        '  kubernetesVersion: "1.33.2"',
        "  controlPlaneEndpoint: 10.0.0.10:6443",
        "  network: {clusterCidr: 10.128.0.0/9, serviceCidr: 10.32.0.0/16}",
        "  hosts:",
    ]
    for index in range(hosts):
        address = f"172.{16 + index // 62500}.{index // 250 % 250}.{1 + index % 250}"  # 172.16.0.0/12: any size
        roles = "[control-plane, etcd]" if index < CONTROL_PLANE else "[node]"
        labels = "" if index < CONTROL_PLANE else f", labels: {{rack: r{index % 20}}}"
        lines.append(f"    - {{name: host{index:04d}, address: {address}, roles: {roles}{labels}}}")
    lines += [
        "  components:",
        "    apiserver: {auditLog: {maxAge: 40}}",
        "    kubelet: {extraConfig: {maxPods: 200}}",
    ]
    return "\n".join(lines) + "\n"


def median_seconds(action: Callable[[], Any], repeat: int) -> float:
    timings = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        timings.append(time.perf_counter() - start)
    return statistics.median(timings)


def validate_and_plan(text: str) -> Any:
    registry = load_registry()
    loaded = load_spec_text(text, "bench.yaml", registry)
    return evaluate(loaded.cluster, registry)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one validate + plan run")
    args = parser.parse_args()

    text = spec_yaml(args.hosts)
    load_registry()  # read once per process, as the CLI does; not part of either measurement
    validate_and_plan(text)  # warm caches of imports and the registry
    parse = median_seconds(lambda: yaml.load(text, Loader=yaml.CSafeLoader), args.repeat)
    full = median_seconds(lambda: validate_and_plan(text), args.repeat)
    plan = validate_and_plan(text)
    to_json = median_seconds(lambda: plan_json(plan), args.repeat)

    print(f"spec: {args.hosts} hosts, {len(text):,} bytes; median of {args.repeat} runs")
    print(f"baseline  yaml.load(CSafeLoader)     {parse * 1000:9.1f} ms")
    print(f"kubesmith load_spec_text + evaluate  {full * 1000:9.1f} ms   ratio {full / parse:5.2f}x (target <= 3x)")
    print(f"plan_json(plan)                      {to_json * 1000:9.1f} ms   ({len(plan_json(plan)):,} bytes)")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(validate_and_plan, text)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
