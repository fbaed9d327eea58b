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
from kubesmith.systemdirs import (KUBESMITH_DIRECTORIES, canonical, inside, spelled, system_directory_problem,
                                  unsafe_tree_problem, used_path_problem)

Finding = tuple[tuple[LocPart, ...], str, str]  # as spec.checks.Finding

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
                findings.append((item.loc, f"{spelled(item.path, canon)} overlaps "
                                 f"{spelled(clash[1], canonical(clash[1]))}, {clash[0]}, on host "
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
        owned_inside = canon.startswith(path + "/") and item.owned
        if canon == path or inside(path, canon) or \
                (owned_inside and not (path == layout.LOG and item.loc[-1] == "path")):
            return name, path
    return None


def _nested(one: str, other: str) -> bool:
    one, other = canonical(one), canonical(other)
    return one == other or inside(one, other) or inside(other, one)


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

