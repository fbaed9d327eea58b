"""The base root file system every lab host boots from, built once with mmdebstrap and cached.

Hosts never write to it: each one boots from an overlayfs copy. The image carries no
per-host identity (hostname, machine-id, SSH host keys, authorized keys, apt mirror);
`up` seeds those into each host's upper dir, so one cached image serves every lab.

By default the image is of this machine's own Debian suite, built from its own apt sources.
`lab up --suite` builds one of another suite (hosts with another python3, containerd, systemd
than the machine's), from the same mirrors with the suite renamed, cached beside the default.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
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
# A suite is named by its codename: an alias moves to another release while its cached image stays.
SUITE_ALIASES = ("oldoldstable", "oldstable", "stable", "testing", "unstable", "experimental")
SUITE_NAME = re.compile(r"^[a-z][a-z0-9]{1,30}$")
MIRROR_TIMEOUT = 20.0


def stamp_path(config: LabConfig) -> Path:
    return config.image_dir / "rootfs.stamp"


def image_suite(config: LabConfig) -> str:
    return config.suite or host_suite()


def chosen_suite(requested: str | None) -> str | None:
    """The `suite` of a LabConfig for `lab up --suite REQUESTED`: None (the default image) for no suite
    or this machine's own; the codename otherwise, refused when it cannot name a Debian release."""
    if requested is None or requested == host_suite():
        return None
    if requested in SUITE_ALIASES:
        raise LabError(f"--suite {requested}: name the release by its codename (bookworm, trixie, ...), "
                       f"not an alias whose release changes under the cached image")
    if not SUITE_NAME.match(requested):
        raise LabError(f"--suite {requested!r} is not a Debian codename (lower-case letters and digits, "
                       "such as bookworm or trixie)")
    return requested


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


@dataclass(frozen=True, slots=True)
class AptSource:
    """One `deb` source: a mirror URI, a suite of it and its components (one-line or deb822 alike)."""

    uri: str
    suite: str
    components: tuple[str, ...]
    signed_by: str | None = None

    def line(self) -> str:
        options = f"[signed-by={self.signed_by}] " if self.signed_by else ""
        return f"deb {options}{self.uri} {self.suite} {' '.join(self.components)}"


def read_sources(paths: Iterable[Path]) -> list[AptSource]:
    """The `deb` sources of apt source files, one-line (`.list`) and deb822 (`.sources`)."""
    found: list[AptSource] = []
    for path in paths:
        text = path.read_text()
        found += _deb822_sources(text) if path.suffix == ".sources" else _one_line_sources(text)
    return found


def _one_line_sources(text: str) -> list[AptSource]:
    found = []
    for line in text.splitlines():
        options = {}
        bracketed = re.match(r"^deb\s+\[([^]]*)\]\s+(.*)$", line.strip())
        if bracketed:
            options = dict(item.split("=", 1) for item in bracketed.group(1).split() if "=" in item)
            fields = bracketed.group(2).split()
        elif line.startswith("deb "):
            fields = line.split()[1:]
        else:
            continue
        if len(fields) >= 2:
            found.append(AptSource(fields[0], fields[1], tuple(fields[2:]), options.get("signed-by")))
    return found


def _deb822_sources(text: str) -> list[AptSource]:
    found = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or line[:1].isspace() or ":" not in line:
                continue  # comments; continuation lines belong to an inline key, which is not kept
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
            continue
        signed_by = fields.get("signed-by") or None
        for uri in fields.get("uris", "").split():
            for suite in fields.get("suites", "").split():
                found.append(AptSource(uri, suite, tuple(fields.get("components", "").split()), signed_by))
    return found


def sources_for_suite(machine: list[AptSource], machine_suite: str, suite: str) -> list[AptSource]:
    """The machine's Debian sources renamed to `suite`: bookworm, bookworm-updates and bookworm-security
    become trixie, trixie-updates and trixie-security on the same mirrors. Sources of other suites (a
    vendor's repository for this release) are left out: they do not fit another release."""
    renamed = []
    for source in machine:
        if source.suite == machine_suite or source.suite.startswith(machine_suite + "-"):
            renamed.append(AptSource(source.uri, suite + source.suite[len(machine_suite):], source.components,
                                     source.signed_by))
    return renamed


