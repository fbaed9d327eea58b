"""`kubesmith wait` against real TLS servers on loopback: trust, client certificates, deadline, logs."""

from __future__ import annotations

import asyncio
import os
import re
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from kubesmith.health.probespec import ProbeSpec, ProbeSyntaxError, format_probe, parse_probe
from net_support import free_port
from tls_support import Pair, CaFiles, make_ca



def kubesmith(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    code = "import sys; from kubesmith.cli import main; sys.argv[0] = 'kubesmith'; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


@dataclass(frozen=True)
class Pki:
    good: CaFiles
    other: CaFiles
    server: Pair
    client: Pair
    stranger: Pair  # client certificate from the other CA


@pytest.fixture()
def pki(tmp_path: Path) -> Pki:
    good = make_ca(tmp_path / "good", "good-ca")
    other = make_ca(tmp_path / "other", "other-ca")
    return Pki(good, other, good.issue(tmp_path / "good", "server", server=True),
               good.issue(tmp_path / "good", "client", client=True),
               other.issue(tmp_path / "other", "stranger", client=True))


@dataclass
class Server:
    port: int
    requests: int = 0
    # Why a stand-in: no real component answers 503 a chosen number of times and then 200 on demand.
    fail_first: int = 0  # answer 503 to this many requests, then 200
    body: str = "ok"


def serve(server: Server, context: ssl.SSLContext | None) -> Iterator[Server]:
    """An aiohttp server on 127.0.0.1 in its own thread and loop."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, web.AppRunner] = {}

    async def handle(request: web.Request) -> web.Response:
        server.requests += 1
        if server.requests <= server.fail_first:
            return web.Response(status=503, text="[-]etcd failed: not yet\n")
        return web.Response(text=server.body)

    async def start() -> None:
        app = web.Application()
        app.router.add_get("/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", server.port, ssl_context=context).start()
        holder["runner"] = runner
        ready.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(holder["runner"].cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def mtls_context(pki: Pki) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server.cert, pki.server.key)
    context.load_verify_locations(pki.good.cert)
    context.verify_mode = ssl.CERT_REQUIRED
    return context


@pytest.fixture()
def tls_server(pki: Pki) -> Iterator[Server]:
    yield from serve(Server(free_port()), mtls_context(pki))


def probe(port: int, ca: Path, client: Pair | None, path: str = "/readyz", scheme: str = "https") -> str:
    spec = ProbeSpec(scheme, "127.0.0.1", port, path, str(ca),  # type: ignore[arg-type]
                     str(client.cert) if client else None, str(client.key) if client else None)
    return format_probe(spec)


def attempt_lines(stderr: str) -> list[int]:
    return [int(n) for n in re.findall(r"not ready \(attempt (\d+),", stderr)]


def test_right_ca_and_client_certificate_pass(tls_server: Server, pki: Pki) -> None:
    result = kubesmith("wait", "--deadline", "10", probe(tls_server.port, pki.good.cert, pki.client))
    assert result.returncode == 0, result.stderr
    assert attempt_lines(result.stderr) == []


def test_wrong_ca_fails_with_one_line_per_attempt_and_exit_4(tls_server: Server, pki: Pki) -> None:
    result = kubesmith("wait", "--deadline", "1", "--max-interval", "0.2",
                       probe(tls_server.port, pki.other.cert, pki.client))
    assert result.returncode == 4
    attempts = attempt_lines(result.stderr)
    assert len(attempts) >= 2 and attempts == list(range(1, len(attempts) + 1))
    failed = [line for line in result.stderr.splitlines() if "not ready (attempt" in line]
    assert all("certificate" in line and "TLS" in line for line in failed), failed
    assert "error: not ready after" in result.stderr


def test_environment_ca_bundles_do_not_apply(tls_server: Server, pki: Pki) -> None:
    env = {"SSL_CERT_FILE": str(pki.good.cert), "REQUESTS_CA_BUNDLE": str(pki.good.cert),
           "CURL_CA_BUNDLE": str(pki.good.cert), "HTTPS_PROXY": "http://127.0.0.1:1"}
    result = kubesmith("wait", "--deadline", "0", probe(tls_server.port, pki.other.cert, pki.client), env=env)
    assert result.returncode == 4


def test_client_certificate_from_another_ca_is_refused(tls_server: Server, pki: Pki) -> None:
    assert kubesmith("wait", "--deadline", "0", probe(tls_server.port, pki.good.cert, pki.stranger)).returncode == 4
    assert kubesmith("wait", "--deadline", "0", probe(tls_server.port, pki.good.cert, None)).returncode == 4


def test_waits_through_503_until_ready(tls_server: Server, pki: Pki) -> None:
    tls_server.fail_first = 3
    result = kubesmith("wait", "--deadline", "30", "--max-interval", "0.2",
                       probe(tls_server.port, pki.good.cert, pki.client))
    assert result.returncode == 0, result.stderr
    assert attempt_lines(result.stderr) == [1, 2, 3]
    assert "HTTP 503: [-]etcd failed: not yet" in result.stderr


def test_relative_credentials_resolve_under_pki_dir(tls_server: Server, pki: Pki) -> None:
    argument = f"https://127.0.0.1:{tls_server.port}/readyz?ca=good-ca.crt&cert=client.crt&key=client.key"
    assert kubesmith("wait", "--deadline", "5", "--pki-dir", str(pki.good.cert.parent), argument).returncode == 0
    missing = kubesmith("wait", "--deadline", "0", "--pki-dir", "/nonexistent", argument)
    assert missing.returncode == 4 and "credential file missing: /nonexistent/good-ca.crt" in missing.stderr


def test_etcd_probe_needs_health_true(pki: Pki) -> None:
    for body, expected in (('{"health":"false","reason":"RAFT NO LEADER"}', 4), ('{"health":"true","reason":""}', 0)):
        for server in serve(Server(free_port(), body=body), mtls_context(pki)):
            argument = probe(server.port, pki.good.cert, pki.client, path="", scheme="etcd")
            result = kubesmith("wait", "--deadline", "0", argument)
            assert result.returncode == expected, result.stderr
            if expected:
                assert "RAFT NO LEADER" in result.stderr


def test_any_passes_when_one_of_several_is_ready(tls_server: Server, pki: Pki) -> None:
    dead = f"tcp://127.0.0.1:{free_port()}"
    good = probe(tls_server.port, pki.good.cert, pki.client)
    assert kubesmith("wait", "--deadline", "5", "--any", dead, good).returncode == 0
    assert kubesmith("wait", "--deadline", "0", dead, good).returncode == 4


def test_tcp_deadline_exit_code() -> None:
    result = kubesmith("wait", "--deadline", "0.5", f"tcp://127.0.0.1:{free_port()}")
    assert result.returncode == 4
    assert "connection refused" in result.stderr


@pytest.mark.parametrize("argument", ["ftp://x:1", "https://127.0.0.1:6443/readyz", "tcp://127.0.0.1",
                                      "https://h:1/?ca=a&cert=b", "https://h:1/?ca=a&bogus=1", "http://h:1/?ca=x"])
def test_bad_probe_is_a_usage_error(argument: str) -> None:
    with pytest.raises(ProbeSyntaxError):
        parse_probe(argument)
    result = kubesmith("wait", argument)
    assert result.returncode == 2 and "Traceback" not in result.stderr


def test_probe_argument_round_trips() -> None:
    spec = ProbeSpec("https", "::1", 6443, "/readyz", "ca dir/ca.crt", "/a/c&d.crt", "/a/k=1.key", "kubernetes")
    assert parse_probe(format_probe(spec)) == spec


def test_the_pace_follows_what_the_dependency_says() -> None:
    from kubesmith.health.wait import WaitPolicy

    policy = WaitPolicy(initial_interval=0.1, max_interval=2.0, refused_interval=0.1, starting_interval=0.25,
                        starting_period=15.0)
    # nothing listens yet: the same short pause however long it has been
    assert [policy.interval(n, True, None) for n in (1, 5, 50)] == [0.1, 0.1, 0.1]
    # answering but not ready: backoff grows, but never past the starting interval for a while
    assert [policy.interval(n, False, 1.0) for n in (1, 2, 3, 8)] == [0.1, 0.2, 0.25, 0.25]
    # still unready after the starting period, or unready without ever having been refused: back off to the cap
    assert [policy.interval(n, False, 20.0) for n in (1, 3, 5, 9)] == [0.1, 0.4, 1.6, 2.0]
    assert policy.interval(9, False, None) == 2.0


def test_only_refused_connections_count_as_not_started() -> None:
    from kubesmith.health.wait import REFUSED, ProbeResult, all_refused

    refused = ProbeResult(False, REFUSED, 0.001)
    starting = ProbeResult(False, "HTTP 500: [-]poststarthook/rbac failed", 0.01, 500)
    assert all_refused([refused, refused])
    assert not all_refused([refused, starting]) and not all_refused([]) and not all_refused([starting])


def test_a_probe_failure_crosses_the_batch_as_its_error_and_reads_back(tmp_path: Path) -> None:
    """A failed operation is a ProbeFailure on the host, {"error": ...} in the batch's JSON, and the
    same failure again where status replays the batch; a measurement passes as plain data."""
    from kubesmith.health.wait import (LocalProbeRunner, ProbeFailure, ProbeOperation, RecordedProbeRunner,
                                       batch_document, run_operations)

    missing = tmp_path / "ca.crt"
    operations = [ProbeOperation(f"https://127.0.0.1:{free_port()}/?ca={missing}", "expiry"),
                  ProbeOperation(f"tcp://127.0.0.1:{free_port()}", "check")]
    answers = asyncio.run(run_operations(LocalProbeRunner(), operations, 1.0))
    assert answers[0] == ProbeFailure(f"credential file missing: {missing}") and isinstance(answers[1], dict)
    document = batch_document(answers)
    assert document[0] == {"error": f"credential file missing: {missing}"} and document[1] is answers[1]
    replayed = RecordedProbeRunner.of(operations, document)
    assert replayed.results[operations[0].key] == answers[0] and replayed.results[operations[1].key] == answers[1]
    result = asyncio.run(replayed.check(parse_probe(f"https://127.0.0.1:1/?ca={missing}"), 1.0))
    assert not result.ok and "was not measured" in result.reason
    with pytest.raises(Exception, match="credential file missing"):
        asyncio.run(replayed.certificate_expiry(parse_probe(operations[0].probe), 1.0))
    assert ProbeFailure.from_document({"ok": True}) is None and ProbeFailure.from_document([]) is None
