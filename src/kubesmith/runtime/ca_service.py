"""`kubesmith ca serve`: the cluster CA as an HTTPS service, compatible with cfssl 1.2 clients.

Endpoints:

* `POST /api/v1/cfssl/authsign` - cfssl's authenticated sign: `{"token": b64(HMAC-SHA256(key,
  request)), "request": b64(request)}`, where key is a join token's auth key (see `tokens`).
  Signs what the token's scope allows (`ca_policy.node_grant`); refuses modified requests (HMAC
  mismatch) and replayed ones (digests of accepted requests are remembered until their token
  expires, in the state database every worker shares; tokens are short-lived, so it stays small).
* `GET|POST /api/v1/cfssl/info` - the signing CA certificate, usages and expiry (cfssl's shape).
* `POST /api/v1/kubesmith/renew` - renewal for a host's agent, authenticated by its agent client
  certificate over mutual TLS; renews only that host's certificates (`ca_policy.renewal_grant`).
* `GET /healthz` - "ok" (readiness probe of the unit, `kube-ca-online.target`).

Answers use cfssl's envelope `{"success", "result", "errors": [{"code", "message"}], "messages"}`;
a bad token is HTTP 400 `invalid token`, as cfssl answers it.

Repeated failed authentication (a MAC that matches no active token: a guess) from one client
address is slowed down: each failure doubles a per-address penalty (bounded by
`max_failed_auth_delay`) that the failing answer waits out, and the address is then served one
request at a time: each further request waits for its own slot, and the slots lie as far apart as
the penalties would if each request failed, so a burst gets no more checks than requests sent one
by one; one that would wait longer than the bound is refused with its token unchecked (HTTP 429,
`Retry-After`). Counts and slots live in the shared state database, so a client gains nothing by
reconnecting until another worker takes it. The waits are plain `asyncio.sleep`s, so one client's
penalty never delays another.

Processes: the parent checks the CA, reserves the port and forks `workers` processes (default one
per CPU; signing is CPU-bound and one Python process uses one core). Each worker listens on the
port with SO_REUSEPORT and runs its own event loop; what must hold across workers (replay memory,
failed-auth counts) is in `SharedState`; the token store is re-read by each worker when its file
changes (checked on every request), so a revocation takes effect in every worker at once.
Within a worker, the heavy steps of the requests it is handling together (CSR checks; replay
claims in one transaction, then signing) run back to back (`Steps`, `batch`): that cut the
CPU per certificate by more than a third (`bench/ca_bench.py`).

Every issuance is logged as one line (logger `kubesmith.ca`; `ca serve` prefixes the worker's
pid): client address, token id or agent host, profile, subject, SANs, serial and expiry. The
serving certificate is reloaded when its file changes (the agent renews it), so renewal needs no
restart of this service.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import json
import logging
import math
import os
import select
import signal
import socket
import sqlite3
import ssl
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from kubesmith.pki import keys
from kubesmith.pki.keys import PrivateKey
from kubesmith.pki.store import utc_now
from kubesmith.runtime import ca_policy, tokens
from kubesmith.runtime.batch import IterationBatch, each
from kubesmith.runtime.ca_policy import Grant, PolicyError, SignRequest
from kubesmith.runtime.durations import format_duration
from kubesmith.urls import url_host

LOG = logging.getLogger("kubesmith.ca")
MAX_BODY = 64 * 1024
MAX_TRACKED_ADDRESSES = 10_000
CHECKPOINT_INTERVAL = 1.0  # seconds between the parent's WAL checkpoints of the shared state
BUSY_DEADLINE = 10.0  # seconds a worker waits for the shared database's write lock before failing


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
    service_sans: tuple[str, ...] = ()  # the API server's names and addresses, which no node may carry
    default_token_ttl: float = 3600.0  # `token create` without --ttl
    cert_reload_interval: float = 10.0
    workers: int = 0  # processes serving the port; 0: one per CPU this process may run on

    @property
    def token_file(self) -> Path:
        return self.state_dir / "tokens.json"


@dataclass(frozen=True, slots=True)
class Claim:
    """An accepted authsign request, remembered until its token expires to refuse its replay."""

    digest: bytes  # SHA-256 of the signed request
    token_id: str
    expires: float


@dataclass(frozen=True, slots=True)
class Admission:
    """`SharedState.admit`'s answer for one request."""

    wait: float  # seconds until the request's slot
    penalized: bool  # its address failed recently (a success clears that)
    queued: bool = True  # False: too many requests from the address wait already; refuse it


