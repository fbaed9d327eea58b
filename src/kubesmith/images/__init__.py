"""Container images without a registry: kubesmith's own pod sandbox image, and image archives that
containerd imports (`ctr images import`), the air-gapped path every node takes.

`oci_archive` packs files into an OCI image layout tarball, byte for byte the same for the same
files (fixed times, owners and order), so apply uploads an unchanged image never again.
`pause_archive` builds the sandbox image from `pause.c`, shipped as source with kubesmith and
compiled static on the machine that runs kubesmith: no downloaded binary anywhere.
`coredns_archive` packs the static CoreDNS binary the operator supplies (next to the Kubernetes
binaries, or named by `components.coreDns.binary`) the same way: the cluster DNS image.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import posixpath
import shutil
import struct
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubesmith import fsutil
from kubesmith.documents import TooDeep, load_json
from kubesmith.fsutil import atomic_write

PAUSE_SOURCE = Path(__file__).with_name("pause.c")
PAUSE_BUNDLED = Path(__file__).with_name("pause.tar")  # built where apply ran, shipped in kubesmith's runtime
PAUSE_IMAGE = "kubesmith.local/pause:1"
COREDNS_IMAGE = "kubesmith.local/coredns:1"
COREDNS_BINARY = "coredns"
# `setcap cap_net_bind_service=+ep`: a vfs_cap_data v2 (revision 2 | effective; permitted bit 10), so
# CoreDNS binds port 53 as a non-root user holding no other capability (as the upstream image does)
NET_BIND_SERVICE_FILE_CAP = ("security.capability", struct.pack("<IIIII", 0x02000001, 1 << 10, 0, 0, 0))
COMPILE = ("-static", "-Os", "-s", "-Wall", "-Werror")
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MAX_ARCHIVE_BYTES = 8 << 30  # an image archive on this machine; larger ones are refused before any upload
MAX_ARCHIVE_MEMBERS = 100_000  # files in one archive (an image's blobs: a few dozen)
MAX_INDEX_BYTES = 4 << 20  # index.json or manifest.json
MAX_COREDNS_BYTES = 512 << 20  # a static coredns is about 70 MiB
ELF_MAGIC = b"\x7fELF"


class ImageError(Exception):
    """An image cannot be built (no compiler, a compile error) or read; the message says which."""


@dataclass(frozen=True, slots=True)
class ImageFile:
    """One file of an image: its path inside the image, mode and bytes."""

    path: str
    data: bytes
    mode: int = 0o755
    xattrs: tuple[tuple[str, bytes], ...] = ()  # extended attributes (file capabilities), as PAX records


def oci_archive(name: str, files: tuple[ImageFile, ...], entrypoint: tuple[str, ...],
                architecture: str = "amd64") -> bytes:
    """An OCI image layout tarball holding one single-layer image named `name` (repository:tag)."""
    layer = _gzip(_tar({file.path.lstrip("/"): (file.data, file.mode) for file in files},
                       {file.path.lstrip("/"): file.xattrs for file in files if file.xattrs}))
    diff_id = "sha256:" + hashlib.sha256(gzip.decompress(layer)).hexdigest()
    config = _json({"architecture": architecture, "os": "linux",
                    "config": {"Entrypoint": list(entrypoint), "WorkingDir": "/"},
                    "rootfs": {"type": "layers", "diff_ids": [diff_id]}})
    manifest = _json({"schemaVersion": 2, "mediaType": MEDIA_MANIFEST,
                      "config": _descriptor(MEDIA_CONFIG, config),
                      "layers": [_descriptor(MEDIA_LAYER, layer)]})
    tag = name.rpartition(":")[2] if ":" in name.rpartition("/")[2] else "latest"
    index = _json({"schemaVersion": 2, "manifests": [{
        **_descriptor(MEDIA_MANIFEST, manifest),
        "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag}}]})
    blobs = {f"blobs/sha256/{hashlib.sha256(blob).hexdigest()}": (blob, 0o644) for blob in (layer, config, manifest)}
    return _tar({"oci-layout": (_json({"imageLayoutVersion": "1.0.0"}), 0o644), "index.json": (index, 0o644),
                 **blobs})


def pause_archive(cache_dir: Path, compiler: str = "cc") -> bytes:
    """The sandbox image archive: the one kubesmith's runtime on a host brought along, else built here
    once per source and compiler and cached in `cache_dir`."""
    if PAUSE_BUNDLED.exists():
        return PAUSE_BUNDLED.read_bytes()
    found = shutil.which(compiler)
    if found is None:
        raise ImageError(f"no C compiler ({compiler}) to build the pod sandbox image from {PAUSE_SOURCE.name}: "
                         "install one with static C libraries (Debian: gcc libc6-dev), or set "
                         "spec.components.containerRuntime.sandboxImage to an image your nodes already have")
    source = PAUSE_SOURCE.read_bytes()
    identity = subprocess.run([found, "--version"], capture_output=True, text=True, check=False).stdout
    key = hashlib.sha256(source + b"\0" + identity.encode() + b"\0" + " ".join(COMPILE).encode()).hexdigest()
    cached = cache_dir / f"pause-{key[:24]}.tar"
    if cached.exists():
        return cached.read_bytes()
    with tempfile.TemporaryDirectory() as work:
        binary = Path(work) / "pause"
        result = subprocess.run([found, *COMPILE, "-o", str(binary), str(PAUSE_SOURCE)], capture_output=True,
                                text=True, check=False)
        if result.returncode != 0:
            raise ImageError(f"building the pod sandbox image failed ({found}): {result.stderr.strip()[-400:]}")
        archive = oci_archive(PAUSE_IMAGE, (ImageFile("/pause", binary.read_bytes()),), ("/pause",))
    atomic_write(cached, archive, 0o644)
    return archive


def coredns_binary(given: str | None, binaries: Mapping[str, Path]) -> Path:
    """The static CoreDNS binary to pack: the option's path, else `coredns` among the binaries apply
    ships (--binaries DIR), else on PATH."""
    if given:
        return Path(given)
    if COREDNS_BINARY in binaries:
        return binaries[COREDNS_BINARY]
    found = shutil.which(COREDNS_BINARY)
    if found is None:
        raise ImageError("no coredns binary for the cluster DNS image: put a static `coredns` in --binaries DIR "
                         "or on PATH, set spec.components.coreDns.binary, or set spec.components.coreDns.enabled: "
                         "false")
    return Path(found)


def coredns_binary_problem(binary: Path) -> str | None:
    """Why `binary` cannot be packed as the cluster DNS image (not a regular file, larger than
    MAX_COREDNS_BYTES, no ELF executable), or None; four bytes are read at most."""
    try:
        with fsutil.open_regular(binary, MAX_COREDNS_BYTES, "a static coredns executable") as file:
            magic = file.read(4)
    except FileNotFoundError:
        return f"{binary} does not exist on this machine"
    except IsADirectoryError:
        return f"{binary} is a directory; expected a static coredns executable"
    except OSError as exc:
        return f"{binary}: {exc.strerror or exc}"
    if magic != ELF_MAGIC:
        return f"{binary} is not an executable (ELF) file: the cluster DNS image needs a static coredns"
    return None


def coredns_archive(binary: Path, cache_dir: Path) -> bytes:
    """The cluster DNS image (one file, /coredns), cached in `cache_dir` by the binary's sha256: the
    same binary gives the same bytes, so apply uploads it once. The binary is hashed in chunks and
    read (bounded by MAX_COREDNS_BYTES) only when the cache lacks its image."""
    if (problem := coredns_binary_problem(binary)) is not None:
        raise ImageError(problem)
    try:
        digest = fsutil.file_sha256(binary, MAX_COREDNS_BYTES)
        cached = cache_dir / f"coredns-2-{digest[:24]}.tar"
        if cached.exists():
            return cached.read_bytes()
        data = fsutil.read_regular(binary, MAX_COREDNS_BYTES, "a static coredns executable")
    except OSError as exc:
        raise ImageError(f"cannot read the coredns binary {binary}: {exc.strerror or exc}") from None
    archive = oci_archive(COREDNS_IMAGE, (ImageFile("/coredns", data, xattrs=(NET_BIND_SERVICE_FILE_CAP,)),),
                          ("/coredns",))
    atomic_write(cached, archive, 0o644)
    return archive


def archive_names(data: bytes) -> tuple[str, ...]:
    """The image names an archive in memory holds (OCI layout or `docker save` format)."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            return _names(archive)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ImageError(f"not an image archive ({exc})") from None


