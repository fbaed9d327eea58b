"""Each command's start: wall and CPU time of `--help` and of a real short run, against `python3 -c pass`.

Most `kubesmith` processes live for well under a second: `probe` (status's batch over SSH), `wait`
(every unit's ExecStartPre= gate), `network`, `node`, `config` on the hosts, and `status`, `plan`,
`validate` run by operators and tests. Their cost is mostly Python's imports, so each case is timed
from the interpreter's start to its exit, and the modules it loaded are counted (with those of the
heavy libraries: asyncssh, pydantic, cryptography, aiohttp, yaml, tenacity).

The real runs reach nothing: probes and SSH go to loopback's port 9, where nothing listens; files
named are in a scratch directory. Baseline: `python3 -c pass`, measured in the same run, rounds
interleaved so that load from elsewhere falls on every case alike.

    python3 bench/command_start_bench.py [--runs 7] [--only probe,wait]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("asyncssh", "pydantic", "cryptography", "aiohttp", "yaml", "tenacity")
MAIN = "import sys; from kubesmith.cli import main; sys.argv[0] = 'kubesmith'; main()"
# the same start, and the names of the modules it loaded written at exit
COUNTED = ("import atexit, os, sys; atexit.register(lambda: open(os.environ['KS_MODULES'], 'w').write("
           "'\\n'.join(sorted(sys.modules)))); " + MAIN)


@dataclass
class Case:
    name: str
    argv: list[str]  # after `kubesmith`; empty: the baseline
    stdin: str = ""
    codes: tuple[int, ...] = (0,)
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)


def fixtures(work: Path) -> dict[str, str]:
    """A one-host cluster file whose host SSH finds on loopback's port 9, and the files the host-side
    commands read."""
    spec = {"apiVersion": "kubesmith.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "bench"},
            "spec": {"kubernetesVersion": "1.36.2", "ssh": {"port": 9},
                     "hosts": [{"name": "n1", "address": "10.9.0.1", "roles": ["control-plane", "etcd", "node"]}]}}
    (work / "cluster.yaml").write_text(json.dumps(spec))  # JSON is YAML
    (work / "known_hosts").write_text("")
    (work / "ssh_config").write_text("Host *\n  HostName 127.0.0.1\n")
    (work / "kube-scheduler.yaml").write_text("kind: KubeSchedulerConfiguration\n")
    (work / "components.json").write_text(json.dumps({"minor": "1.36", "components": [
        {"name": "kube-scheduler", "argv": ["--config", str(work / "kube-scheduler.yaml")],
         "paths": [str(work / "kube-scheduler.yaml")], "binary": "kube-scheduler"}]}))
    ca = work / "pki" / "ca.crt"
    batch = [{"probe": "tcp://127.0.0.1:9", "mode": "check"},
             {"probe": f"https://127.0.0.1:9/readyz?ca={ca}", "mode": "check"},
             {"probe": f"https://127.0.0.1:9/?ca={ca}", "mode": "request", "method": "GET", "path": "/version"},
             {"probe": f"https://127.0.0.1:9/?ca={ca}", "mode": "expiry"},
             {"probe": "http://127.0.0.1:9/healthz", "mode": "check"}]
    return {"work": str(work), "batch": json.dumps(batch)}


def cases(files: dict[str, str]) -> list[Case]:
    work = files["work"]
    spec = f"{work}/cluster.yaml"
    ssh = ["--known-hosts", f"{work}/known_hosts", "--ssh-config", f"{work}/ssh_config"]
    config = ["--components-file", f"{work}/components.json", "--checkpoints-dir", f"{work}/checkpoints"]
    return [
        Case("python3 -c pass", []),
        Case("--help", ["--help"]),
        Case("probe --help", ["probe", "--help"]),
        Case("probe (5 operations, refused)", ["probe", "--timeout", "1"], stdin=files["batch"]),
        Case("wait --help", ["wait", "--help"]),
        Case("wait tcp --deadline 0", ["wait", "--deadline", "0", "--quiet", "tcp://127.0.0.1:9"], codes=(4,)),
        Case("wait https --deadline 0", ["wait", "--deadline", "0", "--quiet", "--pki-dir", f"{work}/pki",
                                         "https://127.0.0.1:9/readyz?ca=ca.crt"], codes=(4,)),
        Case("network --help", ["network", "up", "--help"]),
        Case("network down (no settings file)", ["network", "down", "--config", f"{work}/network.json"], codes=(5,)),
        Case("node --help", ["node", "drain", "--help"]),
        Case("node delete (no kubeconfig)", ["node", "delete", "n1", "--kubeconfig", f"{work}/none.conf"],
             codes=(3,)),
        Case("config --help", ["config", "--help"]),
        Case("config status", ["config", "status", *config]),
        Case("config wait --timeout 0", ["config", "wait", "kube-scheduler", "--timeout", "0", "--since", "0",
                                         *config], codes=(0, 4)),
        Case("ca --help", ["ca", "serve", "--help"]),
        Case("agent --help", ["agent", "--help"]),
        Case("agent --show-state", ["agent", "--show-state", "--state-file", f"{work}/state.json"]),
        Case("validate --help", ["validate", "--help"]),
        Case("validate FILE", ["validate", spec]),
        Case("plan --help", ["plan", "--help"]),
        Case("status --help", ["status", "--help"]),
        Case("status FILE (host refused)", ["status", spec, *ssh, "--state-dir", f"{work}/state"], codes=(4,)),
        Case("apply --help", ["apply", "--help"]),
    ]


def run_once(case: Case, env: dict[str, str], record: Path | None) -> None:
    argv = ([sys.executable, "-c", "pass"] if not case.argv else
            [sys.executable, "-c", COUNTED if record else MAIN, *case.argv])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(argv, input=case.stdin, text=True, capture_output=True,
                            env={**env, "KS_MODULES": str(record)} if record else env)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode not in case.codes:
        sys.exit(f"{case.name}: exit {result.returncode}, expected {case.codes}\n{result.stderr[-2000:]}")
    if record:
        case.modules = record.read_text().split() if case.argv else []
        return
    case.wall.append(wall)
    case.cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--only", default="", help="Comma-separated words; cases whose name has one (and the baseline).")
    parser.add_argument("--json", metavar="FILE", help="Also write the figures as JSON.")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory(prefix="ks-start-") as scratch:
        work = Path(scratch)
        chosen = cases(fixtures(work))
        words = [w for w in args.only.split(",") if w]
        chosen = [c for c in chosen if not c.argv or not words or any(w in c.name for w in words)]
        for case in chosen:  # once to warm the caches (.pyc files) and to count modules
            run_once(case, env, work / "modules.txt")
        for _ in range(args.runs):
            for case in chosen:
                run_once(case, env, None)
    base = chosen[0]
    base_wall, base_cpu = statistics.median(base.wall), statistics.median(base.cpu)
    print(f"{'case':<34} {'wall ms':>8} {'x base':>7} {'CPU ms':>7} {'x base':>7} {'modules':>8}  heavy loaded")
    for case in chosen:
        wall, cpu = statistics.median(case.wall), statistics.median(case.cpu)
        heavy = sorted({m.split(".")[0] for m in case.modules} & set(HEAVY))
        print(f"{case.name:<34} {wall * 1000:8.0f} {wall / base_wall:6.1f}x {cpu * 1000:7.0f} {cpu / base_cpu:6.1f}x "
              f"{len(case.modules):8d}  {', '.join(heavy) or '-'}")
    print(f"medians of {args.runs} runs; baseline python3 -c pass: {base_wall * 1000:.0f} ms wall, "
          f"{base_cpu * 1000:.0f} ms CPU")
    if args.json:
        Path(args.json).write_text(json.dumps({c.name: {"wall_s": statistics.median(c.wall),
                                                        "cpu_s": statistics.median(c.cpu),
                                                        "modules": len(c.modules)} for c in chosen}, indent=2))


if __name__ == "__main__":
    main()
