"""Checks of the paths a cluster file names: directories kubesmith takes over, and files it reads here.

A directory kubesmith owns is created with its component's owner and mode (StateDirectory=,
tmpfiles.d), made writable through the unit's sandbox, and deleted by `kubesmith reset`. So none
may be a system directory or hold one (`/var/lib` as etcd's data directory would be handed to
etcd and then deleted), nor lie inside one that is not made to hold other software's directories
(`/etc/passwd`, `/usr/lib/x86_64-linux-gnu`), none may lie inside a kernel file system, and no two
may share files: compared in canonical form (`/var/run/x` is `/run/x`), the CNI directories too.
Directories given in extraArgs or extraConfig pass the same checks (EXTRA_DIRECTORIES), or may not
be given there at all where a typed option sets them (TYPED_CONFIG_DIRECTORIES).
Files the cluster file names on this machine (image archives, SSH settings) are read as regular
files only, bounded, and image archives are checked to be images before anything is uploaded.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubesmith import fsutil, layout
from kubesmith.images import ImageError, check_archive
from kubesmith.spec.effective import config_type_findings, config_value, toml_type_findings, value_at
from kubesmith.vocabulary.errors import LocPart, format_path, yaml_text
from kubesmith.spec.managed import containerd_written, managed_config_problem, managed_flag_problem
from kubesmith.spec.model import Cluster, Components

Finding = tuple[tuple[LocPart, ...], str, str]  # as spec.checks.Finding

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

# Directories given in extraArgs or extraConfig, where no typed option stands for them: checked as the
# typed options are. (component, where under it, what the component does there, roles)
#   owned: writes its data there (the tree rule, and kept apart from other components' directories)
#   written: writes files there, by default inside its own directory (the tree rule)
#   used: reads or creates it (not a system directory, nor one holding one: as cniBinDir)
EXTRA_DIRECTORIES: tuple[tuple[str, tuple[str, ...], str, frozenset[str]], ...] = (
    ("etcd", ("extraArgs", "wal-dir"), "owned", frozenset({"etcd"})),
    ("kubelet", ("extraArgs", "cert-dir"), "written", frozenset({"node"})),
    ("kubelet", ("extraArgs", "volume-plugin-dir"), "used", frozenset({"node"})),
    ("kubelet", ("extraConfig", "volumePluginDir"), "used", frozenset({"node"})),
    ("kubelet", ("extraArgs", "pod-manifest-path"), "used", frozenset({"node"})),
    ("kubelet", ("extraConfig", "staticPodPath"), "used", frozenset({"node"})),
)
# Directory keys of a configuration document that a typed option sets: the unit's directories, its
# sandbox and `reset` follow the option, so the document may not move them elsewhere (as MANAGED
# refuses such flags in extraArgs)
TYPED_CONFIG_DIRECTORIES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("containerRuntime", ("root",), "rootDir"), ("containerRuntime", ("state",), "stateDir"),
    ("containerRuntime", ("grpc", "address"), "socket"),
    ("containerRuntime", ("plugins", "io.containerd.grpc.v1.cri", "cni", "bin_dir"), "cniBinDir"),
    ("containerRuntime", ("plugins", "io.containerd.grpc.v1.cri", "cni", "conf_dir"), "cniConfDir"),
)


@dataclass(frozen=True, slots=True)
class Owned:
    """A directory a component takes over (or uses, `owned` False) on the hosts with one of `roles`,
    at `loc` in the spec."""

    loc: tuple[LocPart, ...]
    path: str
    roles: frozenset[str]
    written: bool  # the file sets it (else a default)
    owned: bool = True  # taken over: the tree rule (system_directory_problem); else used_path_problem
    why: str = ""  # what the component does there, for the message (default: what a typed option means)


# The system service behind each component's options (what executes, loads or keeps the path)
SERVICES = {"etcd": "etcd", "apiserver": "kube-apiserver", "controllerManager": "kube-controller-manager",
            "scheduler": "kube-scheduler", "kubelet": "the kubelet", "proxy": "kube-proxy",
            "containerRuntime": "containerd", "apiLoadBalancer": "HAProxy", "controlPlaneVip": "keepalived"}
# extraArgs flags whose value names a file, directory or socket: pflag's names say so (--cert-dir,
# --lock-file, --bootstrap-kubeconfig, --pod-manifest-path, --tls-sni-cert-key, --image-service-endpoint,
# --image-credential-provider-bin-dir, etcd's --wal-dir); in a value the paths are the items that start
# with / (a list, key=value pairs, a socket URL, namedCertKey's "cert,key:names")
_PATH_FLAG = re.compile(r"(file|dir|path|config|cert-key|endpoint)$")
_ITEM_SEPARATORS = re.compile(r"[,;=\s]")


def path_findings(cluster: Cluster) -> list[Finding]:
    """Every check of this module, in spec order."""
    owned = owned_directories(cluster)
    findings = [finding for item in owned if (finding := _system_finding(item)) is not None]
    findings += _host_paths(cluster)
    findings += _typed_config_directories(cluster)
    extra, extra_findings = _extra_directories(cluster)
    findings += extra_findings
    refused = {finding[0] for finding in findings}
    findings += [finding for finding in _service_path_findings(cluster)
                 if not any(finding[0][:len(loc)] == loc for loc in refused)]  # an option, or inside one
    refused = {finding[0] for finding in findings}
    findings += _overlaps([item for item in [*owned, *extra] if item.loc not in refused], cluster)
    findings += _image_archives(cluster)
    findings += _ssh_files(cluster)
    return findings


def canonical(path: str) -> str:
    """The one name of an absolute path: normalised (`..`, `.`, repeated and trailing slashes) and with
    the aliases of ALIASES resolved, so /var/run/x, //run/x/ and /run/x are one directory."""
    normal = "/" + posixpath.normpath(path).lstrip("/")
    for alias, target in ALIASES:
        if normal == alias or normal.startswith(alias + "/"):
            return target + normal[len(alias):]
    return normal


