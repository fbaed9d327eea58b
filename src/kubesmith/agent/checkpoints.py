"""Checkpoints of every component's configuration on a host, and its assigned/active/LKG records.

A component's configuration is what `kubesmith apply` lays down for it and what it reads at start:
its argv and systemd unit, its configuration documents, and the certificates, keys and kubeconfigs
those point at (`plan.components.component_config` finds them in the plan). A checkpoint is a copy
of those files (bytes, mode, owner) plus the argv, named by the sha256 of its manifest: the same
configuration is always the same checkpoint, and a checkpoint's name proves its content.

Layout, under `layout.CONFIG_CHECKPOINTS` (root-only, 0700):

    <component>/checkpoints/<sha256>/manifest.json    argv, and path/mode/uid/gid/sha256 of each file
    <component>/checkpoints/<sha256>/blobs/<sha256>   each file's bytes
    <component>/{assigned,active,last-known-good}.json

Crash safety: a checkpoint is built in a temp directory (named with `fsutil.TEMP_MARKER`), every
file and directory fsynced, then renamed to its hash and the parent fsynced, so a directory named
by a hash is complete whatever moment a process is killed; temp directories a killed writer left
are removed by `collect`. Removal goes the other way (rename to a temp name first), so no
directory ever bears a hash while half deleted. Each record is one atomic file write. `load`
checks every blob against the manifest and the manifest against its name anyway, since a
checkpoint is what a rollback trusts.

Private keys are in checkpoints (a certificate restored without its key would not load): the
directory is 0700 and each copy keeps its file's mode and owner.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kubesmith import fsutil, layout
from kubesmith.agent.trial import Active, Record, Records
from kubesmith.documents import MAX_STATE_BYTES, read_json_file, reason
from kubesmith.formats import json_bytes
from kubesmith.plan.components import ComponentConfig

MANIFEST = "manifest.json"
RECORDS = {"assigned": "assigned.json", "active": "active.json", "last_known_good": "last-known-good.json"}
MAX_FILE_BYTES = MAX_STATE_BYTES  # a configuration file, checkpointed whole: unit files and configs of a few KB
KEEP = 3  # checkpoints kept besides the assigned, active and last-known-good ones
_HASH = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]*")


class CheckpointError(Exception):
    """A checkpoint or record is missing or does not match its content; the message names it."""


# ---- snapshots: the configuration as it is on disk

@dataclass(frozen=True, slots=True)
class Entry:
    path: str
    mode: int
    uid: int
    gid: int
    sha256: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    component: str
    argv: tuple[str, ...]
    entries: tuple[Entry, ...]
    blobs: dict[str, bytes]  # sha256 -> bytes

    @property
    def hash(self) -> str:
        """Of the files alone: the unit file holds the argv. The argv the agent read from the
        components file would name the newest configuration even after a rollback restored an older
        unit, and make the restored files look like a new configuration."""
        return hashlib.sha256(json_bytes({"component": self.component,
                                          "files": [asdict(entry) for entry in self.entries]})).hexdigest()


def manifest_document(component: str, argv: Sequence[str], entries: Sequence[Entry]) -> dict[str, Any]:
    return {"component": component, "argv": list(argv), "files": [asdict(entry) for entry in entries]}


def snapshot(config: ComponentConfig, root: Path = Path("/")) -> Snapshot:
    """The component's files as they are under `root` now; a path that does not exist is left out
    (a host run without systemd has no unit file)."""
    entries, blobs = [], {}
    for path in config.paths:
        target = on_root(root, path)
        try:
            data = fsutil.read_regular(target, MAX_FILE_BYTES, f"a configuration file of {config.name}")
            info = target.stat()
        except FileNotFoundError:
            continue
        digest = hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        entries.append(Entry(path, info.st_mode & 0o7777, info.st_uid, info.st_gid, digest))
    return Snapshot(config.name, config.argv, tuple(entries), blobs)


def on_root(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


# ---- the store

@dataclass(frozen=True, slots=True)
class CheckpointStore:
    """Checkpoints and records of every component of one host (`base`: the host's
    CONFIG_CHECKPOINTS, under the root that `kubesmith run` or a test gives)."""

    base: Path

    @classmethod
    def on(cls, root: Path = Path("/")) -> CheckpointStore:
        return cls(on_root(root, layout.CONFIG_CHECKPOINTS))

    def checkpoints_dir(self, component: str) -> Path:
        if not _NAME.fullmatch(component):
            raise CheckpointError(f"{component!r} is not a component name")
        return self.base / component / "checkpoints"

    def save(self, snap: Snapshot) -> str:
        """Write the checkpoint of `snap` unless it exists; returns its hash. Atomic: the directory
        bearing the hash appears complete, in one rename, or not at all."""
        digest = snap.hash
        parent = self.checkpoints_dir(snap.component)
        final = parent / digest
        if final.is_dir():
            return digest
        fsutil.make_dirs(parent, 0o700)
        os.chmod(self.base, 0o700)
        temp = parent / f".{digest}{fsutil.TEMP_MARKER}{secrets.token_hex(4)}"
        try:
            temp.mkdir(0o700)
            (temp / "blobs").mkdir(0o700)
            for blob, data in snap.blobs.items():
                _write_durable(temp / "blobs" / blob, data, 0o600)
            document = {**manifest_document(snap.component, snap.argv, snap.entries), "hash": digest}
            _write_durable(temp / MANIFEST, json_bytes(document), 0o600)
            fsutil.fsync_dir(temp / "blobs")
            fsutil.fsync_dir(temp)
            try:
                os.rename(temp, final)
            except OSError:  # another writer finished the same checkpoint first
                if not final.is_dir():
                    raise
                shutil.rmtree(temp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        fsutil.fsync_dir(parent)
        return digest

    def hashes(self, component: str) -> list[str]:
        parent = self.checkpoints_dir(component)
        return sorted(p.name for p in parent.iterdir() if _HASH.fullmatch(p.name)) if parent.is_dir() else []

    def load(self, component: str, digest: str) -> Snapshot:
        """The checkpoint, checked: the manifest hashes to its name and every blob to its entry."""
        where = self.checkpoints_dir(component) / digest
        try:
            document = read_json_file(where / MANIFEST, "a checkpoint's manifest")
            entries = tuple(Entry(**entry) for entry in document["files"])
            argv = tuple(document["argv"])
            if not all(isinstance(entry.sha256, str) and _HASH.fullmatch(entry.sha256) for entry in entries):
                raise ValueError("a file's sha256 is not a hash")
            blobs = {entry.sha256: fsutil.read_regular(where / "blobs" / entry.sha256, MAX_FILE_BYTES,
                                                       "a checkpointed file") for entry in entries}
        except FileNotFoundError:
            raise CheckpointError(f"{where}: no such checkpoint of {component}") from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"{where}: damaged checkpoint ({reason(exc)})") from None
        snap = Snapshot(component, argv, entries, blobs)
        if snap.hash != digest or document.get("component") != component:
            raise CheckpointError(f"{where}: its manifest does not match its name")
        for blob, data in blobs.items():
            if hashlib.sha256(data).hexdigest() != blob:
                raise CheckpointError(f"{where}/blobs/{blob}: content does not match its name")
        return snap

    # ---- records

    def records(self, component: str) -> Records:
        found: dict[str, Any] = {}
        for key, name in RECORDS.items():
            path = self.base / component / name
            try:
                document = read_json_file(path, "a checkpoint record")
                found[key] = Active(**document) if key == "active" else Record(**document)
            except FileNotFoundError:
                found[key] = None
            except (OSError, ValueError, TypeError) as exc:
                raise CheckpointError(f"{path}: damaged record ({reason(exc)})") from None
        return Records(**found)

    def write_record(self, component: str, key: str, record: Record | Active) -> None:
        """One record, atomically (temp, fsync, rename, fsync directory)."""
        fsutil.make_dirs(self.checkpoints_dir(component).parent, 0o700)
        fsutil.atomic_write(self.base / component / RECORDS[key], json_bytes(asdict(record)), 0o600)

    def problems(self, component: str) -> list[str]:
        """What is torn or missing: a checkpoint that does not match its name, a record that does not
        parse or names no checkpoint. A writer's temp directory is not a problem (collect removes it)."""
        found, have = [], self.hashes(component)
        for digest in have:
            try:
                self.load(component, digest)
            except CheckpointError as exc:
                found.append(str(exc))
        try:
            records = self.records(component)
        except CheckpointError as exc:
            return [*found, str(exc)]
        for key, record in (("assigned", records.assigned), ("active", records.active),
                            ("last-known-good", records.last_known_good)):
            if record is not None and record.hash not in have:
                found.append(f"{component}: its {key} record names {record.hash[:12]}, which has no checkpoint")
        return found

    # ---- garbage collection

    def collect(self, component: str, keep: int = KEEP) -> list[str]:
        """Remove temp directories a killed writer left, and all checkpoints but the assigned,
        active, failed and last-known-good ones and the `keep` newest others. Returns the hashes removed."""
        parent = self.checkpoints_dir(component)
        if not parent.is_dir():
            return []
        for leftover in parent.iterdir():
            if fsutil.TEMP_MARKER in leftover.name:
                shutil.rmtree(leftover, ignore_errors=True)
        records = self.records(component)
        protected = {r.hash for r in (records.assigned, records.active, records.last_known_good) if r is not None}
        if records.active is not None and records.active.failed:
            protected.add(records.active.failed)
        others = sorted((d for d in self.hashes(component) if d not in protected),
                        key=lambda d: (parent / d).stat().st_mtime, reverse=True)
        removed = others[keep:]
        for digest in removed:
            doomed = parent / f".{digest}{fsutil.TEMP_MARKER}gc"
            os.rename(parent / digest, doomed)  # gone from its name in one step, then deleted
            shutil.rmtree(doomed)
        if removed:
            fsutil.fsync_dir(parent)
        return removed


