"""One cgroup per lab host (pitfall: nspawn --keep-unit would otherwise share /payload).

Works on hybrid hosts (cgroup2 at /sys/fs/cgroup/unified + v1 name=systemd) and on
pure cgroup2 hosts (/sys/fs/cgroup).
"""

from __future__ import annotations

import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def hierarchies(root: Path = CGROUP_ROOT) -> tuple[Path, ...]:
    """The hierarchies systemd inside a host cares about: cgroup2, and name=systemd when present."""
    unified = root / "unified" if (root / "unified").is_dir() else root
    found = [unified]
    if (root / "systemd" / "cgroup.procs").is_file():
        found.append(root / "systemd")
    return tuple(found)


def host_cgroups(name: str) -> tuple[Path, ...]:
    return tuple(hierarchy / name for hierarchy in hierarchies())


def create(name: str) -> tuple[Path, ...]:
    paths = host_cgroups(name)
    for path in paths:
        path.mkdir(exist_ok=True)
    return paths


def remove(name: str, timeout: float = 10.0) -> list[Path]:
    """rmdir the host's cgroups depth-first; returns those still there after timeout.

    A cgroup stays busy for a moment after its last process died, hence the retries.
    """
    deadline = time.monotonic() + timeout
    while True:
        left = [path for path in host_cgroups(name) if path.exists() and not _rmdir_tree(path)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def _rmdir_tree(path: Path) -> bool:
    for child in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        try:
            child.rmdir()
        except OSError:
            pass
    try:
        path.rmdir()
    except OSError:
        return False
    return True