def _spelled(path: str, canon: str) -> str:
    """`path`, with its canonical form when that differs (the message names what is compared)."""
    return path if path == canon else f"{path} (that is {canon})"


def _inside(path: str, top: str) -> bool:
    return top == "/" or path.startswith(top + "/")


def system_directory_problem(path: str) -> str | None:
    """Why a component may not take over `path` (None: it may): a system directory, one holding one, or
    one inside a system directory that is no container (CONTAINERS) of other software's directories.
    Shared with `reset`, which refuses to delete such a path whatever spec it came from."""
    canon = canonical(path)
    if (problem := _system_or_kernel(path, canon) or _home_problem(path, canon)) is not None:
        return problem
    if any(canon == own or _inside(canon, own) for own in KUBESMITH_TREES):
        return None  # kubesmith's own: the overlap checks keep components apart from it
    deepest = max((top for top in SYSTEM_DIRECTORIES if _inside(canon, top)), key=len)
    if deepest not in CONTAINERS:
        return f"{_spelled(path, canon)} lies inside {deepest}, a system directory"
    return _held(path, canon)


def unsafe_tree_problem(path: str) -> str | None:
    """Why a system service may not execute, load or keep its state at `path` (None: it may): it lies in
    one of UNSAFE_TREES, which other users write to or a boot empties."""
    canon = canonical(path)
    found = next(((top, why) for top, why in UNSAFE_TREES if canon == top or _inside(canon, top)), None)
    return None if found is None else f"{_spelled(path, canon)} lies inside {found[0]}, {found[1]}"


def _service_path_findings(cluster: Cluster) -> Iterator[Finding]:
    """UNSAFE_TREES against every path a service runs, loads or keeps: the typed options (data
    directories, binaries, socket, CNI directories) and any path in extraArgs or extraConfig, one finding
    per option (the first such path in it)."""
    reported: set[tuple[LocPart, ...]] = set()
    for loc, path in (*_typed_service_paths(cluster), *_extra_service_paths(cluster.spec.components)):
        if loc in reported or (problem := unsafe_tree_problem(path)) is None:
            continue
        reported.add(loc)
        yield (loc, f"{problem}: {SERVICES.get(str(loc[2]), 'a system service')}, a system service, would run, "
               "load or keep there what another user put there first (or lose it at boot); name a root-owned path "
               "(under /etc, /usr, /opt or /var/lib, say)", "error")


