"""`kubesmith ca serve`: the cluster CA as an HTTPS service, compatible with cfssl 1.2 clients.

Endpoints:

* `POST /api/v1/cfssl/authsign` - cfssl's authenticated sign: `{"token": b64(HMAC-SHA256(key,
  request)), "request": b64(request)}`, where key is a join token's auth key (see `tokens`).
  Signs what the token's scope allows (`ca_policy.node_grant`); refuses modified requests (HMAC
  mismatch) and replayed ones (digests of accepted requests are remembered until their token
  expires; tokens are short-lived, so this memory stays small).
* `GET|POST /api/v1/cfssl/info` - the signing CA certificate, usages and expiry (cfssl's shape).
* `POST /api/v1/kubesmith/renew` - renewal for a host's agent, authenticated by its agent client
  certificate over mutual TLS; renews only that host's certificates (`ca_policy.renewal_grant`).
* `GET /healthz` - "ok" (readiness probe of the unit, `kube-ca-online.target`).

Answers use cfssl's envelope `{"success", "result", "errors": [{"code", "message"}], "messages"}`;
a bad token is HTTP 400 `invalid token`, as cfssl answers it.

Repeated failed authentication from one client address is slowed down: each failure doubles a
per-address delay (bounded by `max_failed_auth_delay`) that the failing answer and every further
request from that address wait out first. The waits are plain `asyncio.sleep`s; no lock is held
(the event loop is the only synchronisation), so one client's penalty never delays another.

Every issuance is logged as one line (logger `kubesmith.ca`): client address, token id or agent
host, profile, subject, SANs, serial and expiry. The serving certificate is reloaded when its file
changes (the agent renews it), so renewal needs no restart of this service.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import logging
import os
import ssl
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from kubesmith.pki import keys
from kubesmith.pki.keys import PrivateKey
from kubesmith.pki.store import utc_now
from kubesmith.runtime import ca_policy, tokens
from kubesmith.runtime.ca_policy import Grant, PolicyError, SignRequest
from kubesmith.runtime.durations import format_duration

LOG = logging.getLogger("kubesmith.ca")
MAX_BODY = 64 * 1024
MAX_TRACKED_ADDRESSES = 10_000


@dataclass(frozen=True, slots=True)
class CaServiceConfig:
    """Everything `ca serve` needs; read from the module's JSON file, overridden by flags."""

    ca_cert: Path
    ca_key: Path
    tls_cert: Path
    tls_key: Path
    state_dir: Path
    listen: str = "127.0.0.1"
    port: int = 8443
    validity_seconds: float = 365 * 86400.0
    failed_auth_delay: float = 0.5
    max_failed_auth_delay: float = 10.0
    reserved_nodes: tuple[str, ...] = ()  # names a token bound at first use may not take
    default_token_ttl: float = 3600.0  # `token create` without --ttl
    cert_reload_interval: float = 10.0

    @property
    def token_file(self) -> Path:
        return self.state_dir / "tokens.json"


class Throttle:
    """Per-address delay after failed authentication: doubles per failure, bounded, forgotten later."""

    def __init__(self, base: float, maximum: float) -> None:
        self.base, self.maximum = base, maximum
        self._state: OrderedDict[str, tuple[int, float]] = OrderedDict()  # address -> (failures, last)

    def delay(self, address: str, now: float) -> float:
        """How long a request from `address` waits before it is looked at."""
        failures, last = self._state.get(address, (0, 0.0))
        if failures == 0:
            return 0.0
        if now - last > self.maximum * 10:
            self._state.pop(address, None)
            return 0.0
        return max(0.0, last + self._penalty(failures) - now)

    def failed(self, address: str, now: float) -> float:
        failures, last = self._state.pop(address, (0, 0.0))
        if now - last > self.maximum * 10:
            failures = 0
        self._state[address] = (failures + 1, now)
        while len(self._state) > MAX_TRACKED_ADDRESSES:
            self._state.popitem(last=False)
        return self._penalty(failures + 1)

    def succeeded(self, address: str) -> None:
        self._state.pop(address, None)

    def _penalty(self, failures: int) -> float:
        return min(self.maximum, self.base * 2 ** min(failures - 1, 30))


