"""One cgroup per lab host in every hierarchy (nspawn --keep-unit would otherwise share /payload).

Works on hybrid hosts (cgroup2 at /sys/fs/cgroup/unified + v1 name=systemd + v1 controllers) and
on pure cgroup2 hosts (/sys/fs/cgroup). A host's own cgroup in each v1 controller is what lets its
containers run: nspawn roots the host's cgroup namespace there, so the kubelet and runc inside
see their own tree (once the guest made the mounts writable, see `lab.host`), and two hosts'
pods never meet.
"""

from __future__ import annotations

import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids")


def hierarchies(root: Path = CGROUP_ROOT) -> tuple[Path, ...]:
    """cgroup2 first, then name=systemd and the v1 controllers where this machine mounts them."""
    unified = root / "unified" if (root / "unified").is_dir() else root
    found = [unified]
    for name in ("systemd", *V1_CONTROLLERS):
        if (root / name / "cgroup.procs").is_file() and not (root / name).is_symlink():
            found.append(root / name)
    return tuple(found)


def host_cgroups(name: str) -> tuple[Path, ...]:
    return tuple(hierarchy / name for hierarchy in hierarchies())


def create(name: str) -> tuple[Path, ...]:
    paths = host_cgroups(name)
    for path in paths:
        path.mkdir(exist_ok=True)
        if path.parent.name == "cpuset":  # a v1 cpuset takes no process before it has CPUs and memory nodes
            for setting in ("cpuset.cpus", "cpuset.mems"):
                (path / setting).write_text((path.parent / setting).read_text())
    return paths


def kill(name: str, subtree: str = "") -> bool:
    """SIGKILL every process in the host's cgroup2 tree (or a subtree of it) with `cgroup.kill`: it
    reaches the pods runc started and a guest PID 1 that no longer calls itself systemd."""
    control = hierarchies()[0] / name / subtree / "cgroup.kill"
    if not control.exists():
        return False
    try:
        control.write_text("1\n")
    except OSError:
        return False
    return True


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
