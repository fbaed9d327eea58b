"""When a certificate is due for renewal: one rule (`lifetimes.standing`) for the PKI state's reissue
decision, `certs check-expiration` and the agent."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pytest

from kubesmith.lifetimes import renewal_due, standing

START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class Cert:
    not_valid_before_utc: dt.datetime
    not_valid_after_utc: dt.datetime


def cert(days: float) -> Cert:
    return Cert(START, START + dt.timedelta(days=days))


def test_due_once_the_fraction_of_its_life_is_used() -> None:
    assert renewal_due(cert(300), 2 / 3) == START + dt.timedelta(days=200)
    assert renewal_due(cert(100), 0.5) == START + dt.timedelta(days=50)


@pytest.mark.parametrize(("offset", "expected"), [
    (dt.timedelta(days=0), "valid"),
    (dt.timedelta(days=200) - dt.timedelta(microseconds=1), "valid"),
    (dt.timedelta(days=200), "due"),
    (dt.timedelta(days=300) - dt.timedelta(microseconds=1), "due"),
    (dt.timedelta(days=300), "expired"),
    (dt.timedelta(days=400), "expired"),
])
def test_standing(offset: dt.timedelta, expected: str) -> None:
    assert standing(cert(300), 2 / 3, START + offset) == expected


@pytest.mark.parametrize("fraction", [0.5, 0.6, 2 / 3, 0.75, 0.9, 0.999])
@pytest.mark.parametrize("seconds", [1, 59, 3601, 86400 * 365, 86400 * 3650 + 17])
def test_the_instant_is_the_one_of_the_remaining_life_rule(fraction: float, seconds: int) -> None:
    """The former reissue rule, "less than (1 - fraction) of the life left", names the same instant."""
    c = Cert(START, START + dt.timedelta(seconds=seconds))
    lifetime = c.not_valid_after_utc - c.not_valid_before_utc
    assert renewal_due(c, fraction) == c.not_valid_after_utc - lifetime * (1 - fraction)