class ReplayGuard:
    """Digests of accepted requests per token, kept until that token expires."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[float, set[bytes]]] = {}

    def seen(self, token_id: str, digest: bytes) -> bool:
        entry = self._seen.get(token_id)
        return entry is not None and digest in entry[1]

    def remember(self, token_id: str, digest: bytes, expires: float, now: float) -> None:
        self._prune(now)
        self._seen.setdefault(token_id, (expires, set()))[1].add(digest)

    def _prune(self, now: float) -> None:
        for token_id in [t for t, (expires, _) in self._seen.items() if expires <= now]:
            del self._seen[token_id]


class CaService:
    """The signing state of one `ca serve` process (no globals: one instance per application)."""

    def __init__(self, config: CaServiceConfig) -> None:
        self.config = config
        self.ca_cert = x509.load_pem_x509_certificate(config.ca_cert.read_bytes())
        self.ca_cert_pem = self.ca_cert.public_bytes(Encoding.PEM)
        self.ca_key: PrivateKey = keys.load(config.ca_key.read_bytes(), str(config.ca_key))
        if not keys.same_public_key(self.ca_cert.public_key(), self.ca_key.public_key()):
            raise ValueError(f"{config.ca_key} does not belong to {config.ca_cert}")
        self.tokens = tokens.TokenStore(config.token_file, self.ca_key)
        self.throttle = Throttle(config.failed_auth_delay, config.max_failed_auth_delay)
        self.replays = ReplayGuard()

    def issue(self, grant: Grant, request: SignRequest, who: str, client: str) -> str:
        now = utc_now()
        cert = ca_policy.sign(grant, request.public_key, self.ca_cert, self.ca_key,
                              self.config.validity_seconds, now)
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


async def authsign(request: web.Request) -> web.Response:
    service = request.app[SERVICE_KEY]
    client = request.remote or "unknown"
    delay = service.throttle.delay(client, time.monotonic())
    if delay > 0:
        await asyncio.sleep(delay)
    try:
        mac, raw = await _authsign_body(request)
    except PolicyError as exc:
        return envelope(status=exc.status, message=str(exc))
    try:
        candidate = tokens.match(service.tokens.candidates(), mac, raw)
    except tokens.TokenError as exc:
        LOG.error("token store: %s", exc)
        return envelope(status=500, message="token store unreadable")
    digest = hashlib.sha256(raw).digest()
    if candidate is None or service.replays.seen(candidate.record.id, digest):
        reason = "invalid token" if candidate is None else "replayed request"
        penalty = service.throttle.failed(client, time.monotonic())
        LOG.warning("refused authsign from %s: %s (next attempts wait %.1fs)", client, reason, penalty)
        await asyncio.sleep(penalty)
        return envelope(status=400, message=reason)
    service.throttle.succeeded(client)
    try:
        sign_request = ca_policy.parse_sign_request(raw)
        grant = await _node_grant(service, candidate.record, sign_request)
    except PolicyError as exc:
        LOG.warning("refused authsign from %s (token %s): %s", client, candidate.record.id, exc)
        return envelope(status=exc.status, message=str(exc))
    service.replays.remember(candidate.record.id, digest, candidate.record.expires, time.time())
    pem = service.issue(grant, sign_request, f"token:{candidate.record.id}", client)
    return envelope({"certificate": pem})


async def _authsign_body(request: web.Request) -> tuple[bytes, bytes]:
    try:
        document = json.loads(await request.read())
    except ValueError:
        raise PolicyError("request body is not JSON", 400) from None
    if not isinstance(document, dict) or "token" not in document or "request" not in document:
        raise PolicyError("authsign needs token and request", 400)
    return ca_policy.decode_b64(document["token"], "token"), ca_policy.decode_b64(document["request"], "request")


async def _node_grant(service: CaService, record: tokens.TokenRecord, sign_request: SignRequest) -> Grant:
    """Apply the token's scope; an unbound token is bound to the first node name it signs for."""
    grant = ca_policy.node_grant(record.node, record.addresses, sign_request)
    if record.node is None and grant.node is not None:
        if grant.node in service.config.reserved_nodes or _node_taken(service, record.id, grant.node):
            raise PolicyError(f"node name {grant.node!r} already belongs to the cluster; "
                              "create a token with --node for it")
        bound = await asyncio.to_thread(service.tokens.bind, record.id, grant.node)
        if bound.node != grant.node:
            raise PolicyError(f"this token is for node {bound.node!r}, not {grant.node!r}")
    return grant


