"""Benchmark: a first apply to one control-plane host and N nodes, the release relayed host to host
(`spec.ssh.relayFanout`) against the same apply with relaying off (the baseline: every host gets the
release from the operator's machine).

Each apply runs on freshly booted lab hosts (real systemd, sshd, containerd, the real v1.36.2
binaries), at two fleet sizes, so the figures per added host come out of the difference. Measured:
* bytes the operator's machine sent: the transmit counter of the lab bridge's own interface, which
  counts what the lab namespace's stack sends (the operator's SSH sessions arrive there through
  their ProxyCommand) and not what the bridge forwards from host to host;
* the operator's CPU seconds: this process and its reaped children (the ProxyCommands);
* the wall time of the apply, and of its relay and upload phases;
and one release: every distinct file of the apply once (a binary once, each host's certificates and
configuration), the least any apply must send.
Prints the figures and the ratios. Needs root, systemd-nspawn and mmdebstrap.
Run: python bench/fanout_bench.py [--nodes 2,8] [--fanout 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
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
from kubesmith.hostfile import size_of  # noqa: E402
from kubesmith.lab import lifecycle  # noqa: E402
from kubesmith.lab.config import LabConfig  # noqa: E402
from lab_support import own_lab  # noqa: E402
from kubesmith.lab.errors import quiet  # noqa: E402
from kubesmith.spec.load import load_spec_file  # noqa: E402
from kubesmith.transport.ssh import SshOptions, SshTransport  # noqa: E402
from kubesmith.versions.registry import load_registry  # noqa: E402


def lab_config() -> LabConfig:
    return own_lab("bench-fanout", "ks-fanout")


def fleet_spec(work: Path, config: LabConfig, nodes: int, fanout: int) -> Path:
    """examples/lab.yaml with one control-plane host (h1) and `nodes` nodes (h2...)."""
    document = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    spec = document["spec"]
    spec.pop("controlPlaneVIP", None)
    spec["components"].pop("controlPlaneVip", None)
    prefix = config.bridge_address.rpartition(".")[0]
    spec["hosts"] = [{"name": "h1", "address": f"{prefix}.11", "roles": ["control-plane", "etcd", "node"]}]
    spec["hosts"] += [{"name": f"h{i}", "address": f"{prefix}.{10 + i}", "roles": ["node"]}
                      for i in range(2, nodes + 2)]
    spec["components"]["coreDns"]["upstream"] = [config.bridge_address]
    spec["ssh"] = {"relayFanout": fanout}
    path = work / f"fleet-{nodes}-{fanout}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def bridge_sent(config: LabConfig) -> int:
    """Bytes the lab namespace's own stack sent onto its bridge (what the operator's machine sent)."""
    shown = subprocess.run(["ip", "-n", config.netns, "-s", "-j", "link", "show", "dev", config.bridge],
                           capture_output=True, text=True, check=True).stdout
    return int(json.loads(shown)[0]["stats64"]["tx"]["bytes"])


def operator_cpu() -> float:
    times = psutil.Process().cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def one_apply(config: LabConfig, work: Path, nodes: int, fanout: int) -> dict[str, float]:
    """A fresh lab of 1 + nodes hosts, one first apply; the figures."""
    lifecycle.down(config, quiet)
    lifecycle.up(config, nodes + 1, quiet)
    try:
        spec = fleet_spec(work, config, nodes, fanout)
        cluster, registry = load_spec_file(spec).cluster, load_registry()
        paths = binary_paths(real_binaries())
        bundle = build_bundle(work / "cache")
        options = SshOptions(config_file=config.ssh_config, known_hosts=config.known_hosts,
                             identity_files=(config.client_key,))

        async def scenario() -> dict[str, float]:
            async with SshTransport(options) as transport:
                plan = await applying.observed_plan(transport, cluster, registry, [h.name for h in cluster.spec.hosts])
                files = applying.desired_files(plan, work / f"state-{nodes}-{fanout}", applying.Binaries(paths),
                                               bundle)
                sent, cpu, started = bridge_sent(config), operator_cpu(), time.perf_counter()
                report = await applying.apply_plan(transport, plan, files, bundle, lambda line: print(f"  {line}"),
                                                   600.0, relay_fanout=fanout)
                wall = time.perf_counter() - started
            # the least any apply must send: every distinct file once (a binary once, each host's certificates)
            release = {(f.path, f.sha256): size_of(f) for host_files in files.values() for f in host_files}
            return {"sent": bridge_sent(config) - sent, "cpu": operator_cpu() - cpu, "wall": wall,
                    "relay": report.timings.get("relay", 0.0), "upload": report.timings["upload"],
                    "release": sum(release.values())}

        return asyncio.run(scenario())
    finally:
        lifecycle.down(config, quiet)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="2,8", help="two fleet sizes (nodes besides the control plane)")
    parser.add_argument("--fanout", type=int, default=2)
    args = parser.parse_args()
    small, large = (int(n) for n in args.nodes.split(","))
    coredns_on_path()
    config = lab_config()
    results: dict[tuple[int, int], dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as work:
        for nodes in (small, large):
            for fanout in (0, args.fanout):
                print(f"{nodes} nodes + 1 control plane, relay fan-out {fanout}:")
                results[nodes, fanout] = one_apply(config, Path(work), nodes, fanout)
                print(f"  -> {results[nodes, fanout]}")
    release = results[large, args.fanout]["release"]
    added = large - small
    print(f"first apply of 1 control-plane host + N nodes (fresh lab hosts; one release: {release / 1e6:.0f} MB, "
          "every distinct file of the apply once)")
    print(f"{'':<34}{'relay off':>14}{'relay on':>14}{'ratio':>9}")
    for nodes in (small, large):
        off, on = results[nodes, 0], results[nodes, args.fanout]
        for key, label, scale, unit in (("sent", "MB sent by the operator", 1e6, ""),
                                        ("cpu", "operator CPU-s", 1, ""), ("wall", "wall s", 1, "")):
            print(f"{nodes} nodes: {label:<24}{off[key] / scale:>14.1f}{on[key] / scale:>14.1f}"
                  f"{(off[key] / on[key]) if on[key] else float('nan'):>8.2f}x{unit}")
    for fanout, name in ((0, "relay off"), (args.fanout, "relay on")):
        a, b = results[small, fanout], results[large, fanout]
        print(f"per added node ({name}): {(b['sent'] - a['sent']) / added / 1e6:.1f} MB sent, "
              f"{(b['cpu'] - a['cpu']) / added:.2f} CPU-s, {(b['wall'] - a['wall']) / added:+.1f} s wall")
    on = results[large, args.fanout]
    print(f"relay on, {large} nodes: the operator sent {on['sent'] / release:.2f}x one release "
          f"(goal <= 1.1x); relay phase {on['relay']:.1f}s, upload {on['upload']:.1f}s")


if __name__ == "__main__":
    main()
