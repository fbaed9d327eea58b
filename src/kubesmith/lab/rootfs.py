"""The base root file system every lab host boots from, built once with mmdebstrap and cached.

Hosts never write to it: each one boots from an overlayfs copy. The image carries no
per-host identity (hostname, machine-id, SSH host keys, authorized keys, apt mirror);
`up` seeds those into each host's upper dir, so one cached image serves every lab.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from kubesmith.lab.config import LabConfig
from kubesmith.lab.errors import LabError, Progress, require_tools

PACKAGES = ("systemd", "systemd-sysv", "dbus", "openssh-server", "iproute2", "curl", "ca-certificates",
            "procps", "netcat-openbsd", "python3", "openssl",
            # what a node needs (Debian's, as on a user's hosts)
            "containerd", "runc", "containernetworking-plugins", "iptables", "conntrack", "kmod",
            # a node's local load balancer to the API servers; the control plane's virtual IP (VRRP)
            "haproxy", "keepalived")
# Bump when the image recipe changes, so a cached image from an older recipe is rebuilt.
RECIPE_VERSION = 5
BUILD_TIMEOUT = 900.0
MASKED_UNITS = ("apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "e2scrub_all.timer",
                "fstrim.timer", "e2scrub_reap.service", "console-getty.service")
# The lab network has no DNS server: fail fast on 127.0.0.1 instead of timing out on the
# build machine's resolver (which mmdebstrap copied in). Lab names come from /etc/hosts.
RESOLV_CONF = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
SSHD_CONFIG = "HostKey /etc/ssh/ssh_host_ed25519_key\nPasswordAuthentication no\nUseDNS no\n"
APT_SOURCE_FILES = (Path("/etc/apt/sources.list"),)
APT_SOURCE_DIR = Path("/etc/apt/sources.list.d")


def stamp_path(config: LabConfig) -> Path:
    return config.cache_dir / "rootfs.stamp"


def wanted_stamp(suite: str) -> dict[str, object]:
    return {"recipe": RECIPE_VERSION, "suite": suite, "packages": list(PACKAGES)}


def host_suite(os_release: Path = Path("/etc/os-release")) -> str:
    """The Debian suite this machine runs; the image matches it, so its apt sources fit."""
    for line in os_release.read_text().splitlines():
        key, _, value = line.partition("=")
        if key == "VERSION_CODENAME" and value.strip('"'):
            return value.strip('"')
    raise LabError(f"cannot tell the Debian suite from {os_release} (no VERSION_CODENAME)")


def apt_sources() -> list[Path]:
    """The machine's own enabled apt source files (never a hard-coded mirror)."""
    candidates = [*APT_SOURCE_FILES, *sorted(APT_SOURCE_DIR.glob("*.list")), *sorted(APT_SOURCE_DIR.glob("*.sources"))]
    found = [path for path in candidates if path.is_file() and _has_source_lines(path)]
    if not found:
        raise LabError("no apt sources found in /etc/apt; mmdebstrap needs a Debian mirror")
    return found


def _has_source_lines(path: Path) -> bool:
    return any(line.startswith(("deb ", "URIs:")) for line in path.read_text().splitlines())


def is_cached(config: LabConfig) -> bool:
    """True when the cached image exists and was built by this recipe for this suite."""
    try:
        stamp = json.loads(stamp_path(config).read_text())
    except (OSError, ValueError):
        return False
    return config.rootfs.is_dir() and stamp == wanted_stamp(host_suite())


def ensure_rootfs(config: LabConfig, progress: Progress) -> Path:
    """Return the cached image, building it first when it is missing or stale."""
    if is_cached(config):
        return config.rootfs
    require_tools(["mmdebstrap", "systemctl"])
    build_rootfs(config, progress)
    return config.rootfs


def build_rootfs(config: LabConfig, progress: Progress) -> None:
    """Build into rootfs.new and rename at the end, so an interrupted build is never used."""
    suite = host_suite()
    staging = config.cache_dir / "rootfs.new"
    config.cache_dir.mkdir(parents=True, exist_ok=True)
    _remove_tree(staging)
    log = config.cache_dir / "mmdebstrap.log"
    progress(f"building the lab image (Debian {suite}, mmdebstrap; about a minute) into {config.rootfs}")
    started = time.monotonic()
    _run_mmdebstrap(suite, staging, log)
    _customize(staging)
    os.sync()  # dpkg unpacked without fsync (force-unsafe-io): the image is on disk before it is used
    stamp_path(config).unlink(missing_ok=True)
    _retire(config.rootfs)
    staging.rename(config.rootfs)
    stamp_path(config).write_text(json.dumps(wanted_stamp(suite)) + "\n")
    progress(f"lab image ready after {time.monotonic() - started:.0f}s")


