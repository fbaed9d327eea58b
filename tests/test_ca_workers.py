"""`kubesmith ca serve --workers N`: the properties that must hold whichever worker process a
request lands on (replay refusal, revocation, failed-auth slow-down), and the pool's lifecycle.

The kernel spreads connections over the workers (SO_REUSEPORT, by address hash); every helper
here opens a fresh connection per request, and each log line names the worker's pid, so a test
keeps sending until it has seen more than one worker answer (bounded), then checks the property.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sqlite3
import time
from pathlib import Path

import aiohttp
import pytest
from ca_support import (
    CFSSL,
    CaFiles,
    create_token,
    kubesmith,
    make_ca,
    start_ca_service,
)

from kubesmith.pki import keys
from kubesmith.runtime import ca_client, tokens
from kubesmith.runtime.ca_service import Admission, Claim, Database, SharedState
from kubesmith.runtime.ca_client import Subject

pytestmark = pytest.mark.skipif(CFSSL is None, reason="ca_support needs cfssl (Debian golang-cfssl)")
TRIES = 60  # fresh connections before giving up on seeing a second worker (chance 2**-59 with 2 workers)


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> CaFiles:
    return make_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def server(ca):
    running = start_ca_service(ca, "--workers", "2", "--failed-auth-delay", "0.1", "--max-failed-auth-delay", "0.8")
    try:
        yield running
    finally:
        running.stop()


def sign_request(cn: str = "system:node:w1", orgs: tuple[str, ...] = ("system:nodes",)) -> bytes:
    csr = ca_client.build_csr(keys.generate("ecdsa-p256"), Subject(cn, orgs))
    return ca_client.sign_request_bytes(csr, "kubelet-client", None)


async def post_authsign(url: str, key: bytes, request: bytes) -> tuple[int, str]:
    """One authsign over a new connection: (HTTP status, error message or "")."""
    async with aiohttp.ClientSession() as session, \
            session.post(url + ca_client.AUTHSIGN_PATH, json=ca_client.authsign_body(key, request),
                         ssl=False) as answer:
        document = await answer.json(content_type=None)
        return answer.status, (document["errors"] or [{"message": ""}])[0]["message"]


def authsign(url: str, key: bytes, request: bytes) -> tuple[int, str]:
    return asyncio.run(post_authsign(url, key, request))


def concurrent_authsign(url: str, key: bytes, request: bytes, copies: int) -> list[int]:
    """The same request sent `copies` times at once, each over its own connection."""
    async def go() -> list[tuple[int, str]]:
        return list(await asyncio.gather(*(post_authsign(url, key, request) for _ in range(copies))))
    return [status for status, _ in asyncio.run(go())]


def new_lines(server, since: int) -> list[str]:
    return server.log_text().splitlines()[since:]


def pids(lines: list[str], pattern: str) -> list[int]:
    """Pids of the workers that logged a line matching `pattern`, in order."""
    return [int(m.group(1)) for line in lines if (m := re.match(r"kubesmith ca\[(\d+)\]: .*" + pattern, line))]


def worker_pids(parent: int) -> set[int]:
    return {int(pid) for pid in Path(f"/proc/{parent}/task/{parent}/children").read_text().split()}


def test_the_log_names_two_workers_and_the_pool_parent(server):
    assert re.search(r"serving on https://\S+ \(2 workers\)", server.log_text())
    assert len(worker_pids(server.process.pid)) == 2


def test_a_replay_is_refused_by_every_worker(ca, server):
    token = create_token(ca, "--node", "w1")["token"]
    key, request = tokens.auth_key(token), sign_request()
    since = len(server.log_text().splitlines())
    assert authsign(server.url, key, request) == (200, "")
    issuer = pids(new_lines(server, since), "issued serial=")
    assert len(issuer) == 1
    for _ in range(TRIES):
        assert authsign(server.url, key, request) == (400, "replayed request")
        if set(pids(new_lines(server, since), "replayed request")) - set(issuer):
            break
    else:
        pytest.fail("every replay landed on the issuing worker; the cross-worker case was never exercised")


def test_simultaneous_copies_of_one_request_are_signed_once(ca, server):
    token = create_token(ca, "--node", "w1")["token"]
    assert authsign(server.url, tokens.auth_key(token), sign_request())[0] == 200  # clears earlier slow-downs
    statuses = concurrent_authsign(server.url, tokens.auth_key(token), sign_request(), 12)
    assert sorted(statuses) == [200] + [400] * 11


def test_a_revoked_token_is_refused_by_every_worker(ca, server):
    created = create_token(ca, "--node", "w1")
    key = tokens.auth_key(created["token"])
    since = len(server.log_text().splitlines())
    for _ in range(TRIES):  # both workers have used (and cached) the token
        assert authsign(server.url, key, sign_request())[0] == 200
        if len(set(pids(new_lines(server, since), f"by=token:{created['id']}"))) == 2:
            break
    else:
        pytest.fail("one worker issued everything; the cross-worker case was never exercised")
    kubesmith("token", "revoke", created["id"], "--state-dir", str(ca.directory / "state"))
    since = len(server.log_text().splitlines())
    for _ in range(TRIES):
        assert authsign(server.url, key, sign_request()) == (400, "invalid token")
        if len(set(pids(new_lines(server, since), "invalid token"))) == 2:
            break
    else:
        pytest.fail("every refusal came from one worker; the cross-worker case was never exercised")


def test_failed_authentication_slow_down_is_counted_across_workers(ca, server):
    token = create_token(ca, "--node", "w1")["token"]
    request = sign_request()
    assert authsign(server.url, tokens.auth_key(token), sign_request())[0] == 200  # success clears earlier counts
    since = len(server.log_text().splitlines())
    for attempt in range(TRIES):
        assert authsign(server.url, bytes(32), request) == (400, "invalid token")
        if attempt >= 4 and len(set(pids(new_lines(server, since), "invalid token"))) == 2:
            break
    else:
        pytest.fail("every failure landed on one worker; the cross-worker case was never exercised")
    waits = [float(w) for w in re.findall(r"next attempts wait ([0-9.]+)s", "\n".join(new_lines(server, since)))]
    # one count for the address, whichever worker saw the failure: 0.1, 0.2, 0.4, then the bound
    assert waits == [min(0.8, 0.1 * 2 ** i) for i in range(len(waits))]
    assert authsign(server.url, tokens.auth_key(token), request)[0] == 200  # a valid request still passes


def test_a_dead_worker_is_replaced_and_sigterm_ends_every_worker(ca):
    running = start_ca_service(ca, "--workers", "2")
    try:
        before = worker_pids(running.process.pid)
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (victim in worker_pids(running.process.pid)
                                               or len(worker_pids(running.process.pid)) < 2):
            time.sleep(0.1)
        after = worker_pids(running.process.pid)
        assert victim not in after and len(after) == 2
        assert f"(pid {victim}) exited (signal 9); starting another" in running.log_text()
        token = create_token(ca, "--node", "w1")["token"]
        assert authsign(running.url, tokens.auth_key(token), sign_request())[0] == 200
    finally:
        running.stop()
    assert running.process.returncode == 0
    assert not [pid for pid in after if Path(f"/proc/{pid}").exists()]  # reaped by the pool, none orphaned


def test_the_shared_state_databases_are_private(ca, server):
    for name in ("ca-replays.db", "ca-throttle.db"):
        database = ca.directory / "state" / name
        assert database.exists() and (database.stat().st_mode & 0o777) == 0o600


# ---- the shared state itself, as two workers see it (two connections to the same files) --------

class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_shared_state_claims_once_counts_failures_together_and_forgets_expired(tmp_path):
    clock = Clock()
    one, two = (SharedState(tmp_path, 0.5, 4.0, clock=clock) for _ in range(2))
    try:
        first = Claim(b"a" * 32, "tok001", clock.now + 60)
        assert one.claim_all([first]) == [True]
        assert two.claim_all([first]) == [False]  # the other worker sees the claim
        # one batch: a request claimed twice in it is a replay the second time; a refused claim
        # does not undo the others of its transaction
        assert two.claim_all([Claim(b"c" * 32, "tok001", clock.now + 60), first,
                              Claim(b"c" * 32, "tok001", clock.now + 60)]) == [True, False, False]
        assert one.claim_all([Claim(b"c" * 32, "tok001", clock.now + 60)]) == [False]
        assert [one.failed("10.0.0.9"), two.failed("10.0.0.9"), one.failed("10.0.0.9")] == [0.5, 1.0, 2.0]
        assert two.admit("10.0.0.9") == Admission(2.0, penalized=True)
        assert one.admit("10.0.0.8") == Admission(0.0, penalized=False)
        two.succeeded("10.0.0.9")
        assert one.admit("10.0.0.9") == Admission(0.0, penalized=False)
        clock.now += 61  # the token expired: its digests go at the next prune
        assert one.claim_all([Claim(b"b" * 32, "tok002", clock.now + 60)]) == [True]
        assert two.claim_all([first]) == [True]
    finally:
        one.close()
        two.close()


def test_a_burst_from_a_failing_address_gets_no_more_checks_than_requests_one_by_one(tmp_path):
    clock = Clock()
    one, two = (SharedState(tmp_path, 0.5, 2.0, clock=clock) for _ in range(2))
    try:
        assert one.failed("10.0.0.7") == 0.5
        # requests arriving together, in either worker: each waits for its own slot, and the gaps
        # double as the penalty would if each failed (0.5, then 1, then 2); none is queued beyond
        # the bound (its wait says how long the queue is taken)
        admissions = [(one if i % 2 else two).admit("10.0.0.7") for i in range(5)]
        assert [a.wait for a in admissions] == [0.5, 1.5, 3.5, 3.5, 3.5]
        assert [a.queued for a in admissions] == [True, True, False, False, False]
        assert two.admit("10.0.0.6") == Admission(0.0, penalized=False)  # other addresses are not held up
        clock.now += 2.0  # a queued request fails: the penalty doubles; the taken slots stay taken
        assert one.failed("10.0.0.7") == 1.0
        assert one.admit("10.0.0.7").wait == 1.5
        clock.now -= 10.0  # the wall clock steps back: the queue starts again instead of locking out
        assert two.admit("10.0.0.7") == Admission(0.0, penalized=True)
        clock.now += 60.0  # quiet for long: forgotten, served at once, counted from one again,
        assert two.admit("10.0.0.7") == Admission(0.0, penalized=False)
        assert two.failed("10.0.0.7") == 0.5
        assert [one.admit("10.0.0.7").wait for _ in range(2)] == [0.5, 1.5]  # with the first gaps too
    finally:
        one.close()
        two.close()


def test_a_transaction_whose_commit_fails_leaves_no_lock_behind(tmp_path):
    """A failed COMMIT must roll back: a connection left inside its transaction would hold the
    write lock and fail every later transaction of the worker."""
    schema = ("PRAGMA foreign_keys = ON",
              "CREATE TABLE IF NOT EXISTS parent (id INTEGER PRIMARY KEY)",
              "CREATE TABLE IF NOT EXISTS child (parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)")
    database = Database(tmp_path / "t.db", schema, worker=True)
    try:
        with pytest.raises(sqlite3.IntegrityError):  # checked only at COMMIT (deferred)
            with database.transaction() as db:
                db.execute("INSERT INTO child (parent) VALUES (1)")
        with database.transaction() as db:
            db.execute("INSERT INTO parent (id) VALUES (1)")
            db.execute("INSERT INTO child (parent) VALUES (1)")
        assert database.read("SELECT count(*) FROM child") == (1,)
    finally:
        database.close()
