"""Render the plan into one directory per host: the exact tree to lay down on that host.

`OUT/<host>/<absolute path on host>` for every file of the host's plan and every unit the systemd
backend makes of it (and, when given, the binaries and kubesmith's runtime that apply ships), plus
`OUT/<host>/manifest.json` (path, mode, owner, group, sha256 of each file),
`OUT/<host>/plan.json` (that host's part of the plan) and `OUT/plan.json` (the whole plan).

Rendering runs as any user: modes are set with chmod, owners are only recorded in the manifest
(the apply backend chowns on the host). Every file is written atomically; unchanged files are
left alone, and files that a previous render listed but the plan no longer has are removed.
`bundles` returns the same files in memory for backends that ship them elsewhere: apply is
"render, then ship", so a rendered tree holds the bytes apply would write.
"""

from __future__ import annotations

import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubesmith import fsutil, layout
from kubesmith.documents import load_json
from kubesmith.backends.systemd import UnitOptions, binary_path, executable, unit_file_mode, unit_files
from kubesmith.formats import DOCUMENT_WRITERS, json_bytes, yaml_bytes
from kubesmith.hostfile import AnyHostFile, HostFile, StreamedFile, size_of
from kubesmith.health.probespec import probe_argument
from kubesmith.images import (MAX_ARCHIVE_BYTES, ImageError, check_archive, coredns_archive, coredns_binary,
                              image_cache_dir, pause_archive)
from kubesmith.modules import TRIAL_SECONDS
from kubesmith.pki import documents
from kubesmith.pki.store import Issued, Notify, PkiError, PkiStore, check_owner, store_root, to_stderr
from kubesmith.plan.components import Component, component_config
from kubesmith.vocabulary.model import File, HostPlan, Plan, Source, plain

MANIFEST = "manifest.json"
MAX_BINARY_BYTES = 2 << 30  # a component binary shipped to hosts (kube-apiserver is about 100 MB)
MAX_MANIFEST_BYTES = 64 << 20  # the list of a host's rendered files: a few hundred entries
HOST_PLAN = "plan.json"
LOCK = ".kubesmith-render.lock"  # in the output directory: one render at a time writes there


class RenderError(Exception):
    """The plan cannot be rendered as asked (unknown host, a source that does not resolve)."""


@dataclass(frozen=True, slots=True)
class Shipped:
    """What a host gets besides its plan's files and units: the component binaries (by name, where
    they are on this machine) and kubesmith's own runtime. Apply ships them; render writes them when asked."""

    binaries: Mapping[str, Path] = field(default_factory=dict)
    runtime: Sequence[HostFile] = ()
    units: UnitOptions = UnitOptions()


def shipped_binaries(plan: Plan, hosts: Sequence[str] | None = None) -> set[str]:
    """Binaries a host needs shipped: kubesmith itself travels as the runtime bundle instead, and a
    binary named by its absolute path is the host's own (a distribution package)."""
    return {name for host in plan.hosts if hosts is None or host.name in hosts
            for service in host.services if service.binary != "kubesmith"
            and not service.binary.startswith("/") for name in (service.binary, *service.tools)}


@dataclass(frozen=True, slots=True)
class RenderResult:
    out_dir: Path
    hosts: tuple[str, ...]
    files_written: int
    files_unchanged: int
    files_removed: int
    certificates: tuple[Issued, ...]

    @property
    def issued(self) -> tuple[Issued, ...]:
        """Certificates created or reissued by this run."""
        return tuple(item for item in self.certificates if item.status != "reused")


def render(plan: Plan, state_dir: Path, out_dir: Path, hosts: list[str] | None = None,
           shipped: Shipped | None = Shipped(), notify: Notify = to_stderr,
           binaries: Mapping[str, Path] | None = None) -> RenderResult:
    """Issue what the PKI lacks, then write every selected host's bundle under `out_dir` (with its
    units; with binaries and runtime as `shipped` gives them; None: the plan's files alone).
    `binaries`: where images are built from (coredns), when `shipped` names no binaries.

    A second render into the same `out_dir` waits for the first (`notify` says for which pid):
    each removes a killed run's temp files on start, which would be a live run's files."""
    selected = select_hosts(plan, hosts)
    check_owner(store_root(state_dir), plan.cluster)  # before anything is created (checked again under the lock)
    if out_dir.exists() and not out_dir.is_dir():
        raise RenderError(f"{out_dir} is not a directory: render writes a tree of files into a directory")
    fsutil.make_dirs(out_dir)
    waiting = lambda holder: notify(f"waiting for {holder}, which is rendering into {out_dir}")
    with fsutil.exclusive(out_dir / LOCK, waiting):
        return _render_locked(plan, state_dir, out_dir, selected, shipped, notify, binaries)