def _typed_service_paths(cluster: Cluster) -> Iterator[tuple[tuple[LocPart, ...], str]]:
    """The typed options naming a path on the hosts: the directories components keep or use, containerd's
    binary and socket, HAProxy's and keepalived's binaries (checked whether or not they run: the file says
    to run them from there)."""
    for item in owned_directories(cluster):
        yield item.loc, item.path
    components = cluster.spec.components
    for alias, options, field in (("containerRuntime", components.container_runtime, "binary"),
                                  ("containerRuntime", components.container_runtime, "socket"),
                                  ("apiLoadBalancer", components.api_load_balancer, "binary"),
                                  ("controlPlaneVip", components.control_plane_vip, "binary")):
        yield ("spec", "components", alias, field), getattr(options, field)


def _extra_service_paths(components: Components) -> Iterator[tuple[tuple[LocPart, ...], str]]:
    """Every path in a component's extraArgs (path flags, see _PATH_FLAG) or extraConfig (any string that
    is an absolute path or a unix:// or file:// URL, but cgroup names, which are no files): containerd's
    imports, plugin_dir, runtimes' BinaryName, a proxy plugin's socket, the kubelet's staticPodPath...
    Flags and fields kubesmith manages, and fields of the wrong type (kubelet, kube-proxy, kube-scheduler:
    JSON; containerd: TOML), are left to that error."""
    mistyped_json = {tuple(map(str, loc[2:3] + loc[4:])) for loc, _, _ in
                     config_type_findings(components, {"kubelet": "kubelet", "proxy": "proxy", "scheduler": "scheduler"})}
    for key, field in Components.model_fields.items():
        alias, options = field.alias or key, getattr(components, key)
        binary = next((module.binary for module in _modules() if module.key == key), None)
        for flag, value in (getattr(options, "extra_args", None) or {}).items():
            if _PATH_FLAG.search(str(flag)) and not isinstance(value, bool) and \
                    not (binary and managed_flag_problem(binary, alias, str(flag), value)):
                for item in _ITEM_SEPARATORS.split(str(value)):
                    if (path := _path_in(item.partition(":")[0] if item.startswith("/") else item)) is not None:
                        yield ("spec", "components", alias, "extraArgs", str(flag)), path
        config = getattr(options, "extra_config", None)
        mistyped = frozenset(keys for keys, _ in toml_type_findings(config, containerd_written())) \
            if alias == "containerRuntime" and config else \
            frozenset(keys[1:] for keys in mistyped_json if keys[0] == alias)
        yield from _config_paths(config, ("spec", "components", alias, "extraConfig"), mistyped)


def _config_paths(value: Any, loc: tuple[LocPart, ...], mistyped: frozenset[tuple[str, ...]] = frozenset()
                  ) -> Iterator[tuple[tuple[LocPart, ...], str]]:
    """The paths in extraConfig `value` at `loc`, but under the fields `mistyped` names (keys below
    extraConfig: the TOML type check's error)."""
    if isinstance(value, dict):
        for key, item in value.items():
            where = (*loc, key)
            keys = tuple(map(str, where[4:]))
            if "cgroup" not in str(key).lower() and keys not in mistyped and \
                    managed_config_problem(str(loc[2]), keys) is None:
                yield from _config_paths(item, where, mistyped)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _config_paths(item, (*loc, index), mistyped)
    elif isinstance(value, str) and (path := _path_in(value)) is not None:
        yield loc, path


def _path_in(text: str) -> str | None:
    """The absolute path `text` names (itself, or a unix:// or file:// URL's), or None."""
    for scheme in ("unix://", "file://"):
        text = text.removeprefix(scheme)
    return text if text.startswith("/") else None


def _modules() -> tuple[Any, ...]:
    from kubesmith.modules import MODULES  # the modules import the spec's types: imported when first needed
    return tuple(MODULES)


def used_path_problem(path: str) -> str | None:
    """Why a component may not use `path` as a file or directory of its own it does not take over (the
    containerd binary, the CNI directories) nor `reset` delete it as a file kubesmith wrote: a system
    directory, one holding one, or a path in a kernel file system. (Inside a system directory is fine:
    kubesmith's unit files live in /etc/systemd/system, the CNI plugins in /usr/lib/cni.)"""
    canon = canonical(path)
    return _system_or_kernel(path, canon) or _held(path, canon)


