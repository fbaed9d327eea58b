"""Client side of the CA service (and of any cfssl 1.2 `serve` with an auth key).

* `pinned_ca`: fetch `/api/v1/cfssl/info` and accept the CA certificate only if its hash equals
  the pin. The pin is `sha256:<hex>` of the CA certificate's DER-encoded SubjectPublicKeyInfo,
  exactly what kubeadm's `--discovery-token-ca-cert-hash` uses (so
  `openssl x509 -pubkey | openssl pkey -pubin -outform der | sha256sum` computes it). This one
  request runs without certificate verification because nothing is trusted yet; its answer is
  used only after the hash matches. Everything afterwards trusts only the pinned CA.
* `authsign`: cfssl's authenticated sign with a token's HMAC key.
* `authcheck`: kubesmith's check of all of a join's requests before the first is signed.
* `renew`: the agent's mTLS renewal.

Every certificate received is checked before it is returned: signed by the pinned CA, carrying
our public key, with the subject we asked for. A CA that answers with something else is an error.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import logging
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_delay

from kubesmith.ca.tokens import request_mac
from kubesmith.pki import keys
from kubesmith.pki.issue import issued_by, signature_problem, subject_alt_names
from kubesmith.pki.keys import PrivateKey, same_public_key

LOG = logging.getLogger("kubesmith.ca_client")
BUSY_PATIENCE = 120.0  # seconds `authsign` keeps asking a CA service that answers 429
BUSY_PAUSE_MAX = 30.0  # the longest pause between those attempts
AUTHSIGN_TIMEOUT = 30.0  # a queued request may wait out the service's bound (10 s by default) first

INFO_PATH = "/api/v1/cfssl/info"
AUTHSIGN_PATH = "/api/v1/cfssl/authsign"
AUTHCHECK_PATH = "/api/v1/kubesmith/authcheck"
RENEW_PATH = "/api/v1/kubesmith/renew"


class CaClientError(Exception):
    """The CA refused or answered wrongly; `status` is the HTTP status (None: no answer)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class CaUnavailable(CaClientError):
    """No answer from the CA (connection refused, timeout, 5xx): worth retrying later."""


