"""One file written atomically: `atomic_write` sets the mode it is given, `atomic_replace` keeps the
replaced file's mode and owner (a renewed certificate stays readable by its component's user), and a
write that fails leaves the target as it was and no temp file beside it."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from kubesmith import fsutil


def _temps(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir() if fsutil.is_temp(path))


def test_atomic_write_creates_the_file_with_its_mode_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "key.pem"
    fsutil.atomic_write(target, b"secret", 0o600)
    assert target.read_bytes() == b"secret"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert _temps(target.parent) == []


def test_atomic_replace_keeps_mode_and_owner(tmp_path: Path) -> None:
    target = tmp_path / "kubelet.crt"
    target.write_bytes(b"old")
    target.chmod(0o640)
    owner = (os.getuid(), os.getgid())
    if os.geteuid() == 0:  # root can give the file away, as the agent's certificates are
        owner = (65534, 65534)
        os.chown(target, *owner)
    fsutil.atomic_replace(target, b"new")
    info = target.stat()
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(info.st_mode) == 0o640
    assert (info.st_uid, info.st_gid) == owner
    assert _temps(tmp_path) == []


@pytest.mark.parametrize("write", [lambda path: fsutil.atomic_write(path, b"new"),
                                   lambda path: fsutil.atomic_replace(path, b"new")], ids=["write", "replace"])
def test_a_failed_rename_leaves_the_target_and_no_temp(tmp_path: Path, write: Callable[[Path], None]) -> None:
    target = tmp_path / "busy"
    target.mkdir()  # a file cannot be renamed over a non-empty directory
    (target / "inside").write_bytes(b"kept")
    with pytest.raises(OSError):
        write(target)
    assert (target / "inside").read_bytes() == b"kept"
    assert _temps(tmp_path) == []
