"""A host's Kubernetes release goes back as a whole: when one component's new release fails its trial.

Each unit names its binary in its release's directory (`layout.release_dir`), and the unit is part of
every checkpoint, so a checkpoint knows its release. When a component is rolled back to a checkpoint
of another release than the one that failed, the keeper sends every other component of the host that
runs the failed release back to its newest checkpoint of the release it goes back to (`trial.
follow_release`): otherwise a failed upgrade would leave a host with a kubelet newer than its API
server. The old release's binaries are still on the host (`backends/releases.py`), so nothing waits.
"""

from __future__ import annotations

import re

from kubesmith import layout
from kubesmith.agent.checkpoints import CheckpointError, CheckpointStore, Snapshot
from kubesmith.agent.trial import Records

_EXEC_START = re.compile(r"^ExecStart=(\S+)", re.MULTILINE)


def release_of(snap: Snapshot) -> str | None:
    """The release whose binary the checkpoint's unit starts (None: not a Kubernetes binary, or no unit)."""
    unit = f"{layout.UNIT_DIR}/{snap.component}.service"
    entry = next((e for e in snap.entries if e.path == unit), None)
    if entry is None:
        return None
    found = _EXEC_START.search(snap.blobs[entry.sha256].decode("utf-8", "replace"))
    return layout.release_of(found.group(1)) if found else None


def checkpoint_of(store: CheckpointStore, component: str, release: str, records: Records) -> str | None:
    """The checkpoint to go back to for `release`: the last-known-good one when it is of that release,
    else the newest checkpoint of it (None: the store keeps none)."""
    lkg = records.last_known_good
    if lkg is not None and _release(store, component, lkg.hash) == release:
        return lkg.hash
    parent = store.checkpoints_dir(component)
    found = [digest for digest in store.hashes(component) if _release(store, component, digest) == release]
    return max(found, key=lambda digest: (parent / digest).stat().st_mtime, default=None)


def _release(store: CheckpointStore, component: str, digest: str) -> str | None:
    try:
        return release_of(store.load(component, digest))
    except CheckpointError:
        return None
