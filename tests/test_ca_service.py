"""`kubesmith ca serve` against real cfssl 1.2 both ways, its token scopes, replay and tamper
refusals, failed-auth slow-down, mTLS renewal, and `kubesmith join` against it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import json
import os
import re
import shutil
import ssl
import stat
import subprocess
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ca_support import (CFSSL, KUBESMITH, CaFiles, ca_args, cfssl_config, create_token, env_with_ca, load_cert,
                        make_ca, start_ca_service, start_cfssl_serve)
from ca_support import request as plan_request
from conftest import kubesmith
from kubesmith.ca import client as ca_client, tokens
from kubesmith.ca.client import CaClientError, Subject
from kubesmith.pki import issue, keys
from kubesmith.pki.certlist import NODE_SCOPED

pytestmark = pytest.mark.skipif(CFSSL is None, reason="cfssl (Debian golang-cfssl) is not installed")


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> CaFiles:
    return make_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def server(ca):
    running = start_ca_service(ca, "--failed-auth-delay", "0.05", "--max-failed-auth-delay", "0.4",
                               "--reserve-node", "cp1", "--service-san", "kubernetes", "--service-san", "api",
                               "--service-san", "10.96.0.1")
    try:
        yield running
    finally:
        running.stop()


def raw_authsign(url: str, key: bytes, request: bytes, mac: bytes | None = None) -> tuple[int, dict]:
    async def go() -> tuple[int, dict]:
        body = {"token": base64.b64encode(mac if mac is not None else tokens.request_mac(key, request)).decode(),
                "request": base64.b64encode(request).decode()}
        async with aiohttp.ClientSession() as session:
            async with session.post(url + ca_client.AUTHSIGN_PATH, json=body, ssl=False) as answer:
                return answer.status, await answer.json(content_type=None)
    return asyncio.run(go())


def sign_request(cn: str, orgs: tuple[str, ...] = (), profile: str = "", hosts: tuple[str, ...] | None = None,
                 key=None) -> bytes:
    key = key or keys.generate("ecdsa-p256")
    csr = ca_client.build_csr(key, Subject(cn, orgs))
    return ca_client.sign_request_bytes(csr, profile, hosts)


def authsign_as(server, ca, token: str, cn: str, orgs: tuple[str, ...], profile: str,
                dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()):
    async def go():
        key = keys.generate("ecdsa-p256")
        async with aiohttp.ClientSession() as session:
            pem = await ca_client.authsign(session, server.url, tokens.auth_key(token), key,
                                           Subject(cn, orgs, dns, ips), profile, ca.ca_pem())
        return key, load_cert(pem)
    return asyncio.run(go())


# ---- interop with real cfssl 1.2 -----------------------------------------------------------

def cfssl_client(tmp_path: Path, url: str, auth_key_hex: str, profile: str) -> Path:
    config = cfssl_config(auth_key_hex, {profile: ["signing", "key encipherment", "client auth"]}, remote=url)
    path = tmp_path / "client.json"
    path.write_text(json.dumps(config))
    return path


def openssl_csr(tmp_path: Path, subject: str) -> Path:
    key, csr = tmp_path / "node.key", tmp_path / "node.csr"
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key)], check=True)
    subprocess.run(["openssl", "req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr)], check=True)
    return csr


def test_cfssl_client_obtains_a_certificate_with_a_valid_token(tmp_path, ca, server):
    token = create_token(ca, "--node", "w1")
    config = cfssl_client(tmp_path, server.url, token["cfssl_auth_key"], "kubelet-client")
    csr = openssl_csr(tmp_path, "/O=system:nodes/CN=system:node:w1")
    result = subprocess.run([CFSSL, "sign", "-config", str(config), "-profile", "kubelet-client", str(csr)],
                            capture_output=True, text=True, env=env_with_ca(ca), timeout=60)
    assert result.returncode == 0, result.stderr
    cert = load_cert(json.loads(result.stdout)["cert"])
    cert.verify_directly_issued_by(load_cert(ca.ca_pem()))
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:w1"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == \
        [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert f"serial={cert.serial_number:x}" in server.log_text()
    assert f"by=token:{token['id']}" in server.log_text()


def test_cfssl_client_with_a_wrong_token_gets_400_invalid_token(tmp_path, ca, server):
    token = create_token(ca, "--node", "w1")
    wrong = ("0" if token["cfssl_auth_key"][0] != "0" else "1") + token["cfssl_auth_key"][1:]
    config = cfssl_client(tmp_path, server.url, wrong, "kubelet-client")
    csr = openssl_csr(tmp_path, "/O=system:nodes/CN=system:node:w1")
    result = subprocess.run([CFSSL, "sign", "-config", str(config), "-profile", "kubelet-client", str(csr)],
                            capture_output=True, text=True, env=env_with_ca(ca), timeout=60)
    assert result.returncode != 0
    assert '\\"code\\": 400' in result.stderr and "invalid token" in result.stderr
    status, body = raw_authsign(server.url, bytes.fromhex(wrong), sign_request("system:node:w1", ("system:nodes",)))
    assert status == 400
    assert body == {"success": False, "result": None, "errors": [{"code": 400, "message": "invalid token"}],
                    "messages": []}


def test_kubesmith_client_obtains_a_certificate_from_real_cfssl_serve(tmp_path, ca):
    auth_hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
    # cfssl's auth key for kubesmith's client is a token's derived key; here a fixed token's
    token = "abcdef.0123456789abcdef0123456789abcdef"
    auth_hex = tokens.auth_key(token).hex()
    config = cfssl_config(auth_hex, {"kubelet-client": ["signing", "key encipherment", "client auth"]})
    cfssl = start_cfssl_serve(tmp_path, ca, config)
    try:
        async def go():
            async with aiohttp.ClientSession() as session:
                pin = ca_client.spki_hash(load_cert(ca.ca_pem()))
                ca_pem = await ca_client.pinned_ca(session, cfssl.url, pin)
                key = keys.generate("ecdsa-p256")
                pem = await ca_client.authsign(session, cfssl.url, tokens.auth_key(token), key,
                                               Subject("system:node:w9", ("system:nodes",)), "kubelet-client", ca_pem)
                with pytest.raises(CaClientError, match="400"):
                    await ca_client.authsign(session, cfssl.url, bytes(32), key,
                                             Subject("system:node:w9", ("system:nodes",)), "kubelet-client", ca_pem)
                return key, load_cert(pem)
        key, cert = asyncio.run(go())
    finally:
        cfssl.stop()
    cert.verify_directly_issued_by(load_cert(ca.ca_pem()))
    assert keys.same_public_key(cert.public_key(), key.public_key())
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:w9"


# ---- pinning -------------------------------------------------------------------------------

def test_pin_must_match_before_anything_is_trusted(ca, server):
    async def go(pin: str) -> bytes:
        async with aiohttp.ClientSession() as session:
            return await ca_client.pinned_ca(session, server.url, pin)
    right = ca_client.spki_hash(load_cert(ca.ca_pem()))
    assert load_cert(asyncio.run(go(right))) == load_cert(ca.ca_pem())
    with pytest.raises(CaClientError, match="refusing to trust"):
        asyncio.run(go("sha256:" + "0" * 64))
    # the pin is the SPKI hash that openssl computes, as kubeadm documents it
    spki = subprocess.run(f"openssl x509 -pubkey -noout -in {ca.ca_cert} | openssl pkey -pubin -outform der "
                          "| sha256sum", shell=True, capture_output=True, text=True, check=True).stdout.split()[0]
    assert right == f"sha256:{spki}"


# ---- token scope ---------------------------------------------------------------------------

def test_node_token_gets_exactly_its_node_certificates(ca, server):
    token = create_token(ca, "--node", "w2", "--address", "10.0.0.22")["token"]
    _, client = authsign_as(server, ca, token, "system:node:w2", ("system:nodes",), "kubelet-client")
    _, serving = authsign_as(server, ca, token, "system:node:w2", ("system:nodes",), "kubelet-serving",
                             dns=("w2",), ips=("10.0.0.22",))
    _, agent = authsign_as(server, ca, token, "kubesmith:agent:w2", ("kubesmith:agents",), "agent-client")
    _, proxy = authsign_as(server, ca, token, "system:kube-proxy", (), "kube-proxy-client")
    san = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["w2"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["10.0.0.22"]
    assert ExtendedKeyUsageOID.SERVER_AUTH in serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    for cert in (client, agent, proxy):
        assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == \
            [ExtendedKeyUsageOID.CLIENT_AUTH]


@pytest.mark.parametrize(("cn", "orgs", "profile", "hosts", "message"), [
    ("system:kube-controller-manager", (), "controller-manager-client", None, "not allowed for a node token"),
    ("system:kube-controller-manager", (), "", None, "not a node identity"),
    ("system:node:w3", ("system:nodes",), "kube-proxy-client", None, "issues CN"),
    ("system:node:w3", ("system:masters",), "kubelet-client", None, "system:masters"),
    ("system:node:w3", ("system:nodes", "system:masters"), "kubelet-client", None, "system:masters"),
    ("system:node:w4", ("system:nodes",), "kubelet-client", None, "not 'w4'"),
    ("kubesmith:agent:w4", ("kubesmith:agents",), "agent-client", None, "not 'w4'"),
    ("system:node:w3", ("system:nodes",), "kubelet-serving", ("w3", "w4"), "'w4' is not this node's name"),
    ("system:node:w3", ("system:nodes",), "kubelet-serving", ("w3", "10.0.0.99"), "10.0.0.99 is not bound"),
    ("system:node:w3", ("system:nodes",), "kubelet-client", ("w3",), "carries no subject alternative names"),
    ("kube-apiserver", (), "apiserver", ("kubernetes",), "not allowed for a node token"),
])
def test_node_token_is_refused_outside_its_scope(ca, server, cn, orgs, profile, hosts, message):
    token = create_token(ca, "--node", "w3", "--address", "10.0.0.23")["token"]
    status, body = raw_authsign(server.url, tokens.auth_key(token), sign_request(cn, orgs, profile, hosts))
    assert status == 403, body
    assert message in body["errors"][0]["message"]
    assert body["success"] is False and body["result"] is None


def test_unbound_token_binds_to_its_first_node_and_not_to_cluster_hosts(ca, server):
    token = create_token(ca)["token"]
    status, body = raw_authsign(server.url, tokens.auth_key(token), sign_request("system:node:cp1", ("system:nodes",),
                                                                                 "kubelet-client"))
    assert status == 403 and "already belongs to the cluster" in body["errors"][0]["message"]
    authsign_as(server, ca, token, "system:node:w5", ("system:nodes",), "kubelet-client")
    status, body = raw_authsign(server.url, tokens.auth_key(token), sign_request("system:node:w6", ("system:nodes",),
                                                                                 "kubelet-client"))
    assert status == 403 and "for node 'w5'" in body["errors"][0]["message"]


@pytest.mark.parametrize(("node", "profile", "hosts", "message", "rightful"), [
    ("kubernetes.default.svc.cluster.local", "kubelet-serving", ("kubernetes.default.svc.cluster.local",),
     "not a DNS label", "w8a"),
    ("*", "kubelet-serving", ("*",), "not a DNS label", "w8b"),
    ("W7", "kubelet-client", None, "not a DNS label", "w8c"),
    ("kubernetes", "kubelet-serving", ("kubernetes",), "'kubernetes' names the cluster's API server", "w8d"),
    ("api", "kubelet-client", None, "'api' names the cluster's API server", "w8e"),
])
def test_no_token_yields_a_certificate_for_the_api_servers_names(ca, server, node, profile, hosts, message,
                                                                 rightful):
    """kubernetes-ca also signs the API server's certificate: a node serving certificate for one of
    its names, or a wildcard, would impersonate it. A refused name does not bind the token."""
    token = create_token(ca)["token"]
    status, body = raw_authsign(server.url, tokens.auth_key(token),
                                sign_request(f"system:node:{node}", ("system:nodes",), profile, hosts))
    assert status == 403 and message in body["errors"][0]["message"], body
    _, cert = authsign_as(server, ca, token, f"system:node:{rightful}", ("system:nodes",), "kubelet-client")
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{rightful}"


def test_both_grants_refuse_the_api_servers_names_themselves(ca):
    """The policy, not each of its callers, keeps the API server's names from nodes."""
    from kubesmith.ca import policy as ca_policy
    taken = ca_policy.normalized_sans(("api", "10.96.0.1"))
    joining = ca_policy.parse_sign_request(sign_request("system:node:api", ("system:nodes",), "kubelet-client"))
    assert ca_policy.node_grant(None, (), joining, service_sans=frozenset()).node == "api"
    with pytest.raises(ca_policy.PolicyError, match="'api' names the cluster's API server"):
        ca_policy.node_grant(None, (), joining, service_sans=taken)
    # the names every API server certificate carries need no settings to be refused
    fixed = ca_policy.parse_sign_request(sign_request("system:node:kubernetes", ("system:nodes",), "kubelet-client"))
    with pytest.raises(ca_policy.PolicyError, match="'kubernetes' names the cluster's API server"):
        ca_policy.node_grant(None, (), fixed, service_sans=frozenset())
    key, now = keys.generate("ecdsa-p256"), dt.datetime.now(dt.timezone.utc)
    current = issue.new_leaf(plan_request("x", "system:node:w7", ("system:nodes",), ips=("10.96.0.1",)),
                             key.public_key(), load_cert(ca.ca_pem()), keys.load(ca.ca_key.read_bytes(), "ca"), 1, now)
    renewing = ca_policy.parse_sign_request(sign_request("system:node:w7", ("system:nodes",), "", ("10.96.0.1",),
                                                         key=key))
    grant = ca_policy.renewal_grant("w7", current, renewing, load_cert(ca.ca_pem()), now, service_sans=frozenset())
    assert grant.request.ip_addresses == ("10.96.0.1",)
    with pytest.raises(ca_policy.PolicyError, match="'10.96.0.1' names the cluster's API server"):
        ca_policy.renewal_grant("w7", current, renewing, load_cert(ca.ca_pem()), now, service_sans=taken)


