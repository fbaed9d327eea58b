"""Day-2 operations on applied hosts, over SSH: etcd snapshot and restore, and reset.

Each follows the documented procedure and checks before it changes: a snapshot is verified
(etcdutl's status) before it is kept; a restore refuses a file whose integrity check fails before
anything stops, keeps every member's old data directory aside until the restored cluster is
healthy (etcd's disaster-recovery guide); a reset touches only hosts whose manifest names this
cluster, and removes what the manifest and the plan say kubesmith put there.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kubesmith import fsutil, layout
from kubesmith.backends.etcd_members import MembershipError, etcdctl, members_of, remove
from kubesmith.backends.runtime_bundle import REMOTE_ROOT
from kubesmith.backends.systemd import UnitOptions
from kubesmith.hostfile import HostFile
from kubesmith.modules.pod_network import NETWORK_CONFIG
from kubesmith.vocabulary.model import HostPlan, Plan
from kubesmith.transport.ssh import SshTransport

Progress = Callable[[str], None]
REMOTE_WORK = f"{layout.LIB}/kubesmith/etcd"
# Stopped for a restore and started again after it: a client that kept running would keep its cache
# of the newer state, watching from a revision the restored etcd reaches only later, and miss what the
# restore took away (etcd 3.5's etcdutl cannot bump the restored revision to make them notice).
CONTROL_PLANE = "kube-apiserver.service kube-controller-manager.service kube-scheduler.service"
SHA256_TRAILER = 32  # etcdctl appends the sha256 of the database to a snapshot


class Day2Error(Exception):
    """An operation stopped; the message names the host, the step and what was left where."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    path: Path
    member: str
    revision: int
    hash: int
    keys: int
    size: int
    sha256: str


async def _run(transport: SshTransport, host: HostPlan, step: str, command: str, timeout: float = 300) -> str:
    result = await transport.run(host.address, command, timeout=timeout)
    if not result.ok:
        raise Day2Error(f"{host.name}: {step} failed ({result.exit_status}): "
                        f"{(result.stderr or result.stdout).strip()[-600:]}")
    return result.stdout


async def _status(transport: SshTransport, host: HostPlan, path: str, bin_dir: str) -> dict[str, int]:
    out = await _run(transport, host, f"checking {path}",
                     shlex.join([f"{bin_dir}/etcdutl", "snapshot", "status", path, "-w", "json"]))
    return json.loads(out)  # type: ignore[no-any-return]


async def snapshot(transport: SshTransport, plan: Plan, output: Path, progress: Progress,
                   bin_dir: str = UnitOptions().bin_dir) -> Snapshot:
    """A consistent snapshot from the first healthy member, verified, written locally 0600 and atomically."""
    errors = []
    for host in members_of(plan):
        health = await transport.run(host.address, f"{etcdctl(host, bin_dir)} endpoint health", timeout=30)
        if health.ok:
            break
        errors.append(f"{host.name}: {(health.stderr or health.stdout).strip()[-200:]}")
    else:
        raise Day2Error("no healthy etcd member to take a snapshot from: " + "; ".join(errors))
    remote = f"{REMOTE_WORK}/snapshot-{int(time.time())}.db"
    progress(f"{host.name}: saving a snapshot through the etcd API")
    await _run(transport, host, "preparing", f"install -d -m 0700 {REMOTE_WORK}")
    try:
        await _run(transport, host, "etcdctl snapshot save", f"{etcdctl(host, bin_dir)} snapshot save {remote}")
        status = await _status(transport, host, remote, bin_dir)
        data = (await transport.read(host.address, [remote]))[remote]
    finally:
        await transport.run(host.address, f"rm -f {remote} {remote}.part")
    if data is None:
        raise Day2Error(f"{host.name}: {remote} vanished before it was read")
    problem = integrity_problem(data)
    if problem:
        raise Day2Error(f"{host.name}: the snapshot read back {problem}")
    fsutil.atomic_write(output, data, 0o600)
    return Snapshot(output, host.name, status["revision"], status["hash"], status["totalKey"], len(data),
                    hashlib.sha256(data).hexdigest())


def integrity_problem(data: bytes) -> str | None:
    """Why a snapshot file is not one etcdctl wrote whole (its sha256 trailer), None when it is."""
    if len(data) <= SHA256_TRAILER:
        return f"is too short for an etcd snapshot ({len(data)} bytes)"
    if hashlib.sha256(data[:-SHA256_TRAILER]).digest() != data[-SHA256_TRAILER:]:
        return "fails its integrity check (the sha256 etcdctl appended does not match the data)"
    return None