def _render_locked(plan: Plan, state_dir: Path, out_dir: Path, selected: list[HostPlan],
                   shipped: Shipped | None, notify: Notify, binaries: Mapping[str, Path] | None = None
                   ) -> RenderResult:
    with PkiStore.open(store_root(state_dir), plan, notify=notify) as store:
        certificates, files = _materialise(plan, selected, store, shipped, binaries)
    fsutil.remove_stale_temps(out_dir)
    written = unchanged = removed = 0
    pending: list[fsutil.Pending] = []
    host_docs = {host.name: plain(host) for host in plan.hosts}
    for host in selected:
        host_dir = out_dir / host.name
        changed, same, stale = _host_changes(host_dir, files[host.name])
        _check_inside(out_dir, [item.path for item in changed] + stale)
        pending += changed
        unchanged += same
        removed += _remove(stale)
        pending += _if_changed(host_dir / HOST_PLAN, json_bytes(host_plan_document(plan, host, host_docs[host.name])))
        pending += _if_changed(host_dir / MANIFEST, json_bytes(manifest(host.name, files[host.name])))
    whole = {"apiVersion": "kubesmith.io/v1alpha1", "kind": "Plan", **_cluster_part(plan),
             "warnings": list(plan.warnings), "hosts": [host_docs[host.name] for host in plan.hosts]}
    pending += _if_changed(out_dir / "plan.json", json_bytes(whole))
    written = fsutil.write_many(pending)
    return RenderResult(out_dir, tuple(h.name for h in selected), written, unchanged, removed, tuple(certificates))


def bundles(plan: Plan, state_dir: Path, hosts: list[str] | None = None,
            shipped: Shipped | None = None) -> dict[str, tuple[AnyHostFile, ...]]:
    """Every selected host's files in memory (issuing what the PKI lacks), without writing a bundle."""
    selected = select_hosts(plan, hosts)
    with PkiStore.open(store_root(state_dir), plan) as store:
        _, files = _materialise(plan, selected, store, shipped)
    return files


def host_files(plan: Plan, host: str, store: PkiStore) -> tuple[AnyHostFile, ...]:
    """One host's files, as (path, mode, owner, group, bytes), resolved against an open store."""
    return _materialise(plan, select_hosts(plan, [host]), store)[1][host]


def select_hosts(plan: Plan, names: Sequence[str] | None) -> list[HostPlan]:
    if not names:
        return list(plan.hosts)
    known = {host.name: host for host in plan.hosts}
    for name in names:
        if name not in known:
            raise RenderError(f"no host named {name!r}; hosts: {', '.join(known)}")
    return [known[name] for name in dict.fromkeys(names)]


def manifest(host: str, files: Sequence[AnyHostFile]) -> dict[str, Any]:
    return {"host": host, "files": [{"path": f.path, "mode": f"{f.mode:04o}", "owner": f.owner, "group": f.group,
                                     "sha256": f.sha256, "size": size_of(f)} for f in files]}


def host_plan_document(plan: Plan, host: HostPlan, host_doc: dict[str, Any] | None = None) -> dict[str, Any]:
    """The part of the plan a host needs: cluster facts, authorities and its own services and files."""
    return {"apiVersion": "kubesmith.io/v1alpha1", "kind": "HostPlan", **_cluster_part(plan),
            "host": host_doc if host_doc is not None else plain(host)}


def _cluster_part(plan: Plan) -> dict[str, Any]:
    return {"cluster": plan.cluster, "kubernetes_version": plan.kubernetes_version, "api_endpoint": plan.api_endpoint,
            "pki": plain(plan.pki), "authorities": [plain(ca) for ca in plan.authorities]}


