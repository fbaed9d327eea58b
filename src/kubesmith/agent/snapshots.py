"""Periodic etcd snapshots, taken by the agent on each member (`etcd.snapshots.interval`, `.keep`).

Each member keeps its own snapshots on its own disk, as k3s does, so losing some hosts loses none
of the snapshots of the others. A snapshot is due when the newest one in the directory is older than
the interval (or there is none, so a new cluster gets one at once and a restarted agent does not
take one early). `etcdctl snapshot save` writes beside and renames; the file is then checked with
`etcdutl snapshot status` and kept 0600 as `snapshot-<UTC time>.db`; one that fails the check is
deleted. The oldest beyond `keep` go. Restore one with `kubesmith etcd restore`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubesmith.agent.renewal import sleep_unless_stopped

LOG = logging.getLogger("kubesmith.agent")
PREFIX, SUFFIX = "snapshot-", ".db"
RETRY_SECONDS = 60.0  # after a failed snapshot (etcd down, disk full): asked again this soon, not a whole interval
Clock = Callable[[], dt.datetime]


class SnapshotError(Exception):
    """A snapshot could not be taken or did not pass its check; nothing partial is left."""


@dataclass(frozen=True, slots=True)
class SnapshotSettings:
    interval: float  # seconds
    keep: int
    directory: Path
    etcdctl: tuple[str, ...]  # argv up to the command: the binary, the endpoint and the client credentials
    etcdutl: str

    @staticmethod
    def from_document(document: dict[str, Any]) -> SnapshotSettings:
        return SnapshotSettings(float(document["interval"]), int(document["keep"]), Path(document["directory"]),
                                tuple(str(a) for a in document["etcdctl"]), str(document["etcdutl"]))


@dataclass(frozen=True, slots=True)
class Taken:
    path: Path
    revision: int
    keys: int
    pruned: tuple[Path, ...]


def snapshots(directory: Path) -> list[Path]:
    """The kept snapshots, oldest first (their names sort by time)."""
    return sorted(directory.glob(f"{PREFIX}*{SUFFIX}")) if directory.is_dir() else []


def seconds_until_due(settings: SnapshotSettings, now: dt.datetime) -> float:
    kept = snapshots(settings.directory)
    if not kept:
        return 0.0
    newest = dt.datetime.fromtimestamp(kept[-1].stat().st_mtime, dt.timezone.utc)
    return max(0.0, settings.interval - (now - newest).total_seconds())


def take(settings: SnapshotSettings, now: dt.datetime) -> Taken:
    """One snapshot, checked, then the oldest beyond `keep` removed."""
    settings.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = settings.directory / f"{PREFIX}{now.strftime('%Y%m%dT%H%M%SZ')}{SUFFIX}"
    try:
        _run([*settings.etcdctl, "snapshot", "save", str(path)], "etcdctl snapshot save")
        path.chmod(0o600)
        status = json.loads(_run([settings.etcdutl, "snapshot", "status", str(path), "-w", "json"],
                                 "etcdutl snapshot status"))
    except (SnapshotError, OSError, ValueError) as exc:
        for leftover in (path, path.with_name(path.name + ".part")):
            leftover.unlink(missing_ok=True)
        raise SnapshotError(str(exc)) from None
    kept = snapshots(settings.directory)
    pruned = tuple(kept[:max(0, len(kept) - settings.keep)])
    for old in pruned:
        old.unlink(missing_ok=True)
    return Taken(path, int(status["revision"]), int(status["totalKey"]), pruned)


def _run(argv: list[str], what: str) -> str:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SnapshotError(f"{what}: {exc}") from None
    if result.returncode != 0:
        raise SnapshotError(f"{what} failed ({result.returncode}): {(result.stderr or result.stdout).strip()[-300:]}")
    return result.stdout


async def run_snapshots(settings: SnapshotSettings, stop: asyncio.Event,
                        clock: Clock = lambda: dt.datetime.now(dt.timezone.utc)) -> None:
    """Take each snapshot when due until `stop` is set; a failure is logged and asked again soon."""
    while not stop.is_set():
        wait = seconds_until_due(settings, clock())
        if wait > 0:
            await sleep_unless_stopped(stop, wait)
            continue
        try:
            taken = await asyncio.to_thread(take, settings, clock())
        except SnapshotError as exc:
            LOG.warning("etcd snapshot: %s (trying again in %.0fs)", exc, RETRY_SECONDS)
            await sleep_unless_stopped(stop, RETRY_SECONDS)
            continue
        LOG.info("etcd snapshot: %s (revision %d, %d keys)%s", taken.path, taken.revision, taken.keys,
                 f"; removed {len(taken.pruned)} older" if taken.pruned else "")
