"""Readiness probes and the wait loop behind `kubesmith wait`, unit gates, `run` and `status`.

Why its own loop and not curl in a shell (as NixOS did): a probe here never prompts, every
attempt has a timeout, the whole wait has a deadline, failed attempts back off exponentially
with jitter (so a fleet of gates does not hammer a recovering API server in lockstep), and
each failed attempt logs exactly one line that says why.

Probes run through a `ProbeRunner`. `LocalProbeRunner` runs them from this process; a runner
that executes them on another host (over SSH, or through the agent) implements the same
protocol, which is how probes with `run_on` (components bound to 127.0.0.1) are checked.

TLS always uses an explicit `ssl.SSLContext` built from the given CA file only: environment
CA bundles (REQUESTS_CA_BUNDLE, SSL_CERT_FILE) and proxies never apply.
"""

from __future__ import annotations

import asyncio
import errno
import http.client
import json
import os
import random
import secrets
import socket
import ssl
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kubesmith.health.probespec import ProbeSpec, format_probe, parse_probe

if TYPE_CHECKING:
    from tenacity import RetryCallState

Log = Callable[[str], None]


REFUSED = "cannot connect: connection refused"


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One attempt: whether the target was ready, why not, and how long the attempt took."""

    ok: bool
    reason: str
    latency: float
    status: int | None = None
    body: str = ""


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer from a component (status reads versions and etcd state with this)."""

    status: int
    body: str
    latency: float

    def json(self) -> Any:
        return json.loads(self.body)


class ProbeRunner(Protocol):
    """Runs probes somewhere: locally, or (later) on another host over SSH or via the agent."""

    async def check(self, spec: ProbeSpec, timeout: float) -> ProbeResult: ...

    async def request(self, spec: ProbeSpec, method: str, path: str, body: Any = None,
                      timeout: float = 5.0) -> Answer: ...

    async def certificate_expiry(self, spec: ProbeSpec, timeout: float) -> float | None: ...


@dataclass(frozen=True, slots=True)
class WaitPolicy:
    """Deadline and pacing of a wait; `deadline=0` means exactly one attempt.

    The pace follows what the dependency says. Refused connections (nothing listens yet: it is
    about to start, and asking costs it nothing) are retried every `refused_interval`. Once it
    answers but is not ready (starting: an API server's /readyz turns ok a few seconds after it
    listens), probes stay at most `starting_interval` apart for `starting_period`; after that, or
    for a dependency that stays unready, they back off exponentially to `max_interval`."""

    deadline: float = 300.0
    initial_interval: float = 0.1
    max_interval: float = 2.0
    jitter: float = 0.1
    attempt_timeout: float = 5.0
    refused_interval: float = 0.1
    starting_interval: float = 0.25
    starting_period: float = 15.0

    def interval(self, attempt: int, refused: bool, answering_for: float | None) -> float:
        """Seconds to the next attempt (before jitter), after `attempt` attempts; `answering_for` is how
        long the dependency has been answering (None: it never answered)."""
        if refused:
            return self.refused_interval
        backoff = min(self.max_interval, self.initial_interval * 2 ** max(0, attempt - 1))
        if answering_for is not None and answering_for < self.starting_period:
            return min(backoff, self.starting_interval)
        return backoff


@dataclass(frozen=True, slots=True)
class WaitOutcome:
    ready: bool
    attempts: int
    elapsed: float
    last: tuple[ProbeResult, ...]


def tls_context(spec: ProbeSpec) -> ssl.SSLContext:
    """A client context trusting only `spec.ca_file`, presenting the client certificate if any."""
    for path in (spec.ca_file, spec.cert_file, spec.key_file):
        if path and not os.path.exists(path):
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if spec.ca_file:
        context.load_verify_locations(cafile=spec.ca_file)
    if spec.cert_file and spec.key_file:
        context.load_cert_chain(spec.cert_file, spec.key_file)
    return context