def check_archive(path: Path) -> tuple[str, ...]:
    """The image names of the archive at `path`, checked without reading it whole: a regular file of
    at most MAX_ARCHIVE_BYTES, an uncompressed tar whose index (OCI layout) or manifest (`docker save`)
    is well-formed and names only blobs the tar holds. OSError when it cannot be read as a file."""
    with fsutil.open_regular(path, MAX_ARCHIVE_BYTES, "an image archive (a tar file)") as file:
        try:
            with tarfile.open(fileobj=_BoundedReads(file), mode="r:") as archive:  # type: ignore[arg-type]
                return _names(archive)
        except (tarfile.TarError, EOFError) as exc:
            raise ImageError(f"not an image archive (not a tar file: {exc})") from None


class _BoundedReads:
    """An archive file whose single reads are bounded: tarfile reads a GNU long name or a pax header
    whole, as large as its header claims (1.5 GiB for a crafted sparse file), and skips member data
    by seeking. Nothing kubesmith reads from an archive (headers, an index) is larger than this."""

    LIMIT = MAX_INDEX_BYTES + (1 << 20)

    def __init__(self, file: Any) -> None:
        self._file = file

    def read(self, size: int = -1) -> bytes:
        if not 0 <= size <= self.LIMIT:
            raise ImageError(f"not an image archive (a header or member of {size:,} bytes read at once; "
                             f"at most {self.LIMIT >> 20} MiB expected)")
        return bytes(self._file.read(size))

    def __getattr__(self, name: str) -> Any:  # seek, tell, name, mode: the file's own
        return getattr(self._file, name)