def mirror_has(uri: str, suite: str) -> bool:
    """Whether the mirror publishes `suite` (its dists/SUITE/Release); LabError when it cannot be asked."""
    url = f"{uri.rstrip('/')}/dists/{suite}/Release"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=MIRROR_TIMEOUT):
            return True
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return False
        raise LabError(f"cannot tell whether {url} exists: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise LabError(f"cannot reach the Debian mirror for {url}: {exc}") from None


def suite_sources(suite: str, machine_suite: str, machine: list[AptSource],
                  published: Callable[[str, str], bool] = mirror_has) -> list[AptSource]:
    """The sources an image of `suite` is built from: the machine's renamed (`sources_for_suite`), without
    the companions the mirror lacks (sid has no sid-updates). The suite itself must be on the mirror."""
    renamed = sources_for_suite(machine, machine_suite, suite)
    if not renamed:
        raise LabError(f"no Debian source for {machine_suite} in /etc/apt to build a {suite} image from")
    main = [source for source in renamed if source.suite == suite]
    if not main or not published(main[0].uri, suite):
        mirror = main[0].uri if main else renamed[0].uri
        raise LabError(f"unknown Debian suite {suite!r}: the mirror {mirror} has no dists/{suite}/Release "
                       "(a codename such as bookworm or trixie)")
    checked: dict[tuple[str, str], bool] = {(main[0].uri, suite): True}
    kept = []
    for source in renamed:
        key = (source.uri, source.suite)
        if key not in checked:
            checked[key] = published(*key)
        if checked[key]:
            kept.append(source)
    return kept


def image_sources(config: LabConfig) -> list[Path]:
    """The apt source files mmdebstrap builds the image from: the machine's own for its own suite (as
    always), a file written into the image's directory for another suite."""
    if config.suite is None:
        return apt_sources()
    sources = suite_sources(config.suite, host_suite(), read_sources(apt_sources()))
    written = config.image_dir / "sources.list"
    written.parent.mkdir(parents=True, exist_ok=True)
    written.write_text("".join(source.line() + "\n" for source in sources))
    return [written]


def is_cached(config: LabConfig) -> bool:
    """True when the cached image exists and was built by this recipe for this suite."""
    try:
        stamp = json.loads(stamp_path(config).read_text())
    except (OSError, ValueError):
        return False
    return config.rootfs.is_dir() and stamp == wanted_stamp(image_suite(config))


def ensure_rootfs(config: LabConfig, progress: Progress) -> Path:
    """Return the cached image, building it first when it is missing or stale. Labs brought up at
    once (the test suite's workers, two shells) build it once: the others wait on the build lock and
    find it cached, where each would otherwise run mmdebstrap into the same staging directory."""
    if is_cached(config):
        return config.rootfs
    require_tools(["mmdebstrap", "systemctl"])
    config.image_dir.mkdir(parents=True, exist_ok=True)
    with (config.image_dir / "build.lock").open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"another lab is building the image in {config.image_dir}; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if not is_cached(config):
            build_rootfs(config, progress)
    return config.rootfs


def build_rootfs(config: LabConfig, progress: Progress) -> None:
    """Build into rootfs.new and rename at the end, so an interrupted build is never used."""
    suite = image_suite(config)
    sources = image_sources(config)  # first: an unknown suite fails before anything is written
    staging = config.image_dir / "rootfs.new"
    config.image_dir.mkdir(parents=True, exist_ok=True)
    _remove_tree(staging)
    log = config.image_dir / "mmdebstrap.log"
    progress(f"building the lab image (Debian {suite}, mmdebstrap; about a minute) into {config.rootfs}")
    started = time.monotonic()
    _run_mmdebstrap(suite, sources, staging, log)
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


def _run_mmdebstrap(suite: str, sources: list[Path], target: Path, log: Path) -> None:
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
            suite, str(target), *map(str, sources)]
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
