"""The time now, in UTC: one name for the clock that certificates, tokens and reports are dated by.

Its own module, light, so that a command that only dates a report (`config status`, the agent's report)
does not load the PKI store and its cryptography to read the clock.
"""

from __future__ import annotations

import datetime as dt


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)