# ---- resolving the plan's files

@dataclass(frozen=True, slots=True)
class _Context:
    plan: Plan
    store: PkiStore
    issued: Mapping[tuple[str, str], Issued]
    documents: dict[tuple[int, str], bytes] = field(default_factory=dict)  # serialised data by object: the plan
    # shares one configuration document between all hosts that have the same one (1,000 kubelets)
    images: dict[str, bytes] = field(default_factory=dict)  # built images by source name, built once
    archives: dict[tuple[str, str, int], StreamedFile] = field(default_factory=dict)  # operators' archives
    binaries: Mapping[str, Path] = field(default_factory=dict)  # this machine's binaries (the coredns image's)


def _materialise(plan: Plan, selected: list[HostPlan], store: PkiStore, shipped: Shipped | None = None,
                 binaries: Mapping[str, Path] | None = None) -> tuple[list[Issued], dict[str, tuple[AnyHostFile, ...]]]:
    certificates = store.issue((host.name, request) for host in selected for request in host.certificates)
    ctx = _Context(plan, store, {(item.host, item.name): item for item in certificates},
                   binaries=binaries or (shipped.binaries if shipped is not None else {}))
    files = {host.name: tuple(_rendered(ctx, host, file) for file in host.files) for host in selected}
    if shipped is not None:
        extra = _Extras(shipped)
        files = {host.name: files[host.name] + extra.for_host(plan, host) for host in selected}
    return certificates, files


@dataclass(slots=True)
class _Extras:
    """Units, binaries and runtime of each host. A binary is streamed from where it is here, never held
    in memory (a release is 400 MB), and hashed once however many hosts get it, or not at all when
    the digest memo remembers that very file."""

    shipped: Shipped
    binaries: dict[str, StreamedFile] = field(default_factory=dict)

    def for_host(self, plan: Plan, host: HostPlan) -> tuple[AnyHostFile, ...]:
        files: list[AnyHostFile] = [HostFile(f"/{path}", unit_file_mode(path), "root", "root", text.encode())
                                    for path, text in sorted(unit_files(host, self.shipped.units).items())]
        files += components_file(plan, host, self.shipped.units)
        for name in sorted(shipped_binaries(plan, [host.name]) & set(self.shipped.binaries)):
            if name not in self.binaries:
                self.binaries[name] = StreamedFile(binary_path(name, self.shipped.units), 0o755, "root", "root",
                                                   self.shipped.binaries[name], MAX_BINARY_BYTES, digest_memo())
            files.append(self.binaries[name])
        return (*files, *self.shipped.runtime)


def digest_memo() -> Path:
    """Where this machine remembers the digests of large files it ships: $XDG_CACHE_HOME/kubesmith."""
    return image_cache_dir().parent / "digests.json"


def components_file(plan: Plan, host: HostPlan, units: UnitOptions) -> list[HostFile]:
    """What the agent's configuration keeper keeps on this host (plan.components, read by
    agent.configloop): each component with a trial length, its configuration's files (from the
    plan), binary, readiness probe and the kept components it starts after."""
    kept = [s for s in host.services if s.name in TRIAL_SECONDS and not s.oneshot]
    if not kept or not any(s.component == "agent" for s in host.services):
        return []
    names = {s.name for s in kept}
    components = [Component(component_config(host, s), s.binary.rsplit("/", 1)[-1],
                            probe_argument(s.readiness, host) if s.readiness else None, executable(s, units),
                            tuple(unit.removesuffix(".service") for unit in s.after
                                  if unit.removesuffix(".service") in names))
                  for s in kept]
    document = {"minor": ".".join(plan.kubernetes_version.split(".")[:2]),
                "components": [component.document() for component in components]}
    return [HostFile(layout.COMPONENTS_FILE, 0o644, "root", "root", json_bytes(document))]


def _rendered(ctx: _Context, host: HostPlan, file: File) -> HostFile | StreamedFile:
    if file.source is not None and file.source.kind == "image-archive":
        return _archive(ctx, file)
    return HostFile(file.path, file.mode, file.owner, file.group, _content(ctx, host, file))