FREE = Admission(0.0, penalized=False)


def penalty(failures: int, base: float, maximum: float) -> float:
    """The wait after `failures` consecutive failed authentications: doubles per failure, bounded."""
    return min(maximum, base * 2 ** min(failures - 1, 30)) if failures > 0 else 0.0


class Database:
    """One SQLite file of the shared state: WAL mode, autocommit, mode 0600, no fsync per write.

    Writes never wait in SQLite's busy handler (it sleeps a whole millisecond first, stalling the
    worker's event loop) but retry within microseconds. Workers do not checkpoint (a checkpoint
    fsyncs, which can take many milliseconds on a busy disk): the pool's parent does (`checkpoint`).
    """

    def __init__(self, path: Path, schema: tuple[str, ...], worker: bool) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        self._db = sqlite3.connect(path, timeout=0.0, isolation_level=None, check_same_thread=False)
        self.write("PRAGMA journal_mode=WAL")
        self.write("PRAGMA synchronous=NORMAL")  # WAL: commits are not fsynced; consistent after a crash
        self.write(f"PRAGMA wal_autocheckpoint={0 if worker else 1000}")
        self.write("PRAGMA journal_size_limit=16777216")
        for statement in schema:
            self.write(statement)

    def read(self, statement: str, parameters: tuple[Any, ...] = ()) -> Any:
        return self._db.execute(statement, parameters).fetchone()

    def write(self, statement: str, parameters: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        """Execute, retrying while another process holds the write lock (held for microseconds)."""
        pause, deadline = 20e-6, time.monotonic() + BUSY_DEADLINE
        while True:
            try:
                return self._db.execute(statement, parameters)
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 2e-3)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (its lock taken up front): several statements, one commit."""
        self.write("BEGIN IMMEDIATE")
        try:
            yield self._db
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:  # also when COMMIT itself failed: the write lock must go
                self._db.execute("ROLLBACK")
            raise

    def checkpoint(self) -> None:
        """Copy the WAL into the database without blocking the writers (PASSIVE); busy: next time."""
        try:
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.OperationalError as exc:
            LOG.warning("shared state not checkpointed: %s", exc)

    def close(self) -> None:
        self._db.close()


class SharedState:
    """Replay memory and failed-authentication slow-down, shared by every worker process.

    SQLite in the CA state dir: a replayed request must be refused whichever worker it lands on,
    and a client cannot escape its slow-down by reconnecting until the kernel hands it to another
    worker. The UNIQUE digest makes `claim_all` atomic across processes (a worker's batch of
    claims is one transaction); `failed` never loses a count and `admit` hands out each slot
    once (both are transactions). The memory also survives a restart (an in-process set did
    not). Expired rows are pruned. Two files: the throttle is read on every request, and reads
    of a file that the per-issuance replay writes do not touch stay cheap. Each worker opens its
    own connections after the fork (they must not cross a fork).
    """

    REPLAYS = (("CREATE TABLE IF NOT EXISTS replays (digest BLOB PRIMARY KEY, token_id TEXT NOT NULL, "
                "expires REAL NOT NULL) WITHOUT ROWID"),
               "CREATE INDEX IF NOT EXISTS replays_expires ON replays (expires)")
    THROTTLE = ("DROP TABLE IF EXISTS throttle",  # counts only, before requests queued for slots
                ("CREATE TABLE IF NOT EXISTS slowdown (address TEXT PRIMARY KEY, failures INTEGER NOT NULL, "
                 "last REAL NOT NULL, next_slot REAL NOT NULL, step REAL NOT NULL) WITHOUT ROWID"))

    def __init__(self, state_dir: Path, base: float, maximum: float, worker: bool = True,
                 clock: Callable[[], float] = time.time) -> None:
        self.base, self.maximum, self._clock = base, maximum, clock
        self.forget_after = max(maximum * 10, 1.0)  # a quiet address starts again from the first delay
        self._next_prune = 0.0
        self._replays = Database(state_dir / "ca-replays.db", self.REPLAYS, worker)
        self._throttle = Database(state_dir / "ca-throttle.db", self.THROTTLE, worker)

    def close(self) -> None:
        self._replays.close()
        self._throttle.close()

    def checkpoint(self) -> None:
        self._replays.checkpoint()
        self._throttle.checkpoint()

    # ---- replay memory

    def claim_all(self, claims: Sequence[Claim]) -> list[bool]:
        """Record accepted requests, in one transaction; False for each one that any worker has
        recorded before, or that comes earlier in `claims` (a replay)."""
        if not claims:
            return []
        self._prune()
        claimed: list[bool] = []
        with self._replays.transaction() as db:
            for claim in claims:
                try:
                    db.execute("INSERT INTO replays (digest, token_id, expires) VALUES (?, ?, ?)",
                               (claim.digest, claim.token_id, claim.expires))
                except sqlite3.IntegrityError:
                    claimed.append(False)
                else:
                    claimed.append(True)
        return claimed

    # ---- failed-authentication slow-down

    def admit(self, address: str) -> Admission:
        """When a request from `address` may be looked at.

        An address that failed recently is served one request at a time: each request takes the
        next free slot, and the slot after it lies as far on as the penalty would be if this
        request failed too (the gap doubles per slot, as it does per failure), so a burst gets
        no more checks than the same requests sent one after another. A request whose slot would
        lie more than `maximum` ahead is not queued at all. Addresses without failures cost one
        read.
        """
        if self._throttle.read("SELECT 1 FROM slowdown WHERE address = ?", (address,)) is None:
            return FREE
        with self._throttle.transaction() as db:
            now = self._clock()  # under the lock: another worker's later `now` is in the row already
            row = db.execute("SELECT last, next_slot, step FROM slowdown WHERE address = ?", (address,)).fetchone()
            if row is None or abs(now - row[0]) > self.forget_after:
                return FREE
            next_slot, step = float(row[1]), float(row[2])
            if next_slot - now > 2 * self.maximum:  # only after the clock went back: start the queue again
                next_slot = now
            slot = max(now, next_slot)
            if slot - now > self.maximum:
                return Admission(slot - now, penalized=True, queued=False)
            db.execute("UPDATE slowdown SET next_slot = ?, step = ? WHERE address = ?",
                       (slot + step, min(self.maximum, 2 * step), address))
        return Admission(slot - now, penalized=True)

    def failed(self, address: str) -> float:
        """Count one more failure for `address` (atomically, whichever worker); the new penalty,
        which also keeps the address's next slot at least that far away. After a quiet spell the
        address starts again from the first penalty, slots and gaps included."""
        with self._throttle.transaction() as db:
            now = self._clock()
            failures = db.execute(
                "INSERT INTO slowdown (address, failures, last, next_slot, step) VALUES (?1, 1, ?2, ?2, 0) "
                "ON CONFLICT (address) DO UPDATE SET failures = CASE WHEN abs(?2 - last) > ?3 THEN 1 "
                "ELSE failures + 1 END, next_slot = CASE WHEN abs(?2 - last) > ?3 THEN ?2 ELSE next_slot END, "
                "step = CASE WHEN abs(?2 - last) > ?3 THEN 0 ELSE step END, last = ?2 RETURNING failures",
                (address, now, self.forget_after)).fetchone()[0]
            wait = penalty(int(failures), self.base, self.maximum)
            db.execute("UPDATE slowdown SET next_slot = MAX(next_slot, ?), step = MAX(step, ?) WHERE address = ?",
                       (now + wait, penalty(int(failures) + 1, self.base, self.maximum), address))
        return wait

    def succeeded(self, address: str) -> None:
        self._throttle.write("DELETE FROM slowdown WHERE address = ?", (address,))

    def _prune(self) -> None:
        """Forget replays of expired tokens and quiet addresses, at most once a minute per worker."""
        now = self._clock()
        if now < self._next_prune:
            return
        self._next_prune = now + 60.0
        self._replays.write("DELETE FROM replays WHERE expires <= ?", (now,))
        self._throttle.write("DELETE FROM slowdown WHERE abs(? - last) > ?", (now, self.forget_after))
        self._throttle.write("DELETE FROM slowdown WHERE address IN (SELECT address FROM slowdown "
                             "ORDER BY last DESC LIMIT -1 OFFSET ?)", (MAX_TRACKED_ADDRESSES,))


class CaService:
    """The signing state of `ca serve`: built once in the parent, inherited by each forked worker."""

    def __init__(self, config: CaServiceConfig) -> None:
        self.config = config
        self.ca_cert = x509.load_pem_x509_certificate(config.ca_cert.read_bytes())
        self.ca_cert_pem = self.ca_cert.public_bytes(Encoding.PEM)
        self.ca_key: PrivateKey = keys.load(config.ca_key.read_bytes(), str(config.ca_key))
        if not keys.same_public_key(self.ca_cert.public_key(), self.ca_key.public_key()):
            raise ValueError(f"{config.ca_key} does not belong to {config.ca_cert}")
        self.tokens = tokens.TokenStore(config.token_file, self.ca_key)
        self.service_sans = ca_policy.normalized_sans(config.service_sans)

    def shared_state(self, worker: bool = True) -> SharedState:
        """This process's connections to the state every worker shares (open them after forking)."""
        return SharedState(self.config.state_dir, self.config.failed_auth_delay, self.config.max_failed_auth_delay,
                           worker)

    def issue(self, issuance: Issuance) -> str:
        grant = issuance.grant
        now = utc_now()
        cert = ca_policy.sign(grant, issuance.request.public_key, self.ca_cert, self.ca_key,
                              self.config.validity_seconds, now)
        LOG.info("issued serial=%x profile=%s subject=%r O=%s sans=%s expires=%s by=%s client=%s",
                 cert.serial_number, grant.profile, grant.request.common_name,
                 ",".join(grant.request.organizations) or "-",
                 ",".join((*grant.request.dns_names, *grant.request.ip_addresses)) or "-",
                 cert.not_valid_after_utc.isoformat(), issuance.who, issuance.client)
        return cert.public_bytes(Encoding.PEM).decode()