def test_a_token_for_the_api_servers_name_is_refused_at_creation(ca, server):
    """The same rules when the operator names the node: `token create` says so before a token exists."""
    config = ca.directory / "ca-service.json"
    config.write_text(json.dumps({"service_sans": ["kubernetes", "10.96.0.1"]}))
    for extra, message in ((("--node", "kubernetes"), "'kubernetes' names the cluster's API server"),
                           (("--node", "w1", "--address", "10.96.0.1"), "'10.96.0.1' names the cluster's API server"),
                           (("--node", "w1.example.com"), "not a DNS label")):
        result = kubesmith("token", "create", "--ca-config", str(config), *ca_args(ca), *extra)
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1 and not result.stdout
    token = create_token(ca, "--node", "api")  # without the settings file, only the server refuses
    status, body = raw_authsign(server.url, tokens.auth_key(token["token"]),
                                sign_request("system:node:api", ("system:nodes",), "kubelet-client"))
    assert status == 403 and "names the cluster's API server" in body["errors"][0]["message"]


# ---- expiry, revocation, tampering, replay, slow-down ------------------------------------------

def test_expired_and_revoked_tokens_are_refused(ca, server):
    expired = create_token(ca, "--node", "w1", "--ttl", "1s")
    revoked = create_token(ca, "--node", "w1")
    assert kubesmith("token", "revoke", revoked["id"], "--state-dir",
                     str(ca.directory / "state")).returncode == 0
    request = sign_request("system:node:w1", ("system:nodes",), "kubelet-client")
    import time
    time.sleep(max(0.0, expired_at(expired) - time.time() + 0.2))
    for token in (expired, revoked):
        status, body = raw_authsign(server.url, tokens.auth_key(token["token"]), request)
        assert (status, body["errors"][0]["message"]) == (400, "invalid token")