def _archive(ctx: _Context, file: File) -> StreamedFile:
    """An operator's image archive, checked (a regular file, bounded, an image), then streamed from
    its file wherever it goes: an archive of gigabytes is never held in memory."""
    assert file.source is not None
    key = (file.source.name, file.path, file.mode)
    if key not in ctx.archives:
        source = Path(file.source.name)
        try:
            check_archive(source)
            streamed = StreamedFile(file.path, file.mode, file.owner, file.group, source, MAX_ARCHIVE_BYTES,
                                    digest_memo())
            streamed.sha256  # hashed once, now: a file that cannot be read is said here
        except ImageError as exc:
            raise RenderError(f"{file.path}: {source}: {exc} (spec.components.containerRuntime.images)") from None
        except OSError as exc:
            raise RenderError(f"{file.path}: cannot read the image archive {source}: {exc.strerror} "
                              "(spec.components.containerRuntime.images)") from None
        ctx.archives[key] = streamed
    return ctx.archives[key]


def _content(ctx: _Context, host: HostPlan, file: File) -> bytes:
    if file.source is not None:
        return _resolve(ctx, host, file.source, file.path)
    if file.format not in DOCUMENT_WRITERS:
        return own_bytes(file, host.name)
    key = (id(file.data), file.format)  # one document object is shared by many hosts: serialise it once
    if key not in ctx.documents:
        ctx.documents[key] = own_bytes(file, host.name)
    return ctx.documents[key]


def own_bytes(file: File, host: str) -> bytes:
    """The bytes of a file the plan spells out itself (a document or text, not key material)."""
    if file.format in DOCUMENT_WRITERS:
        return DOCUMENT_WRITERS[file.format](file.data)
    if file.content is None:
        raise RenderError(f"{host}:{file.path}: a file needs content, data or a source (kubesmith bug)")
    return file.content.encode()


def _resolve(ctx: _Context, host: HostPlan, source: Source, path: str) -> bytes:
    options = dict(source.options)
    kind = source.kind
    if kind in ("certificate", "private-key"):
        issued = _leaf(ctx, host, source.name, path)
        return issued.cert_pem if kind == "certificate" else issued.key_pem
    if kind == "ca-certificate":
        return _authority(ctx, source.name, path).cert_pem
    if kind == "ca-private-key":
        _check_key_holder(ctx.plan, host.name, source.name, path)
        return _authority(ctx, source.name, path).key_pem
    if kind in ("service-account-key", "service-account-public-key"):
        private, public = ctx.store.service_account_key()
        return private if kind == "service-account-key" else public
    if kind == "kubeconfig":
        return _kubeconfig(ctx, host, options, path)
    if kind in ("sandbox-image", "coredns-image"):
        return _image(ctx, source, path)
    if kind == "encryption-config":
        secret = ctx.store.encryption_secret(source.name)
        try:
            return yaml_bytes(documents.encryption_config(options.get("provider", "aescbc"), secret))
        except ValueError as exc:
            raise RenderError(f"{host.name}:{path}: {exc}") from exc
    raise RenderError(f"{host.name}:{path}: unknown source kind {kind!r} (kubesmith bug)")


def _image(ctx: _Context, source: Source, path: str) -> bytes:
    """kubesmith's own images (the sandbox's, CoreDNS's), built here once."""
    if source.name not in ctx.images:
        try:
            if source.kind == "coredns-image":
                binary = coredns_binary(dict(source.options).get("binary") or None, ctx.binaries)
                ctx.images[source.name] = coredns_archive(binary, image_cache_dir())
            else:
                ctx.images[source.name] = pause_archive(image_cache_dir())
        except ImageError as exc:
            given = source.kind == "coredns-image" and dict(source.options).get("binary")
            raise RenderError(f"{path}: spec.components.coreDns.binary: {exc}" if given else f"{path}: {exc}") \
                from None
    return ctx.images[source.name]


def _kubeconfig(ctx: _Context, host: HostPlan, options: dict[str, str], path: str) -> bytes:
    for required in ("server", "ca", "certificate"):
        if required not in options:
            raise RenderError(f"{host.name}:{path}: kubeconfig source lacks {required!r} (kubesmith bug)")
    issued = _leaf(ctx, host, options["certificate"], path)
    user = host.certificate(options["certificate"]).common_name
    document = documents.kubeconfig(options.get("cluster", ctx.plan.cluster), options["server"], user,
                                    _authority(ctx, options["ca"], path).cert_pem, issued.cert_pem, issued.key_pem)
    return yaml_bytes(document)


