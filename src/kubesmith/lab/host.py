"""One lab host: its overlay root, its supervisor, its systemd (PID 1) and its boot state."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

from kubesmith.lab import cgroups
from kubesmith.lab.config import LabConfig, LabHost
from kubesmith.lab.errors import LabError
from kubesmith.lab.procs import ProcessRecord, children

READY_STATES = ("running", "degraded")
GUEST_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "TERM=dumb",
             "LANG=C.UTF-8")
POLL_SECONDS = 0.2
# Kernel-wide settings the kubelet insists on (it writes them unless they already hold). Lab hosts
# share this machine's kernel, so each sees them as set through a read-only file of its own, and a
# kubelet in the lab never changes the machine's kernel (nspawn keeps /proc/sys read-only anyway).
KUBELET_KERNEL_SETTINGS = {"vm/overcommit_memory": "1", "vm/panic_on_oom": "0", "kernel/panic": "10",
                           "kernel/panic_on_oops": "1", "kernel/keys/root_maxkeys": "1000000",
                           "kernel/keys/root_maxbytes": "25000000"}
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def root_dir(config: LabConfig, name: str) -> Path:
    return config.host_dir(name) / "root"


def supervisor_file(config: LabConfig, name: str) -> Path:
    return config.host_dir(name) / "supervisor.json"


def console_log(config: LabConfig, name: str) -> Path:
    return config.host_dir(name) / "console.log"


def stop_file(config: LabConfig, name: str) -> Path:
    return config.host_dir(name) / "stop"


# -- preparing a host ---------------------------------------------------------------------------


def mount_root(config: LabConfig, host: LabHost) -> Path:
    """An overlayfs copy of the cached image; the host's writes land in its own upper dir."""
    base = config.host_dir(host.name)
    upper, work, root = base / "upper", base / "work", base / "root"
    for path in (upper, work, root):
        path.mkdir(parents=True, exist_ok=True)
    options = f"lowerdir={config.rootfs},upperdir={upper},workdir={work}"
    result = subprocess.run(["mount", "-t", "overlay", config.machine_name(host.name), "-o", options, str(root)],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise LabError(f"{host.name}: overlay mount failed: {result.stderr.strip()}")
    return root


def seed_identity(root: Path, host: LabHost, all_hosts: tuple[LabHost, ...], network: str,
                  authorized_key: str) -> None:
    """Hostname, static address, /etc/hosts and the client's key; the host key is made by sshkeys."""
    network_dir = root / "etc/systemd/network"
    network_dir.mkdir(parents=True, exist_ok=True)
    (network_dir / "10-host0.network").write_text(
        f"[Match]\nName=host0\n\n[Network]\nAddress={host.address}/24\nGateway={network}.1\n"
        "LinkLocalAddressing=no\nIPv6AcceptRA=no\n")
    (root / "etc/hostname").write_text(host.name + "\n")
    (root / "etc/hosts").write_text("127.0.0.1 localhost\n" + "".join(f"{h.address} {h.name}\n" for h in all_hosts))
    ssh_dir = root / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    keys = ssh_dir / "authorized_keys"
    keys.write_text(authorized_key + "\n")
    keys.chmod(0o600)
    seed_kernel_settings(root)
    seed_container_support(root)


# nspawn mounts the v1 controllers read-only; the host's own cgroups lie under them (`lab.cgroups`),
# so the guest makes them writable before anything starts, on every boot. And a guest stops within
# seconds: pods (the init of their own PID namespace, which ignores SIGTERM) would hold the final
# kill-everything for 90 s.
CGROUPS_UNIT_NAME = "lab-cgroups-writable.service"  # the lab's own: not named like kubesmith's units
CGROUPS_UNIT = """[Unit]
Description=kubesmith lab: this host's own cgroup controllers, writable
DefaultDependencies=no
Before=sysinit.target
ConditionPathIsReadWrite=!/sys/fs/cgroup/memory

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'for c in /sys/fs/cgroup/*; do [ -e "$c/tasks" ] && mount -o remount,bind,rw,nosuid,nodev,noexec "$c"; done; true'

[Install]
WantedBy=sysinit.target
"""
STOP_TIMEOUT_CONF = "[Manager]\nDefaultTimeoutStopSec=10s\n"


def seed_container_support(root: Path) -> None:
    units = root / "etc/systemd/system"
    wants = units / "sysinit.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (units / CGROUPS_UNIT_NAME).write_text(CGROUPS_UNIT)
    link = wants / CGROUPS_UNIT_NAME
    if not link.is_symlink():
        link.symlink_to(f"../{CGROUPS_UNIT_NAME}")
    conf = root / "etc/systemd/system.conf.d"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "kubesmith-lab.conf").write_text(STOP_TIMEOUT_CONF)


def containerd_dir(config: LabConfig, name: str) -> Path:
    """containerd's data on the machine's file system: overlayfs cannot be the upper dir of its snapshots."""
    return config.host_dir(name) / "containerd"


KERNEL_SETTINGS_DIR = "/etc/kubesmith-lab/kernel"


def seed_kernel_settings(root: Path) -> None:
    """Files holding KUBELET_KERNEL_SETTINGS inside the host's root: nspawn binds a source for a
    destination under /proc once inside the container, so the source must be there too."""
    directory = root / KERNEL_SETTINGS_DIR.lstrip("/")
    directory.mkdir(parents=True, exist_ok=True)
    for setting, value in KUBELET_KERNEL_SETTINGS.items():
        (directory / setting.replace("/", ".")).write_text(value + "\n")


