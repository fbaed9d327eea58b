"""kubesmith's own runtime for hosts: `kubesmith wait`, `agent` and `ca serve` run there.

The bundle is kubesmith plus the installed distributions it depends on, as one deterministic
tarball (sorted, fixed mtimes and owners), so its hash changes only when the code does and a
re-apply uploads nothing. Hosts need a `python3` of the same minor version (checked by apply);
compiled extensions are shipped as installed here.
"""

from __future__ import annotations

import hashlib
import io
import re
import sys
import tarfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import kubesmith
from kubesmith import layout
from kubesmith.fsutil import atomic_write
from kubesmith.hostfile import HostFile
from kubesmith.images import PAUSE_BUNDLED, image_cache_dir, pause_archive

COMMAND = "kubesmith"
REMOTE_ROOT = "/usr/local/lib/kubesmith"
REMOTE_TARBALL = f"{REMOTE_ROOT}/runtime.tar.gz"
WRAPPER_PATH = "/usr/local/bin/kubesmith"
MARKER = ".kubesmith-bundle"  # in an unpacked bundle: its tarball's sha256, written once the unpack is complete
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True, slots=True)
class RuntimeBundle:
    data: bytes = field(repr=False)  # 14 MB: never in a repr (see HostFile.data)
    sha256: str
    python: str  # "3.11": hosts must run this minor version

    @property
    def remote_dir(self) -> str:
        return f"{REMOTE_ROOT}/{self.sha256[:16]}"


def wrapper_script() -> bytes:
    return (b"#!" + layout.HOST_PYTHON.encode() + b" -I\n"
            b"# kubesmith on this host: the bundle shipped by `kubesmith apply`\n"
            b"import sys\n"
            b"sys.path.insert(0, \"" + REMOTE_ROOT.encode() + b"/current\")\n"
            b"from kubesmith.cli import main\n"
            b"main()\n")


def host_files(bundle: RuntimeBundle) -> list[HostFile]:
    """What a host holds of kubesmith itself: the bundle's tarball and the `kubesmith` wrapper."""
    return [HostFile(REMOTE_TARBALL, 0o644, "root", "root", bundle.data),
            HostFile(WRAPPER_PATH, 0o755, "root", "root", wrapper_script())]


def install_command(bundle: RuntimeBundle) -> str:
    """Unpack (when not already there, checked by content) and switch `current` to it, in one go."""
    return f"{unpack_command(bundle)} && {switch_command(bundle)}"


def unpack_command(bundle: RuntimeBundle) -> str:
    """Unpack beside the live version into `<hash>.tmp` and fsync it, with the marker written last.

    Leftovers of an interrupted install (`*.tmp`) go first. When `<hash>` already holds this
    bundle's marker there is nothing to unpack; one without it (an older kubesmith's, or torn)
    is replaced. The tarball is checked against the bundle's hash: what is unpacked is what was built."""
    target, digest = bundle.remote_dir, bundle.sha256
    return (f"set -e; rm -rf {REMOTE_ROOT}/*.tmp; "
            f"if [ \"$(cat {target}/{MARKER} 2>/dev/null)\" != {digest} ]; then "
            f"echo '{digest}  {REMOTE_TARBALL}' | sha256sum --check --quiet --strict; "
            f"mkdir {target}.tmp; tar -xzf {REMOTE_TARBALL} -C {target}.tmp; "
            f"echo {digest} > {target}.tmp/{MARKER}; sync; fi")


def switch_command(bundle: RuntimeBundle) -> str:
    """Rename the unpacked `<hash>.tmp` into place (if `unpack_command` made one), then point `current`
    at it: each a rename, so `current` is always a whole bundle or the previous one."""
    target, root = bundle.remote_dir, REMOTE_ROOT
    return (f"if [ -d {target}.tmp ]; then rm -rf {target} && mv -T {target}.tmp {target} && sync; fi "
            f"&& ln -sfn {target} {root}/current.tmp && mv -T {root}/current.tmp {root}/current && sync")


def inspect_command() -> str:
    """What is installed, from content: the marker of `current` (its bundle's sha256), then any
    leftover of an interrupted install (`*.tmp`), one per line."""
    return (f"cat {REMOTE_ROOT}/current/{MARKER} 2>/dev/null; echo; "
            f"ls -d {REMOTE_ROOT}/*.tmp 2>/dev/null; true")


def parse_inspection(output: str) -> tuple[str, tuple[str, ...]]:
    """(sha256 of the installed bundle or "", leftover paths) from `inspect_command`'s output."""
    first, _, rest = output.partition("\n")
    return first.strip(), tuple(line for line in rest.splitlines() if line.strip())


def build_bundle(cache_dir: Path) -> RuntimeBundle:
    """The bundle for the running interpreter, cached in `cache_dir` by content hash. It carries the
    sandbox image built here, so a node that joins without a compiler has it too."""
    members = {name: (path.read_bytes(), bool(path.stat().st_mode & 0o111)) for name, path in _runtime_files().items()}
    members[f"kubesmith/images/{PAUSE_BUNDLED.name}"] = (pause_archive(image_cache_dir()), False)
    files = sorted(members.items())
    digest = hashlib.sha256()
    for name, (data, _) in files:
        digest.update(name.encode() + b"\0" + data + b"\0")
    key = digest.hexdigest()
    cached = cache_dir / f"runtime-{key[:24]}.tar.gz"
    if not cached.exists():
        atomic_write(cached, _tarball(files), 0o644)
    data = cached.read_bytes()
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return RuntimeBundle(data, hashlib.sha256(data).hexdigest(), python)


def _runtime_files() -> dict[str, Path]:
    files: dict[str, Path] = {}
    package = Path(kubesmith.__file__).parent
    for path in package.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            files[f"kubesmith/{path.relative_to(package)}"] = path
    for dist in _dependency_closure("kubesmith"):
        for entry in dist.files or ():
            relative = str(entry)
            if relative.startswith("..") or "__pycache__" in relative or relative.endswith(".pyc"):
                continue
            located = Path(str(dist.locate_file(entry)))
            if located.is_file():
                files[relative] = located
    return files


def _dependency_closure(root: str) -> list[metadata.Distribution]:
    found: dict[str, metadata.Distribution] = {}
    pending = list(_requirements(metadata.distribution(root)))
    while pending:
        name = pending.pop()
        key = name.lower().replace("_", "-")
        if key in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # optional or platform-specific requirement that is not installed
        found[key] = dist
        pending.extend(_requirements(dist))
    return [found[key] for key in sorted(found)]


def _requirements(dist: metadata.Distribution) -> list[str]:
    names = []
    for requirement in dist.requires or ():
        if "extra ==" in requirement.replace("extra==", "extra =="):
            continue
        match = _NAME.match(requirement.strip())
        if match:
            names.append(match.group(0))
    return names


def _tarball(files: list[tuple[str, tuple[bytes, bool]]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as archive:
        for name, (data, executable) in files:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o755 if executable else 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