def expired_at(token: dict) -> float:
    return dt.datetime.strptime(token["expires"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc).timestamp() + 1


def test_modified_and_replayed_requests_are_refused(ca, server):
    token = create_token(ca, "--node", "w1")["token"]
    key = tokens.auth_key(token)
    request = sign_request("system:node:w1", ("system:nodes",), "kubelet-client")
    mac = tokens.request_mac(key, request)
    modified = request.replace(b"kubelet-client", b"kubelet-serving")
    assert raw_authsign(server.url, key, modified, mac=mac)[1]["errors"][0]["message"] == "invalid token"
    status, body = raw_authsign(server.url, key, request)
    assert status == 200 and body["success"] is True
    status, body = raw_authsign(server.url, key, request)
    assert (status, body["errors"][0]["message"]) == (400, "replayed request")


def request_with_a_broken_csr_signature(cn: str, orgs: tuple[str, ...], profile: str) -> bytes:
    document = json.loads(sign_request(cn, orgs, profile))
    der = bytearray(x509.load_pem_x509_csr(document["certificate_request"].encode()).public_bytes(Encoding.DER))
    der[-1] ^= 0x01  # the last byte of the ECDSA signature's s
    document["certificate_request"] = ssl.DER_cert_to_PEM_cert(bytes(der)).replace("CERTIFICATE", "CERTIFICATE REQUEST")
    return json.dumps(document).encode()


def test_concurrent_requests_each_get_their_own_answer_and_a_replay_wins_once(ca, server):
    """Requests that arrive together each get their own certificate or their own refusal."""
    token = create_token(ca, "--node", "w2")["token"]
    key = tokens.auth_key(token)
    distinct = [sign_request("system:node:w2", ("system:nodes",), "kubelet-client") for _ in range(12)]
    twice = sign_request("system:node:w2", ("system:nodes",), "kubelet-client")
    bad_signature = request_with_a_broken_csr_signature("system:node:w2", ("system:nodes",), "kubelet-client")
    # a success clears the slow-down earlier refusals left (a penalized address is served one at a time)
    assert raw_authsign(server.url, key, sign_request("system:node:w2", ("system:nodes",), "kubelet-client"))[0] == 200
    since = len(server.log_text().splitlines())

    async def go() -> list[tuple[int, dict]]:
        connector = aiohttp.TCPConnector(limit=32, ssl=False)
        async with aiohttp.ClientSession(connector=connector) as session:
            async def post(request: bytes) -> tuple[int, dict]:
                async with session.post(server.url + ca_client.AUTHSIGN_PATH,
                                        json=ca_client.authsign_body(key, request)) as answer:
                    return answer.status, await answer.json(content_type=None)
            return await asyncio.gather(*(post(r) for r in (*distinct, twice, twice, twice, bad_signature)))

    answers = asyncio.run(go())
    assert all(status == 200 for status, _ in answers[:12])
    serials = {load_cert(body["result"]["certificate"]).serial_number for _, body in answers[:12]}
    assert len(serials) == 12
    replayed = answers[12:15]
    assert sorted(status for status, _ in replayed) == [200, 400, 400]
    assert [body["errors"][0]["message"] for status, body in replayed if status == 400] == ["replayed request"] * 2
    assert answers[15][0] == 400 and "signature does not verify" in answers[15][1]["errors"][0]["message"]
    # a replay is authentic, only stale: no guess at a token, so it does not slow the address down
    assert "next attempts wait" not in "\n".join(server.log_text().splitlines()[since:])


def test_repeated_failures_from_one_address_are_slowed_down(ca, server):
    request = sign_request("system:node:w1", ("system:nodes",), "kubelet-client")
    before = len(re.findall(r"next attempts wait", server.log_text()))
    for _ in range(5):
        raw_authsign(server.url, bytes(32), request)
    waits = [float(w) for w in re.findall(r"next attempts wait ([0-9.]+)s", server.log_text())][before:]
    assert len(waits) == 5
    assert waits == sorted(waits) and waits[-1] > waits[0]  # doubles per failure...
    assert max(waits) <= 0.4  # ...up to the configured bound
    token = create_token(ca, "--node", "w1")["token"]  # a valid request still succeeds afterwards
    assert raw_authsign(server.url, tokens.auth_key(token), request)[0] == 200


def test_parallel_failures_from_one_address_queue_and_the_overflow_is_refused_unchecked(ca, server):
    request = sign_request("system:node:w1", ("system:nodes",), "kubelet-client")
    body = {"token": base64.b64encode(bytes(32)).decode(), "request": base64.b64encode(request).decode()}
    assert raw_authsign(server.url, bytes(32), request)[0] == 400  # the address is penalized now

    async def burst(count: int) -> list[tuple[int, str | None, str]]:
        async with aiohttp.ClientSession() as session:
            async def one() -> tuple[int, str | None, str]:
                async with session.post(server.url + ca_client.AUTHSIGN_PATH, json=body, ssl=False) as answer:
                    document = await answer.json(content_type=None)
                    return answer.status, answer.headers.get("Retry-After"), document["errors"][0]["message"]
            return await asyncio.gather(*(one() for _ in range(count)))

    answers = asyncio.run(burst(40))
    # 40 guesses at once: the address is served one per penalty, up to the bound (0.4 s) of queue;
    # the rest are refused without looking at their token (before, all 40 were checked together)
    checked = [message for status, _, message in answers if status == 400]
    unchecked = [(retry, message) for status, retry, message in answers if status == 429]
    assert len(checked) + len(unchecked) == 40
    assert checked and set(checked) == {"invalid token"}
    assert unchecked and all(retry is not None and int(retry) >= 1 and "too many failed authentications" in message
                          for retry, message in unchecked)
    assert "unchecked: too many failed authentications" in server.log_text()
    token = create_token(ca, "--node", "w1")["token"]  # the queue drains; a valid request passes and clears
    assert raw_authsign(server.url, tokens.auth_key(token), request)[0] == 200


def test_bodies_held_back_to_arrive_together_get_no_more_checks(ca, server):
    """A clean address: 40 connections send all but the last byte of a wrong-token request, then
    the last bytes together. The first check's failure counts before the next check starts, so
    the rest queue or get 429 (admitted at arrival, all 40 were checked)."""
    token = create_token(ca, "--node", "w16")["token"]
    request = sign_request("system:node:w16", ("system:nodes",), "kubelet-client")
    assert raw_authsign(server.url, tokens.auth_key(token), request)[0] == 200  # the address starts clean
    body = json.dumps({"token": base64.b64encode(bytes(32)).decode(),
                       "request": base64.b64encode(request).decode()}).encode()
    head = (f"POST {ca_client.AUTHSIGN_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    port = int(server.url.rsplit(":", 1)[1])

    async def held_back(count: int) -> list[int]:
        context = ssl.create_default_context(cadata=ca.ca_pem().decode())
        connections = [await asyncio.open_connection("127.0.0.1", port, ssl=context) for _ in range(count)]
        for _, writer in connections:
            writer.write(head + body[:-1])
            await writer.drain()
        await asyncio.sleep(0.5)  # every request now waits for its last byte
        for _, writer in connections:
            writer.write(body[-1:])
        statuses = []
        for reader, writer in connections:
            statuses.append(int((await reader.readline()).split()[1]))
            writer.close()
        return statuses

    statuses = asyncio.run(held_back(40))
    assert set(statuses) <= {400, 429} and 429 in statuses
    assert statuses.count(400) <= 6, statuses  # the free check, then one per slot up to the bound
    assert raw_authsign(server.url, tokens.auth_key(token), sign_request("system:node:w16", ("system:nodes",),
                                                                         "kubelet-client"))[0] == 200


def test_a_token_revoked_while_its_request_waits_signs_nothing(tmp_path):
    """Authenticated, then waiting (for its slow-down slot, for binding) when the token is revoked:
    the check right before signing refuses it; a request with a live token is signed."""
    from kubesmith.ca import policy as ca_policy
    from kubesmith.ca.server import CaService, CaServiceConfig, sign_for_token
    files = make_ca(tmp_path / "ca")
    service = CaService(CaServiceConfig(files.ca_cert, files.ca_key, files.tls_cert, files.tls_key,
                                        tmp_path / "state"))
    try:
        def authenticated(node: str) -> tuple[tokens.NewToken, bytes, ca_policy.Grant, ca_policy.SignRequest]:
            token = service.tokens.create(3600, node)
            raw = sign_request(f"system:node:{node}", ("system:nodes",), "kubelet-client")
            request = ca_policy.parse_sign_request(raw)
            return token, raw, ca_policy.node_grant(node, (), request, service_sans=frozenset()), request

        revoked, kept = authenticated("w30"), authenticated("w31")
        service.tokens.revoke(revoked[0].record.id)
        with pytest.raises(ca_policy.PolicyError, match="invalid token"):
            sign_for_token(service, revoked[0].record, *revoked[1:], "127.0.0.1")
        pem = sign_for_token(service, kept[0].record, *kept[1:], "127.0.0.1")
    finally:
        service.replays.close()
    assert load_cert(pem.encode()).subject.rfc4514_string() == "CN=system:node:w31,O=system:nodes"


def test_malformed_bodies_get_cfssl_errors_not_crashes(server):
    async def post(data: bytes) -> tuple[int, dict]:
        async with aiohttp.ClientSession() as session:
            async with session.post(server.url + ca_client.AUTHSIGN_PATH, data=data, ssl=False) as answer:
                return answer.status, await answer.json(content_type=None)
    for data in (b"not json", b"[]", b'{"token": "%%%", "request": "x"}', b"[" * 30000):
        status, body = asyncio.run(post(data))
        assert status == 400 and body["success"] is False and body["errors"][0]["code"] == 400


def test_malformed_sign_requests_from_a_token_holder_get_400(ca, server):
    key = tokens.auth_key(create_token(ca, "--node", "w13")["token"])
    nested = b'{"certificate_request": ' + b"[" * 30000 + b"}"
    private = keys.generate("ecdsa-p256")
    from cryptography.hazmat.primitives import hashes
    broken_san = x509.UnrecognizedExtension(x509.oid.ExtensionOID.SUBJECT_ALTERNATIVE_NAME, b"\x30\x03\x82\x05")
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "system:node:w13")]))
           .add_extension(broken_san, critical=False).sign(private, hashes.SHA256()))
    bad_extension = ca_client.sign_request_bytes(csr.public_bytes(Encoding.PEM), "", None)
    for request, message in ((nested, "malformed sign request"), (bad_extension, "extensions do not parse")):
        status, body = raw_authsign(server.url, key, request)
        assert status == 400 and message in body["errors"][0]["message"], body