def kernel_settings_binds() -> list[str]:
    return [f"--bind-ro={KERNEL_SETTINGS_DIR}/{setting.replace('/', '.')}:/proc/sys/{setting}"
            for setting in KUBELET_KERNEL_SETTINGS]


def nspawn_argv(config: LabConfig, host: LabHost) -> list[str]:
    """nsenter --net (not `ip netns exec`, which remounts /sys and hides the cgroup tree)."""
    return ["nsenter", f"--net={config.netns_path}", "systemd-nspawn", "--boot", "--keep-unit", "--register=no",
            f"--directory={root_dir(config, host.name)}", f"--machine={config.machine_name(host.name)}",
            f"--network-bridge={config.bridge}", "--link-journal=no", "--resolv-conf=off", "--console=read-only",
            f"--uuid={uuid.uuid4()}", *kernel_settings_binds(),
            f"--bind={containerd_dir(config, host.name)}:/var/lib/containerd",
            "--system-call-filter=@keyring",  # runc gives each container a session keyring, as on any machine
            *config.nspawn_args]


def start(config: LabConfig, host: LabHost) -> ProcessRecord:
    """Start the host's supervisor, detached in its own session, inside the host's own cgroups."""
    cgroup_dirs = cgroups.create(config.cgroup_name(host.name))
    containerd_dir(config, host.name).mkdir(mode=0o711, exist_ok=True)
    stop_file(config, host.name).unlink(missing_ok=True)
    argv = [sys.executable, "-m", "kubesmith.lab.supervisor", *(f"--cgroup={c}" for c in cgroup_dirs),
            f"--stop-file={stop_file(config, host.name)}", "--", *nspawn_argv(config, host)]
    with console_log(config, host.name).open("ab") as log:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True, cwd="/")
    record = ProcessRecord.of(process.pid) or ProcessRecord(pid=process.pid, start_time=-1)
    record.save(supervisor_file(config, host.name))
    return record


# -- finding a running host's processes ---------------------------------------------------------


def supervisor(config: LabConfig, name: str) -> ProcessRecord | None:
    """The recorded supervisor, if it is still the process `up` started."""
    record = ProcessRecord.load(supervisor_file(config, name))
    return record if record is not None and record.alive() else None


def nspawn(config: LabConfig, name: str) -> ProcessRecord | None:
    return _child(supervisor(config, name), "systemd-nspawn")


def leader(config: LabConfig, name: str) -> ProcessRecord | None:
    """The host's systemd (its PID 1) as the machine sees it; it changes on every reboot."""
    return _child(nspawn(config, name), "systemd")


def _child(parent: ProcessRecord | None, command: str) -> ProcessRecord | None:
    """The first live child of `parent` running `command`."""
    if parent is None:
        return None
    found = children(parent.pid, command)
    return ProcessRecord(pid=found[0].pid, start_time=found[0].start_time) if found else None


def exec_argv(pid: int, command: list[str]) -> list[str]:
    """Run command in every namespace of the host's PID 1, with a clean environment."""
    return ["nsenter", "-t", str(pid), "-a", "env", "-i", *GUEST_ENV, *command]


def system_state(config: LabConfig, name: str) -> str:
    """`systemctl is-system-running` inside the host, or `down`/`booting` when there is no answer."""
    pid = leader(config, name)
    if pid is None:
        return "down" if supervisor(config, name) is None else "booting"
    try:
        result = subprocess.run(exec_argv(pid.pid, ["systemctl", "is-system-running"]), capture_output=True,
                                text=True, timeout=10, check=False)
    except subprocess.TimeoutExpired:
        return "unknown"
    return result.stdout.strip() or "booting"


# -- waiting ------------------------------------------------------------------------------------


def wait_running(config: LabConfig, names: list[str], timeout: float, not_leader: dict[str, int] | None = None
                 ) -> dict[str, str]:
    """Wait until every host says running/degraded; return each host's final state.

    not_leader maps a host to its previous PID 1, so a reboot is only done once a new boot answers.
    """
    deadline = time.monotonic() + timeout
    pending = set(names)
    states: dict[str, str] = {}
    while pending:
        for name in sorted(pending):
            if supervisor(config, name) is None:
                raise LabError(f"{name}: systemd-nspawn exited during boot; last lines: {console_tail(config, name)}")
            current = leader(config, name)
            if current is None or (not_leader and not_leader.get(name) == current.pid):
                continue
            states[name] = system_state(config, name)
            if states[name] in READY_STATES:
                pending.discard(name)
        if pending and time.monotonic() >= deadline:
            detail = ", ".join(f"{n}={states.get(n, 'booting')}" for n in sorted(pending))
            first = sorted(pending)[0]
            raise LabError(f"hosts not running after {timeout:.0f}s ({detail}); {first} console: "
                           f"{console_tail(config, first)}")
        if pending:
            time.sleep(POLL_SECONDS)
    return states


def console_tail(config: LabConfig, name: str, lines: int = 5) -> str:
    try:
        text = console_log(config, name).read_text(errors="replace")
    except OSError:
        return "(no console log)"
    text = ANSI_ESCAPE.sub("", text)
    return " | ".join(line.strip() for line in text.splitlines()[-lines:] if line.strip())
