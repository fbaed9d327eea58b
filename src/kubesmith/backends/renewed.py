"""Certificates the agent renewed on a host: apply keeps them instead of going back to older ones.

A host's copy counts as a renewal of the planned certificate when it says the same thing (subject,
SANs, usages), holds the same key, comes from the same CA and lives longer. Kubeconfigs carry a
client certificate too: for them the rest of the document must be identical.
"""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

import yaml
from cryptography import x509

from kubesmith.pki.issue import Identity
from kubesmith.pki.keys import same_public_key

RENEWABLE_SOURCES = ("certificate", "kubeconfig")


def is_renewal(kind: str, planned: bytes, found: bytes, now: dt.datetime) -> bool:
    """Whether `found` (on the host) is a newer, still valid version of `planned` (from the PKI state)."""
    try:
        if kind == "certificate":
            return _newer_certificate(planned, found, now)
        return _newer_kubeconfig(planned, found, now)
    except (ValueError, KeyError, TypeError, IndexError, yaml.YAMLError):
        return False  # anything unreadable is simply replaced by the planned version


def _newer_certificate(planned_pem: bytes, found_pem: bytes, now: dt.datetime) -> bool:
    planned, found = x509.load_pem_x509_certificate(planned_pem), x509.load_pem_x509_certificate(found_pem)
    return (Identity.of_certificate(found) == Identity.of_certificate(planned)
            and same_public_key(found.public_key(), planned.public_key())
            and found.issuer == planned.issuer
            and _aki(found) == _aki(planned)
            and planned.not_valid_after_utc < found.not_valid_after_utc
            and now < found.not_valid_after_utc)


def _newer_kubeconfig(planned_text: bytes, found_text: bytes, now: dt.datetime) -> bool:
    planned, found = yaml.safe_load(planned_text), yaml.safe_load(found_text)
    planned_cert, found_cert = _client_certificate(planned), _client_certificate(found)
    if _without_client_certificate(planned) != _without_client_certificate(found):
        return False
    return _newer_certificate(planned_cert, found_cert, now)


def _client_certificate(config: dict[str, Any]) -> bytes:
    return base64.b64decode(config["users"][0]["user"]["client-certificate-data"])


def _without_client_certificate(config: dict[str, Any]) -> dict[str, Any]:
    users = [{**user, "user": {k: v for k, v in user["user"].items() if k != "client-certificate-data"}}
             for user in config["users"]]
    return {**config, "users": users}


def _aki(cert: x509.Certificate) -> bytes | None:
    try:
        return cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier
    except x509.ExtensionNotFound:
        return None
