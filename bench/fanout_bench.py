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

On one machine no link limits anything (every host shares its cores), so `--link-mbit R` shapes the
links with `tc` (tbf) inside the lab: each host's link both ways (the bridge port's egress is what the
host receives, the host's own `host0` egress what it sends) and the operator's uplink (the bridge's own
interface, `--uplink-mbit`, R by default). The shaping is checked before the applies (TCP streams
between hosts and from the operator, alone and two at once), and each apply's relay and upload phases
are set beside docs/fleet.md's model for the same bytes, rates, hosts and fan-out.
Prints the figures and the ratios (baseline: relay off). Needs root, systemd-nspawn, mmdebstrap, tc.
Run: python bench/fanout_bench.py [--nodes 2,8] [--fanout 2] [--link-mbit 100 [--uplink-mbit 100]]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
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
from kubesmith.backends import relay  # noqa: E402
from kubesmith.backends.runtime_bundle import build_bundle  # noqa: E402
from kubesmith.binaries import binary_paths  # noqa: E402
from kubesmith.hostfile import AnyHostFile, size_of  # noqa: E402
from kubesmith.lab import host as lab_host, lifecycle  # noqa: E402
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


# -- links shaped with tc -------------------------------------------------------------------------

TBF = ("burst", "256kb", "latency", "100ms")  # a burst above veth's 64 KB GSO packets; ~1.25 MB queued at 100 Mbit


def _run(argv: list[str]) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")
    return result.stdout


def host_pids(config: LabConfig, names: list[str]) -> dict[str, int]:
    """Each host's PID 1: its network namespace is where the host's own end of its link is."""
    pids: dict[str, int] = {}
    for name in names:
        leader = lab_host.leader(config, name)
        if leader is None:
            raise RuntimeError(f"{name}: no running host")
        pids[name] = leader.pid
    return pids


def shape_links(config: LabConfig, names: list[str], link_mbit: float, uplink_mbit: float) -> list[str]:
    """tbf on every link of the lab: the bridge ports' egress (what each host receives), each host's
    host0 egress (what it sends), the bridge's own egress (what the operator's sessions send). All of
    it lives in the lab's namespaces and goes with them at `lifecycle.down`. The devices shaped."""
    rate = f"{link_mbit}mbit"
    ports = [link["ifname"] for link in json.loads(_run(["ip", "-n", config.netns, "-j", "link", "show",
                                                           "master", config.bridge]))]
    if len(ports) != len(names):
        raise RuntimeError(f"{len(ports)} bridge ports for {len(names)} hosts: {ports}")
    for port in ports:
        _run(["tc", "-n", config.netns, "qdisc", "replace", "dev", port, "root", "tbf", "rate", rate, *TBF])
    for name, pid in host_pids(config, names).items():
        _run(["nsenter", "-t", str(pid), "-n", "tc", "qdisc", "replace", "dev", "host0", "root", "tbf",
              "rate", rate, *TBF])
    _run(["tc", "-n", config.netns, "qdisc", "replace", "dev", config.bridge, "root", "tbf",
          "rate", f"{uplink_mbit}mbit", *TBF])
    return [*ports, *(f"{name}:host0" for name in names), config.bridge]


SINK = """import socket, sys
server = socket.create_server(("0.0.0.0", int(sys.argv[1])))
print("listening", flush=True)
connection, _ = server.accept()
while connection.recv(1 << 20):
    pass
connection.close()
"""
SOURCE = """import socket, sys, time
size, chunk = int(sys.argv[3]), b"\\0" * (1 << 20)
started = time.monotonic()
with socket.create_connection((sys.argv[1], int(sys.argv[2]))) as stream:
    for _ in range(size >> 20):
        stream.sendall(chunk)
    stream.shutdown(socket.SHUT_WR)
    stream.recv(1)
print(time.monotonic() - started)
"""
CHECK_BYTES = 50 << 20
CHECK_PORT = 5201


def _in_netns(where: str | int, config: LabConfig) -> list[str]:
    """nsenter into the lab's namespace (the operator's side) or a host's (by its PID 1), network only."""
    return ["nsenter", f"--net={config.netns_path}"] if where == "operator" else ["nsenter", "-t", str(where), "-n"]


def streams(config: LabConfig, pids: dict[str, int], addresses: dict[str, str],
            pairs: list[tuple[str, str]]) -> list[float]:
    """Mbit/s of CHECK_BYTES sent over TCP for each (source, target) pair, all at once: a source
    "operator" sends from the lab namespace, as the operator's SSH sessions do."""
    sinks: list[subprocess.Popen[str]] = []
    sources: list[subprocess.Popen[str]] = []
    try:
        for index, (_, target) in enumerate(pairs):
            sink = subprocess.Popen([*_in_netns(pids[target], config), sys.executable, "-c", SINK,
                                     str(CHECK_PORT + index)], stdout=subprocess.PIPE, text=True)
            sinks.append(sink)
            assert sink.stdout is not None and sink.stdout.readline().strip() == "listening"
        for index, (source, target) in enumerate(pairs):
            where = source if source == "operator" else pids[source]
            sources.append(subprocess.Popen([*_in_netns(where, config), sys.executable, "-c", SOURCE,
                                             addresses[target], str(CHECK_PORT + index), str(CHECK_BYTES)],
                                            stdout=subprocess.PIPE, text=True))
        seconds = [float(source.communicate(timeout=300)[0]) for source in sources]
    finally:
        for process in (*sources, *sinks):
            if process.poll() is None:
                process.kill()
            process.wait()
    return [CHECK_BYTES * 8 / s / 1e6 for s in seconds]


