"""Bringing a lab up and taking it down again, leaving nothing behind.

`up` records everything it creates in the state dir before creating it, so `down`
can undo a lab from any later process, after a crash, or after a half-finished `up`.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from kubesmith.lab import cgroups, host, netns, rootfs, sshkeys
from kubesmith.lab.config import MAX_HOSTS, LabConfig, LabHost
from kubesmith.lab.errors import LabError, Progress, require_root, require_tools
from kubesmith.lab.procs import ProcessRecord
from kubesmith.lab.state import LabState, mounts_under

NSPAWN_PROPAGATE = Path("/run/systemd/nspawn/propagate")
# Lab hosts share this machine's kernel and its root user, and every host's systemd, kubelet and
# containerd take inotify instances from root's one quota (128 by default: four hosts with nodes
# exhaust it, and the next systemd or kubelet fails with "too many open files").
INOTIFY_LIMITS = {"fs/inotify/max_user_instances": 8192, "fs/inotify/max_user_watches": 524288}
SHUTDOWN_TIMEOUT = 30.0
UP_TOOLS = ("systemd-nspawn", "nsenter", "ip", "mount", "umount", "ssh-keygen")


def up(config: LabConfig, count: int, progress: Progress) -> tuple[LabHost, ...]:
    """Boot hosts h1..hN and return when all of them are running; on any failure undo it all."""
    if not 1 <= count <= MAX_HOSTS:
        raise LabError(f"a lab has 1 to {MAX_HOSTS} hosts, not {count}")
    require_root()
    require_tools(UP_TOOLS)
    refuse_if_up(config)
    raise_inotify_limits(progress)
    rootfs.ensure_rootfs(config, progress)
    hosts = config.hosts(count)
    started = time.monotonic()
    try:
        _create(config, hosts, progress)
        states = host.wait_running(config, [h.name for h in hosts], config.boot_timeout)
    except BaseException:
        progress("up failed; taking the half-built lab down")
        down(config, progress)
        raise
    for name, state in sorted(states.items()):
        progress(f"{name}: {state}")
    progress(f"{count} host{'s' if count != 1 else ''} up in {time.monotonic() - started:.1f}s; "
             f"ssh -F {config.ssh_config} h1")
    return hosts


def raise_inotify_limits(progress: Progress, proc_sys: Path = Path("/proc/sys")) -> None:
    """Raise the machine's inotify limits to what several lab hosts need (never lower them)."""
    for name, wanted in INOTIFY_LIMITS.items():
        setting = proc_sys / name
        current = int(setting.read_text())
        if current < wanted:
            setting.write_text(str(wanted))
            progress(f"raised {name.replace('/', '.')} from {current} to {wanted}: lab hosts share this "
                     "machine's kernel, and each host's systemd and kubelet need inotify instances")


def refuse_if_up(config: LabConfig) -> None:
    if netns.exists(config) or (config.hosts_dir.exists() and any(config.hosts_dir.iterdir())):
        raise LabError(f"a lab is already up (netns {config.netns}, state {config.state_dir}); "
                       "run `kubesmith lab down` first")


def _create(config: LabConfig, hosts: tuple[LabHost, ...], progress: Progress) -> None:
    config.state_dir.mkdir(parents=True, exist_ok=True)
    config.state_dir.chmod(0o700)
    LabState(netns=config.netns, bridge=config.bridge, hosts=hosts, linked=config.link).save(config)
    netns.create(config)
    if config.link:
        progress(f"this machine is {netns.link(config)} on the lab network: kubectl, curl and kubesmith "
                 "reach the hosts from here")
    client_key = sshkeys.keygen(config.client_key, f"kubesmith-lab@{config.netns}")
    host_keys: dict[LabHost, str] = {}
    for lab_host in hosts:
        root = host.mount_root(config, lab_host)
        host.seed_identity(root, lab_host, hosts, config.network, client_key)
        host_keys[lab_host] = sshkeys.keygen(root / "etc/ssh/ssh_host_ed25519_key", f"root@{lab_host.name}")
    sshkeys.write_client_files(config, host_keys)
    for lab_host in hosts:
        record = host.start(config, lab_host)
        progress(f"{lab_host.name}: booting at {lab_host.address} (supervisor pid {record.pid})")


# -- down -----------------------------------------------------------------------------------------