def _leaf(ctx: _Context, host: HostPlan, name: str, path: str) -> Issued:
    issued = ctx.issued.get((host.name, name))
    if issued is None:
        raise RenderError(f"{host.name}:{path}: no certificate request named {name!r} on this host (kubesmith bug)")
    return issued


def _authority(ctx: _Context, name: str, path: str):  # type: ignore[no-untyped-def]
    try:
        return ctx.store.authority(name)
    except PkiError as exc:
        raise RenderError(f"{path}: {exc}") from exc


def _check_key_holder(plan: Plan, host: str, ca: str, path: str) -> None:
    """A CA key goes only to the hosts that sign with it, whatever a module asks for."""
    holders = next((a.key_holders for a in plan.authorities if a.name == ca), ())
    if host not in holders:
        raise RenderError(f"{host}:{path}: refusing to place the {ca} private key on a host that does not sign "
                          f"with it (key holders: {', '.join(holders) or 'none'})")


# ---- the output tree

def target_path(host_dir: Path, path: str) -> Path:
    """Where a host's absolute path lands inside its bundle; refuses paths that would escape it."""
    relative = Path(path.lstrip("/"))
    if not path.startswith("/") or ".." in relative.parts:
        raise RenderError(f"{path}: file paths must be absolute and without '..' (kubesmith bug)")
    return host_dir / relative


def _host_changes(host_dir: Path, files: Sequence[HostFile | StreamedFile]
                  ) -> tuple[list[fsutil.Pending], int, list[Path]]:
    """(files to write, count unchanged, stale paths from the previous render)."""
    pending: list[fsutil.Pending] = []
    unchanged = 0
    wanted = set()
    for file in files:
        target = target_path(host_dir, file.path)
        wanted.add(target)
        if _same(target, file):
            unchanged += 1
        else:
            pending.append(_pending(target, file))
    return pending, unchanged, [path for path in _previous(host_dir) if path not in wanted]


def _check_inside(out_dir: Path, paths: Sequence[Path]) -> None:
    """Nothing is written or removed through a symbolic link that leads out of the output directory
    (a link planted in an old bundle would have render overwrite /etc); checked before any change."""
    for path in paths:
        if (bad := fsutil.escapes(out_dir, path)) is not None:
            what = f"a symbolic link to {bad.resolve()}" if bad.is_symlink() else "not a directory"
            raise RenderError(f"{bad} is {what}: render writes only inside {out_dir}; remove it and render again")


def _if_changed(target: Path, data: bytes, mode: int = 0o644) -> list[fsutil.Pending]:
    return [] if _same(target, HostFile(str(target), mode, "", "", data)) else [fsutil.Pending(target, data, mode)]


def _pending(target: Path, file: HostFile | StreamedFile) -> fsutil.Pending:
    if isinstance(file, StreamedFile):
        return fsutil.Pending(target, b"", file.mode, file.source, file.limit)
    return fsutil.Pending(target, file.data, file.mode)


def _same(target: Path, file: HostFile | StreamedFile) -> bool:
    """Whether `target` already is `file`: a regular file (never followed through a link, never a FIFO)."""
    try:
        info = target.lstat()
        if not stat.S_ISREG(info.st_mode) or info.st_size != size_of(file) or (info.st_mode & 0o7777) != file.mode:
            return False
        if isinstance(file, StreamedFile):
            return fsutil.file_sha256(target, file.limit) == file.sha256
        return target.read_bytes() == file.data
    except OSError:
        return False


def _previous(host_dir: Path) -> list[Path]:
    try:
        document = load_json(fsutil.read_regular(host_dir / MANIFEST, MAX_MANIFEST_BYTES, "a render manifest"))
        return [target_path(host_dir, entry["path"]) for entry in document["files"]]
    except (OSError, ValueError, KeyError, TypeError, RenderError):
        return []


def _remove(paths: list[Path]) -> int:
    for path in paths:
        path.unlink(missing_ok=True)
    return len(paths)