async def restore(transport: SshTransport, plan: Plan, source: Path, progress: Progress,
                  bin_dir: str = UnitOptions().bin_dir, deadline: float = 600) -> list[str]:
    """etcd's disaster recovery across every member; returns the old data directories removed at the end."""
    data = source.read_bytes()
    problem = integrity_problem(data)
    if problem:
        raise Day2Error(f"{source} {problem}; nothing was changed")
    members = members_of(plan)
    control_planes = [host for host in plan.hosts if any(s.name == "kube-apiserver" for s in host.services)]
    nodes = [host for host in plan.hosts if any(s.name == "kubelet" for s in host.services)]
    remote = f"{REMOTE_WORK}/restore.db"
    stamp = time.strftime("%Y%m%d%H%M%S")
    progress(f"uploading {source.name} ({len(data)} bytes) to {', '.join(h.name for h in members)}")
    await asyncio.gather(*(transport.upload(h.address, [HostFile(remote, 0o600, "root", "root", data)])
                           for h in members))
    await asyncio.gather(*(_status(transport, h, remote, bin_dir) for h in members))
    progress(f"stopping the control plane on {', '.join(h.name for h in control_planes)}, then etcd")
    await asyncio.gather(*(_run(transport, h, "stopping the control plane", f"systemctl stop {CONTROL_PLANE}")
                           for h in control_planes))
    await asyncio.gather(*(_run(transport, h, "stopping etcd", "systemctl stop etcd.service") for h in members))
    everyone = ",".join(f"{h.name}={h.service('etcd').flags['initial-advertise-peer-urls']}" for h in members)
    aside = await asyncio.gather(*(_restore_member(transport, h, remote, stamp, everyone, bin_dir) for h in members))
    progress("starting etcd on every member")
    await asyncio.gather(*(_run(transport, h, "starting etcd", "systemctl start --no-block etcd-online.target")
                           for h in members))
    await asyncio.gather(*(_run(transport, h, "waiting for etcd", "systemctl start etcd-online.target",
                                deadline) for h in members))
    progress("starting the control plane")
    await asyncio.gather(*(_run(transport, h, "starting the control plane", "systemctl start kubernetes.target",
                                deadline) for h in control_planes))
    progress(f"restarting the kubelet and kube-proxy on {', '.join(h.name for h in nodes)}")
    await asyncio.gather(*(_run(transport, h, "restarting the node's components",
                                "systemctl try-restart kubelet.service kube-proxy.service", deadline) for h in nodes))
    await asyncio.gather(*(_run(transport, h, "removing the old data", f"rm -rf -- {shlex.quote(old)} {remote}")
                           for h, old in zip(members, aside)))
    return [f"{h.name}:{old}" for h, old in zip(members, aside)]


async def _restore_member(transport: SshTransport, host: HostPlan, remote: str, stamp: str, everyone: str,
                          bin_dir: str) -> str:
    """Move the member's data aside and restore the snapshot into its data directory as a new cluster
    of every member (`everyone`: a member that joined later started with fewer in its flags)."""
    service = host.service("etcd")
    flags = service.flags
    data_dir = flags["data-dir"]
    old = f"{data_dir}.before-restore-{stamp}"
    command = " && ".join([
        f"if [ -e {shlex.quote(data_dir)} ]; then mv {shlex.quote(data_dir)} {shlex.quote(old)}; fi",
        shlex.join([f"{bin_dir}/etcdutl", "snapshot", "restore", remote, f"--name={flags['name']}",
                    f"--initial-cluster={everyone}",
                    f"--initial-cluster-token={flags['initial-cluster-token']}",
                    f"--initial-advertise-peer-urls={flags['initial-advertise-peer-urls']}",
                    f"--data-dir={data_dir}"]),
        f"chown -R {shlex.quote(service.user)}:{shlex.quote(service.group)} {shlex.quote(data_dir)}",
        f"chmod 0700 {shlex.quote(data_dir)}",
    ])
    await _run(transport, host, f"restoring into {data_dir} (old data kept at {old})", command)
    return old


# ---- reset

# Pods outlive their kubelet and containerd (containerd leaves its shims running by design): reset
# kills every process in the pod cgroups (either cgroup driver), then containerd's shims, and
# unmounts what pods and the kubelet mounted, deepest first.
STOP_PODS = (
    "systemctl stop kubepods.slice 2>/dev/null; "
    "find /sys/fs/cgroup -path '*kubepods*' -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -9; "
    "pkill -9 -f 'containerd-shim-run[c]'; sleep 1; "  # [c]: the pattern does not match this shell's own line
    "awk '$2 ~ \"^(/var/lib/kubelet|/run/containerd|/var/lib/containerd)/\" {print $2}' /proc/mounts | sort -r "
    "| xargs -r -n 1 umount -l; true"
)

def kubesmith_paths(host: HostPlan) -> list[str]:
    """Directories kubesmith's components own on a host: their data, configuration, logs and runtime."""
    owned = {service.state_directory for service in host.services if service.state_directory}
    owned |= {layout.ETC, layout.KUBESMITH_ETC, f"{layout.LIB}/kubesmith", layout.LOG, REMOTE_ROOT}
    return sorted(owned)


