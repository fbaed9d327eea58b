"""kubesmith's own runtime for hosts: `kubesmith wait`, `agent` and `ca serve` run there.

The bundle is kubesmith plus the installed distributions it depends on, and their bytecode for this
machine's minor (`bytecode`), as one deterministic tarball (sorted, fixed mtimes and owners), so its
hash changes only when the code does and a re-apply uploads nothing.

Hosts run it on their own python3, whose minor need not be this machine's. What is pure Python runs
on any minor; an extension module built for one minor (`_pydantic_core.cpython-311-*.so`, cffi's
`_cffi_backend`) loads only there. Those are shipped as installed here for this machine's minor and,
for each other minor the hosts run, taken from the same release's wheel for that minor (fetched once
with pip, then cached). Each interpreter imports the file named for its own minor, so one bundle
serves every host. Two things differ on a minor older than this machine's:

* a stable-ABI module (`abi3`) loads on the minor it was built for and every later one, and the one
  installed here may be built for this minor (cryptography's `_rust.abi3.so` is `cp311-abi3`): the
  bundle then carries the same release's build for the oldest minor, which loads on all of them;
* a requirement whose marker holds only there (aiohttp's `async-timeout; python_version < "3.11"`)
  is not installed here: its wheel for that minor is shipped too.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

import kubesmith
from kubesmith import fsutil, layout
from kubesmith.fsutil import atomic_write
from kubesmith.hostfile import HostFile
from kubesmith.images import PAUSE_BUNDLED, image_cache_dir, pause_archive

if TYPE_CHECKING:
    from kubesmith.vocabulary.model import Plan

COMMAND = "kubesmith"
REMOTE_ROOT = "/usr/local/lib/kubesmith"
REMOTE_TARBALL = f"{REMOTE_ROOT}/runtime.tar.gz"
WRAPPER_PATH = "/usr/local/bin/kubesmith"
MARKER = ".kubesmith-bundle"  # in an unpacked bundle: its tarball's sha256, written once the unpack is complete
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")
# An extension module built for one CPython minor: "cpython-311" in its name.
MINOR_EXTENSION = re.compile(r"\.cpython-(3\d+)-[^/]*\.so$")
# One built for the stable ABI: loads on the minor of its wheel's tag ("cp311-abi3") and every later one.
STABLE_EXTENSION = re.compile(r"\.abi3\.so$")
# A wheel's file name: name-version(-build)?-python-abi-platform.whl
WHEEL_NAME = re.compile(r"^[^-]+-(?P<version>[^-]+)(-\d[^-]*)?-(?P<python>[^-]+)-(?P<abi>[^-]+)-[^-]+\.whl$")
# Wheels of the platform this machine's extensions were built for (glibc 2.17 and 2.28 baselines:
# Debian 11 and newer have both).
WHEEL_PLATFORMS = ("manylinux2014", "manylinux_2_17", "manylinux_2_28")
FETCH_TIMEOUT = 300.0
CACHED_NAME = re.compile(r"runtime-[0-9a-f]{24}\.tar\.gz")  # a built bundle in the cache directory


class BundleError(Exception):
    """The runtime cannot be built for a python3 minor the hosts run (its wheels could not be had)."""


@dataclass(frozen=True, slots=True)
class RuntimeBundle:
    data: bytes = field(repr=False)  # 21 MB: never in a repr (see HostFile.data)
    sha256: str
    pythons: tuple[str, ...]  # ("3.11", "3.13"): the python3 minors it runs on (their extension modules are in it)

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


def build_bundle(cache_dir: Path, pythons: Iterable[str] = ()) -> RuntimeBundle:
    """The bundle for the running interpreter's minor and each of `pythons` ("3.13"), cached in
    `cache_dir` by content hash (BundleError: another minor's wheels could not be had, or the bytecode
    could not be compiled). It carries the sandbox image built here, so a node that joins without a
    compiler has it too."""
    own = running_python()
    others = sorted(set(pythons) - {own}, key=_minor_key)
    minors = tuple(sorted({own, *others}, key=_minor_key))
    sources = _runtime_files()
    extras: dict[str, tuple[bytes, bool]] = {}
    for minor in reversed(others):  # the oldest last: its stable-ABI modules load on every later minor
        extras.update(minor_extensions(minor, wheel_cache_dir()))
    extras[f"kubesmith/images/{PAUSE_BUNDLED.name}"] = (pause_archive(image_cache_dir()), False)
    # Reading and hashing the ~1,400 files cost about 0.6 CPU-s at every apply: the bundle is recalled
    # by the files' identities (fsutil.identity) while none of them changed.
    inputs, settled = _inputs(sources, extras)
    memo = cache_dir / "bundles.json"
    known = fsutil.recall(memo, inputs)
    if known is not None and CACHED_NAME.fullmatch(known) and (cache_dir / known).is_file():
        data = (cache_dir / known).read_bytes()
        return RuntimeBundle(data, hashlib.sha256(data).hexdigest(), minors)
    members = {name: (path.read_bytes(), bool(path.stat().st_mode & 0o111)) for name, path in sources.items()}
    files = sorted({**members, **bytecode(sources), **extras}.items())
    digest = hashlib.sha256()
    for name, (data, _) in files:
        digest.update(name.encode() + b"\0" + data + b"\0")
    cached = cache_dir / f"runtime-{digest.hexdigest()[:24]}.tar.gz"
    if not cached.exists():
        atomic_write(cached, _tarball(files), 0o644)
    if settled:
        fsutil.remember(memo, inputs, cached.name)
    data = cached.read_bytes()
    return RuntimeBundle(data, hashlib.sha256(data).hexdigest(), minors)


def _inputs(sources: dict[str, Path], extras: dict[str, tuple[bytes, bool]]) -> tuple[str, bool]:
    """What the bundle is made of, without reading the files: each file's name and identity, and the
    digest of each member built here; and whether every file is settled enough to remember it by."""
    digest, settled = hashlib.sha256(), True
    digest.update(f"{sys.implementation.cache_tag}\0".encode())  # the bytecode's interpreter
    for name, path in sorted(sources.items()):
        info = path.stat()
        settled = settled and fsutil.settled(info)
        digest.update(f"{name}\0{fsutil.identity(info)}\0{info.st_mode & 0o111 != 0}\0".encode())
    for name, (data, executable) in sorted(extras.items()):
        digest.update(f"{name}\0{hashlib.sha256(data).hexdigest()}\0{executable}\0".encode())
    return digest.hexdigest(), settled


# Run in a child with a fixed hash seed: a set among a module's constants is written in hash order,
# and the same sources must give the same bytes (the bundle's digest changes only with the code).
COMPILE = """
import json, py_compile, sys
for source, target, shown in json.load(sys.stdin):
    try:
        py_compile.compile(source, cfile=target, dfile=shown, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    except py_compile.PyCompileError:
        pass  # a file this minor cannot compile ships as it is, as an installer leaves it
"""


def bytecode(sources: dict[str, Path]) -> dict[str, tuple[bytes, bool]]:
    """The running interpreter's bytecode of each Python source, by its name in the bundle.

    Without it each newly installed bundle was compiled on the hosts by whichever process imported a
    module first, and the CA service (its unit sees /usr read-only) compiled its own imports at every
    start: on the lab the agent, CA and route units of a first apply used 9.6-13.5 CPU-s on three
    hosts, 5.0 with bytecode. Hash-based and unchecked: a bundle's directory is named by its content,
    so no source changes under its bytecode. A host of another minor ignores these files (their
    names carry this minor) and compiles as before."""
    named = sorted((name, path) for name, path in sources.items() if name.endswith(".py"))
    with tempfile.TemporaryDirectory() as scratch:
        jobs = [(str(path), f"{scratch}/{index}.pyc", name) for index, (name, path) in enumerate(named)]
        try:
            done = subprocess.run([sys.executable, "-s", "-S", "-c", COMPILE], input=json.dumps(jobs), text=True,
                                  env={"PYTHONHASHSEED": "0"}, capture_output=True, timeout=FETCH_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BundleError(f"cannot compile kubesmith's runtime for the hosts: {exc}") from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            raise BundleError(f"cannot compile kubesmith's runtime for the hosts: {last}")
        return {cached_name(name): (Path(target).read_bytes(), False) for _, target, name in jobs
                if os.path.exists(target)}


def cached_name(source: str) -> str:
    """Where this interpreter looks for a source's bytecode: `a/__pycache__/b.cpython-311.pyc` for `a/b.py`."""
    directory, _, file = source.rpartition("/")
    cached = f"__pycache__/{file.removesuffix('.py')}.{sys.implementation.cache_tag}.pyc"
    return f"{directory}/{cached}" if directory else cached


def host_pythons(plan: Plan) -> set[str]:
    """The python3 minors the plan's hosts were observed to run (none when nothing was observed)."""
    return {host.environment.facts.python for host in plan.hosts if host.environment.facts.python}


def running_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _minor_key(minor: str) -> tuple[int, ...]:
    return tuple(int(part) for part in minor.split("."))


def wheel_cache_dir() -> Path:
    """Where other minors' wheels are kept on this machine: $XDG_CACHE_HOME/kubesmith/wheels."""
    return image_cache_dir().parent / "wheels"


def minor_extensions(minor: str, wheel_dir: Path) -> dict[str, tuple[bytes, bool]]:
    """What python3 `minor` needs besides the files installed here: the extension modules for it of every
    shipped distribution that has some for this machine's minor (from that distribution's wheel of the
    same version), stable-ABI modules built for a later minor, and the requirements only it has."""
    members: dict[str, tuple[bytes, bool]] = {}
    for dist in _dependency_closure("kubesmith"):
        _check_supports(dist, minor)
        files = [str(entry) for entry in dist.files or ()]
        if any(MINOR_EXTENSION.search(name) for name in files):
            wheel = fetch_wheel(dist.metadata["Name"], dist.version, minor, wheel_dir)
            members.update(wheel_extensions(wheel, minor))
        if any(STABLE_EXTENSION.search(name) for name in files) and _minor_key(minor) < _stable_floor(dist):
            wheel = fetch_wheel(dist.metadata["Name"], dist.version, minor, wheel_dir, abi="abi3")
            members.update(wheel_stable_extensions(wheel))
    for name, specifier in minor_requirements(minor):
        members.update(wheel_files(fetch_wheel(name, specifier, minor, wheel_dir, abi="none")))
    return members


def _check_supports(dist: metadata.Distribution, minor: str) -> None:
    """BundleError when the release of `dist` installed here is not for python3 `minor` (its Requires-Python):
    the bundle ships that release, so the remedy is another one here, which pip's own error would not say."""
    supported = dist.metadata.get("Requires-Python") or ""
    if supported and not SpecifierSet(supported).contains(f"{minor}.99"):
        name = dist.metadata["Name"]
        raise BundleError(f"kubesmith's runtime for python {minor} ships {name} {dist.version} as installed here, "
                          f"which needs Python {supported}: install a release of {name} that supports {minor} here, "
                          "or give the hosts a newer python3")


def _stable_floor(dist: metadata.Distribution) -> tuple[int, ...]:
    """The oldest minor the installed stable-ABI modules of `dist` load on, from its wheel's tags
    ("Tag: cp311-abi3-manylinux_2_34_x86_64" in WHEEL: 3.11); (3,) when no tag says."""
    tags = re.findall(r"^Tag:\s*cp3(\d+)-abi3-", dist.read_text("WHEEL") or "", re.MULTILINE)
    return min(((3, int(minor)) for minor in tags), default=(3,))


def minor_requirements(minor: str) -> list[tuple[str, str]]:
    """(name, version specifier) of each requirement of the shipped distributions whose marker holds on
    python3 `minor` but that is not installed here (its marker did not hold on this machine's)."""
    environment = {"python_version": minor, "python_full_version": f"{minor}.0", "extra": ""}
    found: dict[str, str] = {}
    for dist in [metadata.distribution("kubesmith"), *_dependency_closure("kubesmith")]:
        for line in dist.requires or ():
            requirement = Requirement(line)
            if requirement.marker is None or not requirement.marker.evaluate(environment):
                continue
            try:
                metadata.distribution(requirement.name)
            except metadata.PackageNotFoundError:
                found[requirement.name] = str(requirement.specifier)
    return sorted(found.items())


def wheel_extensions(wheel: Path, minor: str) -> dict[str, tuple[bytes, bool]]:
    """A wheel's extension modules for `minor`, by their path in site-packages."""
    tag = minor.replace(".", "")
    with zipfile.ZipFile(wheel) as archive:
        return {name: (archive.read(name), True) for name in archive.namelist()
                if (found := MINOR_EXTENSION.search(name)) and found.group(1) == tag}


def wheel_stable_extensions(wheel: Path) -> dict[str, tuple[bytes, bool]]:
    """A wheel's stable-ABI extension modules, by their path in site-packages."""
    with zipfile.ZipFile(wheel) as archive:
        return {name: (archive.read(name), True) for name in archive.namelist() if STABLE_EXTENSION.search(name)}


def wheel_files(wheel: Path) -> dict[str, tuple[bytes, bool]]:
    """Every file of a pure-Python wheel, by its path in site-packages."""
    with zipfile.ZipFile(wheel) as archive:
        return {name: (archive.read(name), False) for name in archive.namelist() if not name.endswith("/")}


def fetch_wheel(name: str, version: str, minor: str, wheel_dir: Path, abi: str = "") -> Path:
    """The wheel of `name` at `version` (or a specifier: ">=4.0,<6.0") for CPython `minor` on this platform,
    built for `minor` itself (abi ""), for the stable ABI ("abi3") or pure Python ("none"): cached, or
    fetched with pip (the operator's own index, proxy and certificates, as for installing kubesmith)."""
    tag = "cp" + minor.replace(".", "")
    specifier = version if version[:1] in "<>=!~" else f"=={version}"
    cached = _cached_wheels(wheel_dir, name, specifier, minor, abi or tag)
    if cached:
        return cached[-1]
    wheel_dir.mkdir(parents=True, exist_ok=True)
    machine = platform.machine()
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
            "--only-binary=:all:", "--implementation", "cp", "--python-version", minor, "--abi", abi or tag,
            *(f"--platform={base}_{machine}" for base in WHEEL_PLATFORMS),
            "--dest", str(wheel_dir), f"{name}{specifier}"]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=FETCH_TIMEOUT, check=False,
                                env={**os.environ, "PIP_NO_INPUT": "1"})
    except subprocess.TimeoutExpired:
        raise BundleError(f"fetching {name} {version} for python {minor} took over {FETCH_TIMEOUT:.0f}s") from None
    fetched = _cached_wheels(wheel_dir, name, specifier, minor, abi or tag)
    if result.returncode != 0 or not fetched:
        detail = (result.stderr.strip().splitlines() or ["no such wheel"])[-1]
        raise BundleError(f"kubesmith's runtime for python {minor} needs the {name} {version} wheel for {tag} "
                          f"({machine}); pip could not fetch it: {detail}. Put it in {wheel_dir} to use it offline")
    return fetched[-1]


def _cached_wheels(wheel_dir: Path, name: str, specifier: str, minor: str, abi: str) -> list[Path]:
    """The wheels in `wheel_dir` of `name` in `specifier` that python3 `minor` loads, built with `abi`,
    oldest release first (by file name)."""
    wanted, found = SpecifierSet(specifier), []
    for wheel in sorted(wheel_dir.glob(f"{re.sub(r'[-_.]+', '_', name).lower()}-*.whl")):
        parts = WHEEL_NAME.match(wheel.name)
        if parts is None or parts["abi"] != abi or not wanted.contains(parts["version"]):
            continue
        floors = [(3, int(python[3:])) for python in parts["python"].split(".") if python.startswith("cp3")]
        if abi != "abi3" or min(floors, default=(3,)) <= _minor_key(minor):
            found.append(wheel)
    return found


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
    # gzip's header holds a time too: 0, as the members' (tarfile's "w:gz" writes the current one)
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=6, mtime=0) as packed, \
            tarfile.open(fileobj=packed, mode="w") as archive:
        for name, (data, executable) in files:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o755 if executable else 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
