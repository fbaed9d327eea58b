"""The operating system's directories and kubesmith's own, and which paths kubesmith may take over,
use, delete or write among them: the rules the spec's path checks (`spec.paths`) and the operator's own
state and output directories (`fsutil`) share. Plain data and path arithmetic: nothing is read here.
"""

from __future__ import annotations

import posixpath

from kubesmith import layout

# Directories of the operating system and of its users: never a component's own, nor a parent of one.
# Their canonical forms (see canonical): /var/run, /lib... are listed for their own names' sake only.
SYSTEM_DIRECTORIES = frozenset({
    "/", "/bin", "/boot", "/dev", "/efi", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/lost+found",
    "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys", "/tmp", "/usr", "/var",
    "/etc/cni", "/etc/default", "/etc/init.d", "/etc/pam.d", "/etc/security", "/etc/ssh", "/etc/ssl", "/etc/sudoers.d",
    "/etc/systemd", "/etc/systemd/system", "/etc/tmpfiles.d", "/etc/sysctl.d", "/etc/modules-load.d",
    "/etc/apt", "/etc/cron.d", "/etc/cron.daily", "/etc/cron.hourly", "/etc/cron.weekly", "/etc/cron.monthly",
    "/etc/profile.d", "/etc/udev", "/etc/containerd",
    "/run/lock", "/run/systemd", "/run/user", "/run/credentials", "/run/dbus", "/run/udev", "/run/mount",
    "/run/sshd", "/run/log", "/run/netns",
    "/usr/bin", "/usr/games", "/usr/include", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libx32", "/usr/libexec",
    "/usr/local", "/usr/local/bin", "/usr/local/etc", "/usr/local/games", "/usr/local/include", "/usr/local/lib",
    "/usr/local/libexec", "/usr/local/man", "/usr/local/sbin", "/usr/local/share", "/usr/local/src", "/usr/sbin",
    "/usr/share", "/usr/src", "/usr/lib/systemd", "/usr/lib/tmpfiles.d", "/usr/lib/sysusers.d", "/usr/lib/modules",
    "/var/backups", "/var/cache", "/var/crash", "/var/lib", "/var/local", "/var/lock", "/var/log", "/var/mail",
    "/var/opt", "/var/run", "/var/snap", "/var/spool", "/var/tmp", "/var/lib/apt", "/var/lib/dpkg", "/var/lib/systemd",
    "/var/lib/dbus", "/var/lib/machines", "/var/lib/pam", "/var/lib/polkit-1", "/var/lib/private",
    "/var/lib/portables", "/var/lib/snapd", "/var/lib/sudo", "/var/lib/ucf", "/var/cache/apt", "/var/cache/debconf",
    "/var/cache/ldconfig", "/var/cache/private", "/var/log/apt", "/var/log/journal", "/var/log/private",
})
# Of those, the ones made to hold other software's directories: a component's may lie inside them
# (never be them). "/" and the mount points hold operators' own disks (/data/etcd, /mnt/disk1); /var/lib,
# /var/log, /var/cache are where packages and daemons keep their state, logs and caches (FHS), each
# under its own name (the subdirectories the OS keeps there are listed above, as whole trees); /run is
# /var/lib's counterpart for runtime state (containerd's /run/containerd); /opt, /var/opt, /srv,
# /usr/local and /var/local are the administrator's; /tmp and /var/tmp hold scratch directories
# (which reset may delete), though no system service's path (UNSAFE_TREES); /var and /var/backups hold what operators
# and installers put there (/var/etcd/data as kube-up has it, kubespray's /var/backups/etcd), the
# OS's own subdirectories of /var listed above as whole trees. Every other system directory is a whole
# tree: the OS's files (/etc, /usr, /boot, /var/spool, ...), where nothing may be a component's.
CONTAINERS = frozenset({
    "/", "/var", "/var/lib", "/var/log", "/var/cache", "/var/opt", "/var/local", "/var/backups", "/run", "/opt",
    "/srv", "/mnt", "/media", "/usr/local", "/tmp", "/var/tmp",
})
# Another name of a directory on every system kubesmith supports (FHS 3.0's /var/run and /var/lock;
# merged /usr, Debian 12's default): one directory is compared under one name.
ALIASES = (("/var/run", "/run"), ("/var/lock", "/run/lock"), ("/lib", "/usr/lib"), ("/bin", "/usr/bin"),
           ("/sbin", "/usr/sbin"), ("/lib64", "/usr/lib64"), ("/lib32", "/usr/lib32"), ("/libx32", "/usr/libx32"),
           ("/run/shm", "/dev/shm"))
KERNEL_FILE_SYSTEMS = ("/proc", "/sys", "/dev")  # nothing of a component's lives inside these
HOMES = ("/home", "/root")  # users' files: a component's directory inside would have its parents chowned to root