class ReplayedRequest(Exception):
    """An authsign request that was accepted before, by any worker."""


@dataclass(frozen=True, slots=True)
class Issuance:
    """One certificate to sign, who asked for it (for the issuance log line), and for authsign
    the claim that refuses a replay of its request (renewals are bound to mTLS, not replayable)."""

    grant: Grant
    request: SignRequest
    who: str  # token:<id> or agent:<host>
    client: str  # the client's address
    claim: Claim | None = None


class TokenGone(Exception):
    """The request's token was revoked or expired after the request was authenticated."""


def issue_batch(service: CaService, shared: SharedState, issuances: Sequence[Issuance]) -> list[str | Exception]:
    """Claim the batch's requests in one transaction, then sign each one that is not a replay.

    A token's requests are checked against the token store once more right before: a revocation
    that lands while a request waits (for its slot, for its batch) still stops it.
    """
    outcomes: list[str | Exception | None] = list(_token_checks(service, issuances))
    waiting = [index for index, outcome in enumerate(outcomes) if outcome is None]
    claimed = iter(shared.claim_all([claim for index in waiting if (claim := issuances[index].claim) is not None]))
    for index in waiting:
        if issuances[index].claim is not None and not next(claimed):
            outcomes[index] = ReplayedRequest()
    fresh = [index for index in waiting if outcomes[index] is None]
    for index, signed in zip(fresh, each(service.issue)([issuances[index] for index in fresh])):
        outcomes[index] = signed
    return outcomes  # type: ignore[return-value]  # every outcome is set by now