class LocalProbeRunner:
    """Probes from this process. A fresh connection per attempt: certificates may have rotated."""

    async def check(self, spec: ProbeSpec, timeout: float) -> ProbeResult:
        started = time.monotonic()
        try:
            if spec.scheme == "tcp":
                await self._connect(spec, timeout)
                return ProbeResult(True, "connected", time.monotonic() - started)
            if spec.scheme == "dns":
                name = spec.path.strip("/")
                addresses = await asyncio.to_thread(dns_query, spec.host, spec.port, name, timeout)
                return ProbeResult(True, f"{name} -> {', '.join(addresses)}", time.monotonic() - started)
            answer = await self.request(spec, "GET", spec.http_path, timeout=timeout)
        except Exception as exc:  # every failure is a reason, never a crash of the wait loop
            return ProbeResult(False, describe_error(exc), time.monotonic() - started)
        ok, reason = judge(spec, answer)
        return ProbeResult(ok, reason, answer.latency, answer.status, answer.body[:2000])

    async def request(self, spec: ProbeSpec, method: str, path: str, body: Any = None,
                      timeout: float = 5.0) -> Answer:
        context = tls_context(spec) if spec.scheme in ("https", "etcd") else None
        started = time.monotonic()
        # the socket's timeout bounds each step; no outer bound, which would also count a thread's wait
        status, text = await asyncio.to_thread(_http_request, spec, context, method, path, body, timeout)
        return Answer(status, text, time.monotonic() - started)

    async def certificate_expiry(self, spec: ProbeSpec, timeout: float) -> float | None:
        """When the certificate the server presents expires (epoch seconds); None for plain probes."""
        if spec.scheme not in ("https", "etcd"):
            return None
        _, writer = await asyncio.wait_for(asyncio.open_connection(
            spec.host, spec.port, ssl=tls_context(spec), server_hostname=spec.server_name or spec.host), timeout)
        try:
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        finally:
            writer.close()
        from cryptography import x509  # here only: `probe` and `wait` start without it (0.1 s)

        return x509.load_der_x509_certificate(der).not_valid_after_utc.timestamp() if der else None

    async def _connect(self, spec: ProbeSpec, timeout: float) -> None:
        _, writer = await asyncio.wait_for(asyncio.open_connection(spec.host, spec.port), timeout)
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass


class _ServerNameConnection(http.client.HTTPSConnection):
    """HTTPS to an address, verifying the certificate for another name (a probe's `servername`)."""

    def __init__(self, host: str, port: int, server_name: str, **options: Any) -> None:
        super().__init__(host, port, **options)
        self.server_name = server_name

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self.server_name)  # type: ignore[attr-defined]


def _http_request(spec: ProbeSpec, context: ssl.SSLContext | None, method: str, path: str, body: Any,
                  timeout: float) -> tuple[int, str]:
    """One request on a fresh connection, blocking (run in a thread). The standard library's client:
    a gate starts a Python process for a handful of GETs, and importing aiohttp cost more CPU than
    the whole probe. No proxies from the environment, no redirects followed."""
    connection = (http.client.HTTPConnection(spec.host, spec.port, timeout=timeout) if context is None else
                  _ServerNameConnection(spec.host, spec.port, spec.server_name or spec.host, timeout=timeout,
                                        context=context))
    try:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        connection.close()


@dataclass(frozen=True, slots=True)
class ProbeOperation:
    """One thing status asks of a component; the unit of a batch run on another host."""

    probe: str  # probe argument with absolute credential paths (as on that host)
    mode: str  # check | request | expiry
    method: str = "GET"
    path: str = "/"
    body: Any = None

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return self.probe, self.mode, self.method, self.path, json.dumps(self.body, sort_keys=True)


@dataclass(frozen=True, slots=True)
class ProbeFailure:
    """The answer to an operation that has no measurement: the probe raised on the host, or the host's
    batch did not run (or the host was not reached). In a batch's JSON (`kubesmith probe`) it is
    {"error": <what went wrong>}, which a reader turns back into this."""

    error: str

    def to_document(self) -> dict[str, Any]:
        return {"error": self.error}

    @staticmethod
    def from_document(document: Any) -> ProbeFailure | None:
        """The failure a batch's answer reports (a ProbeFailure is its own); None for a measurement."""
        if isinstance(document, ProbeFailure):
            return document
        return ProbeFailure(document["error"]) if isinstance(document, dict) and "error" in document else None


BatchAnswer = dict[str, Any] | ProbeFailure  # a measurement as plain data, or why there is none