# ---- restoring

def restore(snap: Snapshot, root: Path = Path("/")) -> int:
    """Put a checkpoint's files back under `root`: each file whose bytes, mode or owner differ is
    written to a temp file beside it (mode and owner set, fsynced), then all are renamed into place
    and their directories fsynced. Returns how many files changed. Every file is whole at every
    moment; a crash between renames leaves a mix that the rolling-back record makes the next
    pass finish (restoring again is idempotent)."""
    temps: list[tuple[Path, Path]] = []
    try:
        for entry in snap.entries:
            target = on_root(root, entry.path)
            data = snap.blobs[entry.sha256]
            if _same(target, entry, data):
                continue
            fsutil.make_dirs(target.parent)
            temp = target.with_name(f".{target.name}{fsutil.TEMP_MARKER}{secrets.token_hex(4)}")
            _write_durable(temp, data, entry.mode, (entry.uid, entry.gid))
            temps.append((temp, target))
        for temp, target in temps:
            os.replace(temp, target)
    except BaseException:
        for temp, _ in temps:
            temp.unlink(missing_ok=True)
        raise
    for directory in sorted({target.parent for _, target in temps}):
        fsutil.fsync_dir(directory)
    return len(temps)


def _same(target: Path, entry: Entry, data: bytes) -> bool:
    try:
        info = target.stat()
        return (info.st_mode & 0o7777, info.st_uid, info.st_gid) == (entry.mode, entry.uid, entry.gid) \
            and fsutil.read_regular(target, len(data), "a restored file") == data
    except OSError:  # missing, or not the file it was (a FIFO, grown): written again
        return False


def _write_durable(path: Path, data: bytes, mode: int, owner: tuple[int, int] | None = None) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)
        if owner is not None and owner != (os.getuid(), os.getgid()):
            os.fchown(fd, *owner)
            os.fchmod(fd, mode)  # chown clears set-id bits
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
