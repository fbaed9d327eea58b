"""Signing throughput of `kubesmith ca serve` against a real `cfssl serve` (baseline), in one run.

Same CA (ECDSA P-256), same transport (HTTPS with the same serving certificate), same endpoint
(`/api/v1/cfssl/authsign` with the same HMAC key), same pre-generated CSRs (ECDSA P-256, one per
request so none is a replay), same client load: aiohttp, 32 concurrent requests over 32 pooled
connections, same logging (kubesmith and cfssl log every issuance: cfssl at its default level,
to a file).
Prints certificates/s of each, the CPU time each server spends per certificate (its whole process
tree, from psutil: the client shares the two cores, so CPU per certificate is what decides the
rate), the CPU each spends per request of the same load on `/api/v1/cfssl/info` (no signing:
what HTTPS, HTTP and JSON cost alone), the CPU of the signing work alone in-process (CSR parse
and signature check, then the certificate with `cryptography`'s builder, warm caches: what
kubesmith's process spends on crypto at best), the machine's load average and the ratio
kubesmith / cfssl. There is no target: `ca serve` is one Python process (a cluster CA signs a
handful of certificates per node), cfssl a multi-threaded Go server; the ratio says what that
choice costs.

    pip install -e '.[bench]'
    python bench/ca_bench.py [--requests 10000] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

try:
    import psutil
except ModuleNotFoundError:
    raise SystemExit("ca_bench needs psutil: pip install -e '.[bench]'") from None

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import aiohttp  # noqa: E402
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives.serialization import Encoding  # noqa: E402
from net_support import free_port, listening  # noqa: E402

from kubesmith.ca import client as ca_client, policy as ca_policy, tokens  # noqa: E402
from kubesmith.pki import issue, keys  # noqa: E402
from kubesmith.pki.store import utc_now  # noqa: E402
from kubesmith.vocabulary.model import CertificateRequest  # noqa: E402

NODE = "bench"
PROFILE = "kubelet-client"
INFO_PATH, INFO_BODY = "/api/v1/cfssl/info", b'{"label": ""}'


def make_ca(directory: Path) -> dict[str, Path]:
    now = dt.datetime.now(dt.timezone.utc)
    ca_key = keys.generate("ecdsa-p256")
    ca_cert = issue.new_ca("kubernetes-ca", ca_key, 3650, now)
    tls_key = keys.generate("ecdsa-p256")
    serving = CertificateRequest("ca-service-serving", "kubernetes-ca", "kubesmith-ca-service", (),
                                 ("digital signature", "key encipherment", "server auth"), ("localhost",),
                                 ("127.0.0.1",), "", "", "root", "root")
    tls_cert = issue.new_leaf(serving, tls_key.public_key(), ca_cert, ca_key, 30, now)
    paths = {name: directory / f"{name}.pem" for name in ("ca", "ca-key", "tls", "tls-key")}
    paths["ca"].write_bytes(ca_cert.public_bytes(Encoding.PEM))
    paths["ca-key"].write_bytes(keys.to_pem(ca_key))
    paths["tls"].write_bytes(tls_cert.public_bytes(Encoding.PEM))
    paths["tls-key"].write_bytes(keys.to_pem(tls_key))
    return paths


def bodies(count: int, key: bytes) -> list[bytes]:
    """Pre-built authsign bodies, one fresh CSR each (CSR generation is not measured)."""
    out = []
    for _ in range(count):
        csr = ca_client.build_csr(keys.generate("ecdsa-p256"),
                                  ca_client.Subject(f"system:node:{NODE}", ("system:nodes",)))
        request = ca_client.sign_request_bytes(csr, PROFILE, None)
        out.append(json.dumps(ca_client.authsign_body(key, request)).encode())
    return out


def given_up(process: subprocess.Popen, message: str) -> NoReturn:  # type: ignore[type-arg]
    """End a server that did not start and the bench with `message`."""
    process.kill()
    process.wait()
    raise SystemExit(message)


def wait_port(port: int, process: subprocess.Popen, deadline: float = 20) -> None:  # type: ignore[type-arg]
    if not listening(port, process, deadline):
        given_up(process, f"server on port {port} did not start (exit status {process.poll()})")


def start_kubesmith(work: Path, paths: dict[str, Path]) -> tuple[subprocess.Popen, str, str]:  # type: ignore[type-arg]
    """`kubesmith ca serve` on a free port; its URL from its `serving on URL` line."""
    kubesmith = shutil.which("kubesmith") or str(Path(sys.executable).with_name("kubesmith"))
    log_path = work / "kubesmith.log"
    with log_path.open("w") as log:
        process = subprocess.Popen([kubesmith, "ca", "serve", "--listen", "127.0.0.1", "--port", "0",
                                    "--ca-cert", str(paths["ca"]), "--ca-key", str(paths["ca-key"]),
                                    "--tls-cert", str(paths["tls"]), "--tls-key", str(paths["tls-key"]),
                                    "--state-dir", str(work / "state")], stdout=log, stderr=subprocess.STDOUT)
    stop = time.monotonic() + 20
    while time.monotonic() < stop:
        match = re.search(r"serving on (https://\S+)", log_path.read_text())
        if match:
            return process, match.group(1), "1 process"
        if process.poll() is not None:
            given_up(process, f"kubesmith ca serve exited with {process.returncode}: see {log_path}")
        time.sleep(0.05)
    given_up(process, "kubesmith ca serve did not start")


def start_cfssl(work: Path, paths: dict[str, Path], auth_hex: str) -> tuple[subprocess.Popen, str, str]:
    config = {"signing": {"default": {"usages": ["signing", "key encipherment", "client auth"], "expiry": "8760h",
                                      "auth_key": "key"},
                          "profiles": {PROFILE: {"usages": ["signing", "key encipherment", "client auth"],
                                                 "expiry": "8760h", "auth_key": "key"}}},
              "auth_keys": {"key": {"type": "standard", "key": auth_hex}}}
    (work / "cfssl.json").write_text(json.dumps(config))
    port = free_port()
    log = (work / "cfssl.log").open("w")
    process = subprocess.Popen(["cfssl", "serve", "-address", "127.0.0.1", "-port", str(port), "-ca", str(paths["ca"]),
                                "-ca-key", str(paths["ca-key"]), "-config", str(work / "cfssl.json"),
                                "-tls-cert", str(paths["tls"]), "-tls-key", str(paths["tls-key"]),
                                ], stdout=log, stderr=subprocess.STDOUT)
    wait_port(port, process)
    return process, f"https://127.0.0.1:{port}", f"1 process, GOMAXPROCS {os.environ.get('GOMAXPROCS', os.cpu_count())}"


async def load(url: str, payloads: list[bytes], concurrency: int, ca_pem: bytes,
               path: str = ca_client.AUTHSIGN_PATH) -> tuple[float, int]:
    """(seconds, failures) to POST every payload to `path` with `concurrency` requests in flight."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    connector = aiohttp.TCPConnector(limit=concurrency, ssl=context)
    queue = list(reversed(payloads))
    failures = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal failures
        while queue:
            body = queue.pop()
            async with session.post(url + path, data=body,
                                    headers={"Content-Type": "application/json"}) as answer:
                document = await answer.json(content_type=None)
                if answer.status != 200 or not document.get("success"):
                    failures += 1

    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        return time.perf_counter() - started, failures