def _token_checks(service: CaService, issuances: Sequence[Issuance]) -> list[Exception | None]:
    """None for each issuance without a token or whose token is still active (one store check)."""
    if all(issuance.claim is None for issuance in issuances):
        return [None] * len(issuances)
    try:
        active = {candidate.record.id for candidate in service.tokens.candidates()}
    except tokens.TokenError as exc:  # renewals in the batch do not depend on the store
        return [exc if issuance.claim is not None else None for issuance in issuances]
    return [TokenGone() if issuance.claim is not None and issuance.claim.token_id not in active else None
            for issuance in issuances]


@dataclass(frozen=True, slots=True)
class Steps:
    """A worker's CPU- and lock-heavy request steps, each run for a wave of requests (`batch`)."""

    parse: IterationBatch[bytes, SignRequest]  # parse the sign request, check the CSR's signature
    issue: IterationBatch[Issuance, str]  # claim (replay memory), sign, log, PEM

    @staticmethod
    def of(service: CaService, shared: SharedState) -> Steps:
        return Steps(IterationBatch(each(ca_policy.parse_sign_request)),
                     IterationBatch(lambda issuances: issue_batch(service, shared, issuances)))


SERVICE_KEY = web.AppKey("service", CaService)
SHARED_KEY = web.AppKey("shared", SharedState)
STEPS_KEY = web.AppKey("steps", Steps)


