"""Benchmark: time to a ready cluster on one machine, against the physical floor.

`kubesmith run` of `kubesmith init`'s spec (the real v1.36.2 binaries, etcd, containerd), from
the command's start to its "all N services ready" line, against a baseline in the same run: the
same binaries with the same arguments (those of the run root kubesmith prepared) started by a
minimal script, each one as soon as what it depends on answers (probes every 50 ms), until every
readiness probe answers: the critical path. Each trial starts from empty data directories.
Prints both medians, their ratio and the absolute gap. Needs root (a network namespace).

Run: python bench/startup_bench.py [--trials 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from k8s_support import real_binaries  # noqa: E402

from kubesmith.backends.run import reroot, reroot_argument, resolve_binary  # noqa: E402
from kubesmith.health.probespec import parse_probe, probe_argument  # noqa: E402
from kubesmith.health.wait import LocalProbeRunner  # noqa: E402
from kubesmith.layout import RunPaths  # noqa: E402
from kubesmith.node.observe import observe_local  # noqa: E402
from kubesmith.node.teardown import release_node_leftovers  # noqa: E402
from kubesmith.plan.evaluate import evaluate  # noqa: E402
from kubesmith.vocabulary.model import HostPlan  # noqa: E402
from kubesmith.spec.load import load_spec_file  # noqa: E402
from kubesmith.versions.registry import load_registry  # noqa: E402

NETNS = f"ks-bench-start-{os.getpid()}"
ADDRESS = "10.213.96.2"
CLI = [sys.executable, "-c", "import sys; from kubesmith.cli import main; sys.argv[0] = 'kubesmith'; main()"]
ENTER = ["nsenter", f"--net=/run/netns/{NETNS}"]
POLL = 0.05


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def make_netns() -> None:
    ip("netns", "add", NETNS)
    ip("-n", NETNS, "link", "set", "lo", "up")
    ip("-n", NETNS, "link", "add", "ksbr0", "type", "bridge")
    ip("-n", NETNS, "addr", "add", f"{ADDRESS}/24", "dev", "ksbr0")
    ip("-n", NETNS, "link", "set", "ksbr0", "up")
    ip("-n", NETNS, "route", "add", "default", "via", ADDRESS.rsplit(".", 1)[0] + ".1")
    subprocess.run([*ENTER, "sysctl", "-qw", "net.ipv4.ip_forward=1"], check=True)  # pods need it; run only checks


def spec_file(work: Path) -> tuple[Path, str]:
    import yaml
    document = yaml.safe_load(subprocess.run([*ENTER, *CLI, "init", "--name", "bench"], capture_output=True,
                                             text=True, check=True).stdout)
    host = document["spec"]["hosts"][0]
    path = work / "cluster.yaml"
    path.write_text(yaml.safe_dump(document))
    return path, host["name"]


def time_kubesmith_run(spec: Path, host: str, state: Path) -> float:
    """Seconds from the command's start to its 'all N services ready' line; then a clean stop."""
    started = time.monotonic()
    process = subprocess.Popen([*ENTER, *CLI, "run", str(spec), "--host", host, "--binaries", str(real_binaries()),
                                "--state-dir", str(state)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    assert process.stdout is not None
    try:
        for line in process.stdout:
            if "services ready" in line:
                return time.monotonic() - started
        raise RuntimeError("kubesmith run ended before it was ready")
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=120)  # read on: a run that cannot write its stop lines never stops


async def critical_path(host: HostPlan, paths: RunPaths, binaries: Path) -> float:
    """The same services started by the floor's rules: each once its local predecessors run and its gates
    answer; the clock stops when every readiness probe answers."""
    runner = LocalProbeRunner()
    pki = str(paths.pki_dir)
    started_at = time.monotonic()
    processes: dict[str, subprocess.Popen[bytes]] = {}

    async def answers(probe) -> bool:  # type: ignore[no-untyped-def]
        spec = parse_probe(probe_argument(probe, host)).resolved(pki)
        return (await runner.check(spec, 1.0)).ok

    async def start(service) -> None:  # type: ignore[no-untyped-def]
        for name in service.after:
            while name.endswith(".service") and name.removesuffix(".service") in {s.name for s in host.services} \
                    and name.removesuffix(".service") not in processes:
                await asyncio.sleep(POLL)
        for gate in service.gates:
            while not any([await answers(probe) for probe in gate.any_of]):
                await asyncio.sleep(POLL)
        argv = [reroot_argument(argument, paths.root) for argument in service.argv]
        cwd = reroot(service.state_directory, paths.root) if service.state_directory else None
        processes[service.name] = subprocess.Popen([str(resolve_binary(service.binary, binaries)), *argv], cwd=cwd,
                                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                                   start_new_session=True)

    async def ready(service) -> None:  # type: ignore[no-untyped-def]
        while service.name not in processes:
            await asyncio.sleep(POLL)
        if service.oneshot:  # done once it exited 0; started again until then, as run and systemd do
            while await asyncio.to_thread(processes[service.name].wait) != 0:
                await asyncio.sleep(POLL)
                del processes[service.name]
                await start(service)
        while service.readiness is not None and not await answers(service.readiness):
            await asyncio.sleep(POLL)

    try:
        await asyncio.gather(*(start(s) for s in host.services), *(ready(s) for s in host.services))
        return time.monotonic() - started_at
    finally:
        for process in reversed(list(processes.values())):
            process.terminate()
        for process in processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def empty_data(host: HostPlan, paths: RunPaths) -> None:
    release_node_leftovers(paths.root)  # the kubelet's bind mount first, or its directory cannot go
    for service in host.services:
        if service.state_directory:
            directory = Path(reroot(service.state_directory, paths.root))
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True, mode=0o700, exist_ok=True)


def in_netns() -> None:
    """Enter the bench's network namespace in this process (the baseline's children inherit it)."""
    from kubesmith.lab.netns import enter
    enter(Path(f"/run/netns/{NETNS}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    make_netns()
    work = Path(tempfile.mkdtemp(prefix="ksb", dir="/tmp"))
    try:
        spec, name = spec_file(work)
        runs = []
        for trial in range(args.trials):
            runs.append(time_kubesmith_run(spec, name, work / f"s{trial}"))
        last = work / f"s{args.trials - 1}"
        plan = evaluate(load_spec_file(spec).cluster, load_registry(), {name: observe_local()})
        host = plan.host(name)
        paths = RunPaths(last.resolve(), name)
        in_netns()
        floors = []
        for _ in range(args.trials):
            empty_data(host, paths)
            floors.append(asyncio.run(critical_path(host, paths, real_binaries())))
            empty_data(host, paths)
        run, floor = statistics.median(runs), statistics.median(floors)
        print(json.dumps({"kubesmith_run_s": [round(x, 2) for x in runs],
                          "critical_path_s": [round(x, 2) for x in floors]}))
        print(f"kubesmith run to all ready ({len(host.services)} services): median {run:.2f}s "
              f"(range {min(runs):.2f}-{max(runs):.2f})")
        print(f"critical path, same binaries and arguments, 50 ms polls: median {floor:.2f}s "
              f"(range {min(floors):.2f}-{max(floors):.2f})")
        print(f"ratio {run / floor:.2f}x (goal <= 1.15x), gap {run - floor:+.2f}s")
    finally:
        subprocess.run(["ip", "netns", "del", NETNS], check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