def check_shaping(config: LabConfig, names: list[str], addresses: dict[str, str]) -> dict[str, list[float]]:
    """Rates that show each shaped link limits: one stream over a host link and from the operator; two
    at once from the operator (its uplink halves them), from one host (its upload), to one host (its
    download)."""
    a, b, c = names[:3]
    pids = host_pids(config, names)
    checks = {f"operator -> {b}": [("operator", b)], f"{a} -> {b}": [(a, b)],
              f"operator -> {b}, {c} at once": [("operator", b), ("operator", c)],
              f"{a} -> {b}, {c} at once": [(a, b), (a, c)],
              f"{b}, {c} -> {a} at once": [(b, a), (c, a)]}
    rates: dict[str, list[float]] = {}
    for label, pairs in checks.items():
        rates[label] = streams(config, pids, addresses, pairs)
        print(f"  link check: {label}: " + ", ".join(f"{r:.1f}" for r in rates[label]) + " Mbit/s")
    return rates


# -- the model of docs/fleet.md -------------------------------------------------------------------


def relayed_files(files: dict[str, list[AnyHostFile]]) -> dict[str, int]:
    """What the relay passes on (`relay.relay_release`): release files wanted, the same bytes, by at
    least relay.MIN_TARGETS hosts; path -> size."""
    by_path: dict[str, set[tuple[str, int]]] = {}
    for host_files in files.values():
        for f in host_files:
            if relay.relayable(f.path):
                by_path.setdefault(f.path, set()).add((f.sha256, size_of(f)))
    counts = {path: sum(1 for host_files in files.values() for f in host_files if f.path == path) for path in by_path}
    return {path: next(iter(copies))[1] for path, copies in by_path.items()
            if counts[path] >= relay.MIN_TARGETS and len(copies) == 1}


def model(files: dict[str, list[AnyHostFile]], fanout: int, link_bps: float, uplink_bps: float) -> dict[str, float]:
    """The transfer terms (seconds) for these files: relay off, the operator's uplink carries every
    host's files; relay on, the seed gets the relayed files S once (S/B_o), then ceil(log_(1+k) N)
    rounds of k*S/B_h each, and the upload sends the rest from the operator."""
    relayed = relayed_files(files)
    per_host = {host: sum(size_of(f) for f in host_files) for host, host_files in files.items()}
    if not fanout:
        return {"relay": 0.0, "upload": max(sum(per_host.values()) / uplink_bps, max(per_host.values()) / link_bps)}
    wanting = [host for host, host_files in files.items() if any(f.path in relayed for f in host_files)]
    size = sum(relayed.values())
    rounds = math.ceil(math.log(len(wanting), 1 + fanout) - 1e-9)
    rest = {host: per_host[host] - sum(relayed[f.path] for f in files[host] if f.path in relayed) for host in files}
    return {"relay": size / min(uplink_bps, link_bps) + rounds * fanout * size / link_bps,
            "upload": max(sum(rest.values()) / uplink_bps, max(rest.values()) / link_bps),
            "relayed": size, "rounds": rounds}


