"""Checks of the paths a cluster file names: directories kubesmith takes over, and files it reads here.

A directory kubesmith owns is created with its component's owner and mode (StateDirectory=,
tmpfiles.d), made writable through the unit's sandbox, and deleted by `kubesmith reset`. So none
may be a system directory or hold one (`/var/lib` as etcd's data directory would be handed to
etcd and then deleted), none may lie inside a kernel file system, and no two may share files.
Files the cluster file names on this machine (image archives, SSH settings) are read as regular
files only, bounded, and image archives are checked to be images before anything is uploaded.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubesmith import fsutil, layout
from kubesmith.images import ImageError, check_archive
from kubesmith.spec.errors import LocPart, format_path
from kubesmith.spec.model import Cluster

Finding = tuple[tuple[LocPart, ...], str, str]  # as spec.checks.Finding

# Directories of the operating system and of its users: never a component's own, nor a parent of one.
SYSTEM_DIRECTORIES = frozenset({
    "/", "/bin", "/boot", "/dev", "/efi", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/lost+found",
    "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys", "/tmp", "/usr", "/var",
    "/etc/cni", "/etc/default", "/etc/init.d", "/etc/pam.d", "/etc/security", "/etc/ssh", "/etc/ssl", "/etc/sudoers.d",
    "/etc/systemd", "/etc/systemd/system", "/etc/tmpfiles.d", "/etc/sysctl.d", "/etc/modules-load.d",
    "/run/lock", "/run/systemd", "/run/user", "/run/credentials",
    "/usr/bin", "/usr/include", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec", "/usr/local",
    "/usr/local/bin", "/usr/local/etc", "/usr/local/include", "/usr/local/lib", "/usr/local/sbin",
    "/usr/local/share", "/usr/local/src", "/usr/sbin", "/usr/share", "/usr/src", "/usr/lib/systemd",
    "/usr/lib/tmpfiles.d", "/usr/lib/sysusers.d",
    "/var/backups", "/var/cache", "/var/lib", "/var/local", "/var/lock", "/var/log", "/var/mail", "/var/opt",
    "/var/run", "/var/spool", "/var/tmp", "/var/lib/apt", "/var/lib/dpkg", "/var/lib/systemd", "/var/log/journal",
})
KERNEL_FILE_SYSTEMS = ("/proc", "/sys", "/dev")  # nothing of a component's lives inside these
HOMES = ("/home", "/root")  # users' files: a component's directory inside would have its parents chowned to root

# kubesmith's own directories on every host: a component's directory may be neither these nor around them
KUBESMITH_DIRECTORIES = (
    (layout.ETC, "kubesmith's configuration and PKI"), (layout.KUBESMITH_ETC, "kubesmith's settings"),
    (f"{layout.LIB}/kubesmith", "kubesmith's state"), (layout.LOG, "kubesmith's logs"),
)



@dataclass(frozen=True, slots=True)
class Owned:
    """A directory a component takes over on the hosts with one of `roles`, at `loc` in the spec."""

    loc: tuple[LocPart, ...]
    path: str
    roles: frozenset[str]
    written: bool  # the file sets it (else a default)


def path_findings(cluster: Cluster) -> list[Finding]:
    """Every check of this module, in spec order."""
    owned = owned_directories(cluster)
    findings = [finding for item in owned if (finding := _system_finding(item.loc, item.path)) is not None]
    findings += _host_paths(cluster)
    refused = {finding[0] for finding in findings}
    findings += _overlaps([item for item in owned if item.loc not in refused], cluster)
    findings += _image_archives(cluster)
    findings += _ssh_files(cluster)
    return findings


def system_directory_problem(path: str) -> str | None:
    """Why a component may not own `path` (None: it may). Shared with `reset`, which refuses to delete
    such a path whatever spec it came from."""
    if path in SYSTEM_DIRECTORIES:
        return f"{path} is a system directory"
    kernel = next((top for top in KERNEL_FILE_SYSTEMS if path.startswith(top + "/")), None)
    if kernel is not None:
        return f"{path} lies inside {kernel}, a kernel file system"
    home = next((top for top in HOMES if path.startswith(top + "/")), None)
    if home is not None:
        return f"{path} lies inside {home}, where users keep their files"
    held = next((system for system in sorted(SYSTEM_DIRECTORIES) if system.startswith(path.rstrip("/") + "/")), None)
    if held is not None:
        return f"{path} holds the system directory {held}"
    return None


def owned_directories(cluster: Cluster) -> list[Owned]:
    """The directories components take over, as the spec sets them (with their defaults)."""
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
                  _owned(("containerRuntime",), runtime, "state_dir", node)]
    return owned


def _owned(where: tuple[str, ...], options: Any, field: str, roles: frozenset[str]) -> Owned:
    alias = type(options).model_fields[field].alias or field
    return Owned(("spec", "components", *where, alias), getattr(options, field), roles,
                 field in options.model_fields_set)


def _system_finding(loc: tuple[LocPart, ...], path: str) -> Finding | None:
    problem = system_directory_problem(path)
    if problem is None:
        return None
    what = "the directory of this file" if loc[-1] == "path" else "this directory"
    return (loc, f"{problem}: kubesmith hands {what} to a component (its owner, mode and sandbox access), and "
            "`kubesmith reset` deletes data directories; name a directory of the component's own", "error")


def _host_paths(cluster: Cluster) -> list[Finding]:
    """Paths on the hosts that are not taken over but used: a system directory there is a mistake
    (the containerd binary cannot be /usr/bin, nor the CNI configuration all of /etc)."""
    runtime = cluster.spec.components.container_runtime
    base = ("spec", "components", "containerRuntime")
    findings: list[Finding] = []
    for field in ("binary", "socket", "cni_bin_dir", "cni_conf_dir"):
        path = getattr(runtime, field)
        problem = path in SYSTEM_DIRECTORIES or any(path.startswith(top + "/") for top in KERNEL_FILE_SYSTEMS)
        if problem and runtime.enabled:
            where = (*base, type(runtime).model_fields[field].alias or field)
            findings.append((where, f"{system_directory_problem(path)}: name the component's own "
                             f"{'file' if field in ('binary', 'socket') else 'directory'}", "error"))
    return findings


def _overlaps(owned: list[Owned], cluster: Cluster) -> list[Finding]:
    """Components on one host keep their directories apart (etcd in the kubelet's directory would have
    each delete and chown the other's files), and apart from kubesmith's own."""
    owned = sorted(owned, key=lambda item: item.written)  # the error stands where the user wrote the clash
    fixed = [(frozenset({"control-plane"}), "kubesmith's CA service", layout.CA_SERVICE_STATE),
             (frozenset({"control-plane", "etcd", "node"}), "kubesmith's agent", layout.AGENT_STATE)]
    findings: list[Finding] = []
    reported: set[tuple[LocPart, ...]] = set()
    for host in cluster.spec.hosts:
        roles = set(host.roles)
        present = [item for item in owned if item.roles & roles]
        for index, item in enumerate(present):
            others = [(f"the state directory of {format_path(other.loc)}", other.path) for other in present[:index]]
            others += [(f"the state directory of {name}", path) for needs, name, path in fixed if needs & roles]
            clash = next(((name, path) for name, path in others if _nested(item.path, path)), None)
            if clash is None:
                clash = _kubesmith_clash(item)
            if clash and item.loc not in reported:
                reported.add(item.loc)
                findings.append((item.loc, f"{item.path} overlaps {clash[1]}, {clash[0]}, on host {host.name}: "
                                 "each component needs its own", "error"))
    return findings


def _kubesmith_clash(item: Owned) -> tuple[str, str] | None:
    """kubesmith's fixed directories: a component's may not be one or hold one; the audit log may
    live inside kubesmith's log directory (its default does)."""
    for path, name in KUBESMITH_DIRECTORIES:
        inside = item.path.startswith(path + "/")
        if item.path == path or path.startswith(item.path.rstrip("/") + "/") or \
                (inside and not (path == layout.LOG and item.loc[-1] == "path")):
            return name, path
    return None


def _nested(one: str, other: str) -> bool:
    return one == other or one.startswith(other.rstrip("/") + "/") or other.startswith(one.rstrip("/") + "/")


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