def _names(archive: tarfile.TarFile) -> tuple[str, ...]:
    """The image names of an open archive, after checking its index or manifest (ImageError)."""
    members: dict[str, tarfile.TarInfo] = {}
    for count, member in enumerate(archive):
        if count >= MAX_ARCHIVE_MEMBERS:
            raise ImageError(f"not an image archive (more than {MAX_ARCHIVE_MEMBERS} members)")
        if (problem := _member_problem(member)) is not None:
            raise ImageError(f"not an image archive ({problem})")
        members[member.name.removeprefix("./")] = member
    try:
        if "index.json" in members:
            return _oci_names(archive, members)
        if "manifest.json" in members:
            return _docker_names(archive, members)
    except TooDeep as exc:
        raise ImageError(f"not an image archive (its index or manifest is {exc})") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ImageError(f"not an image archive (a malformed index or manifest: {exc!r})") from None
    raise ImageError("not an image archive (no index.json or manifest.json)")


def _member_problem(member: tarfile.TarInfo) -> str | None:
    """Why `member` is no part of an image archive, or None: `docker save` and OCI layouts hold files,
    directories and links inside the archive, never a name (or link target) that is absolute or climbs
    out with `..` (what a tool extracting it would write elsewhere), nor a device or FIFO."""
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        return f"member {member.name[:80]!r} is a device or FIFO"
    for what, name in (("member", member.name), ("link target", member.linkname if member.issym() or member.islnk()
                                                  else "")):
        if not name:
            continue
        joined = posixpath.join(posixpath.dirname(member.name), name) if member.issym() else name
        if name.startswith("/") or posixpath.normpath(joined).split("/")[0] == "..":
            return (f"{what} {name[:80]!r}{f' of {member.name[:80]!r}' if what != 'member' else ''} lies outside "
                    "the archive (an absolute path or one climbing out with ..)")
    return None