def tree_cpu_seconds(process: psutil.Process) -> float:
    """User + system CPU of a server and its child processes so far."""
    total = 0.0
    for member in (process, *process.children(recursive=True)):
        with contextlib.suppress(psutil.NoSuchProcess):
            times = member.cpu_times()
            total += times.user + times.system
    return total


def timed_load(url: str, tree: psutil.Process, payloads: list[bytes], concurrency: int, ca_pem: bytes,
               path: str = ca_client.AUTHSIGN_PATH) -> tuple[float, float]:
    """(seconds, server CPU seconds per request) to send every payload to `path`; any failure ends the bench."""
    before = tree_cpu_seconds(tree)
    seconds, failures = asyncio.run(load(url, payloads, concurrency, ca_pem, path))
    if failures:
        raise SystemExit(f"{url}{path}: {failures} requests failed")
    return seconds, (tree_cpu_seconds(tree) - before) / len(payloads)


def measure(url: str, server: int, payloads: list[bytes], warmup: list[bytes], concurrency: int,
            ca_pem: bytes) -> tuple[float, float, float]:
    """(certificates/s, server CPU seconds per certificate, server CPU seconds per request of the
    same load without signing: `/info`, what HTTPS, HTTP and JSON cost alone)."""
    asyncio.run(load(url, warmup, concurrency, ca_pem))
    tree = psutil.Process(server)
    seconds, per_certificate = timed_load(url, tree, payloads, concurrency, ca_pem)
    _, per_info = timed_load(url, tree, [INFO_BODY] * len(payloads), concurrency, ca_pem, INFO_PATH)
    return len(payloads) / seconds, per_certificate, per_info


