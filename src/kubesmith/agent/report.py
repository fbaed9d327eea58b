"""The agent's report: one JSON file per host (`state_file`) with the last and next renewal, the
last error and one entry per certificate. `read_state` is what `kubesmith status` and
`agent --show-state` print.

Each pass holds the file's lock and starts from the file (`locked_report`), so a manual
`agent --once` beside the unit's agent waits for its pass and neither loses the other's record.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import fcntl
import itertools
import json
import logging
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import IO, Any, Literal

from kubesmith import fsutil
from kubesmith.clock import utc_now
from kubesmith.documents import read_json_file

LOG = logging.getLogger("kubesmith.agent")
LOCK_POLL_SECONDS = 0.2  # how often a pass checks whether the other agent's pass has ended
REPORT_REMEDY = "the agent writes it anew on its next pass"
Renewer = Literal["local", "ca-service", "none"]


@dataclass(frozen=True, slots=True)
class SlotState:
    path: str
    subject: str
    ca: str
    not_after: str
    renew_at: str
    renewer: Renewer
    last_renewal: str | None = None
    last_error: str | None = None


SLOT_FIELDS = tuple(f.name for f in fields(SlotState))
REPORT_FIELDS = ("last_check", "last_renewal", "last_error", "next_renewal", "next_attempt")  # AgentState's order


@dataclass(slots=True)
class AgentState:
    """What the agent reports: read from the state file before each pass, written after it."""

    host: str
    slots: dict[str, SlotState] = field(default_factory=dict)
    last_check: str | None = None
    last_renewal: str | None = None
    last_error: str | None = None
    next_renewal: str | None = None
    next_attempt: str | None = None
    configs: dict[str, dict[str, str | None]] = field(default_factory=dict)  # component -> its ConfigOK condition

    def document(self) -> dict[str, Any]:
        return {"host": self.host, "last_check": self.last_check, "last_renewal": self.last_renewal,
                "next_renewal": self.next_renewal, "last_error": self.last_error,
                "next_attempt": self.next_attempt,
                "certificates": [slot_document(s) for _, s in sorted(self.slots.items())],
                "configs": [entry for _, entry in sorted(self.configs.items())]}


# ---- one pass at a time per state file

class Stopping(Exception):
    """The agent was asked to stop while it waited for another pass to end."""


@contextlib.asynccontextmanager
async def locked_report(state_file: Path, host: str, stop: asyncio.Event | None = None) -> AsyncIterator[AgentState]:
    """The report as the last pass left it, under the state file's lock; written back at the end.

    The unit's agent and a manual `agent --once` share the report: a pass waits for the other's
    to end (no certificate renewed by both at once) and starts from what the other recorded,
    so neither overwrites the other's renewals. The lock is polled, not waited for in a blocking
    call, so the event loop (and with it SIGTERM and Ctrl-C) keeps running meanwhile.
    """
    lock_path = fsutil.lock_file(state_file)
    fsutil.make_dirs(lock_path.parent)
    with open(lock_path, "a+b") as lock:
        await _take(lock, lock_path, stop)
        state = load_state(state_file, host)
        yield state
        write_state(state_file, state)


async def _take(lock: IO[bytes], lock_path: Path, stop: asyncio.Event | None) -> None:
    for attempt in itertools.count():
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if attempt == 0:
                LOG.info("another agent is renewing on this host; waiting for its pass to end (%s)", lock_path)
        if stop is not None and stop.is_set():
            raise Stopping()
        await asyncio.sleep(LOCK_POLL_SECONDS)


# ---- state file

def write_state(path: Path, state: AgentState) -> None:
    document = {**state.document(), "updated": iso(utc_now())}
    fsutil.atomic_write(path, (json.dumps(document, indent=2, sort_keys=True) + "\n").encode(), 0o644)


def load_state(path: Path, host: str) -> AgentState:
    """The report as `AgentState`; a fresh one if there is none, or it is another host's or not
    a report this agent wrote (damaged, edited, other types)."""
    try:
        document = read_state(path)
    except OSError:
        return AgentState(host)
    if not isinstance(document, dict) or document.get("host") != host:
        return AgentState(host)
    entries = document.get("certificates") or []
    tops = [document.get(name) for name in REPORT_FIELDS]
    if not isinstance(entries, list) or not all(isinstance(e, dict) and _strings(e.get(n) for n in SLOT_FIELDS)
                                                 and isinstance(e.get("path"), str) for e in entries) \
            or not _strings(tops):
        return AgentState(host)
    slots = {entry["path"]: SlotState(**{name: entry.get(name) for name in SLOT_FIELDS}) for entry in entries}
    return AgentState(host, slots, *tops, configs=_configs(document.get("configs")))


def _configs(entries: object) -> dict[str, dict[str, str | None]]:
    """The configuration conditions the keeper recorded (`agent.keeper.condition_document`), by component;
    none that is not one (edited, damaged), so a renewal pass never fails on them."""
    if not isinstance(entries, list):
        return {}
    return {entry["component"]: entry for entry in entries
            if isinstance(entry, dict) and isinstance(entry.get("component"), str) and _strings(entry.values())}


def _strings(values: Iterable[object]) -> bool:
    return all(value is None or isinstance(value, str) for value in values)


def read_state(path: Path) -> Any:
    """The agent's last report, or None if it never ran here (for `kubesmith status`); read bounded, so a
    FIFO, a huge or deeply nested file is an OSError naming it."""
    try:
        return read_json_file(path, "the agent's report", remedy=REPORT_REMEDY)
    except FileNotFoundError:
        return None


def failed_slot(previous: SlotState | None, path: str, error: str) -> SlotState:
    if previous is not None:
        return replace(previous, last_error=error)
    return SlotState(path, "", "unknown", "", "", "none", None, error)


def slot_document(slot: SlotState) -> dict[str, Any]:
    return {name: getattr(slot, name) for name in SLOT_FIELDS}


def iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.timezone.utc).isoformat(timespec="seconds")
