"""`kubesmith ca serve`: the cluster CA as an HTTPS service, compatible with cfssl 1.2 clients.

Endpoints:

* `POST /api/v1/cfssl/authsign` - cfssl's authenticated sign: `{"token": b64(HMAC-SHA256(key,
  request)), "request": b64(request)}`, where key is a join token's auth key (see `tokens`).
  Signs what the token's scope allows (`policy.node_grant`); refuses modified requests (HMAC
  mismatch) and replayed ones (the digests of accepted requests are kept until their token
  expires, in `ca-replays.db` in the state directory, so a replay is refused after a restart too).
* `POST /api/v1/kubesmith/authcheck` - a join's requests, checked together and signed never: the
  body is authsign's with `request` = JSON `{"requests": [b64(sign request), ...]}`. 200 when the
  token would have every one signed (`policy.check_join`), else the first refusal. `kubesmith
  join` asks before its first authsign, so a request outside the token's scope (an `--address`
  the token does not cover) wastes no issuance. Nothing is bound or claimed: the same requests are
  then signed one by one. Authenticated and slowed down exactly as authsign.
* `GET|POST /api/v1/cfssl/info` - the signing CA certificate, usages and expiry (cfssl's shape).
* `POST /api/v1/kubesmith/renew` - renewal for a host's agent, authenticated by its agent client
  certificate over mutual TLS; renews only that host's certificates (`policy.renewal_grant`).
* `GET /healthz` - "ok" (readiness probe of the unit, `kube-ca-online.target`).

Answers use cfssl's envelope `{"success", "result", "errors": [{"code", "message"}], "messages"}`;
a bad token is HTTP 400 `invalid token`, as cfssl answers it.

One process: a cluster CA signs a handful of certificates per node, which one event loop does
thousands of times over (`bench/ca_bench.py`); systemd or `run`'s supervisor restarts it.
Everything from the token check to the signature runs without yielding to the event loop, so a
token revoked while a request waited (for its slow-down slot) signs nothing, and no other request
can slip in between the check of a token and its use.

Repeated failed authentication (a MAC that matches no active token: a guess) from one client
address is slowed down (`Throttle`): each failure doubles a per-address penalty (bounded by
`max_failed_auth_delay`) that the failing answer waits out, and the address is then served one
request at a time, each in its own slot, the slots as far apart as the penalties would be if each
request failed; so a burst gets no more checks than requests sent one by one, and a request whose
slot would lie beyond the bound is refused with its token unchecked (HTTP 429, `Retry-After`).
The waits are `asyncio.sleep`s, so one client's penalty never delays another.

Every issuance is logged as one line (logger `kubesmith.ca`): client address, token id or agent
host, profile, subject, SANs, serial and expiry. The serving certificate is reloaded when its file
changes (the agent renews it), so renewal needs no restart of this service.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import os
import signal
import socket
import sqlite3
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from kubesmith.apiclient import ApiError, Credentials, api_request
from kubesmith.ca import policy, tokens
from kubesmith.ca.policy import Grant, PolicyError, SignRequest
from kubesmith.durations import format_duration
from kubesmith.fsutil import SMALL_FILE_BYTES, check_regular, read_regular
from kubesmith.pki import keys
from kubesmith.pki.keys import PrivateKey
from kubesmith.pki.store import utc_now
from kubesmith.settings import CaServiceConfig
from kubesmith.urls import url_host

LOG = logging.getLogger("kubesmith.ca")
MAX_BODY = 64 * 1024
MAX_TRACKED_ADDRESSES = 10_000


def penalty(failures: int, base: float, maximum: float) -> float:
    """The wait after `failures` consecutive failed authentications: doubles per failure, bounded."""
    return min(maximum, base * 2 ** min(failures - 1, 30)) if failures > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Admission:
    """`Throttle.admit`'s answer for one request."""

    wait: float  # seconds until the request's slot
    penalized: bool  # its address failed recently (a success clears that)
    queued: bool = True  # False: the address's queued requests fill the slots up to the bound; refuse it


FREE = Admission(0.0, penalized=False)