def signing_floor(paths: dict[str, Path], payloads: list[bytes]) -> float:
    """CPU seconds per certificate of parsing and checking the sign request and issuing, in-process."""
    ca_cert = x509.load_pem_x509_certificate(paths["ca"].read_bytes())
    ca_key = keys.load(paths["ca-key"].read_bytes(), "ca")
    raws = [ca_policy.decode_b64(json.loads(body)["request"], "request") for body in payloads]
    started = time.process_time()
    for raw in raws:
        request = ca_policy.parse_sign_request(raw)
        grant = ca_policy.node_grant(NODE, (), request, service_sans=frozenset())
        ca_policy.sign(grant, request.public_key, ca_cert, ca_key, 365 * 86400.0, utc_now())
    return (time.process_time() - started) / len(raws)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=300)
    options = parser.parse_args()
    if shutil.which("cfssl") is None:
        raise SystemExit("cfssl not found (Debian golang-cfssl): the baseline is required")
    with tempfile.TemporaryDirectory() as temp:
        work = Path(temp)
        paths = make_ca(work)
        ca_key = keys.load(paths["ca-key"].read_bytes(), "ca")
        created = tokens.TokenStore(work / "state" / "tokens.json", ca_key).create(3600, NODE)
        key = tokens.auth_key(created.token)
        total = options.requests + options.warmup
        print(f"pre-generating {2 * total} CSRs (ECDSA P-256) ...", file=sys.stderr)
        ours, theirs = bodies(total, key), bodies(total, key)
        ca_pem = paths["ca"].read_bytes()
        results: dict[str, float] = {}
        cpu: dict[str, float] = {}
        transport: dict[str, float] = {}
        shapes: dict[str, str] = {}
        for name, start, payloads in (("cfssl serve 1.2", lambda: start_cfssl(work, paths, key.hex()), theirs),
                                      ("kubesmith ca serve", lambda: start_kubesmith(work, paths), ours)):
            process, url, shapes[name] = start()
            try:
                results[name], cpu[name], transport[name] = measure(
                    url, process.pid, payloads[options.warmup:], payloads[:options.warmup], options.concurrency, ca_pem)
            finally:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        floor = signing_floor(paths, ours[: min(len(ours), 2000)])
    print(f"authsign throughput, ECDSA P-256, HTTPS, {options.concurrency} concurrent, {options.requests} requests, "
          f"{os.cpu_count()} CPUs, load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}:")
    for name, rate in results.items():
        print(f"  {name:20s} {rate:9.0f} certificates/s   server CPU {cpu[name] * 1e6:5.0f} us/certificate   "
              f"({shapes[name]})")
    print("  server CPU per request of the same load without signing (/info: HTTPS, HTTP, JSON): "
          + ", ".join(f"{name.split()[0]} {seconds * 1e6:.0f} us" for name, seconds in transport.items()))
    print(f"  signing work alone (in-process, cryptography): {floor * 1e6:.0f} us/certificate")
    ratio = results["kubesmith ca serve"] / results["cfssl serve 1.2"]
    print(f"  ratio kubesmith / cfssl: {ratio:.2f}x")


if __name__ == "__main__":
    main()