def _oci_names(archive: tarfile.TarFile, members: dict[str, tarfile.TarInfo]) -> tuple[str, ...]:
    index = load_json(_member(archive, members, "index.json"))
    manifests = index["manifests"]
    if not isinstance(manifests, list) or not manifests:
        raise ImageError("not an image archive (index.json lists no image)")
    names = []
    for entry in manifests:
        _blob(members, str(entry["digest"]))
        annotations = entry.get("annotations") or {}
        names.append(str(annotations.get("io.containerd.image.name") or
                         annotations.get("org.opencontainers.image.ref.name") or entry["digest"]))
    return tuple(names)


def _docker_names(archive: tarfile.TarFile, members: dict[str, tarfile.TarInfo]) -> tuple[str, ...]:
    entries = load_json(_member(archive, members, "manifest.json"))
    if not isinstance(entries, list) or not entries:
        raise ImageError("not an image archive (manifest.json lists no image)")
    names = []
    for entry in entries:
        for part in (str(entry["Config"]), *map(str, entry["Layers"])):
            if part.removeprefix("./") not in members:
                raise ImageError(f"not an image archive (manifest.json names {part!r}, which the archive lacks)")
        names += [str(tag) for tag in entry.get("RepoTags") or ()]
    return tuple(names)


def _blob(members: dict[str, tarfile.TarInfo], digest: str) -> None:
    algorithm, _, encoded = digest.partition(":")
    if not algorithm or not encoded or f"blobs/{algorithm}/{encoded}" not in members:
        raise ImageError(f"not an image archive (index.json names {digest!r}, which the archive lacks)")


def _member(archive: tarfile.TarFile, members: dict[str, tarfile.TarInfo], name: str) -> bytes:
    """A small member's bytes (an index or manifest): bounded, a regular file inside the tar."""
    info = members[name]
    if not info.isfile() or info.size > MAX_INDEX_BYTES:
        raise ImageError(f"not an image archive ({name} is not a file of at most {MAX_INDEX_BYTES >> 10} KiB)")
    handle = archive.extractfile(info)
    if handle is None:
        raise KeyError(name)
    return handle.read(MAX_INDEX_BYTES)


def _descriptor(media_type: str, blob: bytes) -> dict[str, object]:
    return {"mediaType": media_type, "digest": "sha256:" + hashlib.sha256(blob).hexdigest(), "size": len(blob)}


def _json(document: object) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _tar(members: Mapping[str, tuple[bytes, int]],
         xattrs: Mapping[str, tuple[tuple[str, bytes], ...]] | None = None) -> bytes:
    """A tarball of `members` (path -> (bytes, mode)), parents included, all owned by root at time 0;
    `xattrs` (path -> attributes) become SCHILY.xattr PAX records, which containerd sets on unpacking."""
    buffer = io.BytesIO()
    directories = sorted({str(parent) for path in members for parent in Path(path).parents if str(parent) != "."})
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for directory in directories:
            info = tarfile.TarInfo(directory)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            archive.addfile(info)
        for path in sorted(members):
            data, mode = members[path]
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), mode, 0
            info.pax_headers = {f"SCHILY.xattr.{name}": value.decode("utf-8", "surrogateescape")
                                for name, value in (xattrs or {}).get(path, ())}
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=6, mtime=0)


def image_cache_dir() -> Path:
    """Where built images are kept on this machine: $XDG_CACHE_HOME/kubesmith/images."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kubesmith" / "images"
