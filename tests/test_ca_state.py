"""The CA service's safety state: the replay memory (kept across restarts) and the failed-
authentication slow-down, on their own and through a running `kubesmith ca serve`."""

from __future__ import annotations

import asyncio
import signal

import aiohttp
import pytest
from ca_support import CFSSL, CaFiles, create_token, make_ca, start_ca_service

from kubesmith.ca import client as ca_client, tokens
from kubesmith.ca.client import Subject
from kubesmith.ca.server import Admission, ReplayMemory, Throttle
from kubesmith.pki import keys

pytestmark = pytest.mark.skipif(CFSSL is None, reason="ca_support needs cfssl (Debian golang-cfssl)")


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> CaFiles:
    return make_ca(tmp_path_factory.mktemp("ca"))


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


def test_a_replay_is_refused_after_a_restart_and_sigterm_ends_the_service(ca):
    token = create_token(ca, "--node", "w1")["token"]
    key, request = tokens.auth_key(token), sign_request()
    first = start_ca_service(ca)
    try:
        assert authsign(first.url, key, request) == (200, "")
        assert authsign(first.url, key, request) == (400, "replayed request")
        first.process.send_signal(signal.SIGTERM)
        assert first.process.wait(timeout=30) == 0
    finally:
        first.stop()
    second = start_ca_service(ca)
    try:
        assert authsign(second.url, key, request) == (400, "replayed request")
        assert authsign(second.url, key, sign_request())[0] == 200  # the token itself still works
    finally:
        second.stop()
    database = ca.directory / "state" / "ca-replays.db"
    assert (database.stat().st_mode & 0o777) == 0o600


def test_simultaneous_copies_of_one_request_are_signed_once(ca):
    token = create_token(ca, "--node", "w1")["token"]
    server = start_ca_service(ca)

    async def copies() -> list[tuple[int, str]]:
        request = sign_request()
        return list(await asyncio.gather(*(post_authsign(server.url, tokens.auth_key(token), request)
                                           for _ in range(12))))
    try:
        statuses = [status for status, _ in asyncio.run(copies())]
    finally:
        server.stop()
    assert sorted(statuses) == [200] + [400] * 11


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_replay_memory_claims_once_and_forgets_expired_tokens(tmp_path):
    clock = Clock()
    memory = ReplayMemory(tmp_path / "replays.db", clock)
    try:
        assert memory.claim(b"request a", "tok001", clock.now + 60)
        assert not memory.claim(b"request a", "tok001", clock.now + 60)
        assert memory.claim(b"request b", "tok001", clock.now + 60)
        clock.now += 61  # the token expired: its digests go at the next prune
        assert memory.claim(b"request c", "tok002", clock.now + 60)
        assert memory.claim(b"request a", "tok001", clock.now + 60)
    finally:
        memory.close()


def test_failures_double_the_penalty_and_a_success_clears_it():
    throttle = Throttle(0.5, 4.0, Clock())
    assert [throttle.failed("10.0.0.9") for _ in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert throttle.admit("10.0.0.9") == Admission(4.0, penalized=True)
    assert throttle.admit("10.0.0.8") == Admission(0.0, penalized=False)
    throttle.succeeded("10.0.0.9")
    assert throttle.admit("10.0.0.9") == Admission(0.0, penalized=False)


def test_a_burst_from_a_failing_address_gets_no_more_checks_than_requests_one_by_one():
    clock = Clock()
    throttle = Throttle(0.5, 2.0, clock)
    assert throttle.failed("10.0.0.7") == 0.5
    # requests arriving together each wait for their own slot, and the gaps double as the penalty
    # would if each failed (0.5, then 1, then 2); none is queued beyond the bound (its wait says
    # how long the queue is taken)
    admissions = [throttle.admit("10.0.0.7") for _ in range(5)]
    assert [a.wait for a in admissions] == [0.5, 1.5, 3.5, 3.5, 3.5]
    assert [a.queued for a in admissions] == [True, True, False, False, False]
    assert throttle.admit("10.0.0.6") == Admission(0.0, penalized=False)  # other addresses are not held up
    clock.now += 2.0  # a queued request fails: the penalty doubles; the taken slots stay taken
    assert throttle.failed("10.0.0.7") == 1.0
    assert throttle.admit("10.0.0.7").wait == 1.5
    clock.now += 60.0  # quiet for long: forgotten, served at once, counted from one again,
    assert throttle.admit("10.0.0.7") == Admission(0.0, penalized=False)
    assert throttle.failed("10.0.0.7") == 0.5
    assert [throttle.admit("10.0.0.7").wait for _ in range(2)] == [0.5, 1.5]  # with the first gaps too
