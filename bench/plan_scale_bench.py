"""Benchmark: `plan --offline -o json` (and text, and `validate`) of 1,000 hosts against 10,000 and 20,000.

Each command runs as its own process, as a user runs it, with its output sent to /dev/null; measured
are wall time, user + system CPU and peak resident memory (os.wait4). The 1,000-host run is the
baseline: the larger ones are printed as their CPU per host against the baseline's (under 1x: the fixed
start-up cost spread wider) and as what each host beyond the baseline added, in CPU and memory (the
same figure at 10,000 and 20,000 hosts: linear; a few KB a host: the cluster file itself). The
machine is shared, so CPU seconds say more than wall time. Target (issue 32): 10,000 hosts well under
10 s and a few hundred MB; memory about flat as hosts grow.

Run: python bench/plan_scale_bench.py [--hosts 1000,10000,20000] [--repeat R] [--commands json,text,validate]
Not part of the pass/fail test run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTROL_PLANE = 3
CLI = "import sys; from kubesmith.cli import main; sys.argv[0] = 'kubesmith'; main()"
COMMANDS = {"json": ("plan", "--offline", "-o", "json"), "text": ("plan", "--offline"), "validate": ("validate",)}


def spec_yaml(hosts: int) -> str:
    """3 control-plane + etcd hosts, the rest nodes, at 10.x.y.z; written compactly (the nodes' roles
    through one YAML alias) so that 20,000 hosts stay under the 1 MiB a cluster file may have."""
    lines = [
        "apiVersion: kubesmith.io/v1alpha1",
        "kind: Cluster",
        "metadata:",
        "  name: scale",
        "spec:",
        '  kubernetesVersion: "1.36.2"',
        "  controlPlaneEndpoint: 10.0.0.10:6443",
        "  network: {clusterCidr: 10.128.0.0/9, serviceCidr: 10.32.0.0/16}",
        "  hosts:",
    ]
    for index in range(hosts):
        address = f"10.{1 + index // 62500}.{index // 250 % 250}.{1 + index % 250}"
        roles = "[control-plane, etcd]" if index < CONTROL_PLANE else "&n [node]" if index == CONTROL_PLANE else "*n"
        lines.append(f"  - {{name: h{index:05d}, address: {address}, roles: {roles}}}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float  # user + system seconds
    rss_mb: float


def run_once(spec: Path, command: tuple[str, ...]) -> Run:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    with open(os.devnull, "w") as null:
        process = subprocess.Popen([sys.executable, "-c", CLI, *command[:1], str(spec), *command[1:]], stdout=null,
                                   env=env)
        _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} {spec} exited {process.returncode}")
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def median_run(spec: Path, command: tuple[str, ...], repeat: int) -> Run:
    runs = [run_once(spec, command) for _ in range(repeat)]
    return Run(statistics.median(r.wall for r in runs), statistics.median(r.cpu for r in runs),
               statistics.median(r.rss_mb for r in runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1000,10000,20000", help="comma list; the first is the baseline")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--commands", default="json,text,validate")
    args = parser.parse_args()
    sizes = [int(size) for size in args.hosts.split(",")]
    with tempfile.TemporaryDirectory() as directory:
        specs = {}
        for size in sizes:
            specs[size] = Path(directory) / f"hosts-{size}.yaml"
            specs[size].write_text(spec_yaml(size))
        for name in args.commands.split(","):
            command = COMMANDS[name]
            print(f"kubesmith {' '.join(command)}  (median of {args.repeat})")
            base = None
            for size in sizes:
                result = median_run(specs[size], command, args.repeat)
                line = (f"  {size:>6,} hosts  wall {result.wall:7.2f} s  cpu {result.cpu:7.2f} s  "
                        f"max RSS {result.rss_mb:6.0f} MB")
                if base is None:
                    base = (size, result)
                    line += "   baseline"
                else:
                    scale, added = size / base[0], size - base[0]
                    line += (f"   cpu per host {result.cpu / base[1].cpu / scale:4.2f}x baseline's; "
                             f"each host added {(result.cpu - base[1].cpu) / added * 1000:5.2f} ms, "
                             f"{(result.rss_mb - base[1].rss_mb) / added * 1024:5.1f} KB")
                print(line, flush=True)


if __name__ == "__main__":
    main()
