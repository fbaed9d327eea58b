"""Benchmark: the operator's CPU per host to connect, look at and inspect a fleet, at two fleet sizes and
two `spec.ssh.maxParallelHosts`.

The hosts are one real sshd on 127.0.0.1 under many names: documentation addresses in the spec (a
spec's address may not be loopback) that one wildcard block of an SSH config points at it (`HostName`),
a connection each. One block, not one per host: asyncssh parses the config file once per connection, so a
config with a block per host costs each host a parse that grows with the fleet (`--block-per-host` shows
it). No ProxyCommand, so every CPU second measured is this process's own (`time.process_time`: asyncssh's key exchange and ciphers, the commands' channels, the
plan's evaluation, the parsing), which is what grows with the fleet. What the sshd and the hosts'
shells spend is the hosts' part, not measured. Inspect is given no files: hashing runs on the hosts,
and the operator's share of it is one command's output per host.
The baseline is 10 hosts with maxParallelHosts 8; every row's CPU per host is also given as a ratio
to it (1.0: flat per host). Needs root and openssh-server.
Run: python bench/inspect_scale_bench.py [--hosts 10,50] [--bounds 8,64]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from sshd_fixture import LocalSshd, start_sshd  # noqa: E402

from kubesmith.backends.apply import inspect_all, observed_plan  # noqa: E402
from kubesmith.backends.runtime_bundle import RuntimeBundle  # noqa: E402
from kubesmith.backends.ssh_settings import ssh_options  # noqa: E402
from kubesmith.spec.load import load_spec_text  # noqa: E402
from kubesmith.spec.model import Cluster  # noqa: E402
from kubesmith.transport.ssh import SshTransport  # noqa: E402
from kubesmith.versions.registry import load_registry  # noqa: E402

BASELINE = (10, 8)  # hosts, maxParallelHosts


def documentation(index: int) -> str:
    return f"198.51.100.{index + 1}" if index < 250 else f"203.0.113.{index - 249}"


def fleet(hosts: int, bound: int, sshd: LocalSshd, work: Path, per_host: bool) -> tuple[Cluster, Path, Path]:
    """The cluster, its SSH config (one wildcard block, or a block per host) and known_hosts (every name,
    one key)."""
    entries = [{"name": f"h{index + 1}", "address": documentation(index),
                "roles": ["control-plane", "etcd", "node"] if index == 0 else ["node"]} for index in range(hosts)]
    cluster = load_spec_text(yaml.safe_dump({
        "apiVersion": "kubesmith.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "bench"},
        "spec": {"kubernetesVersion": "1.36.2", "hosts": entries,
                 "ssh": {"port": sshd.port, "maxParallelHosts": bound}}}), "bench.yaml").cluster
    config, known = work / "ssh_config", work / "known_hosts"
    names = [documentation(i) for i in range(hosts)] if per_host else ["198.51.100.* 203.0.113.*"]
    config.write_text("".join(f"Host {name}\n  HostName 127.0.0.1\n" for name in names))
    key = sshd.host_key_pub.read_text().strip()
    known.write_text("".join(f"[{documentation(i)}]:{sshd.port} {key}\n" for i in range(hosts))
                     + f"[127.0.0.1]:{sshd.port} {key}\n")
    return cluster, config, known


async def measure(cluster: Cluster, config: Path, known: Path, identity: Path, minor: str) -> dict[str, float]:
    """CPU seconds of this process per phase, and the wall time of all of them."""
    options, _ = ssh_options(cluster, str(config), str(known), str(identity))
    names = [host.name for host in cluster.spec.hosts]
    figures: dict[str, float] = {}
    wall = time.monotonic()
    async with SshTransport(options) as transport:
        mark = time.process_time()
        await transport.reach({host.name: host.address for host in cluster.spec.hosts})
        figures["connect"] = time.process_time() - mark
        mark = time.process_time()
        plan = await observed_plan(transport, cluster, load_registry(), names)
        figures["observe+plan"] = time.process_time() - mark
        mark = time.process_time()
        await inspect_all(transport, plan, {name: [] for name in names}, RuntimeBundle(b"", "0" * 64, (minor,)))
        figures["inspect"] = time.process_time() - mark
    figures["wall"] = time.monotonic() - wall
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="10,50", help="fleet sizes, comma-separated")
    parser.add_argument("--bounds", default="8,64", help="maxParallelHosts values, comma-separated")
    parser.add_argument("--block-per-host", action="store_true", help="an SSH config block per host")
    args = parser.parse_args()
    sizes = [int(n) for n in args.hosts.split(",")]
    bounds = [int(n) for n in args.bounds.split(",")]
    minor = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="inspect-bench-") as directory:
        work = Path(directory)
        with start_sshd(work, "MaxStartups 1000\nMaxSessions 64\n") as sshd:
            rows = []
            for hosts in sizes:
                for bound in bounds:
                    cluster, config, known = fleet(hosts, bound, sshd, work, args.block_per_host)
                    figures = asyncio.run(measure(cluster, config, known, sshd.identity, minor))
                    rows.append((hosts, bound, figures))
                    print(f"measured {hosts} hosts, maxParallelHosts {bound}", file=sys.stderr)
    report(rows)


def report(rows: list[tuple[int, int, dict[str, float]]]) -> None:
    per_host = {(hosts, bound): sum(v for k, v in figures.items() if k != "wall") / hosts
                for hosts, bound, figures in rows}
    baseline = per_host.get(BASELINE)
    print(f"{'hosts':>5} {'bound':>5} {'connect':>8} {'observe+plan':>12} {'inspect':>8} {'CPU-s/host':>10} "
          f"{'vs base':>7} {'wall s':>7}")
    for hosts, bound, figures in rows:
        ratio = f"{per_host[hosts, bound] / baseline:.2f}" if baseline else "-"
        print(f"{hosts:>5} {bound:>5} {figures['connect']:>8.2f} {figures['observe+plan']:>12.2f} "
              f"{figures['inspect']:>8.2f} {per_host[hosts, bound]:>10.4f} {ratio:>7} {figures['wall']:>7.1f}")
    print(f"baseline: {BASELINE[0]} hosts, maxParallelHosts {BASELINE[1]}; CPU-s: this process only "
          "(time.process_time)")


if __name__ == "__main__":
    main()