def _system_or_kernel(path: str, canon: str) -> str | None:
    if path in SYSTEM_DIRECTORIES or canon in SYSTEM_DIRECTORIES:
        return f"{path if path in SYSTEM_DIRECTORIES else _spelled(path, canon)} is a system directory"
    kernel = next((top for top in KERNEL_FILE_SYSTEMS if _inside(canon, top)), None)
    return None if kernel is None else f"{_spelled(path, canon)} lies inside {kernel}, a kernel file system"


def removable_file_problem(path: str) -> str | None:
    """Why `reset` may not delete `path` as a file kubesmith wrote (None: it may): as used_path_problem,
    and never inside /home or /root."""
    return used_path_problem(path) or _home_problem(path, canonical(path))


def _home_problem(path: str, canon: str) -> str | None:
    home = next((top for top in HOMES if _inside(canon, top)), None)
    return None if home is None else f"{_spelled(path, canon)} lies inside {home}, where users keep their files"


def _held(path: str, canon: str) -> str | None:
    held = next((system for system in sorted(SYSTEM_DIRECTORIES) if canon != "/" and _inside(system, canon)), None)
    return None if held is None else f"{_spelled(path, canon)} holds the system directory {held}"


def owned_directories(cluster: Cluster) -> list[Owned]:
    """The directories components take over, as the spec sets them (with their defaults), and the CNI
    directories containerd uses (kept apart from those: the kubelet's directory in /etc/cni/net.d
    would have the pods' network configuration deleted with it)."""
    components = cluster.spec.components
    etcd, kubelet, runtime = components.etcd, components.kubelet, components.container_runtime
    audit = components.apiserver.audit_log
    node, control_plane, members = frozenset({"node"}), frozenset({"control-plane"}), frozenset({"etcd"})
    owned = [
        _owned(("etcd",), etcd, "data_dir", members),
        _owned(("etcd", "snapshots"), etcd.snapshots, "directory", members),
        _owned(("kubelet",), kubelet, "root_dir", node),
        Owned(("spec", "components", "apiserver", "auditLog", "path"), posixpath.dirname(audit.path), control_plane,
              "path" in audit.model_fields_set),
    ]
    if runtime.enabled:
        owned += [_owned(("containerRuntime",), runtime, "root_dir", node),
                  _owned(("containerRuntime",), runtime, "state_dir", node),
                  _owned(("containerRuntime",), runtime, "cni_bin_dir", node, owned=False),
                  _owned(("containerRuntime",), runtime, "cni_conf_dir", node, owned=False)]
    return owned


def _owned(where: tuple[str, ...], options: Any, field: str, roles: frozenset[str], owned: bool = True) -> Owned:
    alias = type(options).model_fields[field].alias or field
    return Owned(("spec", "components", *where, alias), getattr(options, field), roles,
                 field in options.model_fields_set, owned)


def _system_finding(item: Owned) -> Finding | None:
    if not item.owned:
        return None  # the CNI directories: _host_paths says it, with their own message
    problem = system_directory_problem(item.path)
    if problem is None:
        return None
    if item.why:
        return item.loc, f"{problem}: {item.why}; name a directory of the component's own", "error"
    what = "the directory of this file" if item.loc[-1] == "path" else "this directory"
    return (item.loc, f"{problem}: kubesmith hands {what} to a component (its owner, mode and sandbox access), and "
            "`kubesmith reset` deletes data directories; name a directory of the component's own", "error")