def envelope(result: Any = None, status: int = 200, message: str = "") -> web.Response:
    """cfssl's response shape; errors carry the HTTP status as their code."""
    body = {"success": status == 200, "result": result if status == 200 else None,
            "errors": [] if status == 200 else [{"code": status, "message": message}], "messages": []}
    return web.json_response(body, status=status)


async def authsign(request: web.Request) -> web.Response:
    service, shared, steps = request.app[SERVICE_KEY], request.app[SHARED_KEY], request.app[STEPS_KEY]
    client = request.remote or "unknown"
    try:
        mac, raw = await _authsign_body(request)
    except PolicyError as exc:
        return envelope(status=exc.status, message=str(exc))
    # Admitted once the body is in, with no await between the admission, the token check and the
    # count of a failure (for a free address): bodies held back to arrive together get no more checks.
    admission = shared.admit(client)
    if not admission.queued:
        return _too_many(client, admission.wait)
    if admission.wait > 0:
        await asyncio.sleep(admission.wait)
    try:
        candidate = tokens.match(service.tokens.candidates(), mac, raw)
    except tokens.TokenError as exc:
        return _store_unreadable(exc)
    if candidate is None:
        return await _refuse_token(shared, client)
    try:
        sign_request = await steps.parse(raw)
        grant = await _node_grant(service, candidate.record, sign_request)
    except PolicyError as exc:
        LOG.warning("refused authsign from %s (token %s): %s", client, candidate.record.id, exc)
        return envelope(status=exc.status, message=str(exc))
    claim = Claim(hashlib.sha256(raw).digest(), candidate.record.id, candidate.record.expires)
    try:
        pem = await steps.issue(Issuance(grant, sign_request, f"token:{candidate.record.id}", client, claim))
    except TokenGone:
        LOG.warning("refused authsign from %s: token %s was revoked or expired during the request",
                    client, candidate.record.id)
        return envelope(status=400, message="invalid token")
    except tokens.TokenError as exc:
        return _store_unreadable(exc)
    except ReplayedRequest:  # authentic but stale: refused whatever the rate, so not counted as a guess
        LOG.warning("refused authsign from %s (token %s): replayed request", client, candidate.record.id)
        return envelope(status=400, message="replayed request")
    if admission.penalized:
        shared.succeeded(client)
    return envelope({"certificate": pem})