def _retire(rootfs: Path, mounts: Path = Path("/proc/mounts")) -> None:
    """Move the old image aside rather than delete it: a lab that is up has it as its overlays' lower
    directory (a rebuild after a recipe change must not pull it from under those hosts). Earlier retired
    images go once no lab runs from this cache: a mount names its lower directory as it was when mounted,
    so which image an overlay uses cannot be told once one was renamed."""
    if f"lowerdir={rootfs.parent}/" not in mounts.read_text():
        for old in rootfs.parent.glob(f"{rootfs.name}.old.*"):
            _remove_tree(old)
    if rootfs.exists():
        rootfs.rename(rootfs.parent / f"{rootfs.name}.old.{time.time_ns()}")


def _run_mmdebstrap(suite: str, target: Path, log: Path) -> None:
    # The lab packages go in with a second apt run, once the required set (mawk among it) is
    # configured: in one run, dpkg may configure openssh-server (whose ucf needs awk) first.
    install = ("chroot \"$1\" env DEBIAN_FRONTEND=noninteractive apt-get install --yes --no-install-recommends "
               + " ".join(PACKAGES))
    argv = ["mmdebstrap", "--variant=minbase", f"--customize-hook={install}",
            '--aptopt=Acquire::Check-Valid-Until "false"',
            "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-include=/usr/share/doc/*/copyright", "--dpkgopt=path-exclude=/usr/share/locale/*",
            # no fsync per unpacked file: the image is synced once, before its stamp says it is whole
            "--dpkgopt=force-unsafe-io",
            suite, str(target), *map(str, apt_sources())]
    with log.open("w") as out:
        try:
            result = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    timeout=BUILD_TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            raise LabError(f"mmdebstrap did not finish in {BUILD_TIMEOUT:.0f}s; see {log}") from None
    if result.returncode != 0:
        tail = " | ".join(log.read_text(errors="replace").splitlines()[-3:])
        raise LabError(f"mmdebstrap failed (exit {result.returncode}): {tail} (full log: {log})")


def _customize(root: Path) -> None:
    """Strip per-host identity and switch on what every host needs.

    `systemctl --root` only edits symlinks in the image; nothing boots here.
    """
    for path in [root / "etc/apt/sources.list", *(root / "etc/apt/sources.list.d").glob("*"),
                 root / "etc/hostname", *(root / "etc/ssh").glob("ssh_host_*")]:
        path.unlink(missing_ok=True)
    (root / "etc/machine-id").write_text("")
    resolv = root / "etc/resolv.conf"
    resolv.unlink(missing_ok=True)
    resolv.write_text(RESOLV_CONF)
    (root / "etc/ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/ssh/sshd_config.d/kubesmith-lab.conf").write_text(SSHD_CONFIG)
    _systemctl_offline(root, "enable", "systemd-networkd.service", "ssh.service")
    _systemctl_offline(root, "mask", *MASKED_UNITS)
    # containerd, runc and the CNI plugins are there for nodes: kubesmith's own unit runs containerd
    _systemctl_offline(root, "disable", "containerd.service")
    # haproxy and keepalived likewise: kubesmith runs its own units with its own configuration
    _systemctl_offline(root, "disable", "haproxy.service", "keepalived.service")
    # the kubelet's OOM watcher reads /dev/kmsg, which a container does not have (kind links it likewise)
    (root / "etc/tmpfiles.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/tmpfiles.d/kubesmith-lab-kmsg.conf").write_text("L /dev/kmsg - - - - /dev/console\n")


def _systemctl_offline(root: Path, verb: str, *units: str) -> None:
    result = subprocess.run(["systemctl", f"--root={root}", verb, *units], capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        raise LabError(f"systemctl --root {verb} {' '.join(units)} failed: {result.stderr.strip()}")


def _remove_tree(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)