def test_two_unbound_tokens_racing_for_one_node_name_cannot_both_win(ca, server):
    """Binding checks and takes the name under the store's lock, in whichever worker."""
    async def race(node: str, keys_: list[bytes]) -> list[int]:
        async with aiohttp.ClientSession() as session:
            async def one(key: bytes) -> int:
                request = sign_request(f"system:node:{node}", ("system:nodes",), "kubelet-client")
                async with session.post(server.url + ca_client.AUTHSIGN_PATH, ssl=False,
                                        json=ca_client.authsign_body(key, request)) as answer:
                    return answer.status
            return list(await asyncio.gather(*(one(key) for key in keys_)))
    for round_ in range(5):
        racers = [tokens.auth_key(create_token(ca)["token"]) for _ in range(4)]
        statuses = asyncio.run(race(f"race{round_}", racers))
        assert sorted(statuses) == [200, 403, 403, 403], statuses
    listed = json.loads(kubesmith("token", "list", "-o", "json", "--state-dir", str(ca.directory / "state")).stdout)
    assert sorted(row["node"] for row in listed if (row["node"] or "").startswith("race")) == \
        [f"race{n}" for n in range(5)]


# ---- a join's requests are checked together before any is signed ---------------------------

def test_a_join_outside_its_tokens_addresses_gets_nothing_signed(tmp_path, ca, server):
    """The token covers 127.0.0.1; the join asks for a serving certificate on another address. The
    kubelet client certificate, asked for first, must not be signed before that is refused."""
    from kubesmith.pki.certlist import NODE_SCOPED
    token = create_token(ca, "--node", "w21", "--address", "127.0.0.1")
    args = ("join", "--server", server.url, "--token", token["token"], "--ca-hash", token["ca_hash"],
            "--node", "w21", "--root", str(tmp_path / "root"), "--no-wait")
    refused = kubesmith(*args, "--address", "10.9.9.9")
    assert refused.returncode == 5 and "10.9.9.9" in refused.stderr and "Traceback" not in refused.stderr
    assert f"by=token:{token['id']}" not in server.log_text()  # no issuance wasted
    assert not (tmp_path / "root").exists()
    joined = kubesmith(*args, "--address", "127.0.0.1")  # nothing bound or claimed by the check
    assert joined.returncode == 0, joined.stderr
    assert server.log_text().count(f"by=token:{token['id']}") == len(NODE_SCOPED)


