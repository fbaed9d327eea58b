"""`kubesmith images load`: the image archives kubesmith laid down on a node, imported into
containerd's `k8s.io` namespace (the one the kubelet's CRI uses) with Debian's `ctr`.

No registry is needed: the sandbox image and any archive listed in the spec arrive with apply (or
`kubesmith images import`), and pods use them with `imagePullPolicy: Never` or `IfNotPresent`.
An archive whose images containerd already has is not imported again.
"""

from __future__ import annotations

import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from kubesmith import fsutil
from kubesmith.images import ImageError, check_archive

NAMESPACE = "k8s.io"
SOCKET_URL = "unix://"
Say = Callable[[str], None]


class LoadError(Exception):
    """An archive could not be imported (containerd not answering, a broken archive)."""


def load_all(directory: Path, endpoint: str, deadline: float, say: Say) -> int:
    """Import every `*.tar` under `directory`; the number imported (already present ones are skipped)."""
    address = endpoint.removeprefix(SOCKET_URL)
    if directory.exists() and not directory.is_dir():  # a file where the directory of archives belongs
        mode = directory.stat().st_mode
        raise LoadError(f"{directory}: {'a file' if stat.S_ISREG(mode) else fsutil.file_kind(mode)}, not a directory; --dir names "
                        "the directory of image archives")
    archives = sorted(directory.glob("*.tar")) if directory.is_dir() else []
    if not archives:
        say(f"no image archives in {directory}")
        return 0
    present = _images(address, deadline)
    imported = 0
    for archive in archives:
        try:
            names = check_archive(archive)
        except (ImageError, OSError) as exc:
            raise LoadError(f"{archive}: {exc}") from None
        if names and all(name in present for name in names):
            continue
        result = _ctr(address, "images", "import", str(archive))
        if result.returncode != 0:
            raise LoadError(f"{archive}: ctr images import failed: {result.stderr.strip()[-300:]}")
        say(f"imported {', '.join(names) or archive.name} from {archive}")
        imported += 1
    return imported


def _images(address: str, deadline: float) -> set[str]:
    """The images containerd has, once it answers (it may still be starting: asked until `deadline`)."""
    end = time.monotonic() + deadline
    while True:
        result = _ctr(address, "images", "list", "--quiet")
        if result.returncode == 0:
            return set(result.stdout.split())
        if time.monotonic() > end:
            raise LoadError(f"containerd at {address} did not answer within {deadline:g}s: "
                            f"{result.stderr.strip()[-200:]}")
        time.sleep(0.2)


def _ctr(address: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["ctr", "--address", address, "--namespace", NAMESPACE, *arguments],
                              capture_output=True, text=True, timeout=300, check=False)
    except FileNotFoundError:
        raise LoadError("ctr not found: it comes with containerd (Debian: containerd)") from None