class CaBusy(CaClientError):
    """HTTP 429: the CA service is slowing this address down (failed authentications from it,
    perhaps another machine behind the same NAT); it says when to ask again."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message, 429)
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class Subject:
    common_name: str
    organizations: tuple[str, ...] = ()
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()


def spki_hash(cert: x509.Certificate) -> str:
    """`sha256:<hex>` of the certificate's SubjectPublicKeyInfo (kubeadm's CA cert hash)."""
    return keys.spki_hash(cert.public_key())


def parse_pin(pin: str) -> str:
    algorithm, _, digest = pin.strip().lower().partition(":")
    if algorithm != "sha256" or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"{pin!r}: the CA hash must be sha256:<64 hex digits> (of the CA's public key, "
                         "as kubeadm's --discovery-token-ca-cert-hash)")
    return f"sha256:{digest}"


def client_context(ca_pem: bytes | None, cert_file: str | None = None, key_file: str | None = None
                   ) -> ssl.SSLContext:
    """Trust only `ca_pem` (never the environment's bundles); None verifies nothing (pinning only)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca_pem is None:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context.load_verify_locations(cadata=ca_pem.decode())
    if cert_file and key_file:
        context.load_cert_chain(cert_file, key_file)
    return context


def build_csr(key: PrivateKey, subject: Subject) -> bytes:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in subject.organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, subject.common_name))
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attributes))
    names = subject_alt_names(subject.dns_names, subject.ip_addresses)
    if names is not None:
        builder = builder.add_extension(names, critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(Encoding.PEM)


def sign_request_bytes(csr_pem: bytes, profile: str, hosts: tuple[str, ...] | None, label: str = "") -> bytes:
    document: dict[str, Any] = {"certificate_request": csr_pem.decode(), "profile": profile, "label": label}
    if hosts is not None:
        document["hosts"] = list(hosts)
    return json.dumps(document).encode()


def authsign_body(key: bytes, request: bytes) -> dict[str, str]:
    return {"token": base64.b64encode(request_mac(key, request)).decode(),
            "request": base64.b64encode(request).decode()}


async def post(session: aiohttp.ClientSession, url: str, body: Any, context: ssl.SSLContext | bool,
               timeout: float = 10.0) -> Any:
    """POST JSON and unwrap cfssl's envelope; transport failures and 5xx are `CaUnavailable`."""
    try:
        async with session.post(url, json=body, ssl=context, timeout=aiohttp.ClientTimeout(total=timeout)) as answer:
            text = (await answer.read()).decode("utf-8", errors="replace")
            status, retry_after = answer.status, answer.headers.get("Retry-After", "")
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        raise CaUnavailable(f"{url}: {exc.__class__.__name__}: {exc}") from None
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        document = None
    if status >= 500:
        raise CaUnavailable(f"{url}: HTTP {status}: {_message(document, text)}", status)
    if status == 429:
        raise CaBusy(f"{url}: HTTP 429: {_message(document, text)}",
                     float(retry_after) if retry_after.isdigit() else BUSY_PAUSE_MAX)
    if status != 200 or not isinstance(document, dict) or not document.get("success"):
        raise CaClientError(f"{url}: HTTP {status}: {_message(document, text)}", status)
    return document.get("result")


def _message(document: Any, text: str) -> str:
    errors = document.get("errors") if isinstance(document, dict) else None
    if isinstance(errors, list) and errors:
        return "; ".join(str(e.get("message", e)) if isinstance(e, dict) else str(e) for e in errors)[:300]
    return text.strip()[:300] or "no message"


def transport(server: str, ca_pem: bytes | None) -> ssl.SSLContext | bool:
    """TLS trusting `ca_pem` for https (None: pinning only), none for http (a plain `cfssl serve`:
    the pin and the returned certificates' checks still hold, HMAC protects the requests)."""
    scheme = urlsplit(server).scheme.lower()
    if scheme == "https":
        return client_context(ca_pem)
    if scheme == "http":
        return False
    raise CaClientError(f"{server}: the CA service URL must start with https:// (http:// for a plain cfssl serve)")


async def pinned_ca(session: aiohttp.ClientSession, server: str, pin: str) -> bytes:
    """The CA certificate (PEM) of `server`, accepted only when its SPKI hash equals `pin`."""
    want = parse_pin(pin)
    result = await post(session, server.rstrip("/") + INFO_PATH, {"label": "", "profile": ""},
                        transport(server, None))
    try:
        pem = str(result["certificate"]).encode()
        cert = x509.load_pem_x509_certificate(pem)
    except (KeyError, TypeError, ValueError) as exc:
        raise CaClientError(f"{server}: info answer has no CA certificate ({exc})") from None
    have = spki_hash(cert)
    if not hmac.compare_digest(have, want):
        raise CaClientError(f"{server}: the CA's public key hash is {have}, not the pinned {want}; "
                            "refusing to trust it")
    check_self_signed_ca(cert, server)
    return cert.public_bytes(Encoding.PEM)


def check_self_signed_ca(cert: x509.Certificate, server: str) -> None:
    """The pin covers the key only: the rest of the certificate (validity, extensions) must be what
    that key signed, and a CA's."""
    problem = signature_problem(cert, cert)
    if problem:
        raise CaClientError(f"{server}: the CA certificate is not self-signed by the pinned key ({problem})")
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except (x509.ExtensionNotFound, ValueError):  # none, or extensions that do not parse
        is_ca = False
    if not is_ca:
        raise CaClientError(f"{server}: the pinned certificate is not a CA certificate")


def sign_request_for(key: PrivateKey, subject: Subject, profile: str, hosts: tuple[str, ...] | None = None) -> bytes:
    """The sign request (CSR and profile) that authcheck checks and authsign then signs, byte for byte."""
    return sign_request_bytes(build_csr(key, subject), profile, hosts if hosts is not None else
                              (*subject.dns_names, *subject.ip_addresses) or None)


async def authsign(session: aiohttp.ClientSession, server: str, auth_key: bytes, key: PrivateKey,
                   subject: Subject, profile: str, ca_pem: bytes, hosts: tuple[str, ...] | None = None
                   ) -> bytes:
    """A certificate for `key` and `subject` from cfssl authsign; verified before it is returned."""
    request = sign_request_for(key, subject, profile, hosts)
    return await authsign_request(session, server, auth_key, request, key, subject, ca_pem)


async def authsign_request(session: aiohttp.ClientSession, server: str, auth_key: bytes, request: bytes,
                           key: PrivateKey, subject: Subject, ca_pem: bytes) -> bytes:
    """authsign of a prepared `sign_request_for`. While the service answers 429 it is asked again
    when it says (for up to `BUSY_PATIENCE`)."""
    result = await _patiently(session, server.rstrip("/") + AUTHSIGN_PATH, authsign_body(auth_key, request),
                              transport(server, ca_pem))
    return verified_certificate(result, key, subject, ca_pem)


async def authcheck(session: aiohttp.ClientSession, server: str, auth_key: bytes, requests: list[bytes],
                    ca_pem: bytes) -> bool:
    """Ask the CA service whether the token would have every one of `requests` signed, signing none:
    a join asks before its first authsign, so one request outside the token's scope wastes no
    issuance of the others. False: the server has no such check (a plain `cfssl serve`, which has
    no token scopes to check either)."""
    document = {"requests": [base64.b64encode(request).decode() for request in requests]}
    batch = json.dumps(document).encode()
    try:
        await _patiently(session, server.rstrip("/") + AUTHCHECK_PATH, authsign_body(auth_key, batch),
                         transport(server, ca_pem))
    except CaClientError as exc:
        if exc.status == 404:
            return False
        raise
    return True


async def _patiently(session: aiohttp.ClientSession, url: str, body: Any, context: ssl.SSLContext | bool) -> Any:
    """`post`, asked again while the service answers 429 (when it says, up to `BUSY_PATIENCE`)."""
    retrying = AsyncRetrying(retry=retry_if_exception_type(CaBusy), stop=stop_after_delay(BUSY_PATIENCE),
                             wait=_busy_pause, before_sleep=_log_busy, reraise=True)
    return await retrying(post, session, url, body, context, timeout=AUTHSIGN_TIMEOUT)


def _busy_pause(retry_state: RetryCallState) -> float:
    error = retry_state.outcome.exception() if retry_state.outcome else None
    return min(BUSY_PAUSE_MAX, error.retry_after if isinstance(error, CaBusy) else 1.0)


def _log_busy(retry_state: RetryCallState) -> None:
    pause = retry_state.next_action.sleep if retry_state.next_action else 0.0
    LOG.warning("the CA service is slowing this address down (failed authentications from it); "
                "asking again in %.0fs", pause)


async def renew(session: aiohttp.ClientSession, server: str, key: PrivateKey, current: x509.Certificate,
                subject: Subject, ca_pem: bytes, agent_cert: str, agent_key: str) -> bytes:
    """A renewed certificate for `current` (same key, same subject) over mTLS."""
    body = {"certificate_request": build_csr(key, subject).decode(), "profile": "renewal",
            "current": current.public_bytes(Encoding.PEM).decode()}
    result = await post(session, server.rstrip("/") + RENEW_PATH, body, client_context(ca_pem, agent_cert, agent_key))
    return verified_certificate(result, key, subject, ca_pem)


def verified_certificate(result: Any, key: PrivateKey, subject: Subject, ca_pem: bytes) -> bytes:
    try:
        pem = str(result["certificate"]).encode()
        cert = x509.load_pem_x509_certificate(pem)
    except (KeyError, TypeError, ValueError) as exc:
        raise CaClientError(f"the CA's answer holds no certificate ({exc})") from None
    ca = x509.load_pem_x509_certificate(ca_pem)
    problem = signature_problem(cert, ca)
    if problem:
        raise CaClientError(f"the returned certificate is not signed by the pinned CA ({problem})")
    if not issued_by(cert, ca) and cert.issuer != ca.subject:
        raise CaClientError("the returned certificate names another issuer")
    if not same_public_key(cert.public_key(), key.public_key()):
        raise CaClientError("the returned certificate is for another key")
    common_names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not common_names or common_names[0].value != subject.common_name:
        raise CaClientError(f"the returned certificate is not for {subject.common_name!r}")
    return cert.public_bytes(Encoding.PEM)