def test_authcheck_refuses_a_join_for_two_nodes_and_binds_nothing(ca, server):
    token = create_token(ca)  # unbound: it binds to the first node it signs for
    key = tokens.auth_key(token["token"])
    for_a = sign_request("system:node:w22", ("system:nodes",), "kubelet-client")
    for_b = sign_request("system:node:w23", ("system:nodes",), "kubelet-client")

    async def check(requests: list[bytes], auth_key: bytes) -> bool:
        async with aiohttp.ClientSession() as session:
            return await ca_client.authcheck(session, server.url, auth_key, requests, ca.ca_pem())
    with pytest.raises(CaClientError, match="one join is for one node") as refused:
        asyncio.run(check([for_a, for_b], key))
    assert refused.value.status == 403
    with pytest.raises(CaClientError, match="invalid token"):
        asyncio.run(check([for_a], bytes(32)))
    with pytest.raises(CaClientError, match="'cp1' already belongs to the cluster"):  # refused before any signing
        asyncio.run(check([sign_request("system:node:cp1", ("system:nodes",), "kubelet-client")], key))
    assert asyncio.run(check([for_b], key)) is True
    status, _ = raw_authsign(server.url, key, for_b)  # the checks bound nothing: w23 is still free to take
    assert status == 200
    assert f"by=token:{token['id']}" in server.log_text()


# ---- mTLS renewal --------------------------------------------------------------------------

def renew_as(server, ca, agent: tuple, key, current: x509.Certificate, tmp_path: Path):
    agent_key, agent_cert = agent
    cert_file, key_file = tmp_path / "agent.crt", tmp_path / "agent.key"
    cert_file.write_bytes(agent_cert.public_bytes(ENCODING))
    key_file.write_bytes(keys.to_pem(agent_key))
    from kubesmith.pki.issue import Identity
    have = Identity.of_certificate(current)
    subject = Subject(have.common_name, have.organizations, tuple(sorted(have.dns_names)),
                      tuple(sorted(have.ip_addresses)))

    async def go():
        async with aiohttp.ClientSession() as session:
            return await ca_client.renew(session, server.url, key, current, subject, ca.ca_pem(), str(cert_file),
                                         str(key_file))
    return asyncio.run(go())


from cryptography.hazmat.primitives.serialization import Encoding as _Encoding  # noqa: E402

ENCODING = _Encoding.PEM


