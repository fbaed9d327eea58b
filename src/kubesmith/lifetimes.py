"""The lives of what kubesmith issues: the longest it gives (read by the spec's checks, the CLI's options
and the token store, so that one bound holds wherever a lifetime is set, and no light command loads the
spec's model to know it), and when a certificate is due for renewal (read by the PKI state's reissue
rule, `certs check-expiration` and the agent, so that all three agree on the instant)."""

from __future__ import annotations

import datetime as dt
from typing import Literal, Protocol

TOKEN_MAX_DAYS = 365  # a join token lives a year at most (kubeadm's default: a day)
SERVICE_VALIDITY_MAX_DAYS = 3650  # the CA service issues for ten years at most

Standing = Literal["valid", "due", "expired"]


class Validity(Protocol):
    """What renewal reads of a certificate (an x509.Certificate has both, without importing cryptography here)."""

    @property
    def not_valid_before_utc(self) -> dt.datetime: ...

    @property
    def not_valid_after_utc(self) -> dt.datetime: ...


def renewal_due(cert: Validity, renew_fraction: float) -> dt.datetime:
    """The instant `cert` is due for renewal: once it has used `renew_fraction` of its life
    (spec.pki.renewFraction), that is, with less than (1 - renew_fraction) of it left."""
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    return cert.not_valid_before_utc + lifetime * renew_fraction


def standing(cert: Validity, renew_fraction: float, now: dt.datetime) -> Standing:
    """expired from its not-after on, due from `renewal_due` on, valid before."""
    if now >= cert.not_valid_after_utc:
        return "expired"
    if now >= renewal_due(cert, renew_fraction):
        return "due"
    return "valid"