def one_apply(config: LabConfig, work: Path, nodes: int, fanout: int, link_mbit: float, uplink_mbit: float,
              check: bool) -> dict[str, float]:
    """A fresh lab of 1 + nodes hosts (its links shaped when link_mbit), one first apply; the figures."""
    lifecycle.down(config, quiet)
    hosts = lifecycle.up(config, nodes + 1, quiet)
    try:
        names, addresses = [h.name for h in hosts], {h.name: h.address for h in hosts}
        if link_mbit:
            shaped = shape_links(config, names, link_mbit, uplink_mbit)
            print(f"  tbf at {link_mbit} Mbit/s (uplink {uplink_mbit}) on {' '.join(shaped)}")
            if check:
                check_shaping(config, names, addresses)
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
            figures = {"sent": bridge_sent(config) - sent, "cpu": operator_cpu() - cpu, "wall": wall,
                       "relay": report.timings.get("relay", 0.0), "upload": report.timings["upload"],
                       "release": sum(release.values())}
            figures["other"] = wall - figures["relay"] - figures["upload"]
            print("  phases: " + ", ".join(f"{k} {v:.1f}s" for k, v in report.timings.items()))
            if link_mbit:
                predicted = model(files, fanout, link_mbit * 1e6 / 8, uplink_mbit * 1e6 / 8)
                figures.update({f"model_{k}": v for k, v in predicted.items()})
            return figures

        return asyncio.run(scenario())
    finally:
        lifecycle.down(config, quiet)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="2,8", help="one or two fleet sizes (nodes besides the control plane)")
    parser.add_argument("--fanout", default="2", help="relay fan-outs to run against relay off, e.g. 1,2")
    parser.add_argument("--link-mbit", type=float, default=0.0, help="shape each host's link both ways (tbf)")
    parser.add_argument("--uplink-mbit", type=float, default=0.0, help="the operator's uplink (default: --link-mbit)")
    parser.add_argument("--no-check", action="store_true", help="skip the link check before each shaped apply")
    args = parser.parse_args()
    sizes = [int(n) for n in args.nodes.split(",")]
    fanouts = [int(k) for k in args.fanout.split(",")]
    uplink = args.uplink_mbit or args.link_mbit
    coredns_on_path()
    config = lab_config()
    results: dict[tuple[int, int], dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as work:
        for nodes in sizes:
            for fanout in (0, *fanouts):
                print(f"{nodes} nodes + 1 control plane, relay fan-out {fanout}:", flush=True)
                check = bool(args.link_mbit) and not args.no_check and (nodes, fanout) == (sizes[0], 0)
                results[nodes, fanout] = one_apply(config, Path(work), nodes, fanout, args.link_mbit, uplink, check)
                print(f"  -> {results[nodes, fanout]}", flush=True)
    release = results[sizes[-1], fanouts[-1]]["release"]
    links = f"links shaped to {args.link_mbit:g} Mbit/s, uplink {uplink:g}" if args.link_mbit else "links unshaped"
    print(f"first apply of 1 control-plane host + N nodes (fresh lab hosts; one release: {release / 1e6:.0f} MB, "
          f"every distinct file of the apply once; {links})")
    print(f"{'':<34}{'relay off':>14}" + "".join(f"{f'fan-out {k}':>14}{'off/on':>8}" for k in fanouts))
    for nodes in sizes:
        off = results[nodes, 0]
        for key, label, scale in (("sent", "MB sent by the operator", 1e6), ("cpu", "operator CPU-s", 1),
                                  ("wall", "wall s", 1), ("relay", "relay phase s", 1), ("upload", "upload phase s", 1),
                                  ("other", "other phases s", 1)):
            row = f"{nodes} nodes: {label:<24}{off[key] / scale:>14.1f}"
            for k in fanouts:
                on = results[nodes, k]
                row += f"{on[key] / scale:>14.1f}" + (f"{off[key] / on[key]:>7.2f}x" if on[key] and off[key] else f"{'':>8}")
            print(row)
    if len(sizes) == 2:
        small, large = sizes
        added = large - small
        for fanout in (0, *fanouts):
            a, b = results[small, fanout], results[large, fanout]
            name = f"fan-out {fanout}" if fanout else "relay off"
            print(f"per added node ({name}): {(b['sent'] - a['sent']) / added / 1e6:.1f} MB sent, "
                  f"{(b['cpu'] - a['cpu']) / added:.2f} CPU-s, {(b['wall'] - a['wall']) / added:+.1f} s wall")
    for k in fanouts:
        on = results[sizes[-1], k]
        print(f"fan-out {k}, {sizes[-1]} nodes: the operator sent {on['sent'] / release:.2f}x one release "
              f"(goal <= 1.1x); relay phase {on['relay']:.1f}s, upload {on['upload']:.1f}s")
    if not args.link_mbit:
        return
    print(f"model (docs/fleet.md) against the measurement, {links}; 'other' is each run's own phases that move no "
          "release bytes (inspect, start, wait, addons), added as the constant term")
    print(f"{'':<28}{'relay pred':>11}{'meas':>7}{'ratio':>7}{'upload pred':>12}{'meas':>7}{'ratio':>7}"
          f"{'wall pred':>10}{'meas':>7}{'ratio':>7}")
    for nodes in sizes:
        for fanout in (0, *fanouts):
            r = results[nodes, fanout]
            wall = r["other"] + r["model_relay"] + r["model_upload"]
            relay_cells = (f"{r['model_relay']:>11.1f}{r['relay']:>7.1f}{r['relay'] / r['model_relay']:>6.2f}x"
                           if fanout else f"{'-':>11}{'-':>7}{'':>7}")
            name = f"fan-out {fanout}" if fanout else "relay off"
            print(f"{nodes} nodes, {name:<18}{relay_cells}{r['model_upload']:>12.1f}{r['upload']:>7.1f}"
                  f"{r['upload'] / r['model_upload']:>6.2f}x{wall:>10.1f}{r['wall']:>7.1f}{r['wall'] / wall:>6.2f}x"
                  + (f"  (S = {r['model_relayed'] / 1e6:.0f} MB relayed; rounds: {r['model_rounds']:.0f})"
                     if fanout else ""))


if __name__ == "__main__":
    main()