def test_agent_renews_only_its_own_host_over_mtls(tmp_path, ca, server):
    token7 = create_token(ca, "--node", "w7")["token"]
    token8 = create_token(ca, "--node", "w8")["token"]
    agent7 = authsign_as(server, ca, token7, "kubesmith:agent:w7", ("kubesmith:agents",), "agent-client")
    key7, client7 = authsign_as(server, ca, token7, "system:node:w7", ("system:nodes",), "kubelet-client")
    key8, client8 = authsign_as(server, ca, token8, "system:node:w8", ("system:nodes",), "kubelet-client")
    renewed = load_cert(renew_as(server, ca, agent7, key7, client7, tmp_path))
    assert renewed.serial_number != client7.serial_number
    assert keys.same_public_key(renewed.public_key(), key7.public_key())
    assert "by=agent:w7" in server.log_text()
    with pytest.raises(CaClientError, match="may not renew a certificate of 'w8'"):
        renew_as(server, ca, agent7, key8, client8, tmp_path)  # even holding w8's key
    with pytest.raises(CaClientError, match="key differs"):
        renew_as(server, ca, agent7, keys.generate("ecdsa-p256"), client7, tmp_path)
    # a control-plane certificate whose key reached w7 (a left-over copy) is not renewed for it
    manager_key = keys.generate("ecdsa-p256")
    manager = issue.new_leaf(plan_request("x", "system:kube-controller-manager", (), ("digital signature",
                             "key encipherment", "client auth")), manager_key.public_key(), load_cert(ca.ca_pem()),
                             keys.load(ca.ca_key.read_bytes(), "ca"), 1, dt.datetime.now(dt.timezone.utc))
    with pytest.raises(CaClientError, match="'system:kube-controller-manager' is not a node identity of host 'w7'"):
        renew_as(server, ca, agent7, manager_key, manager, tmp_path)
    # w7's serving certificate from before 10.96.0.1 became the API server's address is not renewed
    serving_key = keys.generate("ecdsa-p256")
    serving = issue.new_leaf(plan_request("x", "system:node:w7", ("system:nodes",), ips=("10.96.0.1",)),
                             serving_key.public_key(), load_cert(ca.ca_pem()), keys.load(ca.ca_key.read_bytes(), "ca"),
                             1, dt.datetime.now(dt.timezone.utc))
    with pytest.raises(CaClientError, match="'10.96.0.1' names the cluster's API server"):
        renew_as(server, ca, agent7, serving_key, serving, tmp_path)

    async def anonymous():
        async with aiohttp.ClientSession() as session:
            return await ca_client.post(session, server.url + ca_client.RENEW_PATH, {},
                                        ca_client.client_context(ca.ca_pem()))
    with pytest.raises(CaClientError, match="401"):
        asyncio.run(anonymous())


def test_a_removed_host_s_keys_renew_nothing_and_new_keys_under_its_name_do(tmp_path, ca):
    """Apply lists the keys of the hosts it removed (`--removed-key`, the module's removed_keys): a
    renewal by such a key is refused, whether the agent's or the certificate's, while a host added
    again under the same name, with new keys, renews as any other."""
    old_agent_key = keys.generate("ecdsa-p256")
    old_node_key = keys.generate("ecdsa-p256")
    removed = [f"{keys.spki_hash(key.public_key())}=w9" for key in (old_agent_key, old_node_key)]
    running = start_ca_service(ca, *(argument for pair in removed for argument in ("--removed-key", pair)))
    try:
        ca_cert, ca_key = load_cert(ca.ca_pem()), keys.load(ca.ca_key.read_bytes(), "ca")
        now = dt.datetime.now(dt.timezone.utc)

        def leaf(key, common_name: str, organizations: tuple[str, ...]) -> x509.Certificate:
            return issue.new_leaf(plan_request("x", common_name, organizations, ("digital signature", "client auth")),
                                  key.public_key(), ca_cert, ca_key, 1, now)

        def agent(key) -> tuple:
            return key, leaf(key, "kubesmith:agent:w9", ("kubesmith:agents",))

        new_agent_key, new_node_key = keys.generate("ecdsa-p256"), keys.generate("ecdsa-p256")
        old_client = leaf(old_node_key, "system:node:w9", ("system:nodes",))
        new_client = leaf(new_node_key, "system:node:w9", ("system:nodes",))
        with pytest.raises(CaClientError, match="belonged to host 'w9', which was removed from the cluster"):
            renew_as(running, ca, agent(old_agent_key), new_node_key, new_client, tmp_path)  # the agent's key
        with pytest.raises(CaClientError, match="belonged to host 'w9', which was removed from the cluster"):
            renew_as(running, ca, agent(new_agent_key), old_node_key, old_client, tmp_path)  # the certificate's
        renewed = load_cert(renew_as(running, ca, agent(new_agent_key), new_node_key, new_client, tmp_path))
        assert keys.same_public_key(renewed.public_key(), new_node_key.public_key())
        assert "which was removed" in running.log_text()
    finally:
        running.stop()
    bad = kubesmith("ca", "serve", *ca_args(ca), "--removed-key", "w9")
    assert bad.returncode == 2 and "expected sha256:<hex>=HOST" in bad.stderr and "Traceback" not in bad.stderr


# ---- join ----------------------------------------------------------------------------------

def test_join_writes_locally_generated_keys_and_verified_certificates(tmp_path, ca, server):
    token = create_token(ca, "--node", "w10", "--address", "127.0.0.1")
    root = tmp_path / "root"
    result = kubesmith("join", "--server", server.url, "--token", token["token"], "--ca-hash", token["ca_hash"],
                       "--node", "w10", "--address", "127.0.0.1", "--root", str(root), "--no-wait")
    assert result.returncode == 0, result.stderr
    pki = root / "etc/kubernetes/pki"
    ca_cert = load_cert(ca.ca_pem())
    assert (pki / "ca.crt").read_bytes() == ca.ca_pem()
    for name, cn in (("kubelet-client", "system:node:w10"), ("kubelet-serving", "system:node:w10"),
                     ("agent-client", "kubesmith:agent:w10"), ("kube-proxy-client", "system:kube-proxy")):
        cert = load_cert((pki / f"{name}.crt").read_bytes())
        key = keys.load((pki / f"{name}.key").read_bytes(), name)
        assert stat.S_IMODE((pki / f"{name}.key").stat().st_mode) == 0o600
        cert.verify_directly_issued_by(ca_cert)
        assert keys.same_public_key(cert.public_key(), key.public_key())
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == cn
    assert not list(pki.rglob("ca.key")) and not list(root.rglob("*.kstmp-*"))


