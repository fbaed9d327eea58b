"""Two Kubernetes releases side by side on a host: the one an apply installs and the one it ran before.

The units name each Kubernetes binary in its release's directory (`layout.release_dir`). An apply
that changes the release uploads the new directory and keeps the old one, so when the new release
fails its trial the agent restores the old units (part of each component's checkpoint) and they
start binaries that are still there: a rollback never waits for an upload. Going back by applying
the old spec uploads nothing either. At most two releases stay: the previous one is dropped when a
third arrives; a directory no manifest accounts for (a release uploaded by an apply that halted,
then abandoned) goes too. The applied manifest records which release the host runs and which it
keeps, so the next apply knows without asking.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubesmith import layout

LIST_COMMAND = f"ls -1 {layout.RELEASES} 2>/dev/null; true"


@dataclass(frozen=True, slots=True)
class Kept:
    """What an apply does with a host's releases."""

    release: str  # the release this apply installs (spec.kubernetesVersion)
    previous: str | None  # the release kept beside it (`layout.LEGACY_RELEASE`: binaries in layout.BIN)
    files: dict[str, str]  # the previous manifest's files of `previous`: kept on the host, recorded again
    stale: tuple[str, ...]  # release directories on the host besides these two: removed before the upload

    def manifest_fields(self) -> dict[str, Any]:
        return {"release": self.release, "previous": self.previous}


def running_release(manifest: Mapping[str, Any]) -> str | None:
    """The release the host's units named at its last complete apply; a manifest from before release
    directories names none, and its Kubernetes binaries in layout.BIN are the legacy release."""
    named = manifest.get("release")
    if isinstance(named, str) and named:
        return named
    files = manifest.get("files") or {}
    return layout.LEGACY_RELEASE if any(layout.release_of(path) == layout.LEGACY_RELEASE for path in files) else None


def kept(manifest: Mapping[str, Any], release: str, on_host: Sequence[str]) -> Kept:
    """Keep the release the host runs when this apply changes it (the trial's way back); while the
    release stays, keep the one the manifest kept already. `on_host`: the directories in RELEASES."""
    ran = running_release(manifest)
    keep = ran if ran != release else manifest.get("previous")
    keep = keep if isinstance(keep, str) and keep and keep != release else None
    files = manifest.get("files") or {}
    kept_files = {path: digest for path, digest in files.items()
                  if keep is not None and layout.release_of(path) == keep}
    stale = tuple(sorted(name for name in on_host if name and name not in (release, keep)))
    return Kept(release, keep, kept_files, stale)


def listed(output: str) -> tuple[str, ...]:
    """LIST_COMMAND's answer: the release directories on the host."""
    names = (line.strip() for line in output.splitlines())
    return tuple(name for name in names if name and name not in (".", "..") and "/" not in name)


def remove_command(stale: Sequence[str]) -> str:
    return "rm -rf -- " + " ".join(shlex.quote(layout.release_dir(name)) for name in stale)
