"""What a node stopped by `kubesmith run` leaves on the machine, undone: its pods' processes and
containerd shims, the mounts under its run root, the pod cgroups, the kubelet's iptables chains.

The supervisor (`kubesmith.backends.run`) calls `release_node_leftovers` once every service has
stopped: a foreground run should leave the machine as it found it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

CGROUP_MOUNT = Path("/sys/fs/cgroup")
POD_CGROUP = "kubepods"  # the kubelet's pod cgroup tree with the cgroupfs driver and no cgroupRoot
KUBELET_CHAINS = ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT")  # the kubelet's own


def release_node_leftovers(root: Path) -> list[str]:
    """Undo what a stopped node leaves on the machine: the pods' processes (containers outlive the
    kubelet and containerd, as containerd's shims are meant to), mounts under the run root (the
    kubelet's bind mount, pod volumes, container root file systems, pods' network namespaces) and
    the pod cgroups. A foreground run should leave the machine as it found it."""
    notes: list[str] = []
    killed = stop_pod_processes(root)
    if killed:
        notes.append(f"stopped {killed} processes of pods and their containerd shims")
    for mount_point in sorted(mounts_under(root), key=len, reverse=True):
        result = subprocess.run(["umount", mount_point], capture_output=True, text=True, check=False)
        notes.append(f"unmounted {mount_point}" if result.returncode == 0
                     else f"could not unmount {mount_point}: {result.stderr.strip()}")
    for tree in pod_cgroup_trees():
        busy = remove_empty_cgroups(tree)
        if busy:
            notes.append(f"left {tree}: {busy} cgroups still hold processes")
    removed = remove_kubelet_chains()
    if removed:
        notes.append(f"removed the kubelet's iptables chains {', '.join(sorted(set(removed)))}")
    return notes


def remove_kubelet_chains() -> list[str]:
    """The iptables chains the kubelet makes (its firewall against outside traffic to 127.0.0.1, its
    canaries) outlive it; kube-proxy's go with `kube-proxy --cleanup`, its service's undo. Jumps to
    them first, then the chains."""
    removed = []
    for table in ("filter", "nat", "mangle"):
        saved = subprocess.run(["iptables-save", "-t", table], capture_output=True, text=True, check=False).stdout
        chains = [line[1:].split()[0] for line in saved.splitlines()
                  if line.startswith(":") and line[1:].split()[0] in KUBELET_CHAINS]
        jumps = [rule.split()[1:] for rule in saved.splitlines()
                 if rule.startswith("-A ") and any(f"-j {chain}" in rule for chain in chains)]
        steps = [*(["-D", *jump] for jump in jumps), *(["-F", c] for c in chains), *(["-X", c] for c in chains)]
        for arguments in steps:
            subprocess.run(["iptables", "-w", "5", "-t", table, *arguments], capture_output=True, check=False)
        removed += chains
    return removed


def stop_pod_processes(root: Path) -> int:
    """SIGKILL every process in the kubelet's pod cgroups, and the shims of this run's containerd
    (their command line names its socket, under `root`); returns how many, once they are gone."""
    pids = {int(pid) for tree in pod_cgroup_trees() for procs in tree.rglob("cgroup.procs")
            for pid in _read(procs).split()}
    marker = str(root).rstrip("/") + "/"
    for entry in Path("/proc").glob("[0-9]*"):
        command = _read(entry / "cmdline").replace("\0", " ")
        if "containerd-shim" in command and marker in command:
            pids.add(int(entry.name))
    pids.discard(os.getpid())
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() and _read(Path(f"/proc/{pid}/stat")).split(") ")[-1][:1] != "Z"
              for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(pids)


def pod_cgroup_trees() -> list[Path]:
    return sorted(CGROUP_MOUNT.glob(f"*/{POD_CGROUP}")) + sorted(CGROUP_MOUNT.glob(POD_CGROUP))


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def mounts_under(root: Path) -> list[str]:
    prefix = str(root).rstrip("/") + "/"
    with open("/proc/self/mounts") as table:
        points = [line.split()[1].replace("\\040", " ") for line in table]
    return [point for point in points if point.startswith(prefix)]


def remove_empty_cgroups(tree: Path) -> int:
    """rmdir every cgroup of `tree`, deepest first (a cgroup goes only once its children are gone);
    returns how many stayed because they still hold processes."""
    busy = 0
    for directory in sorted((p for p in tree.rglob("*") if p.is_dir()), key=lambda p: len(p.parts),
                            reverse=True) + [tree]:
        try:
            directory.rmdir()
        except FileNotFoundError:
            continue
        except OSError:
            busy += 1
    return busy