@dataclass(slots=True)
class _Address:
    failures: int
    last: float  # time of the last failure
    next_slot: float  # when the next request from the address may be looked at
    step: float  # the gap after that slot


class Throttle:
    """The failed-authentication slow-down, per client address, in this process's memory.

    An address is forgotten after a quiet spell of ten times the bound (it starts again from the
    first penalty), and beyond MAX_TRACKED_ADDRESSES the quietest ones go first.
    """

    def __init__(self, base: float, maximum: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.base, self.maximum, self._clock = base, maximum, clock
        self.forget_after = max(maximum * 10, 1.0)
        self._addresses: dict[str, _Address] = {}

    def admit(self, address: str) -> Admission:
        """When a request from `address` may be looked at: at once for an address without recent
        failures; otherwise at the next free slot, and the slot after it lies as far on as the
        penalty would be if this request failed too."""
        now = self._clock()
        state = self._current(address, now)
        if state is None:
            return FREE
        slot = max(now, state.next_slot)
        if slot - now > self.maximum:
            return Admission(slot - now, penalized=True, queued=False)
        state.next_slot, state.step = slot + state.step, min(self.maximum, 2 * state.step)
        return Admission(slot - now, penalized=True)

    def failed(self, address: str) -> float:
        """Count one more failure for `address`; the new penalty, which also keeps the address's
        next slot at least that far away."""
        now = self._clock()
        state = self._current(address, now) or _Address(0, now, now, 0.0)
        state.failures += 1
        state.last = now
        wait = penalty(state.failures, self.base, self.maximum)
        state.next_slot = max(state.next_slot, now + wait)
        state.step = max(state.step, penalty(state.failures + 1, self.base, self.maximum))
        self._addresses[address] = state
        self._bound()
        return wait

    def succeeded(self, address: str) -> None:
        self._addresses.pop(address, None)

    def _current(self, address: str, now: float) -> _Address | None:
        state = self._addresses.get(address)
        if state is not None and now - state.last > self.forget_after:
            del self._addresses[address]
            return None
        return state

    def _bound(self) -> None:
        if len(self._addresses) > MAX_TRACKED_ADDRESSES:
            quietest = sorted(self._addresses, key=lambda address: self._addresses[address].last)
            for address in quietest[: len(self._addresses) - MAX_TRACKED_ADDRESSES]:
                del self._addresses[address]


class ReplayMemory:
    """The digests of accepted authsign requests, until their token expires: SQLite in the state
    directory (mode 0600), so a replay is refused across restarts; one connection, this process's.
    Claims are not fsynced one by one (WAL, synchronous=NORMAL: a restart keeps them, a power
    loss may take the last few): an fsync per certificate cost a quarter of the signing rate."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        self._clock = clock
        self._next_prune = 0.0
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS replays (digest BLOB PRIMARY KEY, token_id TEXT NOT NULL, "
                         "expires REAL NOT NULL) WITHOUT ROWID")

    def claim(self, request: bytes, token_id: str, expires: float) -> bool:
        """Remember an accepted request; False if it was accepted before (a replay)."""
        self._prune()
        try:
            self._db.execute("INSERT INTO replays (digest, token_id, expires) VALUES (?, ?, ?)",
                             (hashlib.sha256(request).digest(), token_id, expires))
        except sqlite3.IntegrityError:
            return False
        return True

    def close(self) -> None:
        self._db.close()

    def _prune(self) -> None:
        """Forget the replays of expired tokens, at most once a minute."""
        now = self._clock()
        if now >= self._next_prune:
            self._next_prune = now + 60.0
            self._db.execute("DELETE FROM replays WHERE expires <= ?", (now,))


class CaService:
    """The signing state of `ca serve` and its safety duties: token store, replay memory, slow-down."""

    def __init__(self, config: CaServiceConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.ca_cert = x509.load_pem_x509_certificate(read_regular(config.ca_cert, SMALL_FILE_BYTES, "a certificate"))
        self.ca_cert_pem = self.ca_cert.public_bytes(Encoding.PEM)
        self.ca_key: PrivateKey = keys.load(read_regular(config.ca_key, SMALL_FILE_BYTES, "a private key"),
                                            str(config.ca_key))
        if not keys.same_public_key(self.ca_cert.public_key(), self.ca_key.public_key()):
            raise ValueError(f"{config.ca_key} does not belong to {config.ca_cert}")
        self.tokens = tokens.TokenStore(config.token_file, self.ca_key)
        self.service_sans = policy.normalized_sans(config.service_sans)
        self.replays = ReplayMemory(config.state_dir / "ca-replays.db")
        self.throttle = Throttle(config.failed_auth_delay, config.max_failed_auth_delay, clock)

    def issue(self, grant: Grant, request: SignRequest, who: str, client: str) -> str:
        """Sign, and log the issuance in one line. `who`: token:<id> or agent:<host>."""
        cert = policy.sign(grant, request.public_key, self.ca_cert, self.ca_key, self.config.validity_seconds,
                           utc_now())
        LOG.info("issued serial=%x profile=%s subject=%r O=%s sans=%s expires=%s by=%s client=%s",
                 cert.serial_number, grant.profile, grant.request.common_name,
                 ",".join(grant.request.organizations) or "-",
                 ",".join((*grant.request.dns_names, *grant.request.ip_addresses)) or "-",
                 cert.not_valid_after_utc.isoformat(), who, client)
        return cert.public_bytes(Encoding.PEM).decode()


SERVICE_KEY = web.AppKey("service", CaService)


def envelope(result: Any = None, status: int = 200, message: str = "") -> web.Response:
    """cfssl's response shape; errors carry the HTTP status as their code."""
    body = {"success": status == 200, "result": result if status == 200 else None,
            "errors": [] if status == 200 else [{"code": status, "message": message}], "messages": []}
    return web.json_response(body, status=status)


@dataclass(frozen=True, slots=True)
class _Authenticated:
    """A request whose MAC matched an active token."""

    record: tokens.TokenRecord
    raw: bytes
    client: str
    penalized: bool  # its address had failed recently: a success clears that


async def _authenticate(request: web.Request) -> _Authenticated | web.Response:
    """The token behind an authsign-shaped body, or the answer that refuses it. Returns right after
    the token check (no await after it), so the caller's use of the token follows without a gap."""
    service = request.app[SERVICE_KEY]
    client = request.remote or "unknown"
    try:
        mac, raw = await _authsign_body(request)
    except PolicyError as exc:
        return envelope(status=exc.status, message=str(exc))
    # Admitted once the body is in, with no await between the admission, the token check and the
    # count of a failure: bodies held back to arrive together get no more checks.
    admission = service.throttle.admit(client)
    if not admission.queued:
        return _too_many(client, admission.wait)
    if admission.wait > 0:
        await asyncio.sleep(admission.wait)
    try:
        candidate = tokens.match(service.tokens.candidates(), mac, raw)
    except tokens.TokenError as exc:
        return _store_unreadable(exc)
    if candidate is None:
        return await _refuse_token(service, client)
    return _Authenticated(candidate.record, raw, client, admission.penalized)


async def authsign(request: web.Request) -> web.Response:
    service = request.app[SERVICE_KEY]
    auth = await _authenticate(request)
    if isinstance(auth, web.Response):
        return auth
    record, raw, client = auth.record, auth.raw, auth.client
    try:
        sign_request = policy.parse_sign_request(raw)
        grant = policy.node_grant(record.node, record.addresses, sign_request, service_sans=service.service_sans)
        if record.node is None and grant.node is not None:
            await _bind(service, record, grant.node)
        pem = sign_for_token(service, record, raw, grant, sign_request, client)
    except PolicyError as exc:
        LOG.warning("refused authsign from %s (token %s): %s", client, record.id, exc)
        return envelope(status=exc.status, message=str(exc))
    except tokens.TokenError as exc:
        return _store_unreadable(exc)
    if auth.penalized:
        service.throttle.succeeded(client)
    return envelope({"certificate": pem})


async def authcheck(request: web.Request) -> web.Response:
    """Would the token have every request of this join signed? Signs, binds and claims nothing."""
    service = request.app[SERVICE_KEY]
    auth = await _authenticate(request)
    if isinstance(auth, web.Response):
        return auth
    try:
        document = json.loads(auth.raw)
        encoded = document["requests"] if isinstance(document, dict) else None
        if not isinstance(encoded, list) or not encoded:
            raise PolicyError("authcheck needs a non-empty list of requests", 400)
        raws = [policy.decode_b64(item, "request") for item in encoded]
        grants = policy.check_join(auth.record.node, auth.record.addresses, raws, service_sans=service.service_sans)
        node = next((grant.node for grant in grants if grant.node), None)
        if auth.record.node is None and node is not None:  # the name the token would bind: free?
            if node in service.config.reserved_nodes:
                raise PolicyError(str(tokens.NodeTaken.of(node)))
            if service.config.nodes_kubeconfig is not None:
                await _unregistered(service.config.nodes_kubeconfig, node)
    except (ValueError, RecursionError):
        return envelope(status=400, message="authcheck request is not JSON")
    except PolicyError as exc:
        LOG.warning("refused authcheck from %s (token %s): %s", auth.client, auth.record.id, exc)
        return envelope(status=exc.status, message=str(exc))
    if auth.penalized:
        service.throttle.succeeded(auth.client)
    return envelope({"checked": len(grants)})


def sign_for_token(service: CaService, record: tokens.TokenRecord, raw: bytes, grant: Grant, sign_request: SignRequest,
               client: str) -> str:
    """The token checked once more (a bind may have waited), the request claimed against replays,
    then signed: no await in between."""
    if record.id not in {candidate.record.id for candidate in service.tokens.candidates()}:
        raise PolicyError("invalid token", 400)  # revoked or expired while the request waited
    if not service.replays.claim(raw, record.id, record.expires):
        raise PolicyError("replayed request", 400)  # authentic but stale: refused, not counted as a guess
    return service.issue(grant, sign_request, f"token:{record.id}", client)


async def _bind(service: CaService, record: tokens.TokenRecord, node: str) -> None:
    """An unbound token is bound to the first node name it signs for (under the store's lock)."""
    if service.config.nodes_kubeconfig is not None:
        await _unregistered(service.config.nodes_kubeconfig, node)
    try:
        bound = await asyncio.to_thread(service.tokens.bind, record.id, node, frozenset(service.config.reserved_nodes))
    except tokens.NodeTaken as exc:
        raise PolicyError(str(exc)) from None
    except tokens.TokenError:  # pruned since the request was authenticated
        raise PolicyError("invalid token", 400) from None
    if bound.node is None:  # revoked or expired since the request was authenticated
        raise PolicyError("invalid token", 400)
    if bound.node != node:
        raise PolicyError(f"this token is for node {bound.node!r}, not {node!r}")


async def _unregistered(kubeconfig: Path, node: str) -> None:
    """Refuse a name that a registered Node holds: the cluster's hosts register theirs as they come
    (a node added to the spec changes no file here), and a token must not take one over. The API is
    asked at each bind; while it does not answer, no unbound token binds (the join needs it anyway)."""
    try:
        status, _ = await api_request(Credentials.of_kubeconfig(kubeconfig), "GET", f"/api/v1/nodes/{quote(node)}",
                                      None, 10, accept=(404,))
    except ApiError as exc:
        LOG.warning("cannot tell whether node name %r is free: %s", node, exc)
        raise PolicyError(f"cannot tell whether node name {node!r} is free (the API does not answer); "
                          "try again", 503) from None
    if status != 404:
        raise PolicyError(f"node name {node!r} already belongs to the cluster (a Node of that name is registered); "
                          "create a token with --node for it")


async def _refuse_token(service: CaService, client: str) -> web.Response:
    """A failed authentication (a guess at a token): counted for the address and answered late."""
    wait = service.throttle.failed(client)
    LOG.warning("refused authsign from %s: invalid token (next attempts wait %.1fs)", client, wait)
    await asyncio.sleep(wait)
    return envelope(status=400, message="invalid token")


def _store_unreadable(exc: tokens.TokenError) -> web.Response:
    LOG.error("token store: %s", exc)
    return envelope(status=500, message="token store unreadable")


def _too_many(client: str, busy_for: float) -> web.Response:
    """Refused unchecked (HTTP 429): the address's queued requests already fill the slots up to the bound."""
    LOG.warning("refused authsign from %s unchecked: too many failed authentications, slots taken for %.1fs",
                client, busy_for)
    answer = envelope(status=429, message=f"too many failed authentications from {client}; "
                                          f"retry in {math.ceil(busy_for)}s")
    answer.headers["Retry-After"] = str(math.ceil(busy_for))
    return answer


async def _authsign_body(request: web.Request) -> tuple[bytes, bytes]:
    try:
        document = json.loads(await request.read())
    except (ValueError, RecursionError):
        raise PolicyError("request body is not JSON", 400) from None
    if not isinstance(document, dict) or "token" not in document or "request" not in document:
        raise PolicyError("authsign needs token and request", 400)
    return policy.decode_b64(document["token"], "token"), policy.decode_b64(document["request"], "request")


async def info(request: web.Request) -> web.Response:
    service = request.app[SERVICE_KEY]
    return envelope({"certificate": service.ca_cert_pem.decode(),
                     "usages": ["signing", "key encipherment", "client auth", "server auth"],
                     "expiry": format_duration(service.config.validity_seconds)})


async def renew(request: web.Request) -> web.Response:
    service = request.app[SERVICE_KEY]
    client = request.remote or "unknown"
    host = _agent_host(request)
    if host is None:
        return envelope(status=401, message="renewal needs the host's agent client certificate (mutual TLS)")
    try:
        raw = await request.read()
        current = x509.load_pem_x509_certificate(str(json.loads(raw)["current"]).encode())
        sign_request = policy.parse_sign_request(raw)  # the renewal body is a sign request plus "current"
        _not_removed(service.config, current, _peer_certificate(request))
        grant = policy.renewal_grant(host, current, sign_request, service.ca_cert, utc_now(),
                                     service_sans=service.service_sans)
    except PolicyError as exc:
        LOG.warning("refused renewal for host %s from %s: %s", host, client, exc)
        return envelope(status=exc.status, message=str(exc))
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        return envelope(status=400, message=f"malformed renewal request ({exc.__class__.__name__})")
    return envelope({"certificate": service.issue(grant, sign_request, f"agent:{host}", client)})


def _not_removed(config: CaServiceConfig, *certificates: x509.Certificate | None) -> None:
    """A key of a host removed from the cluster renews nothing, whichever certificate carries it."""
    removed = dict(config.removed_keys)
    for certificate in certificates:
        host = removed.get(keys.spki_hash(certificate.public_key())) if certificate is not None else None
        if host is not None:
            raise PolicyError(f"this key belonged to host {host!r}, which was removed from the cluster; its "
                              "certificates are not renewed (a host added again gets new keys from apply)")


def _peer_certificate(request: web.Request) -> x509.Certificate | None:
    """The client certificate the TLS handshake verified, if the client presented one."""
    ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    return x509.load_der_x509_certificate(der) if der else None


def _agent_host(request: web.Request) -> str | None:
    """The host name in a verified agent client certificate, if the client presented one."""
    peer = _peer_certificate(request)
    if peer is None:
        return None
    try:
        common_name, organizations = policy.subject_of(peer.subject)
    except PolicyError:
        return None
    if "kubesmith:agents" not in organizations or not common_name.startswith(policy.AGENT_PREFIX):
        return None
    return policy.node_named(common_name)


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def application(service: CaService) -> web.Application:
    """The CA service's routes."""
    app = web.Application(client_max_size=MAX_BODY)
    app[SERVICE_KEY] = service
    app.router.add_post("/api/v1/cfssl/authsign", authsign)
    app.router.add_post("/api/v1/kubesmith/authcheck", authcheck)
    app.router.add_route("*", "/api/v1/cfssl/info", info)
    app.router.add_post("/api/v1/kubesmith/renew", renew)
    app.router.add_get("/healthz", healthz)
    return app


def server_context(config: CaServiceConfig) -> ssl.SSLContext:
    """TLS 1.2+, own certificate; client certificates optional but verified against the CA."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_serving_pair(context, config)
    check_regular(config.ca_cert, SMALL_FILE_BYTES, "a certificate")
    context.load_verify_locations(cafile=str(config.ca_cert))
    context.verify_mode = ssl.CERT_OPTIONAL
    return context


class ListenError(Exception):
    """The service's address or port cannot be taken (in use, not on this host)."""


@dataclass(frozen=True, slots=True)
class Running:
    """A started service: its port (the one the OS chose for port 0) and how to stop it."""

    runner: web.AppRunner
    port: int
    reloader: asyncio.Task[None]
    service: CaService

    async def close(self) -> None:
        self.reloader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.reloader
        await self.runner.cleanup()
        self.service.replays.close()


async def start(service: CaService) -> Running:
    """Serve on every address `listen` resolves to, in this event loop."""
    config = service.config
    context = server_context(config)
    runner = web.AppRunner(application(service), access_log=None, handle_signals=False)
    await runner.setup()
    port = config.port
    for family, sockaddr in _addresses(config):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            sock.bind((sockaddr[0], port, *sockaddr[2:]))
        except OSError as exc:
            sock.close()
            raise ListenError(f"cannot listen on {url_host(sockaddr[0])}:{port}: {exc.strerror or exc}") from None
        port = sock.getsockname()[1]  # port 0: every address gets the port the first one got
        site = web.SockSite(runner, sock, ssl_context=context, backlog=1024)
        await site.start()
    reloader = asyncio.create_task(_reload_serving_cert(config, context))
    return Running(runner, port, reloader, service)


def _load_serving_pair(context: ssl.SSLContext, config: CaServiceConfig) -> None:
    """The serving certificate and key into `context`; OpenSSL opens them by name, so each is checked to
    be a small regular file first (a FIFO would block the open, and a reload the whole event loop)."""
    check_regular(config.tls_cert, SMALL_FILE_BYTES, "a certificate")
    check_regular(config.tls_key, SMALL_FILE_BYTES, "a private key")
    context.load_cert_chain(str(config.tls_cert), str(config.tls_key))


def _addresses(config: CaServiceConfig) -> list[tuple[int, Any]]:
    """(family, sockaddr) for every address `listen` resolves to (a name may have IPv4 and IPv6)."""
    found = socket.getaddrinfo(config.listen or None, config.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    unique: list[tuple[int, Any]] = []
    for family, _, _, _, sockaddr in found:
        if (family, sockaddr) not in unique:
            unique.append((family, sockaddr))
    return unique


async def _reload_serving_cert(config: CaServiceConfig, context: ssl.SSLContext) -> None:
    """New connections use a renewed serving certificate without a restart."""
    def signature() -> tuple[int, int]:
        stat = os.stat(config.tls_cert)
        return stat.st_ino, stat.st_mtime_ns
    seen = signature()
    while True:
        await asyncio.sleep(config.cert_reload_interval)
        try:
            current = signature()
            if current != seen:
                _load_serving_pair(context, config)
                seen = current
                LOG.info("reloaded serving certificate %s", config.tls_cert)
        except (OSError, ssl.SSLError) as exc:  # mid-rename or a mismatched pair: try again later
            LOG.warning("serving certificate not reloaded: %s", exc)


async def _serve(config: CaServiceConfig, ready: Callable[[int], None] | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    running = await start(CaService(config))
    try:
        LOG.info("serving on https://%s:%d", url_host(config.listen), running.port)
        if ready is not None:
            ready(running.port)
        await stop.wait()
    finally:
        await running.close()


def serve(config: CaServiceConfig, ready: Callable[[int], None] | None = None) -> None:
    """`ca serve`: check the CA and the serving certificate, then serve until SIGTERM or SIGINT."""
    asyncio.run(_serve(config, ready))