async def run_operation(runner: ProbeRunner, operation: ProbeOperation, timeout: float) -> BatchAnswer:
    """One operation's answer: a measurement as plain data (the wire format of `kubesmith probe
    --batch`), or a ProbeFailure."""
    spec = parse_probe(operation.probe)
    try:
        if operation.mode == "check":
            result = await runner.check(spec, timeout)
            return {"ok": result.ok, "reason": result.reason, "latency": result.latency, "status": result.status,
                    "body": result.body}
        if operation.mode == "request":
            answer = await runner.request(spec, operation.method, operation.path, operation.body, timeout)
            return {"status": answer.status, "body": answer.body, "latency": answer.latency}
        return {"expiry": await runner.certificate_expiry(spec, timeout)}
    except Exception as exc:  # the reader turns this back into the same failure
        return ProbeFailure(describe_error(exc))


async def run_operations(runner: ProbeRunner, operations: Sequence[ProbeOperation],
                         timeout: float) -> list[BatchAnswer]:
    return list(await asyncio.gather(*(run_operation(runner, op, timeout) for op in operations)))


def batch_document(answers: Sequence[BatchAnswer]) -> list[dict[str, Any]]:
    """The answers as `kubesmith probe` prints them (JSON)."""
    return [answer.to_document() if isinstance(answer, ProbeFailure) else answer for answer in answers]


class RecordedProbeError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class RecordedProbeRunner:
    """A ProbeRunner that answers from results measured elsewhere (a batch run on the host)."""

    results: dict[tuple[str, str, str, str, str], BatchAnswer]

    @classmethod
    def of(cls, operations: Sequence[ProbeOperation], results: Sequence[Any]) -> RecordedProbeRunner:
        """`results`: one answer per operation, as a batch's JSON holds them or as ProbeFailures."""
        return cls({op.key: ProbeFailure.from_document(result) or result for op, result in zip(operations, results)})

    def _lookup(self, spec: ProbeSpec, mode: str, method: str = "GET", path: str = "/",
                body: Any = None) -> dict[str, Any]:
        found = self.results.get(ProbeOperation(format_probe(spec), mode, method, path, body).key)
        if found is None:
            raise RecordedProbeError(f"{mode} {path} of {spec.label} was not measured")
        if isinstance(found, ProbeFailure):
            raise RecordedProbeError(found.error)
        return found

    async def check(self, spec: ProbeSpec, timeout: float) -> ProbeResult:
        try:
            found = self._lookup(spec, "check")
        except RecordedProbeError as exc:
            return ProbeResult(False, str(exc), 0.0)
        return ProbeResult(bool(found["ok"]), str(found["reason"]), float(found["latency"]), found.get("status"),
                           str(found.get("body", "")))

    async def request(self, spec: ProbeSpec, method: str, path: str, body: Any = None,
                      timeout: float = 5.0) -> Answer:
        found = self._lookup(spec, "request", method, path, body)
        return Answer(int(found["status"]), str(found["body"]), float(found["latency"]))

    async def certificate_expiry(self, spec: ProbeSpec, timeout: float) -> float | None:
        expiry = self._lookup(spec, "expiry")["expiry"]
        return float(expiry) if expiry is not None else None


def judge(spec: ProbeSpec, answer: Answer) -> tuple[bool, str]:
    """Whether an HTTP answer means ready: 200, and for etcd a JSON body with health "true"."""
    if answer.status != 200:
        first = answer.body.strip().splitlines()[0][:200] if answer.body.strip() else ""
        return False, f"HTTP {answer.status}" + (f": {first}" if first else "")
    if spec.scheme != "etcd":
        return True, "HTTP 200"
    try:
        health = answer.json().get("health")
    except (ValueError, AttributeError):
        return False, f"etcd /health answered a non-JSON body: {answer.body[:100]!r}"
    if str(health).lower() != "true":
        return False, f"etcd reports health={health!r}" + _etcd_reason(answer)
    return True, "etcd healthy"


def _etcd_reason(answer: Answer) -> str:
    try:
        reason = answer.json().get("reason")
    except ValueError:
        return ""
    return f" ({reason})" if reason else ""


def describe_error(exc: BaseException) -> str:
    """One line that tells an operator what went wrong (no traceback)."""
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return REFUSED
    if isinstance(exc, FileNotFoundError):
        return f"credential file missing: {exc.filename}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS: server certificate not trusted ({exc.verify_message or exc.reason or exc})"
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or exc}"
    if isinstance(exc, (http.client.RemoteDisconnected, http.client.IncompleteRead, EOFError)):
        return "server closed the connection (client certificate rejected?)"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return "connection reset (client certificate rejected?)"
    if isinstance(exc, http.client.HTTPException):
        return f"not an HTTP answer ({type(exc).__name__})"
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}"
    if isinstance(exc, RecordedProbeError):  # measured on the host: its text already says what went wrong
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def all_refused(results: Sequence[ProbeResult]) -> bool:
    """Whether nothing listened at any probed address: the dependency has not started yet."""
    return bool(results) and all(not r.ok and r.reason == REFUSED for r in results)


