"""Stand-ins packaged as single-file executables for hosts (zipapps), so `apply --binaries` ships them.

On a host they find aiohttp, PyYAML and kubesmith's registry in the kubesmith runtime bundle
that apply installs (/usr/local/lib/kubesmith/current).
"""

from __future__ import annotations

import zipapp
from pathlib import Path

STANDINS = Path(__file__).parent / "standins"
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy")
_MAIN = """import os, sys
sys.path.insert(1, "/usr/local/lib/kubesmith/current")
os.environ.setdefault("STANDIN_KUBERNETES_VERSION", {version!r})
from standin import main
sys.exit(main({binary!r}))
"""


def build_standin_binaries(dest: Path, minor: str) -> Path:
    """One zipapp per Kubernetes binary in `dest`, checking flags as Kubernetes `minor` would."""
    dest.mkdir(parents=True, exist_ok=True)
    for binary in BINARIES:
        source = dest / f".{binary}.src"
        source.mkdir(exist_ok=True)
        (source / "standin.py").write_bytes((STANDINS / "standin.py").read_bytes())
        (source / "__main__.py").write_text(_MAIN.format(version=minor, binary=binary))
        zipapp.create_archive(source, dest / binary, interpreter="/usr/bin/python3")
    return dest