def test_join_with_a_wrong_ca_hash_writes_nothing(tmp_path, ca, server):
    token = create_token(ca, "--node", "w11")
    root = tmp_path / "root"
    result = kubesmith("join", "--server", server.url, "--token", token["token"], "--ca-hash", "sha256:" + "ab" * 32,
                       "--node", "w11", "--root", str(root), "--no-wait")
    assert result.returncode == 5 and "refusing to trust" in result.stderr and "Traceback" not in result.stderr
    assert not root.exists()
    bad = kubesmith("join", "--server", server.url, "--token", "nope", "--ca-hash", token["ca_hash"],
                    "--root", str(root))
    assert bad.returncode == 2 and "malformed token" in bad.stderr
    dotted = kubesmith("join", "--server", server.url, "--token", token["token"], "--ca-hash", token["ca_hash"],
                       "--node", "w11.example.com", "--root", str(root), "--no-wait")
    assert dotted.returncode == 2 and "--node: node name 'w11.example.com' is not a DNS label" in dotted.stderr
    assert not root.exists()


def test_join_under_a_root_writes_nothing_through_a_link_out_of_it(tmp_path, ca, server):
    token = create_token(ca, "--node", "w14")
    root, outside = tmp_path / "image", tmp_path / "this-machine"
    (root / "etc").mkdir(parents=True)
    outside.mkdir()
    (root / "etc" / "kubernetes").symlink_to(outside)  # absolute: points out of the image
    result = kubesmith("join", "--server", server.url, "--token", token["token"], "--ca-hash", token["ca_hash"],
                       "--node", "w14", "--root", str(root), "--no-wait")
    assert result.returncode == 5 and "Traceback" not in result.stderr, result.stderr
    assert re.search(rf"{root}/etc/kubernetes/pki/\S+ leads out of --root {root}", result.stderr), result.stderr
    assert list(outside.iterdir()) == []
    (root / "etc" / "kubernetes").unlink()
    (root / "etc" / "kubernetes" / "pki").mkdir(parents=True)
    machine_key = outside / "kubelet-client.key"  # a key file linked to this machine's key: not read
    machine_key.write_bytes(keys.to_pem(keys.generate("ecdsa-p256")))
    (root / "etc" / "kubernetes" / "pki" / "kubelet-client.key").symlink_to(machine_key)
    linked = kubesmith("join", "--server", server.url, "--token", token["token"], "--ca-hash", token["ca_hash"],
                       "--node", "w14", "--root", str(root), "--no-wait")
    assert linked.returncode == 5, linked.stderr
    assert f"{root}/etc/kubernetes/pki/kubelet-client.key leads out of --root {root}" in linked.stderr
    assert list(outside.iterdir()) == [machine_key] and not (root / "etc" / "kubernetes" / "pki" / "ca.crt").exists()
    shutil.rmtree(root / "etc" / "kubernetes")
    (root / "etc" / "kubernetes").symlink_to("kubernetes")  # a loop: one line, no traceback
    looped = kubesmith("join", "--server", server.url, "--token", token["token"], "--ca-hash", token["ca_hash"],
                       "--node", "w14", "--root", str(root), "--no-wait")
    assert looped.returncode == 5 and "Traceback" not in looped.stderr, looped.stderr
    assert f"{root}/etc/kubernetes/pki/" in looped.stderr and "nothing written" in looped.stderr
    (root / "etc" / "kubernetes").unlink()
    (root / "srv" / "kubernetes").mkdir(parents=True)
    (root / "etc" / "kubernetes").symlink_to("../srv/kubernetes")  # relative: stays inside
    again = kubesmith("join", "--server", server.url, "--token", token["token"], "--ca-hash", token["ca_hash"],
                      "--node", "w14", "--root", str(root), "--no-wait")
    assert again.returncode == 0, again.stderr
    assert (root / "srv" / "kubernetes" / "pki" / "kubelet-client.key").is_file()


NODE_SPEC = """\
apiVersion: kubesmith.io/v1alpha1
kind: Cluster
metadata: {name: demo}
spec:
  kubernetesVersion: "1.33.2"
  hosts:
    - {name: cp1, address: 10.0.0.11, roles: [control-plane, etcd]}
    - {name: w12, address: 10.0.0.12, roles: [node]}
"""


def test_join_with_the_cluster_file_lays_down_the_nodes_files_and_units(tmp_path, ca, server):
    spec = tmp_path / "cluster.yaml"
    spec.write_text(NODE_SPEC)
    token = create_token(ca, "--node", "w12", "--address", "10.0.0.12")
    root = tmp_path / "root"
    result = kubesmith("join", "--server", server.url, "--token", token["token"], "--ca-hash", token["ca_hash"],
                       "--node", "w12", str(spec), "--root", str(root))
    assert result.returncode == 0, result.stderr
    assert "not waiting" in result.stderr  # --root is not /
    units = root / "etc/systemd/system"
    for unit in ("kubelet.service", "kube-proxy.service", "kubesmith-agent.service", "node-online.target"):
        assert (units / unit).exists(), unit
    kubeconfig = json.loads(json.dumps(__import__("yaml").safe_load((root / "etc/kubernetes/kubelet.conf").read_text())))
    embedded = load_cert(base64.b64decode(kubeconfig["users"][0]["user"]["client-certificate-data"]))
    assert embedded.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:w12"
    agent = json.loads((root / "etc/kubesmith/agent.json").read_text())
    assert agent["host"] == "w12" and agent["ca_urls"] == ["https://10.0.0.11:8443"] and agent["ca_keys"] == {}
    refused = kubesmith("join", "--server", server.url, "--token", token["token"], "--ca-hash", token["ca_hash"],
                        "--node", "cp1", str(spec), "--root", str(tmp_path / "cp"))
    assert refused.returncode == 5 and "node-only hosts" in refused.stderr