def _host_paths(cluster: Cluster) -> list[Finding]:
    """Paths on the hosts that are not taken over but used: a system directory there is a mistake
    (the containerd binary cannot be /usr/bin, nor the CNI configuration all of /etc). The socket is
    containerd's own file (it replaces whatever is at that path): the tree rule applies to it."""
    runtime = cluster.spec.components.container_runtime
    base = ("spec", "components", "containerRuntime")
    findings: list[Finding] = []
    if not runtime.enabled:
        return findings
    for field in ("binary", "socket", "cni_bin_dir", "cni_conf_dir"):
        path = getattr(runtime, field)
        where = (*base, type(runtime).model_fields[field].alias or field)
        if field == "socket" and (problem := system_directory_problem(path)) is not None:
            findings.append((where, f"{problem}: containerd replaces the file at its socket path; name a path of "
                             "the component's own (such as /run/containerd/containerd.sock)", "error"))
        elif field != "socket" and (problem := used_path_problem(path)) is not None:
            findings.append((where, f"{problem}: name the component's own "
                             f"{'file' if field == 'binary' else 'directory'}", "error"))
    return findings


def _typed_config_directories(cluster: Cluster) -> list[Finding]:
    """extraConfig may not move a directory a typed option sets (TYPED_CONFIG_DIRECTORIES)."""
    components = cluster.spec.components
    findings: list[Finding] = []
    for component, keys, option in TYPED_CONFIG_DIRECTORIES:
        options = getattr(components, _field_of(component))
        if config_value(options, keys)[0]:
            findings.append((("spec", "components", component, "extraConfig", *keys),
                             f"kubesmith sets {'.'.join(keys)} from spec.components.{component}.{option}: set that "
                             "option instead (extraConfig cannot replace it: the unit's directories, its sandbox "
                             "and `kubesmith reset` follow the option)", "error"))
    return findings


def _extra_directories(cluster: Cluster) -> tuple[list[Owned], list[Finding]]:
    """The directories of EXTRA_DIRECTORIES the spec sets: those a component owns (for the overlap
    check), and what is wrong with each, by the rules the typed options follow."""
    components = cluster.spec.components
    owned: list[Owned] = []
    findings: list[Finding] = []
    for component, where, kind, roles in EXTRA_DIRECTORIES:
        options = getattr(components, _field_of(component))
        section = getattr(options, "extra_args" if where[0] == "extraArgs" else "extra_config", {})
        present, value = value_at(section, where[1:])
        if not present:
            continue
        loc = ("spec", "components", component, *where)
        if not isinstance(value, str) or not value.startswith("/"):
            findings.append((loc, f"{yaml_text(value)} is no path: it must be an absolute path (starting with /)"
                             if not isinstance(value, (str, int)) or isinstance(value, bool) else
                             f"{yaml_text(value)} must be an absolute path (starting with /)", "error"))
            continue
        text = value
        if kind == "used":
            problem = used_path_problem(text)
            if problem is not None:
                findings.append((loc, f"{problem}: name the component's own directory", "error"))
            continue
        item = Owned(loc, text, roles, True, why=f"{_binary_of(component)} writes into this directory")
        if (finding := _system_finding(item)) is not None:
            findings.append(finding)
        elif kind == "owned":
            owned.append(item)
    return owned, findings


def _field_of(component: str) -> str:
    return {"containerRuntime": "container_runtime"}.get(component, component)


def _binary_of(component: str) -> str:
    return {"containerRuntime": "containerd"}.get(component, component)


def _overlaps(owned: list[Owned], cluster: Cluster) -> list[Finding]:
    """Components on one host keep their directories apart (etcd in the kubelet's directory would have
    each delete and chown the other's files), and apart from kubesmith's own. Compared in canonical
    form: /var/run/containerd is containerd's /run/containerd. What a host runs depends on its roles alone,
    so each set of roles is checked once, on its first host: 10,000 hosts have at most seven."""
    owned = sorted(owned, key=lambda item: item.written)  # the error stands where the user wrote the clash
    fixed = [(frozenset({"control-plane"}), "kubesmith's CA service", layout.CA_SERVICE_STATE),
             (frozenset({"control-plane", "etcd", "node"}), "kubesmith's agent", layout.AGENT_STATE)]
    findings: list[Finding] = []
    reported: set[tuple[LocPart, ...]] = set()
    checked: set[frozenset[str]] = set()
    for host in cluster.spec.hosts:
        roles = frozenset(host.roles)
        if roles in checked:
            continue
        checked.add(roles)
        present = [item for item in owned if item.roles & roles]
        for index, item in enumerate(present):
            others = [(f"the {'state ' if other.owned else ''}directory of {format_path(other.loc)}", other.path)
                      for other in present[:index] if (other.owned or item.owned)  # used with used: no harm
                      and not _own_extra(item, other)]
            others += [(f"the state directory of {name}", path) for needs, name, path in fixed if needs & roles]
            clash = next(((name, path) for name, path in others if _nested(item.path, path)), None)
            if clash is None:
                clash = _kubesmith_clash(item)
            if clash and item.loc not in reported:
                reported.add(item.loc)
                canon = canonical(item.path)
                findings.append((item.loc, f"{_spelled(item.path, canon)} overlaps "
                                 f"{_spelled(clash[1], canonical(clash[1]))}, {clash[0]}, on host "
                                 f"{host.name}: each component needs its own", "error"))
    return findings