def check_removable(host: HostPlan, paths: Sequence[str], files: Sequence[str] = ()) -> None:
    """Reset deletes only what kubesmith made: a system directory (from a spec applied before such specs
    were refused, or a manifest edited on the host) stops it before anything is deleted anywhere. The
    directories (`paths`) follow the rule a component's directory does; `files` (unit files, sysctl.d
    drop-ins) may lie in system directories but be none, nor hold one. Both in canonical form."""
    from kubesmith.systemdirs import removable_file_problem, system_directory_problem

    for path, rule in [*((path, system_directory_problem) for path in paths),
                       *((path, removable_file_problem) for path in files)]:
        problem = rule(str(path)) if str(path).startswith("/") else f"{path} is not absolute"
        if problem is not None:
            raise Day2Error(f"{host.name}: refusing to delete {path}: {problem}; no host was changed")


async def reset_host(transport: SshTransport, host: HostPlan, manifest: dict[str, object],
                     progress: Progress) -> None:
    """Stop and remove kubesmith's units, files and data directories on a host of the cluster."""
    files = sorted(manifest.get("files", {}))  # type: ignore[arg-type]
    check_removable(host, kubesmith_paths(host), files)
    units = sorted(Path(path).name for path in files if path.startswith(f"{layout.UNIT_DIR}/"))
    progress(f"{host.name}: stopping {len(units)} units")
    if units:
        await _run(transport, host, "stopping units",
                   "systemctl disable --now --quiet " + " ".join(map(shlex.quote, units)) + " || true")
    if "node" in host.roles:
        progress(f"{host.name}: stopping pods")
        await _run(transport, host, "stopping pods", STOP_PODS)
        # with the pods gone, their bridge and links too (stopping kubesmith-network leaves them to running pods)
        await _run(transport, host, "removing the pods' bridge",
                   f"if [ -e {NETWORK_CONFIG} ]; then {layout.BIN}/kubesmith network down --bridge "
                   f"--config {NETWORK_CONFIG}; fi")
    progress(f"{host.name}: removing {len(files)} files and {len(kubesmith_paths(host))} directories")
    await _run(transport, host, "removing files", "rm -rf -- " + " ".join(map(shlex.quote, [*files, layout.APPLIED_MANIFEST])))
    directories = " ".join(map(shlex.quote, kubesmith_paths(host)))  # a mount point is emptied, not removed
    await _run(transport, host, "removing directories", f"for d in {directories}; do if mountpoint -q \"$d\"; "
               "then find \"$d\" -mindepth 1 -delete; else rm -rf -- \"$d\"; fi; done")
    await _run(transport, host, "reloading systemd", "systemctl daemon-reload && systemctl reset-failed")


async def reset(transport: SshTransport, plan: Plan, hosts: Sequence[str], progress: Progress) -> None:
    """Check every host belongs to the cluster before resetting any, then reset them together. An
    etcd member of a cluster that keeps running (some members are not reset) leaves etcd first:
    its data is about to go, and a member that comes back empty under its old identity is unsafe."""
    selected = [plan.host(name) for name in hosts]
    for host in selected:
        check_removable(host, kubesmith_paths(host))
    manifests = await asyncio.gather(*(manifest_of(transport, host, plan.cluster) for host in selected))
    for host, manifest in zip(selected, manifests):
        check_removable(host, (), sorted(manifest.get("files", {})))  # type: ignore[arg-type]
    staying = [host for host in members_of(plan) if host.name not in hosts]
    for host in (host for host in members_of(plan) if host.name in hosts and staying):
        progress(f"{host.name}: removing its etcd member (through {staying[0].name})")
        try:
            await remove(transport, staying[0], host)
        except MembershipError as exc:
            raise Day2Error(f"{host.name}: removing its etcd member failed: {exc}; no host was reset") from None
    await asyncio.gather(*(reset_host(transport, host, manifest, progress)
                           for host, manifest in zip(selected, manifests)))


async def manifest_of(transport: SshTransport, host: HostPlan, cluster: str) -> dict[str, object]:
    """The host's apply manifest, when it names `cluster`; otherwise the host is not ours to reset."""
    text = await _run(transport, host, "reading the manifest", f"cat {layout.APPLIED_MANIFEST} 2>/dev/null || true")
    manifest = json.loads(text) if text.strip() else {}
    owner = manifest.get("cluster")
    if owner != cluster:
        what = "no kubesmith manifest" if not manifest else f"the manifest of cluster {owner!r}"
        raise Day2Error(f"{host.name}: has {what}, not of cluster {cluster!r}; no host was changed")
    return manifest  # type: ignore[no-any-return]