def _node_taken(service: CaService, token_id: str, node: str) -> bool:
    return any(record.node == node and record.id != token_id for record in service.tokens.records())


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
        document = json.loads(await request.read())
        current = x509.load_pem_x509_certificate(str(document["current"]).encode())
        sign_request = ca_policy.parse_sign_request(json.dumps(document).encode())
        grant = ca_policy.renewal_grant(host, current, sign_request, service.ca_cert, utc_now())
    except PolicyError as exc:
        LOG.warning("refused renewal for host %s from %s: %s", host, client, exc)
        return envelope(status=exc.status, message=str(exc))
    except (ValueError, KeyError, TypeError) as exc:
        return envelope(status=400, message=f"malformed renewal request ({exc.__class__.__name__})")
    return envelope({"certificate": service.issue(grant, sign_request, f"agent:{host}", client)})


def _agent_host(request: web.Request) -> str | None:
    """The host name in a verified agent client certificate, if the client presented one."""
    ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not der:
        return None
    peer = x509.load_der_x509_certificate(der)
    try:
        common_name, organizations = ca_policy.subject_of(peer.subject)
    except PolicyError:
        return None
    if "kubesmith:agents" not in organizations or not common_name.startswith(ca_policy.AGENT_PREFIX):
        return None
    return ca_policy.node_named(common_name)


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def application(service: CaService) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY)
    app[SERVICE_KEY] = service
    app.router.add_post("/api/v1/cfssl/authsign", authsign)
    app.router.add_route("*", "/api/v1/cfssl/info", info)
    app.router.add_post("/api/v1/kubesmith/renew", renew)
    app.router.add_get("/healthz", healthz)
    return app


def server_context(config: CaServiceConfig) -> ssl.SSLContext:
    """TLS 1.2+, own certificate; client certificates optional but verified against the CA."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(config.tls_cert), str(config.tls_key))
    context.load_verify_locations(cafile=str(config.ca_cert))
    context.verify_mode = ssl.CERT_OPTIONAL
    return context


@dataclass(frozen=True, slots=True)
class Running:
    runner: web.AppRunner
    port: int
    reloader: asyncio.Task[None]

    async def close(self) -> None:
        self.reloader.cancel()
        await self.runner.cleanup()


async def start(config: CaServiceConfig) -> Running:
    """Start serving; returns the bound port (config.port 0 picks a free one)."""
    service = CaService(config)
    context = server_context(config)
    runner = web.AppRunner(application(service), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, config.listen, config.port, ssl_context=context, backlog=1024)
    await site.start()
    server = site._server  # aiohttp exposes the bound sockets only here
    port = server.sockets[0].getsockname()[1] if server is not None and server.sockets else config.port
    reloader = asyncio.create_task(_reload_serving_cert(config, context))
    return Running(runner, port, reloader)


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
                context.load_cert_chain(str(config.tls_cert), str(config.tls_key))
                seen = current
                LOG.info("reloaded serving certificate %s", config.tls_cert)
        except (OSError, ssl.SSLError) as exc:  # mid-rename or a mismatched pair: try again later
            LOG.warning("serving certificate not reloaded: %s", exc)


async def serve_forever(config: CaServiceConfig, ready: Any = None) -> None:
    running = await start(config)
    try:
        LOG.info("serving on https://%s:%d", config.listen if ":" not in config.listen else f"[{config.listen}]",
                 running.port)
        if ready is not None:
            ready(running.port)
        await asyncio.Event().wait()
    finally:
        await running.close()


def config_document(config: CaServiceConfig) -> dict[str, Any]:
    return {key: (str(value) if isinstance(value, Path) else list(value) if isinstance(value, tuple) else value)
            for key, value in {field: getattr(config, field) for field in CaServiceConfig.__dataclass_fields__}.items()}


def config_from_document(document: dict[str, Any], **overrides: Any) -> CaServiceConfig:
    merged = {**document, **{k: v for k, v in overrides.items() if v is not None}}
    for field in ("ca_cert", "ca_key", "tls_cert", "tls_key", "state_dir"):
        if field not in merged:
            raise ValueError(f"CA service configuration lacks {field}")
        merged[field] = Path(merged[field])
    if "reserved_nodes" in merged:
        merged["reserved_nodes"] = tuple(merged["reserved_nodes"])
    known = set(CaServiceConfig.__dataclass_fields__)
    unknown = sorted(set(merged) - known)
    if unknown:
        raise ValueError(f"unknown CA service setting {unknown[0]!r}")
    return CaServiceConfig(**merged)


def utc(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