def test_a_second_join_keeps_the_keys_and_renews_the_certificates(tmp_path, ca, server):
    """Keys are never replaced: a re-run (a retried provisioning) gets new certificates for the same
    keys. Directories it creates have exactly 0755 whatever the umask (000 here)."""
    token = create_token(ca, "--node", "w14")
    root = tmp_path / "root"
    command = ["join", "--server", server.url, "--ca-hash", token["ca_hash"], "--node", "w14", "--root", str(root),
               "--no-wait"]
    environment = {**os.environ, "KUBESMITH_JOIN_TOKEN": token["token"]}
    first = subprocess.run(["sh", "-c", 'umask 000; exec "$0" "$@"', KUBESMITH, *command],
                           capture_output=True, text=True, env=environment, timeout=60)
    assert first.returncode == 0, first.stderr
    pki = root / "etc/kubernetes/pki"
    keys_before = {path.name: path.read_bytes() for path in pki.glob("*.key")}
    certs_before = {path.name: path.read_bytes() for path in pki.glob("*.crt")}
    assert len(keys_before) == len(NODE_SCOPED)  # one key per certificate of the node's standard set
    for directory in (root / "etc", root / "etc/kubernetes", pki):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o755, directory
    again = subprocess.run([KUBESMITH, *command], capture_output=True, text=True, env=environment, timeout=60)
    assert again.returncode == 0, again.stderr
    assert {path.name: path.read_bytes() for path in pki.glob("*.key")} == keys_before
    for name in ("kubelet-client", "kubelet-serving", "agent-client", "kube-proxy-client"):
        cert = load_cert((pki / f"{name}.crt").read_bytes())
        assert cert.public_bytes(Encoding.PEM) != certs_before[f"{name}.crt"]
        key = keys.load(keys_before[f"{name}.key"], name)
        assert keys.same_public_key(cert.public_key(), key.public_key())


def test_the_pinned_ca_must_be_a_ca_that_its_key_signed(ca):
    """The pin names a key; a certificate with that key but other contents (a later expiry, other
    extensions) that the key did not sign, or no CA certificate at all, is refused."""
    from cryptography.hazmat.primitives import hashes
    real = load_cert(ca.ca_pem())
    ca_client.check_self_signed_ca(real, "test")
    ca_key = keys.load(ca.ca_key.read_bytes(), "ca")

    def variant(signer, is_ca: bool) -> x509.Certificate:
        now = dt.datetime.now(dt.timezone.utc)
        return (x509.CertificateBuilder().subject_name(real.subject).issuer_name(real.subject)
                .public_key(real.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now).not_valid_after(now + dt.timedelta(days=30000))
                .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
                .sign(signer, hashes.SHA256()))
    with pytest.raises(CaClientError, match="not self-signed by the pinned key"):
        ca_client.check_self_signed_ca(variant(keys.generate("ecdsa-p256"), True), "test")
    with pytest.raises(CaClientError, match="not a CA certificate"):
        ca_client.check_self_signed_ca(variant(ca_key, False), "test")


def test_the_scheme_decides_tls_in_any_case_and_others_are_refused(ca):
    for server in ("https://10.0.0.1:8443", "HTTPS://10.0.0.1:8443"):
        context = ca_client.transport(server, ca.ca_pem())
        assert isinstance(context, ssl.SSLContext) and context.verify_mode == ssl.CERT_REQUIRED \
            and context.check_hostname
    assert ca_client.transport("http://127.0.0.1:8888", ca.ca_pem()) is False  # a plain cfssl serve
    with pytest.raises(CaClientError, match="must start with https://"):
        ca_client.transport("ftp://10.0.0.1", ca.ca_pem())


@contextlib.asynccontextmanager
async def front_server(path: str, answer):
    """An HTTP server on 127.0.0.1 that answers POST `path` with `answer(request)`; its URL."""
    from aiohttp import web
    app = web.Application()
    app.router.add_post(path, answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


def test_join_asks_again_when_the_ca_service_answers_429(ca, server):
    """A node behind the same address as a guessing machine is refused unchecked (429) while the
    address's slots are taken: the client waits as long as Retry-After says and asks again. Here
    a front answers 429 to the first request and passes the rest to the real CA service."""
    from aiohttp import web
    token = create_token(ca, "--node", "w15")["token"]
    seen: list[int] = []

    async def go() -> bytes:
        async def front(request: web.Request) -> web.Response:
            seen.append(len(seen))
            if len(seen) == 1:
                answer = web.json_response({"success": False, "result": None, "messages": [], "errors": [
                    {"code": 429, "message": "too many failed authentications from 127.0.0.1; retry in 1s"}]},
                    status=429)
                answer.headers["Retry-After"] = "1"
                return answer
            async with aiohttp.ClientSession() as session:
                async with session.post(server.url + ca_client.AUTHSIGN_PATH, data=await request.read(),
                                        ssl=False) as real:
                    return web.Response(body=await real.read(), status=real.status, content_type="application/json")
        async with front_server(ca_client.AUTHSIGN_PATH, front) as url, aiohttp.ClientSession() as session:
            return await ca_client.authsign(session, url, tokens.auth_key(token), keys.generate("ecdsa-p256"),
                                            Subject("system:node:w15", ("system:nodes",)), "kubelet-client",
                                            ca.ca_pem())
    cert = load_cert(asyncio.run(go()))
    assert seen == [0, 1]  # refused once, asked again, signed
    assert cert.subject.rfc4514_string() == "CN=system:node:w15,O=system:nodes"


def test_odd_answers_from_a_server_are_errors_not_crashes(tmp_path):
    """Whatever answers --server, join ends with one line: wrong envelopes, bad UTF-8, deep JSON."""
    from aiohttp import web
    answers = iter([web.json_response({"success": False, "errors": ["token expired"]}, status=400),
                    web.json_response({"success": False, "errors": "nope"}, status=400),
                    web.Response(body=b"\xff\xfe{", content_type="application/json", charset="utf-8"),
                    web.Response(body=b"[" * 100000, content_type="application/json")])

    async def go() -> list[str]:
        async def answer(request: web.Request) -> web.Response:
            return next(answers)
        messages = []
        async with front_server(ca_client.INFO_PATH, answer) as url, aiohttp.ClientSession() as session:
            for _ in range(4):
                with pytest.raises(CaClientError) as info:
                    await ca_client.pinned_ca(session, url, "sha256:" + "0" * 64)
                messages.append(str(info.value))
        return messages
    messages = asyncio.run(go())
    assert "token expired" in messages[0] and "nope" in messages[1]
    assert all("HTTP" in message for message in messages)