# Trees that users other than root can write to, or that every boot empties: no path a system service
# executes (containerd, haproxy, keepalived, runc, CNI and credential plugins), loads configuration,
# plugins or certificates from (containerd's imports, the kubelet's config-dir and staticPodPath), dials
# (a plugin's socket) or keeps its state in (etcd's data, the kubelet's keys) may lie inside one. Whoever
# creates the file there first decides what root runs (/tmp/runc, /tmp/*.toml import turning on
# containerd's TCP API), and a reboot deletes the cluster's state (/tmp/etcd). These are the trees of
# that kind on every system kubesmith supports (Debian 12, Ubuntu 22.04+, systemd's tmpfiles.d): each is
# world-writable with the sticky bit (1777), a user's own, or both. /run is not here: root alone writes
# there, and what belongs there (sockets, containerd's state) is meant to go at boot; /root is root's.
# mount points such as /mnt and /srv are the administrator's (an etcd disk at /mnt/etcd is common).
UNSAFE_TREES: tuple[tuple[str, str], ...] = (
    ("/tmp", "which every user may write to (mode 1777) and every boot empties (tmpfs, or tmpfiles.d's D /tmp)"),
    ("/var/tmp", "which every user may write to (mode 1777), and whose unused files systemd-tmpfiles deletes"),
    ("/dev/shm", "a tmpfs every user may write to (mode 1777), empty at every boot"),
    ("/run/lock", "a tmpfs every user may write to (mode 1777 on Debian and Ubuntu), empty at every boot"),
    ("/run/user", "where each logged-in user's own runtime directory lives (owned by that user, removed at logout)"),
    ("/home", "where users keep their own files (each user owns and writes their directory)"),
)

# kubesmith's own directories on every host: a component's directory may be neither these nor around them
KUBESMITH_DIRECTORIES = (
    (layout.ETC, "kubesmith's configuration and PKI"), (layout.KUBESMITH_ETC, "kubesmith's settings"),
    (f"{layout.LIB}/kubesmith", "kubesmith's state"), (layout.LOG, "kubesmith's logs"),
    (posixpath.dirname(layout.RELEASES), "kubesmith's runtime on the hosts"),
)
# ...and the ones inside a whole tree where kubesmith's own directories live (the etcd snapshots'
# default, /var/backups/kubesmith/etcd): the tree rule does not apply inside these
KUBESMITH_TREES = (*(path for path, _ in KUBESMITH_DIRECTORIES), "/var/backups/kubesmith")


def canonical(path: str) -> str:
    """The one name of an absolute path: normalised (`..`, `.`, repeated and trailing slashes) and with
    the aliases of ALIASES resolved, so /var/run/x, //run/x/ and /run/x are one directory."""
    normal = "/" + posixpath.normpath(path).lstrip("/")
    for alias, target in ALIASES:
        if normal == alias or normal.startswith(alias + "/"):
            return target + normal[len(alias):]
    return normal


def spelled(path: str, canon: str) -> str:
    """`path`, with its canonical form when that differs (the message names what is compared)."""
    return path if path == canon else f"{path} (that is {canon})"


def inside(path: str, top: str) -> bool:
    return top == "/" or path.startswith(top + "/")


def within(path: str, top: str) -> bool:
    """`path` is `top` or lies inside it."""
    return path == top or inside(path, top)


def system_directory_problem(path: str) -> str | None:
    """Why a component may not take over `path` (None: it may): a system directory, one holding one, or
    one inside a system directory that is no container (CONTAINERS) of other software's directories.
    Shared with `reset`, which refuses to delete such a path whatever spec it came from."""
    canon = canonical(path)
    if (problem := system_or_kernel(path, canon) or home_problem(path, canon)) is not None:
        return problem
    if any(canon == own or inside(canon, own) for own in KUBESMITH_TREES):
        return None  # kubesmith's own: the overlap checks keep components apart from it
    deepest = max((top for top in SYSTEM_DIRECTORIES if inside(canon, top)), key=len)
    if deepest not in CONTAINERS:
        return f"{spelled(path, canon)} lies inside {deepest}, a system directory"
    return held(path, canon)


def unsafe_tree_problem(path: str) -> str | None:
    """Why a system service may not execute, load or keep its state at `path` (None: it may): it lies in
    one of UNSAFE_TREES, which other users write to or a boot empties."""
    canon = canonical(path)
    found = next(((top, why) for top, why in UNSAFE_TREES if canon == top or inside(canon, top)), None)
    return None if found is None else f"{spelled(path, canon)} lies inside {found[0]}, {found[1]}"


def used_path_problem(path: str) -> str | None:
    """Why a component may not use `path` as a file or directory of its own it does not take over (the
    containerd binary, the CNI directories) nor `reset` delete it as a file kubesmith wrote: a system
    directory, one holding one, or a path in a kernel file system. (Inside a system directory is fine:
    kubesmith's unit files live in /etc/systemd/system, the CNI plugins in /usr/lib/cni.)"""
    canon = canonical(path)
    return system_or_kernel(path, canon) or held(path, canon)


def system_or_kernel(path: str, canon: str) -> str | None:
    if path in SYSTEM_DIRECTORIES or canon in SYSTEM_DIRECTORIES:
        return f"{path if path in SYSTEM_DIRECTORIES else spelled(path, canon)} is a system directory"
    kernel = next((top for top in KERNEL_FILE_SYSTEMS if inside(canon, top)), None)
    return None if kernel is None else f"{spelled(path, canon)} lies inside {kernel}, a kernel file system"


def removable_file_problem(path: str) -> str | None:
    """Why `reset` may not delete `path` as a file kubesmith wrote (None: it may): as used_path_problem,
    and never inside /home or /root."""
    return used_path_problem(path) or home_problem(path, canonical(path))


def home_problem(path: str, canon: str) -> str | None:
    home = next((top for top in HOMES if inside(canon, top)), None)
    return None if home is None else f"{spelled(path, canon)} lies inside {home}, where users keep their files"


def held(path: str, canon: str) -> str | None:
    system = next((top for top in sorted(SYSTEM_DIRECTORIES) if canon != "/" and inside(top, canon)), None)
    return None if system is None else f"{spelled(path, canon)} holds the system directory {system}"