async def _refuse_token(shared: SharedState, client: str) -> web.Response:
    """A failed authentication (a guess at a token): counted for the address (in every worker)
    and answered late."""
    wait = shared.failed(client)
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
    return ca_policy.decode_b64(document["token"], "token"), ca_policy.decode_b64(document["request"], "request")


async def _node_grant(service: CaService, record: tokens.TokenRecord, sign_request: SignRequest) -> Grant:
    """Apply the token's scope; an unbound token is bound to the first node name it signs for."""
    grant = ca_policy.node_grant(record.node, record.addresses, sign_request, service_sans=service.service_sans)
    if record.node is None and grant.node is not None:
        try:
            bound = await asyncio.to_thread(service.tokens.bind, record.id, grant.node,
                                            frozenset(service.config.reserved_nodes))
        except tokens.NodeTaken as exc:
            raise PolicyError(str(exc)) from None
        except tokens.TokenError:  # pruned since the request was authenticated
            raise PolicyError("invalid token", 400) from None
        if bound.node is None:  # revoked or expired since the request was authenticated
            raise PolicyError("invalid token", 400)
        if bound.node != grant.node:
            raise PolicyError(f"this token is for node {bound.node!r}, not {grant.node!r}")
    return grant


async def info(request: web.Request) -> web.Response:
    service = request.app[SERVICE_KEY]
    return envelope({"certificate": service.ca_cert_pem.decode(),
                     "usages": ["signing", "key encipherment", "client auth", "server auth"],
                     "expiry": format_duration(service.config.validity_seconds)})


async def renew(request: web.Request) -> web.Response:
    service, steps = request.app[SERVICE_KEY], request.app[STEPS_KEY]
    client = request.remote or "unknown"
    host = _agent_host(request)
    if host is None:
        return envelope(status=401, message="renewal needs the host's agent client certificate (mutual TLS)")
    try:
        raw = await request.read()
        current = x509.load_pem_x509_certificate(str(json.loads(raw)["current"]).encode())
        sign_request = await steps.parse(raw)  # the renewal body is a sign request plus "current"
        grant = ca_policy.renewal_grant(host, current, sign_request, service.ca_cert, utc_now(),
                                        service_sans=service.service_sans)
    except PolicyError as exc:
        LOG.warning("refused renewal for host %s from %s: %s", host, client, exc)
        return envelope(status=exc.status, message=str(exc))
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        return envelope(status=400, message=f"malformed renewal request ({exc.__class__.__name__})")
    return envelope({"certificate": await steps.issue(Issuance(grant, sign_request, f"agent:{host}", client))})


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


def application(service: CaService, shared: SharedState) -> web.Application:
    """The CA service's routes, for one worker."""
    app = web.Application(client_max_size=MAX_BODY)
    app[SERVICE_KEY] = service
    app[SHARED_KEY] = shared
    app[STEPS_KEY] = Steps.of(service, shared)
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


def listen_addresses(config: CaServiceConfig) -> list[tuple[int, Any]]:
    """(family, sockaddr) for every address `listen` resolves to (a name may have IPv4 and IPv6)."""
    found = socket.getaddrinfo(config.listen or None, config.port, type=socket.SOCK_STREAM,
                               flags=socket.AI_PASSIVE)
    unique: list[tuple[int, Any]] = []
    for family, _, _, _, sockaddr in found:
        if (family, sockaddr) not in unique:
            unique.append((family, sockaddr))
    return unique