def down(config: LabConfig, progress: Progress) -> None:
    """Stop every host cleanly (SIGKILL after a timeout) and remove every trace; safe to repeat."""
    require_root()
    config = _as_brought_up(config)
    names = host_names(config)
    for name in names:
        _request_poweroff(config, name)
    problems: list[str] = []
    for name in names:
        _await_stop(config, name, progress)
        problems += _release_host(config, name)
    _remove_empty_nspawn_dirs()
    if config.link:
        netns.unlink(config)
        netns.guard(config)  # the lab's addresses stay on this machine: "no route to host", never the default route
    netns.delete(config)
    left = mounts_under(config.state_dir)
    if left:
        problems.append(f"still mounted: {', '.join(map(str, left))}")
    elif config.state_dir.exists() and not problems:  # the state names what is left: another `down` needs it
        shutil.rmtree(config.state_dir)
    if problems:
        raise LabError("down left things behind: " + "; ".join(problems))
    progress(f"lab down ({len(names)} host{'s' if len(names) != 1 else ''})")


def _as_brought_up(config: LabConfig) -> LabConfig:
    """Use the names `up` recorded, even when the environment now says otherwise."""
    saved = LabState.load(config)
    return config if saved is None else dataclasses.replace(config, netns=saved.netns, bridge=saved.bridge,
                                                            link=config.link or saved.linked)


def host_names(config: LabConfig) -> list[str]:
    """Every host the state dir knows of: recorded ones and any half-created directory."""
    saved = LabState.load(config)
    names = {h.name for h in saved.hosts} if saved else set()
    if config.hosts_dir.is_dir():
        names |= {p.name for p in config.hosts_dir.iterdir() if p.is_dir()}
    return sorted(names, key=lambda n: (len(n), n))


def _request_poweroff(config: LabConfig, name: str) -> None:
    """nspawn turns SIGTERM into SIGRTMIN+3 for the guest's systemd: a clean poweroff."""
    if config.host_dir(name).is_dir():
        host.stop_file(config, name).touch()
    for pods in ("payload/kubepods", "payload/kubepods.slice"):  # runc's trees in cgroup2, either driver
        cgroups.kill(config.cgroup_name(name), pods)
    process = host.nspawn(config, name)
    if process is not None:
        process.signal(signal.SIGTERM)


def _await_stop(config: LabConfig, name: str, progress: Progress) -> None:
    supervisor = ProcessRecord.load(host.supervisor_file(config, name))
    if supervisor is None or supervisor.wait_gone(SHUTDOWN_TIMEOUT):
        _reap(supervisor)
        return
    progress(f"{name}: no clean shutdown after {SHUTDOWN_TIMEOUT:.0f}s; killing it")
    cgroups.kill(config.cgroup_name(name))  # everything, pods and a PID 1 now called systemd-shutdown included
    for process in (host.leader(config, name), host.nspawn(config, name)):
        if process is not None:
            process.signal(signal.SIGKILL)
    if not supervisor.wait_gone(5.0):
        supervisor.signal(signal.SIGKILL)
        supervisor.wait_gone(5.0)
    _reap(supervisor)


def _reap(process: ProcessRecord | None) -> None:
    """Collect the exit status when the supervisor is our own child (a test's fixture)."""
    if process is None:
        return
    try:
        os.waitpid(process.pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _release_host(config: LabConfig, name: str) -> list[str]:
    problems = []
    for mount_point in mounts_under(config.host_dir(name)):
        if not _umount(mount_point):
            problems.append(f"cannot unmount {mount_point}")
    left = cgroups.remove(config.cgroup_name(name))
    if left:
        problems.append(f"cgroups still in use: {', '.join(map(str, left))}")
    # /run is disk-backed on some machines, and nspawn then refuses to remove this itself.
    shutil.rmtree(NSPAWN_PROPAGATE / config.machine_name(name), ignore_errors=True)
    return problems


def _umount(mount_point: Path) -> bool:
    for argv in (["umount", str(mount_point)], ["umount", "--lazy", str(mount_point)]):
        if subprocess.run(argv, capture_output=True, check=False).returncode == 0:
            return True
    return False


def _remove_empty_nspawn_dirs() -> None:
    for path in (NSPAWN_PROPAGATE, NSPAWN_PROPAGATE.parent / "locks", NSPAWN_PROPAGATE.parent):
        try:
            path.rmdir()
        except OSError:
            pass


# -- checking -------------------------------------------------------------------------------------


def leftovers(config: LabConfig, names: list[str]) -> list[str]:
    """Everything of the lab that still exists (empty after a good `down`); names are host names."""
    found = []
    if netns.exists(config):
        found.append(f"network namespace {config.netns}")
    found += [f"mount {m}" for m in mounts_under(config.state_dir)]
    for name in names:
        found += [f"cgroup {c}" for c in cgroups.host_cgroups(config.cgroup_name(name)) if c.exists()]
        propagate = NSPAWN_PROPAGATE / config.machine_name(name)
        if propagate.exists():
            found.append(f"directory {propagate}")
    if config.state_dir.exists():
        found.append(f"state dir {config.state_dir}")
    return found