async def check_all(runner: ProbeRunner, specs: Sequence[ProbeSpec], timeout: float) -> tuple[ProbeResult, ...]:
    """One attempt at every probe, concurrently."""
    return tuple(await asyncio.gather(*(runner.check(spec, timeout) for spec in specs)))


async def wait_ready(specs: Sequence[ProbeSpec], runner: ProbeRunner, policy: WaitPolicy, *,
                     any_of: bool = False, log: Log = lambda line: None) -> WaitOutcome:
    """Probe until all (or, with `any_of`, one) of `specs` are ready or the deadline passes."""
    from tenacity import AsyncRetrying, retry_if_result, stop_after_delay  # only `wait` loops: `probe` asks once

    started = time.monotonic()
    attempts = 0
    last: tuple[ProbeResult, ...] = ()
    first_answer: float | None = None

    async def attempt() -> bool:
        nonlocal attempts, last, first_answer
        attempts += 1
        remaining = policy.deadline - (time.monotonic() - started)
        last = await check_all(runner, specs, max(0.2, min(policy.attempt_timeout, remaining)))
        if first_answer is None and not all_refused(last):
            first_answer = time.monotonic()
        ready = any(r.ok for r in last) if any_of else all(r.ok for r in last)
        if not ready:
            elapsed = time.monotonic() - started
            reasons = "; ".join(f"{spec.label}: {result.reason}"
                                for spec, result in zip(specs, last) if not result.ok)
            log(f"not ready (attempt {attempts}, {elapsed:.1f}s of {policy.deadline:g}s): {reasons}")
        return ready

    def capped_wait(state: RetryCallState) -> float:
        now = time.monotonic()
        answering_for = None if first_answer is None else now - first_answer
        pause = policy.interval(state.attempt_number, all_refused(last), answering_for)
        pause += random.uniform(0, policy.jitter * pause)
        return max(0.0, min(pause, policy.deadline - (now - started)))

    retrying = AsyncRetrying(stop=stop_after_delay(policy.deadline), wait=capped_wait,
                             retry=retry_if_result(lambda ready: not ready), retry_error_callback=lambda s: False,
                             reraise=True)
    ready = await retrying(attempt)
    return WaitOutcome(bool(ready), attempts, time.monotonic() - started, last)


def dns_query(server: str, port: int, name: str, timeout: float) -> list[str]:
    """The IPv4 addresses one UDP A query for `name` gets from `server`; raises OSError when none."""
    ident = secrets.randbelow(1 << 16)
    question = b"".join(bytes([len(label)]) + label.encode() for label in name.split(".") if label) + b"\0"
    packet = struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0) + question + struct.pack(">HH", 1, 1)
    family = socket.AF_INET6 if ":" in server else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(packet, (server, port))
        while True:
            reply, _ = sock.recvfrom(4096)
            if len(reply) >= 12 and struct.unpack(">H", reply[:2])[0] == ident:
                break
    flags, _, answers = struct.unpack(">HHH", reply[2:8])
    if flags & 0xF:
        raise OSError(f"{name}: the server answered rcode {flags & 0xF} ({'NXDOMAIN' if flags & 0xF == 3 else 'error'})")
    offset = 12 + len(question) + 4
    found: list[str] = []
    for _ in range(answers):
        offset = _skip_name(reply, offset)
        kind, _, _, length = struct.unpack(">HHIH", reply[offset:offset + 10])
        offset += 10
        if kind == 1 and length == 4:
            found.append(socket.inet_ntoa(reply[offset:offset + 4]))
        offset += length
    if not found:
        raise OSError(f"{name}: no address in the answer")
    return found


def _skip_name(message: bytes, offset: int) -> int:
    """The offset after a (possibly compressed) name in a DNS message."""
    while True:
        length = message[offset]
        if length & 0xC0 == 0xC0:
            return offset + 2
        if length == 0:
            return offset + 1
        offset += length + 1