def port_socket(family: int, sockaddr: Any) -> socket.socket:
    """A socket in the port's SO_REUSEPORT group: the kernel spreads connections over the workers
    by address hash (one shared accept queue would let one worker's accept loop take them all)."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # same user only (Linux)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    sock.bind(sockaddr)
    return sock


@dataclass(frozen=True, slots=True)
class Running:
    runner: web.AppRunner
    port: int
    reloader: asyncio.Task[None]
    shared: SharedState

    async def close(self) -> None:
        self.reloader.cancel()
        await self.runner.cleanup()
        self.shared.close()


AppFactory = Callable[[CaService, SharedState], web.Application]


async def start(service: CaService, port: int, addresses: list[tuple[int, Any]],
                make_app: AppFactory = application) -> Running:
    """Serve on `port` of every address, in this process (one worker of the pool)."""
    config = service.config
    context = server_context(config)
    shared = service.shared_state()
    runner = web.AppRunner(make_app(service, shared), access_log=None, handle_signals=False)
    await runner.setup()
    for family, sockaddr in addresses:
        sock = port_socket(family, (sockaddr[0], port, *sockaddr[2:]))
        sock.listen(1024)
        await web.SockSite(runner, sock, ssl_context=context, backlog=1024).start()
    reloader = asyncio.create_task(_reload_serving_cert(config, context))
    return Running(runner, port, reloader, shared)


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


async def serve_worker(service: CaService, port: int, addresses: list[tuple[int, Any]], ready: int,
                       make_app: AppFactory = application) -> None:
    """One worker: serve until SIGTERM or SIGINT, telling the pool through `ready` once listening."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    running = await start(service, port, addresses, make_app)
    try:
        os.write(ready, b"r")
        await stop.wait()
    finally:
        await running.close()


class StopPool(Exception):
    """SIGTERM or SIGINT reached the pool's parent process."""