def _own_extra(one: Owned, other: Owned) -> bool:
    """A directory given in a component's extraArgs/extraConfig and another of the same component: etcd's
    wal-dir inside its data directory, the kubelet's cert-dir inside its root, as their defaults are."""
    extra = any(len(item.loc) > 4 and item.loc[3] in ("extraArgs", "extraConfig") for item in (one, other))
    return extra and one.loc[:3] == other.loc[:3]


def _kubesmith_clash(item: Owned) -> tuple[str, str] | None:
    """kubesmith's fixed directories: a component's may not be one or hold one; the audit log may
    live inside kubesmith's log directory (its default does), and a directory only used (CNI) inside any
    (/etc/kubernetes/cni/net.d)."""
    canon = canonical(item.path)
    for path, name in KUBESMITH_DIRECTORIES:
        inside = canon.startswith(path + "/") and item.owned
        if canon == path or _inside(path, canon) or \
                (inside and not (path == layout.LOG and item.loc[-1] == "path")):
            return name, path
    return None


def _nested(one: str, other: str) -> bool:
    one, other = canonical(one), canonical(other)
    return one == other or _inside(one, other) or _inside(other, one)


# ---- files on this machine

def _image_archives(cluster: Cluster) -> list[Finding]:
    """Each archive is a regular file of bounded size holding an image, before anything is uploaded;
    one missing here is a warning (the cluster file is also read on nodes, which have no archives)."""
    runtime = cluster.spec.components.container_runtime
    findings: list[Finding] = []
    seen: dict[str, int] = {}
    for index, path in enumerate(runtime.images):
        where = ("spec", "components", "containerRuntime", "images", index)
        name = posixpath.basename(path)
        if (first := seen.setdefault(name, index)) != index:
            findings.append((where, f"{path} has the file name of images[{first}] ({name}): both would be "
                             "placed at the same path on the nodes", "error"))
            continue
        problem = archive_problem(Path(path))
        if problem is not None:
            findings.append((where, problem[0], problem[1]))
    return findings


def archive_problem(path: Path) -> tuple[str, str] | None:
    """(message, severity) when `path` is no image archive kubesmith can ship; None when it is."""
    try:
        check_archive(path)
    except FileNotFoundError:
        return f"{path} does not exist on this machine; render and apply need it", "warning"
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}", "error"
    except ImageError as exc:
        return f"{path}: {exc}", "error"
    return None


def _ssh_files(cluster: Cluster) -> list[Finding]:
    """The SSH settings' files: what exists must be a regular file of bounded size (a FIFO would hang
    ssh, a device never ends); a missing one is said when a command connects."""
    ssh = cluster.spec.ssh
    findings: list[Finding] = []
    for field, expected in (("config_file", "an OpenSSH client config"), ("known_hosts_file", "a known_hosts file"),
                            ("identity_file", "a private key")):
        value = getattr(ssh, field)
        if value is None:
            continue
        problem = ssh_file_problem(Path(value).expanduser(), expected)
        if problem is not None:
            findings.append((("spec", "ssh", type(ssh).model_fields[field].alias or field), problem, "error"))
    return findings


def ssh_file_problem(path: Path, expected: str) -> str | None:
    """Why `path` cannot serve as an SSH settings file (None: it can, or it does not exist here)."""
    if not path.exists() and not path.is_symlink():
        return None
    problem = fsutil.regular_file_problem(path, fsutil.SMALL_FILE_BYTES, expected)
    return None if problem is None else f"{path}: {problem}"

