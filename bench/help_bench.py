"""`kubesmith --help` wall time against the interpreter's own start-up, measured in the same run.

The list of commands is read from a table (kubesmith.cli.COMMANDS), not from the commands' modules:
goal 0.3 s. Baseline: `python3 -c "import click"`, the least any click program pays.

    python3 bench/help_bench.py [--runs 15]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def timed(argv: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    program = shutil.which("kubesmith")
    if program is None:
        sys.exit("kubesmith is not installed (pip install -e .)")
    help_times = timed([program, "--help"], runs)
    base_times = timed([sys.executable, "-c", "import click"], runs)
    median, base = statistics.median(help_times), statistics.median(base_times)
    print(f"kubesmith --help: median {median * 1000:.0f} ms ({min(help_times) * 1000:.0f}-"
          f"{max(help_times) * 1000:.0f}) over {runs} runs; goal 300 ms: {'met' if median <= 0.3 else 'not met'}")
    print(f"baseline python3 -c 'import click': median {base * 1000:.0f} ms; ratio {median / base:.2f}x")


if __name__ == "__main__":
    main()