class WorkerPool:
    """N forked worker processes serving one port (SO_REUSEPORT), supervised by the parent; each
    serves `make_app`'s routes (the CA service's; `bench/floor_server.py` serves a control's).

    Everything a worker needs is prepared before the fork (CA key and serving certificate checked,
    port reserved, state databases created) so that a bad configuration fails once, in the
    parent. A worker that dies is replaced; the workers die with the parent (PR_SET_PDEATHSIG),
    so a SIGKILLed `ca serve` leaves no orphan holding the CA key or the port.
    """

    def __init__(self, service: CaService, workers: int, addresses: list[tuple[int, Any]],
                 make_app: AppFactory = application) -> None:
        self.service, self.workers, self.addresses, self.make_app = service, workers, addresses, make_app
        self.port = 0
        self.children: dict[int, int] = {}  # pid -> worker index

    def serve(self, ready: Callable[[int], None] | None = None) -> None:
        reserved = port_socket(*self.addresses[0])  # holds the port (never listens, gets no connections)
        self.port = reserved.getsockname()[1]
        self._checkpoint()  # creates the databases and their schema once, before the workers
        self._trap_signals()
        try:
            self._start(range(self.workers))
            LOG.info("serving on https://%s:%d (%d worker%s)", url_host(self.service.config.listen),
                     self.port, self.workers, "s" if self.workers != 1 else "")
            if ready is not None:
                ready(self.port)
            self._supervise()
        except StopPool:
            pass
        finally:
            self._stop_all()
            reserved.close()

    def _trap_signals(self) -> None:
        def stop(signum: int, frame: Any) -> None:
            raise StopPool()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, stop)

    def _start(self, indexes: Sequence[int]) -> None:
        """Fork the workers with these indexes and wait until each one listens."""
        read_end, write_end = os.pipe()
        try:
            for index in indexes:
                self._fork(index, write_end)
            _wait_ready(read_end, len(indexes), self.children)
        finally:
            os.close(read_end)
            os.close(write_end)

    def _fork(self, index: int, ready: int) -> None:
        """Signals stay blocked across the fork: the child must not run the parent's handlers, and
        the parent records the child before a SIGTERM can interrupt it."""
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        pid = os.fork()
        if pid == 0:
            _worker_main(self.service, self.port, self.addresses, ready, previous, self.make_app)
        self.children[pid] = index
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    def _checkpoint(self) -> None:
        """The parent's checkpoint; its connection is closed again so no SQLite file descriptor
        (and its POSIX locks) is ever inherited by a forked worker."""
        state = self.service.shared_state(worker=False)
        try:
            state.checkpoint()
        finally:
            state.close()

    def _supervise(self) -> None:
        """Checkpoint the shared state now and then; replace a worker that exits (a worker failing
        right after start is a broken setup: that ends the pool)."""
        while True:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                time.sleep(CHECKPOINT_INTERVAL)  # a signal ends the sleep by raising StopPool
                self._checkpoint()
                continue
            index = self.children.pop(pid, None)
            if index is None:
                continue
            LOG.error("worker %d (pid %d) exited (%s); starting another", index, pid, _exit_text(status))
            time.sleep(1.0)
            self._start([index])

    def _stop_all(self) -> None:
        for pid in self.children:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10.0
        while self.children and time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                time.sleep(0.05)
            self.children.pop(pid, None)
        for pid in self.children:
            _signal(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        self.children.clear()


def _worker_main(service: CaService, port: int, addresses: list[tuple[int, Any]], ready: int,
                 previous: set[signal.Signals], make_app: AppFactory) -> NoReturn:
    """The forked child: never returns into the parent's code, whatever happens."""
    code = 1
    try:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        _die_with_parent()
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        asyncio.run(serve_worker(service, port, addresses, ready, make_app))
        code = 0
    except BaseException:  # report, then leave through os._exit
        LOG.exception("worker failed")
    finally:
        logging.shutdown()
        os._exit(code)


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG: the kernel sends SIGTERM when the parent dies (Linux only; else a no-op)."""
    import ctypes
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the call
        os._exit(1)


def _wait_ready(read_end: int, count: int, children: dict[int, int], deadline: float = 60.0) -> None:
    """Until `count` workers listen; a worker exiting first (bad certificate, port taken) is fatal."""
    stop = time.monotonic() + deadline
    received = 0
    while received < count:
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                del children[pid]
                raise RuntimeError(f"a CA service worker exited while starting ({_exit_text(status)})")
        if time.monotonic() > stop:
            raise RuntimeError("CA service workers did not start in time")
        if select.select([read_end], [], [], 0.1)[0]:
            received += len(os.read(read_end, count - received))


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _exit_text(status: int) -> str:
    return f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"status {os.waitstatus_to_exitcode(status)}"


def worker_count(config: CaServiceConfig) -> int:
    """config.workers, or one per CPU this process may run on."""
    if config.workers > 0:
        return config.workers
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def serve(config: CaServiceConfig, ready: Callable[[int], None] | None = None) -> None:
    """`ca serve`: check the CA and the serving certificate, then run the worker pool until SIGTERM
    or SIGINT (a configuration error is reported once, here, not by every worker)."""
    service = CaService(config)
    server_context(config)
    WorkerPool(service, worker_count(config), listen_addresses(config)).serve(ready)


def config_from_document(document: dict[str, Any], **overrides: Any) -> CaServiceConfig:
    merged = {**document, **{k: v for k, v in overrides.items() if v is not None}}
    for field in ("ca_cert", "ca_key", "tls_cert", "tls_key", "state_dir"):
        if field not in merged:
            raise ValueError(f"CA service configuration lacks {field}")
        merged[field] = Path(merged[field])
    for field in ("reserved_nodes", "service_sans"):
        if field in merged:
            merged[field] = tuple(merged[field])
    known = set(CaServiceConfig.__dataclass_fields__)
    unknown = sorted(set(merged) - known)
    if unknown:
        raise ValueError(f"unknown CA service setting {unknown[0]!r}")
    return CaServiceConfig(**merged)


def utc(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
