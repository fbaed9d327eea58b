"""What the bytecode in kubesmith's runtime bundle saves on a host: the CPU of each host-side start's
imports from the unpacked bundle, with the shipped `.pyc` files (`runtime_bundle.bytecode`) against
the same bundle without them (baseline: every import compiled from source, as each start of the CA
service did, its unit seeing /usr read-only, and each host's first starts after an install).

Each case runs the hosts' interpreter (Debian's /usr/bin/python3 where it is this machine's minor)
with `-I -B` (isolated, and writing no bytecode, as a read-only /usr allows), rounds interleaved so
that load from elsewhere falls on both alike. Also printed: the bundle's size, the bytecode's
unpacked, and the CPU its compilation took here.

    python3 bench/runtime_bytecode_bench.py [--runs 5]
"""

from __future__ import annotations

import argparse
import io
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from kubesmith.backends import runtime_bundle

CASES = {  # what each host-side process imports before its work
    "agent": "kubesmith.agent.configloop, kubesmith.agent.renewal, kubesmith.agent.snapshots",
    "ca serve": "kubesmith.ca.server",
    "network follow": "kubesmith.node.routes",
    "wait (a gate)": "kubesmith.health.wait",
}


def host_python() -> str:
    """Debian's python3 when it is this interpreter's minor (the bytecode's), else this one."""
    debian = Path("/usr/bin/python3")
    if debian.exists():
        minor = subprocess.run([str(debian), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True, check=True).stdout.strip()
        if minor == runtime_bundle.running_python():
            return str(debian)
    return sys.executable


def unpack(data: bytes, target: Path, bytecode: bool) -> None:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(target, filter="data")
    if not bytecode:
        for cache in list(target.rglob("__pycache__")):
            shutil.rmtree(cache)


def children_cpu() -> float:
    """CPU-s of this process's reaped children so far."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def cpu_of(argv: list[str]) -> float:
    before = children_cpu()
    subprocess.run(argv, check=True, capture_output=True)
    return children_cpu() - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    python = host_python()
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        before, started = children_cpu(), time.monotonic()
        bundle = runtime_bundle.build_bundle(work / "cache")
        compiled = children_cpu() - before
        print(f"bundle built in {time.monotonic() - started:.1f} s; its bytecode compiled in {compiled:.1f} CPU-s "
              f"(a child); {len(bundle.data) / 1e6:.1f} MB with the bytecode")
        trees = {"shipped": work / "shipped", "source": work / "source"}
        for name, tree in trees.items():
            unpack(bundle.data, tree, bytecode=name == "shipped")
        pyc = sum(path.stat().st_size for path in trees["shipped"].rglob("*.pyc"))
        print(f"the bytecode unpacked: {pyc / 1e6:.1f} MB; interpreter {python}")
        samples: dict[tuple[str, str], list[float]] = {}
        for _ in range(runs):
            for case, modules in CASES.items():
                for name, tree in trees.items():
                    code = f"import sys; sys.path.insert(0, {str(tree)!r}); import kubesmith.cli, {modules}"
                    samples.setdefault((case, name), []).append(cpu_of([python, "-I", "-B", "-c", code]))
        print(f"\n{'start':<16}{'from source (CPU-s)':>22}{'shipped bytecode':>20}{'ratio':>8}   (median of {runs})")
        for case in CASES:
            source, shipped = (statistics.median(samples[(case, name)]) for name in ("source", "shipped"))
            print(f"{case:<16}{source:>22.3f}{shipped:>20.3f}{source / shipped:>7.2f}x")


if __name__ == "__main__":
    main()
