"""Hostile paths, files and operator-side state: each input ends, quickly, in one clear error (located
`spec.x.y (file:line:col)` where it comes from the cluster file) and the right exit code, or is
handled correctly where it is legitimate; never a traceback, a hang or a silent accept.

- directories kubesmith takes over (data, state, snapshot and audit-log directories) are never
  system directories, never hold one, never lie in /proc, /sys or /dev, and never overlap;
- files the cluster file or the command line names (image archives, SSH settings, keys, settings,
  snapshots) are regular files of bounded size and of the expected kind;
- `reset` and `render` change nothing outside what kubesmith made; the state directory is a directory
  no link leads out of; a full output device is one line;
- token lifetimes are bounded, a damaged token store is named and repaired by `token repair`, and
  user text is printed without terminal control characters.

Each case runs in this process under an alarm (`bounded`): a FIFO or device that blocks fails the
test instead of hanging it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ca_support import ca_args, make_ca
from conftest import ROOT, Result, kubesmith
from hostile_support import BOUND_SECONDS, assert_one_located_error, bounded
from hostile_support import warm  # noqa: F401 (the module's autouse fixture)
from kubesmith.images import ImageFile, oci_archive

BASE = """apiVersion: kubesmith.io/v1alpha1
kind: Cluster
metadata:
  name: demo
spec:
  kubernetesVersion: "1.33.2"
  hosts:
    - {name: h1, address: 10.0.0.11, roles: [control-plane, etcd, node]}
"""
SLOW_BOUND = 30.0  # commands that issue a PKI (render) or build a plan


def spec_text(components: str = "", extra: str = "") -> str:
    """BASE with `components` (lines under `components:`, 4 spaces in) and `extra` (spec-level lines)."""
    text = BASE + extra
    return text + ("  components:\n" + components if components else "")


def validate_text(tmp_path: Path, name: str, text: str) -> Result:
    (tmp_path / name).write_text(text)
    with bounded(BOUND_SECONDS):
        return kubesmith("validate", name, cwd=tmp_path)


def assert_clean_failure(result: Result, code: int, *fragments: str) -> None:
    """The exit code, every fragment on stderr, no traceback, and a single error line."""
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and "TookTooLong" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    for fragment in fragments:
        assert fragment in errors[0], result.stderr


# ---- directories kubesmith takes over: system directories ------------------------------------------

SYSTEM_VALUES = ["/", "/etc", "/usr", "/bin", "/sbin", "/boot", "/lib", "/lib64", "/var", "/var/lib", "/var/log",
                 "/home", "/root", "/tmp", "/opt", "/srv", "/mnt", "/media", "/run", "/usr/local",
                 "/usr/local/bin", "/etc/systemd", "/etc/systemd/system", "/var/lib/systemd", "/usr/lib"]

# option -> (the YAML line under components, the option's path)
DIRECTORY_OPTIONS = {
    "etcd.dataDir": ("    etcd: {{dataDir: {v}}}\n", "spec.components.etcd.dataDir"),
    "kubelet.rootDir": ("    kubelet: {{rootDir: {v}}}\n", "spec.components.kubelet.rootDir"),
    "containerRuntime.rootDir": ("    containerRuntime: {{rootDir: {v}}}\n", "spec.components.containerRuntime.rootDir"),
    "containerRuntime.stateDir": ("    containerRuntime: {{stateDir: {v}}}\n",
                                  "spec.components.containerRuntime.stateDir"),
    "etcd.snapshots.directory": ("    etcd: {{snapshots: {{directory: {v}}}}}\n",
                                 "spec.components.etcd.snapshots.directory"),
}


@pytest.mark.parametrize("value", SYSTEM_VALUES)
def test_a_system_directory_as_etcd_data_is_refused(value: str, tmp_path: Path) -> None:
    line, where = DIRECTORY_OPTIONS["etcd.dataDir"]
    result = validate_text(tmp_path, "path-system.yaml", spec_text(line.format(v=value)))
    fragment = f"{value} is a system directory" if value != "/" else "/ is a system directory"
    assert_one_located_error(result, "path-system.yaml", where, fragment)
    assert "`kubesmith reset` deletes data directories" in result.stderr


@pytest.mark.parametrize("option", sorted(DIRECTORY_OPTIONS))
@pytest.mark.parametrize("value", ["/var/lib", "/", "/usr/local/bin"])
def test_every_directory_option_refuses_system_directories(option: str, value: str, tmp_path: Path) -> None:
    line, where = DIRECTORY_OPTIONS[option]
    result = validate_text(tmp_path, "path-option.yaml", spec_text(line.format(v=value)))
    assert_one_located_error(result, "path-option.yaml", where, f"{value} is a system directory")


@pytest.mark.parametrize(("value", "fragment"), [
    ("/proc/kubelet", "lies inside /proc, a kernel file system"),
    ("/sys/fs/etcd", "lies inside /sys, a kernel file system"),
    ("/dev/shm/etcd", "lies inside /dev, a kernel file system"),
    ("/home/alice/etcd", "lies inside /home, where users keep their files"),
    ("/root/etcd", "lies inside /root, where users keep their files"),
    ("/srv/x", None),  # legitimate: inside a directory made to hold others' (/usr/lib/x is not: see below)
])
def test_kernel_file_systems_are_refused(value: str, fragment: str | None, tmp_path: Path) -> None:
    result = validate_text(tmp_path, "path-kernel.yaml", spec_text(f"    etcd: {{dataDir: {value}}}\n"))
    if fragment is None:
        assert result.returncode == 0, result.stderr
    else:
        assert_one_located_error(result, "path-kernel.yaml", "spec.components.etcd.dataDir", fragment)


@pytest.mark.parametrize(("value", "fragment"), [
    ("/var/log/audit.log", "/var/log is a system directory: kubesmith hands the directory of this file"),
    ("/audit.log", "/ is a system directory"),
    ("/tmp/audit.log", "/tmp is a system directory"),
    ("/proc/audit.log", "/proc is a system directory"),
])
def test_the_audit_log_directory_is_not_a_system_directory(value: str, fragment: str, tmp_path: Path) -> None:
    """tmpfiles.d hands the audit log's directory to the API server's user: /var/log must never be it."""
    text = spec_text(f"    apiserver: {{auditLog: {{path: {value}}}}}\n")
    result = validate_text(tmp_path, "path-audit.yaml", text)
    assert_one_located_error(result, "path-audit.yaml", "spec.components.apiserver.auditLog.path", fragment)


def test_a_directory_holding_a_system_directory_is_refused(tmp_path: Path) -> None:
    result = validate_text(tmp_path, "path-holds.yaml", spec_text("    kubelet: {rootDir: /usr/local/lib/../lib}\n"))
    assert result.returncode == 1  # not normalised: said as such
    result = validate_text(tmp_path, "path-holds.yaml", spec_text("    kubelet: {rootDir: /etc/systemd}\n"))
    assert_one_located_error(result, "path-holds.yaml", "spec.components.kubelet.rootDir", "is a system directory")


# ---- directories kubesmith takes over: overlaps ------------------------------------------------------

OVERLAPS = {
    "path-snapshots-in-data": ("    etcd: {dataDir: /srv/etcd, snapshots: {directory: /srv/etcd/snapshots}}\n",
                               "spec.components.etcd.snapshots.directory",
                               "overlaps /srv/etcd, the state directory of spec.components.etcd.dataDir"),
    "path-data-around-snapshots": ("    etcd: {dataDir: /var/backups/kubesmith}\n", "spec.components.etcd.dataDir",
                                   "overlaps /var/backups/kubesmith/etcd"),
    "path-audit-in-kubelet": ("    apiserver: {auditLog: {path: /var/lib/kubelet/audit/audit.log}}\n",
                              "spec.components.apiserver.auditLog.path",
                              "the state directory of spec.components.kubelet.rootDir"),
    "path-kubelet-in-kubesmith-etc": ("    kubelet: {rootDir: /etc/kubernetes/kubelet}\n",
                                      "spec.components.kubelet.rootDir",
                                      "overlaps /etc/kubernetes, kubesmith's configuration and PKI"),
    "path-etcd-is-kubesmith-state": ("    etcd: {dataDir: /var/lib/kubesmith}\n", "spec.components.etcd.dataDir",
                                     "overlaps /var/lib/kubesmith"),
    "path-containerd-state-in-kubesmith-logs": ("    containerRuntime: {stateDir: /var/log/kubernetes/containerd}\n",
                                                "spec.components.containerRuntime.stateDir",
                                                "overlaps /var/log/kubernetes, kubesmith's logs"),
    "path-containerd-around-kubelet": ("    containerRuntime: {rootDir: /srv/k}\n    kubelet: {rootDir: /srv/k/kubelet}\n",
                                       "spec.components.containerRuntime.rootDir",
                                       "the state directory of spec.components.kubelet.rootDir"),
    "path-audit-is-kubesmith-etc": ("    apiserver: {auditLog: {path: /etc/kubesmith/audit.log}}\n",
                                    "spec.components.apiserver.auditLog.path", "kubesmith's settings"),
}


@pytest.mark.parametrize("stem", sorted(OVERLAPS))
def test_directories_never_overlap(stem: str, tmp_path: Path) -> None:
    components, where, fragment = OVERLAPS[stem]
    result = validate_text(tmp_path, f"{stem}.yaml", spec_text(components))
    assert_one_located_error(result, f"{stem}.yaml", where, fragment)


# ---- paths on the hosts that kubesmith uses without taking them over --------------------------------

@pytest.mark.parametrize(("option", "value"), [
    ("binary", "/usr/bin"), ("socket", "/run"), ("cniConfDir", "/etc"), ("cniBinDir", "/usr/lib"),
    ("socket", "/proc/containerd.sock"),
])
def test_host_paths_are_no_system_directory(option: str, value: str, tmp_path: Path) -> None:
    result = validate_text(tmp_path, "path-host.yaml", spec_text(f"    containerRuntime: {{{option}: {value}}}\n"))
    assert_one_located_error(result, "path-host.yaml", f"spec.components.containerRuntime.{option}",
                             "system directory" if not value.startswith("/proc/") else "kernel file system")


LEGITIMATE = {
    "own-data-disk": "    etcd: {dataDir: /data/etcd, snapshots: {directory: /data/etcd-snapshots}}\n",
    "under-srv": "    etcd: {dataDir: /srv/etcd}\n    kubelet: {rootDir: /srv/kubelet}\n",
    "mounted-disk": "    containerRuntime: {rootDir: /mnt/disk1/containerd}\n",
    "audit-elsewhere": "    apiserver: {auditLog: {path: /var/log/kube-audit/audit.log}}\n",
    "opt-kubelet": "    kubelet: {rootDir: /opt/kubelet}\n",
    "sibling-names": "    etcd: {dataDir: /var/lib/etcd-main}\n    kubelet: {rootDir: /var/lib/etcd-main2}\n",
}


@pytest.mark.parametrize("stem", sorted(LEGITIMATE))
def test_legitimate_directories_are_accepted(stem: str, tmp_path: Path) -> None:
    result = validate_text(tmp_path, f"{stem}.yaml", spec_text(LEGITIMATE[stem]))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{stem}.yaml: valid"), result.stdout


# ---- the tree rule: inside a system directory that holds no one else's (audit 32, A01-A08, A15-A16, A21-A22)

INSIDE_SYSTEM = {
    "etc-passwd": ("etcd.dataDir", "/etc/passwd", "/etc/passwd lies inside /etc, a system directory"),
    "libc": ("etcd.dataDir", "/usr/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu lies inside /usr/lib, a system"),
    "lib-modules": ("kubelet.rootDir", "/lib/modules", "/lib/modules (that is /usr/lib/modules) is a system directory"),
    "lib-systemd": ("kubelet.rootDir", "/lib/systemd", "/lib/systemd (that is /usr/lib/systemd) is a system directory"),
    "vendor-units": ("containerRuntime.rootDir", "/usr/lib/systemd/system",
                     "/usr/lib/systemd/system lies inside /usr/lib/systemd, a system directory"),
    "boot-grub": ("etcd.snapshots.directory", "/boot/grub", "/boot/grub lies inside /boot, a system directory"),
    "etc-apt": ("etcd.dataDir", "/etc/apt", "/etc/apt is a system directory"),
    "sshd-config-d": ("etcd.dataDir", "/etc/ssh/sshd_config.d", "/etc/ssh/sshd_config.d lies inside /etc/ssh, a system"),
    "spool-cron": ("etcd.dataDir", "/var/spool/cron", "/var/spool/cron lies inside /var/spool, a system directory"),
    "lib-alias": ("etcd.dataDir", "/lib/etcd-data", "/lib/etcd-data (that is /usr/lib/etcd-data) lies inside /usr/lib"),
    "run-systemd": ("containerRuntime.stateDir", "/run/systemd/containerd", "lies inside /run/systemd, a system"),
    "var-lock-alias": ("containerRuntime.stateDir", "/var/lock/containerd",
                       "/var/lock/containerd (that is /run/lock/containerd) lies inside /run/lock"),
    "dpkg": ("kubelet.rootDir", "/var/lib/dpkg/kubelet", "lies inside /var/lib/dpkg, a system directory"),
    "var-spool": ("etcd.snapshots.directory", "/var/spool/etcd", "lies inside /var/spool, a system directory"),
    "usr-lib-x": ("etcd.dataDir", "/usr/lib/x", "/usr/lib/x lies inside /usr/lib, a system directory"),
}


@pytest.mark.parametrize("case", sorted(INSIDE_SYSTEM))
def test_a_directory_inside_a_system_tree_is_refused(case: str, tmp_path: Path) -> None:
    option, value, fragment = INSIDE_SYSTEM[case]
    line, where = DIRECTORY_OPTIONS[option]
    result = validate_text(tmp_path, "path-tree.yaml", spec_text(line.format(v=value)))
    assert_one_located_error(result, "path-tree.yaml", where, fragment)
    assert "`kubesmith reset` deletes data directories" in result.stderr


@pytest.mark.parametrize(("value", "fragment"), [
    ("/etc/cron.d/audit", "/etc/cron.d is a system directory: kubesmith hands the directory of this file"),
    ("/etc/cron.d/kube/audit.log", "/etc/cron.d/kube lies inside /etc/cron.d, a system directory"),
    ("/usr/share/audit/audit.log", "/usr/share/audit lies inside /usr/share, a system directory"),
])
def test_the_audit_log_never_lies_in_a_system_tree(value: str, fragment: str, tmp_path: Path) -> None:
    result = validate_text(tmp_path, "path-audit-tree.yaml", spec_text(f"    apiserver: {{auditLog: {{path: {value}}}}}\n"))
    assert_one_located_error(result, "path-audit-tree.yaml", "spec.components.apiserver.auditLog.path", fragment)


def test_the_containerd_socket_is_never_a_system_file(tmp_path: Path) -> None:
    """containerd unlinks what is at its socket path: /etc/shadow would be gone (audit 32, A18)."""
    result = validate_text(tmp_path, "path-socket.yaml", spec_text("    containerRuntime: {socket: /etc/shadow}\n"))
    assert_one_located_error(result, "path-socket.yaml", "spec.components.containerRuntime.socket",
                             "/etc/shadow lies inside /etc, a system directory")
    assert "containerd replaces the file at its socket path" in result.stderr


# ---- overlaps in canonical form, and with the CNI directories (audit 32, A09-A12, A23-A24) -----------

CANONICAL_OVERLAPS = {
    "kubelet-in-cni-conf": ("    kubelet: {rootDir: /etc/cni/net.d}\n", "spec.components.kubelet.rootDir",
                            "/etc/cni/net.d lies inside /etc/cni, a system directory"),
    "etcd-in-cni-bin": ("    etcd: {dataDir: /usr/lib/cni}\n", "spec.components.etcd.dataDir",
                        "/usr/lib/cni lies inside /usr/lib, a system directory"),
    "kubelet-around-cni-bin": ("    containerRuntime: {cniBinDir: /opt/cni/bin}\n    kubelet: {rootDir: /opt/cni}\n",
                               "spec.components.containerRuntime.cniBinDir",
                               "/opt/cni/bin overlaps /opt/cni, the state directory of spec.components.kubelet.rootDir"),
    "etcd-is-cni-conf": ("    containerRuntime: {cniConfDir: /srv/cni}\n    etcd: {dataDir: /srv/cni}\n",
                         "spec.components.containerRuntime.cniConfDir",
                         "/srv/cni overlaps /srv/cni, the state directory of spec.components.etcd.dataDir"),
    "cni-conf-is-kubesmith-etc": ("    containerRuntime: {cniConfDir: /etc/kubernetes}\n",
                                  "spec.components.containerRuntime.cniConfDir",
                                  "overlaps /etc/kubernetes, kubesmith's configuration and PKI"),
    "cni-bin-is-etcd-data": ("    containerRuntime: {cniBinDir: /var/lib/etcd}\n",
                             "spec.components.containerRuntime.cniBinDir",
                             "/var/lib/etcd overlaps /var/lib/etcd, the state directory of "
                             "spec.components.etcd.dataDir"),
    "var-run-alias": ("    kubelet: {rootDir: /var/run/containerd}\n", "spec.components.kubelet.rootDir",
                      "/var/run/containerd (that is /run/containerd) overlaps /run/containerd, the state directory "
                      "of spec.components.containerRuntime.stateDir"),
    "var-run-alias-around": ("    etcd: {dataDir: /var/run/kubesmith-etcd}\n"
                             "    containerRuntime: {stateDir: /run/kubesmith-etcd/containerd}\n",
                             "spec.components.containerRuntime.stateDir",
                             "/run/kubesmith-etcd/containerd overlaps /var/run/kubesmith-etcd (that is "
                             "/run/kubesmith-etcd), the state directory of spec.components.etcd.dataDir"),
}


@pytest.mark.parametrize("stem", sorted(CANONICAL_OVERLAPS))
def test_overlaps_are_found_in_canonical_form_and_with_cni_directories(stem: str, tmp_path: Path) -> None:
    components, where, fragment = CANONICAL_OVERLAPS[stem]
    result = validate_text(tmp_path, f"{stem}.yaml", spec_text(components))
    assert_one_located_error(result, f"{stem}.yaml", where, fragment)


# ---- directories given through extraArgs and extraConfig (audit 32, K19, K21, K23, K24) --------------

EXTRA_DIRECTORY_CASES = {
    "etcd-wal-dir-var-lib": ("    etcd: {extraArgs: {wal-dir: /var/lib}}\n", "spec.components.etcd.extraArgs.wal-dir",
                             "/var/lib is a system directory: etcd writes into this directory"),
    "etcd-wal-dir-in-etc": ("    etcd: {extraArgs: {wal-dir: /etc/etcd-wal}}\n",
                            "spec.components.etcd.extraArgs.wal-dir", "/etc/etcd-wal lies inside /etc, a system"),
    "etcd-wal-dir-in-kubelet": ("    etcd: {extraArgs: {wal-dir: /var/lib/kubelet/wal}}\n",
                                "spec.components.etcd.extraArgs.wal-dir",
                                "overlaps /var/lib/kubelet, the state directory of spec.components.kubelet.rootDir"),
    "etcd-wal-dir-relative": ("    etcd: {extraArgs: {wal-dir: wal}}\n", "spec.components.etcd.extraArgs.wal-dir",
                              "'wal' must be an absolute path"),
    "containerd-root": ("    containerRuntime: {extraConfig: {root: /}}\n",
                        "spec.components.containerRuntime.extraConfig.root",
                        "kubesmith sets root from spec.components.containerRuntime.rootDir: set that option instead"),
    "containerd-state": ("    containerRuntime: {extraConfig: {state: /run}}\n",
                         "spec.components.containerRuntime.extraConfig.state",
                         "kubesmith sets state from spec.components.containerRuntime.stateDir"),
    "containerd-cni-bin": ("    containerRuntime: {extraConfig: {plugins: {io.containerd.grpc.v1.cri: "
                           "{cni: {bin_dir: /usr/bin}}}}}\n",
                           "spec.components.containerRuntime.extraConfig.plugins.io.containerd.grpc.v1.cri.cni.bin_dir",
                           "from spec.components.containerRuntime.cniBinDir"),
    "kubelet-static-pods": ("    kubelet: {extraConfig: {staticPodPath: /etc}}\n",
                            "spec.components.kubelet.extraConfig.staticPodPath", "/etc is a system directory"),
    "kubelet-volume-plugins": ("    kubelet: {extraConfig: {volumePluginDir: /usr/lib}}\n",
                               "spec.components.kubelet.extraConfig.volumePluginDir", "/usr/lib is a system directory"),
    "kubelet-volume-plugins-flag": ("    kubelet: {extraArgs: {volume-plugin-dir: /lib}}\n",
                                    "spec.components.kubelet.extraArgs.volume-plugin-dir", "/lib is a system directory"),
    "kubelet-cert-dir": ("    kubelet: {extraArgs: {cert-dir: /etc/ssl/kubelet}}\n",
                         "spec.components.kubelet.extraArgs.cert-dir",
                         "/etc/ssl/kubelet lies inside /etc/ssl, a system directory: kubelet writes into this"),
}


@pytest.mark.parametrize("stem", sorted(EXTRA_DIRECTORY_CASES))
def test_directories_in_extra_args_and_config_are_checked(stem: str, tmp_path: Path) -> None:
    components, where, fragment = EXTRA_DIRECTORY_CASES[stem]
    result = validate_text(tmp_path, f"{stem}.yaml", spec_text(components))
    assert_one_located_error(result, f"{stem}.yaml", where, fragment)


TREE_LEGITIMATE = {
    "var-lib-etcd": "    etcd: {dataDir: /var/lib/etcd}\n",
    "data-etcd": "    etcd: {dataDir: /data/etcd}\n",
    "srv-etcd": "    etcd: {dataDir: /srv/etcd, snapshots: {directory: /srv/etcd-snapshots}}\n",
    "opt-x": "    kubelet: {rootDir: /opt/x}\n",
    "run-containerd": "    containerRuntime: {stateDir: /run/containerd, socket: /run/containerd/containerd.sock}\n",
    "audit-default-path": "    apiserver: {auditLog: {path: /var/log/kubernetes/audit/audit.log}}\n",
    # (/tmp and /var/tmp are refused as every service path is: test_hostile_round5.py)
    "mnt": "    etcd: {dataDir: /mnt/disk1/etcd}\n    kubelet: {rootDir: /mnt/disk2/kubelet}\n",
    "snapshots-default-parent": "    etcd: {snapshots: {directory: /var/backups/kubesmith/etcd-main}}\n",
    "cni-usual-places": "    containerRuntime: {cniBinDir: /opt/cni/bin, cniConfDir: /etc/cni/net.d}\n",
    "cni-conf-in-bin": "    containerRuntime: {cniBinDir: /opt/cni, cniConfDir: /opt/cni/net.d}\n",
    # what kube-up, kubespray and ingress guides write (a review found them refused)
    "var-etcd-data": "    etcd: {dataDir: /var/etcd/data, snapshots: {directory: /var/backups/etcd}}\n",
    "wal-in-own-data-dir": "    etcd: {dataDir: /var/lib/etcd, extraArgs: {wal-dir: /var/lib/etcd/wal}}\n",
    "cni-conf-under-kubesmith-etc": "    containerRuntime: {cniConfDir: /etc/kubernetes/cni/net.d}\n",
    "extra-directories": ("    etcd: {extraArgs: {wal-dir: /srv/etcd-wal}}\n"
                          "    kubelet: {extraArgs: {cert-dir: /var/lib/kubelet/pki}, extraConfig: {staticPodPath: "
                          "/etc/kubernetes/manifests, volumePluginDir: /usr/libexec/kubernetes/kubelet-plugins}}\n"),
}


@pytest.mark.parametrize("stem", sorted(TREE_LEGITIMATE))
def test_legitimate_directories_pass_the_tree_rule(stem: str, tmp_path: Path) -> None:
    result = validate_text(tmp_path, f"{stem}.yaml", spec_text(TREE_LEGITIMATE[stem]))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{stem}.yaml: valid"), result.stdout


@pytest.mark.parametrize(("path", "canonical"), [
    ("/var/run/x", "/run/x"), ("/var/lock", "/run/lock"), ("/lib/modules", "/usr/lib/modules"), ("/bin", "/usr/bin"),
    ("/sbin/x/", "/usr/sbin/x"), ("/lib64", "/usr/lib64"), ("//etc//passwd/", "/etc/passwd"),
    ("/var/lib/kubesmith/../../../etc", "/etc"), ("/library", "/library"), ("/var/running", "/var/running"),
])
def test_paths_are_compared_in_canonical_form(path: str, canonical: str) -> None:
    from kubesmith.systemdirs import canonical as canonical_of

    assert canonical_of(path) == canonical


# ---- image archives named in the cluster file ------------------------------------------------------

def valid_oci(path: Path) -> Path:
    path.write_bytes(oci_archive("example.local/tool:1", (ImageFile("/tool", b"\x7fELF", 0o755),), ("/tool",)))
    return path


def tar_of(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def valid_docker(path: Path) -> Path:
    manifest = [{"Config": "c.json", "RepoTags": ["example.local/d:1"], "Layers": ["l/layer.tar"]}]
    return tar_of(path, {"manifest.json": json.dumps(manifest).encode(), "c.json": b"{}", "l/layer.tar": b""})


def make_file(kind: str, tmp_path: Path) -> Path:
    """A file of `kind` under tmp_path (or a device)."""
    target = tmp_path / f"{kind}.tar"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
    elif kind == "text":
        target.write_text("hello\n")
    elif kind == "empty":
        target.write_bytes(b"")
    elif kind == "truncated":
        target.write_bytes(valid_oci(tmp_path / "whole.tar").read_bytes()[:700])
    elif kind == "no-manifest":
        tar_of(target, {"etc/passwd": b"root:x:0:0\n"})
    elif kind == "index-not-json":
        tar_of(target, {"index.json": b"{not json", "oci-layout": b"{}"})
    elif kind == "index-missing-blob":
        index = {"schemaVersion": 2, "manifests": [{"digest": "sha256:" + "a" * 64}]}
        tar_of(target, {"index.json": json.dumps(index).encode()})
    elif kind == "index-not-a-list":
        tar_of(target, {"index.json": b'{"manifests": 7}'})
    elif kind == "index-empty":
        tar_of(target, {"index.json": b'{"manifests": []}'})
    elif kind == "docker-missing-layer":
        manifest = [{"Config": "c.json", "RepoTags": ["x:1"], "Layers": ["gone/layer.tar"]}]
        tar_of(target, {"manifest.json": json.dumps(manifest).encode(), "c.json": b"{}"})
    elif kind == "manifest-a-string":
        tar_of(target, {"manifest.json": b'"just text"'})
    elif kind == "huge-index":
        tar_of(target, {"index.json": b" " * (5 << 20)})
    elif kind == "gzip":
        import gzip
        target.write_bytes(gzip.compress(valid_oci(tmp_path / "whole.tar").read_bytes()))
    elif kind == "sparse-9-gib":  # no disk used: only the size counts
        with open(target, "wb") as file:
            file.truncate(9 << 30)
    elif kind in ("deep-index", "deep-manifest"):  # RecursionError in the JSON decoder, once
        tar_of(target, {kind.split("-")[1] + ".json": b"[" * 100_000 + b"]" * 100_000})
    elif kind in ("longname-huge", "pax-huge"):  # tarfile read the claimed 1 GiB header whole (1.6 GB RSS)
        info = tarfile.TarInfo("././@LongLink")
        info.size, info.type = 1 << 30, tarfile.GNUTYPE_LONGNAME if kind == "longname-huge" else tarfile.XHDTYPE
        header = info._create_header(info.get_info(), tarfile.GNU_FORMAT, "utf-8", "surrogateescape")
        with open(target, "wb") as file:
            file.write(header)
            file.truncate(len(header) + (1 << 30) + 1024)
    elif kind.startswith("/dev/"):
        return Path(kind)
    return target


ARCHIVE_PROBLEMS = {
    "fifo": "not a regular file (a FIFO)",
    "/dev/zero": "not a regular file (a character device)",
    "/dev/urandom": "not a regular file (a character device)",
    "directory": "Is a directory",
    "text": "not a tar file",
    "empty": "not a tar file",
    "truncated": "not an image archive",
    "no-manifest": "no index.json or manifest.json",
    "index-not-json": "a malformed index or manifest",
    "index-missing-blob": "which the archive lacks",
    "index-not-a-list": "lists no image",
    "index-empty": "lists no image",
    "docker-missing-layer": "names 'gone/layer.tar', which the archive lacks",
    "manifest-a-string": "manifest.json lists no image",
    "huge-index": "index.json is not a file of at most",
    "gzip": "not a tar file",
    "sparse-9-gib": "larger than 8 GiB (9 GiB); expected an image archive",
    "deep-index": "its index or manifest is nested too deeply (more than 64 levels)",
    "deep-manifest": "its index or manifest is nested too deeply (more than 64 levels)",
    "longname-huge": "a header or member of 1,073,741,824 bytes read at once",
    "pax-huge": "a header or member of 1,073,741,824 bytes read at once",
}


@pytest.mark.parametrize("kind", sorted(ARCHIVE_PROBLEMS))
def test_an_image_archive_in_the_spec_is_a_regular_file_holding_an_image(kind: str, tmp_path: Path) -> None:
    path = make_file(kind, tmp_path)
    text = spec_text(f"    containerRuntime: {{images: [{path}]}}\n")
    result = validate_text(tmp_path, "file-image.yaml", text)
    assert_one_located_error(result, "file-image.yaml", "spec.components.containerRuntime.images[0]",
                             ARCHIVE_PROBLEMS[kind])


@pytest.mark.parametrize("maker", [valid_oci, valid_docker])
def test_real_image_archives_are_accepted(maker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = maker(tmp_path / "image.tar")
    result = validate_text(tmp_path, "file-good.yaml", spec_text(f"    containerRuntime: {{images: [{path}]}}\n"))
    assert result.returncode == 0, result.stderr


def test_a_missing_archive_is_a_located_warning(tmp_path: Path) -> None:
    """The cluster file is read on nodes too (join --spec), which have no archives: a warning there,
    and render refuses it with the option named."""
    text = spec_text(f"    containerRuntime: {{images: [{tmp_path / 'gone.tar'}]}}\n")
    result = validate_text(tmp_path, "file-missing.yaml", text)
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("warning: spec.components.containerRuntime.images[0]: ")
    assert "does not exist on this machine" in result.stderr and "(file-missing.yaml:" in result.stderr
    with bounded(SLOW_BOUND):
        rendered = kubesmith("render", "file-missing.yaml", "--out-dir", "out", "--state-dir", "state", cwd=tmp_path)
    assert rendered.returncode == 5, rendered.stderr
    assert "Traceback" not in rendered.stderr and "spec.components.containerRuntime.images" in rendered.stderr


def test_two_archives_of_one_file_name_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = valid_oci(tmp_path / "a" / "x.tar"), valid_oci(tmp_path / "b" / "x.tar")
    result = validate_text(tmp_path, "file-twice.yaml", spec_text(f"    containerRuntime: {{images: [{first}, "
                                                                  f"{second}]}}\n"))
    assert_one_located_error(result, "file-twice.yaml", "spec.components.containerRuntime.images[1]",
                             "the file name of images[0]")


def test_an_operator_archive_lands_root_only_on_the_nodes(tmp_path: Path) -> None:
    """It was 0644 on every node, whatever the source's mode: now 0600 (root imports it)."""
    archive = valid_oci(tmp_path / "private.tar")
    archive.chmod(0o600)
    (tmp_path / "c.yaml").write_text(spec_text(f"    containerRuntime: {{images: [{archive}]}}\n"))
    with bounded(SLOW_BOUND):
        result = kubesmith("render", "c.yaml", "--out-dir", "out", "--state-dir", "state", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    placed = tmp_path / "out" / "h1" / "var/lib/kubesmith/images/private.tar"
    assert placed.read_bytes() == archive.read_bytes()
    assert placed.stat().st_mode & 0o777 == 0o600
    entries = json.loads((tmp_path / "out" / "h1" / "manifest.json").read_text())["files"]
    assert {e["path"]: e["mode"] for e in entries}["/var/lib/kubesmith/images/private.tar"] == "0600"


# ---- the coredns binary named in the cluster file ---------------------------------------------------

def coredns_file(kind: str, tmp_path: Path) -> Path:
    """A file of `kind` to name as spec.components.coreDns.binary (sparse where it is large)."""
    target = tmp_path / f"coredns-{kind}"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
    elif kind == "private-text":  # /etc/shadow-like: readable here (root), but no executable
        target.write_text("root:$6$salt$hash:19000:0:99999:7:::\n")
        target.chmod(0o600)
    elif kind == "sparse-elf-600-mib":
        with open(target, "wb") as file:
            file.write(b"\x7fELF")
            file.truncate(600 << 20)
    elif kind.startswith(("/dev/", "/proc/")):
        return Path(kind)
    return target


COREDNS_PROBLEMS = {
    "fifo": "not a regular file (a FIFO); expected a static coredns executable",
    "/dev/zero": "not a regular file (a character device)",
    "directory": "is a directory; expected a static coredns executable",
    "private-text": "is not an executable (ELF) file",
    "sparse-elf-600-mib": "larger than 512 MiB (600 MiB)",
}


@pytest.mark.parametrize("kind", sorted(COREDNS_PROBLEMS))
def test_the_coredns_binary_is_checked_by_validate(kind: str, tmp_path: Path) -> None:
    """validate did not look at it, and render read it whole: a FIFO hung, /dev/zero filled the memory."""
    path = coredns_file(kind, tmp_path)
    result = validate_text(tmp_path, "dns.yaml", spec_text(f"    coreDns: {{binary: '{path}'}}\n"))
    assert_one_located_error(result, "dns.yaml", "spec.components.coreDns.binary", COREDNS_PROBLEMS[kind])


def test_render_refuses_a_fifo_as_the_coredns_binary_located(tmp_path: Path) -> None:
    path = coredns_file("fifo", tmp_path)
    (tmp_path / "c.yaml").write_text(spec_text(f"    coreDns: {{binary: '{path}'}}\n"))
    with bounded(SLOW_BOUND):
        result = kubesmith("render", "c.yaml", "--out-dir", "out", "--state-dir", "state", cwd=tmp_path)
    assert_one_located_error(result, "c.yaml", "spec.components.coreDns.binary", "a FIFO")


def test_a_coredns_binary_gone_by_render_time_is_a_located_render_error(tmp_path: Path) -> None:
    """Missing is a warning (nodes read the cluster file too); render names the option and its place."""
    (tmp_path / "c.yaml").write_text(spec_text(f"    coreDns: {{binary: '{tmp_path / 'gone'}'}}\n"))
    with bounded(SLOW_BOUND):
        result = kubesmith("render", "c.yaml", "--out-dir", "out", "--state-dir", "state", cwd=tmp_path)
    assert result.returncode == 5 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("warning: spec.components.coreDns.binary: "), result.stderr
    last = result.stderr.splitlines()[-1]
    assert "spec.components.coreDns.binary: " in last and last.endswith("(c.yaml:10:15)"), result.stderr


# ---- kernel interfaces that look like regular files (/proc/kmsg: size 0, every read blocks) ---------------

needs_kmsg = pytest.mark.skipif(not os.access("/proc/kmsg", os.R_OK), reason="/proc/kmsg is not readable here")


@needs_kmsg
@pytest.mark.parametrize("where", ["cluster file", "add-on", "image archive"])
def test_proc_kmsg_is_refused_without_blocking(where: str, tmp_path: Path) -> None:
    """Reading it waits for the next kernel message: the reader keeps O_NONBLOCK and fails instead. (When
    messages are pending they are read, and are no YAML or tar: an error too, just another one.)"""
    if where == "cluster file":
        with bounded(BOUND_SECONDS):
            result = kubesmith("validate", "/proc/kmsg")
        assert result.returncode in (1, 3) and "Traceback" not in result.stderr, result.stderr
        assert "/proc/kmsg" in result.stderr.splitlines()[0] or result.returncode == 1, result.stderr
        return
    text = spec_text("    containerRuntime: {images: [/proc/kmsg]}\n") if where == "image archive" else \
        spec_text(extra="  addons: [/proc/kmsg]\n")
    result = validate_text(tmp_path, "kmsg.yaml", text)
    option = "spec.components.containerRuntime.images[0]" if where == "image archive" else "spec.addons[0]"
    assert_one_located_error(result, "kmsg.yaml", option, "/proc/kmsg")


# ---- the state directory: keys, certificates and the cluster record are read bounded ----------------------

@pytest.fixture(scope="module")
def rendered_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One state directory with every CA and key (rendered once: issuing a PKI takes seconds)."""
    work = tmp_path_factory.mktemp("state")
    (work / "c.yaml").write_text(spec_text("    coreDns: {enabled: false}\n"))
    with bounded(SLOW_BOUND):
        assert kubesmith("render", "c.yaml", "--out-dir", "out", "--state-dir", "state", cwd=work).returncode == 0
    return work / "state"


def _fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _sparse(path: Path) -> None:
    with open(path, "r+b") as file:
        file.truncate(5 << 30)


STATE_DAMAGE = {
    "cluster-record-fifo": ("pki/cluster.json", _fifo, "not a regular file (a FIFO); expected a cluster record"),
    "cluster-record-nested": ("pki/cluster.json", lambda path: path.write_bytes(b"[" * 100_000 + b"]" * 100_000),
                              "unreadable cluster record (nested too deeply (more than 64 levels))"),
    "ca-key-fifo": ("pki/cas/kubernetes-ca.key", _fifo, "not a regular file (a FIFO); expected a PEM private key"),
    "sa-key-sparse-5-gib": ("pki/sa.key", _sparse, "larger than 1 MiB (5 GiB); expected a PEM private key"),
    "leaf-certificate-fifo": ("pki/hosts/h1/apiserver.crt", _fifo, "a FIFO); expected a PEM certificate"),
    "etcd-record-fifo": ("etcd-members.json", _fifo, "a FIFO); expected kubesmith's record of the etcd members"),
    "etcd-record-damaged": ("etcd-members.json", lambda path: path.write_text('{"members": []}'),
                            "damaged: not kubesmith's record of the etcd members"),
    "removed-keys-nested": ("removed-keys.json", lambda path: path.write_bytes(b"[" * 100_000 + b"]" * 100_000),
                            "damaged: not the keys of removed hosts (nested too deeply"),
}


@pytest.mark.parametrize("damage", sorted(STATE_DAMAGE))
def test_a_state_file_render_cannot_read_is_one_line(damage: str, rendered_state: Path, tmp_path: Path) -> None:
    """Each was read whole: a FIFO hung render, a sparse 5 GiB key ran out of memory, deep JSON recursed."""
    name, spoil, fragment = STATE_DAMAGE[damage]
    shutil.copytree(rendered_state, tmp_path / "state", symlinks=True)
    spoil(tmp_path / "state" / name)
    (tmp_path / "c.yaml").write_text(spec_text("    coreDns: {enabled: false}\n"))
    with bounded(SLOW_BOUND):
        result = kubesmith("render", "c.yaml", "--out-dir", "out", "--state-dir", "state", cwd=tmp_path)
    assert_clean_failure(result, 3, f"state/{name}: ", fragment)


# ---- status, the agent and the CA service: the records they read back are read bounded ---------------

NESTED = b"[" * 100_000 + b"]" * 100_000


def _dev_zero(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/zero")


def _spoiler(kind: str):  # type: ignore[no-untyped-def]
    """A way to spoil a file: each hung, exhausted the memory or recursed when read whole."""
    def spoil(path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "fifo":
            _fifo(path)
        elif kind == "dev-zero":
            _dev_zero(path)
        elif kind == "sparse-5-gib":
            path.touch()
            _sparse(path)
        else:
            path.write_bytes(NESTED)
    return spoil


SPOILED = {"fifo": "not a regular file (a FIFO)", "dev-zero": "not a regular file (a character device)",
           "sparse-5-gib": "larger than 16 MiB (5 GiB)", "nested": "nested too deeply (more than 64 levels)"}


def _status(tmp_path: Path) -> Result:
    (tmp_path / "c.yaml").write_text(spec_text())
    with bounded(SLOW_BOUND):
        return kubesmith("status", "c.yaml", "--state-dir", "state", "--timeout", "1", cwd=tmp_path)


@pytest.mark.parametrize("kind", [*sorted(SPOILED), "services-a-list"])
def test_status_names_a_run_record_it_cannot_read(kind: str, tmp_path: Path) -> None:
    """The record of a `kubesmith run` (state/run/HOST/run.json) was read whole, and its shape trusted."""
    record = tmp_path / "state" / "run" / "h1" / "run.json"
    if kind == "services-a-list":
        record.parent.mkdir(parents=True)
        record.write_text('{"supervisor": 1, "services": [1, 2]}')
    else:
        _spoiler(kind)(record)
    fragment = {**SPOILED, "services-a-list": "damaged: not the record of a `kubesmith run` (its services are not",
                "dev-zero": "a symbolic link out of the state directory"}[kind]  # refused before any read
    assert_clean_failure(_status(tmp_path), 3, "state/run/h1/run.json: ", fragment)


@pytest.mark.parametrize("kind", ["fifo", "nested"])
def test_status_shows_an_agent_report_it_cannot_read_as_the_agents_error(kind: str, tmp_path: Path) -> None:
    """The report informs and decides nothing: status goes on, and says why the report is not shown."""
    run = tmp_path / "state" / "run" / "h1"
    run.mkdir(parents=True)
    (run / "run.json").write_text('{"supervisor": null, "services": {}}')
    _spoiler(kind)(run / "root" / "var/lib/kubesmith/agent/state.json")
    result = _status(tmp_path)
    assert result.returncode == 4 and "Traceback" not in result.stderr, result.stderr  # nothing runs: unhealthy
    assert "agent error: state/run/h1/root/var/lib/kubesmith/agent/state.json: " in result.stdout, result.stdout
    assert SPOILED[kind] in result.stdout.split("agent error: ")[1], result.stdout


@pytest.mark.parametrize("kind", sorted(SPOILED))
def test_the_agent_reads_its_own_files_bounded(kind: str, tmp_path: Path) -> None:
    from kubesmith.agent import report
    from kubesmith.agent.checkpoints import CheckpointError, CheckpointStore
    from kubesmith.agent.configloop import load_components

    spoil = _spoiler(kind)
    files = {name: tmp_path / name for name in ("state.json", "components.json")}
    store = CheckpointStore(tmp_path / "store")
    record = store.base / "kubelet" / "active.json"
    manifest = store.checkpoints_dir("kubelet") / ("0" * 64) / "manifest.json"
    for path in (*files.values(), record, manifest):
        spoil(path)
    with bounded(BOUND_SECONDS):
        for read in (report.read_state, load_components):
            path = files["state.json" if read is report.read_state else "components.json"]
            with pytest.raises(OSError, match=SPOILED[kind].replace("(", r"\(").replace(")", r"\)")) as caught:
                read(path)
            assert caught.value.filename == str(path)
        assert report.load_state(files["state.json"], "h1") == report.AgentState("h1")  # a fresh report
        with pytest.raises(CheckpointError, match=f"{record}: damaged record"):
            store.records("kubelet")
        with pytest.raises(CheckpointError, match="damaged checkpoint"):
            store.load("kubelet", "0" * 64)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "sparse-5-gib"])
@pytest.mark.parametrize("which", ["ca_key", "ca_cert", "tls_cert", "tls_key"])
def test_the_ca_service_reads_its_keys_and_certificates_bounded(which: str, kind: str, tmp_path: Path) -> None:
    from kubesmith.ca import server

    ca = make_ca(tmp_path / "ca")
    config = server.CaServiceConfig(ca.ca_cert, ca.ca_key, ca.tls_cert, ca.tls_key, tmp_path / "state")
    _spoiler(kind)(getattr(ca, which))
    fragment = {"fifo": "a FIFO", "dev-zero": "a character device", "sparse-5-gib": "larger than 1 MiB"}[kind]
    with bounded(BOUND_SECONDS), pytest.raises(OSError, match=fragment) as caught:
        if which.startswith("ca_"):
            server.CaService(config)
        server.server_context(config)
    assert caught.value.filename == str(getattr(ca, which))


def test_a_nested_ca_settings_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "ca-service.json").write_bytes(NESTED)
    with bounded(BOUND_SECONDS):
        result = kubesmith("token", "list", "--ca-config", str(tmp_path / "ca-service.json"))
    assert_clean_failure(result, 3, "ca-service.json: unreadable settings (nested too deeply")


# ---- lifetimes that become certificate dates ----------------------------------------------------------

@pytest.mark.parametrize(("command", "fragment"), [
    (["kubeconfig", "create", "c.yaml", "--ttl", "1000000000h", "--out", "k.yaml"], "at most 365 days"),
    (["kubeconfig", "create", "c.yaml", "--ttl", "366d", "--out", "k.yaml"], "at most 365 days"),
    (["ca", "serve", "--validity", "99999999d"], "at most 3650 days"),
])
def test_certificate_lifetimes_are_bounded_when_parsed(command: list[str], fragment: str, tmp_path: Path) -> None:
    """--ttl 1000000000h passed the parser and overflowed while issuing, after the role binding was made."""
    (tmp_path / "c.yaml").write_text(spec_text())
    result = kubesmith(*command, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    option = next(word for word in command if word in ("--ttl", "--validity"))
    assert f"Invalid value for '{option}'" in result.stderr, result.stderr
    assert fragment in result.stderr, result.stderr
    assert not (tmp_path / "k.yaml").exists()


# ---- image archives on the command line (`images import`) ------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "text", "no-manifest", "index-missing-blob", "sparse-9-gib",
                                  "deep-index", "pax-huge"])
def test_images_import_checks_each_archive_before_connecting(kind: str, tmp_path: Path) -> None:
    path = make_file(kind, tmp_path)
    (tmp_path / "c.yaml").write_text(spec_text())
    with bounded(SLOW_BOUND):
        result = kubesmith("images", "import", "c.yaml", str(path), "--known-hosts", str(tmp_path / "none"),
                           cwd=tmp_path)
    assert_clean_failure(result, 2, str(path), ARCHIVE_PROBLEMS[kind])


# ---- SSH settings files named in the cluster file ----------------------------------------------------

@pytest.mark.parametrize(("field", "kind", "fragment"), [
    ("identityFile", "fifo", "not a regular file (a FIFO)"),
    ("knownHostsFile", "/dev/zero", "not a regular file (a character device)"),
    ("configFile", "directory", "is a directory"),
    ("identityFile", "big", "larger than 1 MiB"),
])
def test_ssh_files_in_the_spec_are_regular_and_bounded(field: str, kind: str, fragment: str, tmp_path: Path) -> None:
    path = make_file(kind, tmp_path) if kind != "big" else tmp_path / "big"
    if kind == "big":
        path.write_bytes(b"#" * (2 << 20))
    result = validate_text(tmp_path, "file-ssh.yaml", spec_text(extra=f"  ssh: {{{field}: {path}}}\n"))
    assert_one_located_error(result, "file-ssh.yaml", f"spec.ssh.{field}", fragment)


def test_a_fifo_as_known_hosts_on_the_command_line_does_not_hang(tmp_path: Path) -> None:
    fifo = make_file("fifo", tmp_path)
    (tmp_path / "c.yaml").write_text(spec_text())
    with bounded(SLOW_BOUND):
        result = kubesmith("status", "c.yaml", "--known-hosts", str(fifo), "--state-dir", "state", cwd=tmp_path)
    assert_clean_failure(result, 3, str(fifo), "not a regular file (a FIFO)")


# ---- reset: never a path kubesmith did not make ------------------------------------------------------

@pytest.fixture
def no_ssh(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records any attempt to open an SSH transport (and makes it fail)."""
    from kubesmith.transport import ssh

    attempts: list[str] = []

    async def refuse(self):  # type: ignore[no-untyped-def]
        attempts.append("connect")
        raise AssertionError("an SSH connection was attempted")

    monkeypatch.setattr(ssh.SshTransport, "__aenter__", refuse)
    return attempts


@pytest.mark.parametrize(("components", "where"), [
    ("    etcd: {dataDir: /var/lib}\n", "spec.components.etcd.dataDir"),
    ("    kubelet: {rootDir: /}\n", "spec.components.kubelet.rootDir"),
    ("    containerRuntime: {rootDir: /home}\n", "spec.components.containerRuntime.rootDir"),
])
def test_reset_of_a_spec_naming_a_system_directory_fails_at_validation(components: str, where: str, tmp_path: Path,
                                                                       no_ssh: list[str]) -> None:
    (tmp_path / "reset-system.yaml").write_text(spec_text(components))
    with bounded(BOUND_SECONDS):
        result = kubesmith("reset", "reset-system.yaml", "--yes", "--known-hosts", "/dev/null", cwd=tmp_path)
    assert_one_located_error(result, "reset-system.yaml", where, "is a system directory")
    assert no_ssh == []


def test_reset_purge_refuses_a_state_directory_of_no_cluster(tmp_path: Path, no_ssh: list[str]) -> None:
    """--purge deleted any --state-dir, $HOME as well: now only one whose PKI records this cluster."""
    (tmp_path / "c.yaml").write_text(spec_text())
    victim = tmp_path / "home"
    victim.mkdir()
    (victim / "notes.txt").write_text("mine\n")
    result = kubesmith("reset", "c.yaml", "--yes", "--purge", "--state-dir", str(victim), cwd=tmp_path)
    assert_clean_failure(result, 2, "--purge", "not the state directory of cluster 'demo'", "no host was changed")
    assert (victim / "notes.txt").read_text() == "mine\n" and no_ssh == []


def test_reset_purge_refuses_another_clusters_state(tmp_path: Path, no_ssh: list[str]) -> None:
    (tmp_path / "c.yaml").write_text(spec_text())
    other = tmp_path / "other"
    (other / "pki").mkdir(parents=True)
    (other / "pki" / "cluster.json").write_text('{"cluster": "prod", "id": "x"}')
    result = kubesmith("reset", "c.yaml", "--yes", "--purge", "--state-dir", str(other), cwd=tmp_path)
    assert_clean_failure(result, 2, "records cluster 'prod'")
    assert other.is_dir() and no_ssh == []


@pytest.mark.parametrize("path", ["/var/lib", "/", "/etc", "relative/dir"])
def test_reset_refuses_a_system_directory_from_any_plan(path: str) -> None:
    """An applied spec from before these checks, or a manifest edited on the host, is refused as well."""
    from kubesmith.backends.day2 import Day2Error, check_removable

    class Host:
        name = "h1"

    with pytest.raises(Day2Error, match="refusing to delete .*no host was changed"):
        check_removable(Host(), ["/etc/kubernetes", path])  # type: ignore[arg-type]


@pytest.mark.parametrize("path", ["/etc/passwd", "//etc//apt/", "/var/lib/kubesmith/../../../etc", "/var/run",
                                  "/lib/modules", "/usr/lib/x86_64-linux-gnu", "/boot/grub", "/var/spool/cron",
                                  "/etc/cni/net.d", "/run/systemd/containerd"])
def test_reset_refuses_a_directory_the_policy_refuses_in_any_spelling(path: str) -> None:
    """The directories reset deletes pass the rule the spec's do, canonicalised (a manifest is not)."""
    from kubesmith.backends.day2 import Day2Error, check_removable

    class Host:
        name = "h1"

    with pytest.raises(Day2Error, match="refusing to delete .*no host was changed"):
        check_removable(Host(), ["/var/lib/etcd", path])  # type: ignore[arg-type]


@pytest.mark.parametrize("path", ["/etc/", "//usr/lib", "/var/lib/kubesmith/../..", "/proc/1/root", "/lib", "/var/run",
                                  "/etc/systemd/../systemd/system/", "/root/.ssh/authorized_keys"])
def test_reset_refuses_a_manifest_file_that_is_a_system_directory(path: str) -> None:
    from kubesmith.backends.day2 import Day2Error, check_removable

    class Host:
        name = "h1"

    with pytest.raises(Day2Error, match="refusing to delete .*no host was changed"):
        check_removable(Host(), [], ["/etc/systemd/system/kubelet.service", path])  # type: ignore[arg-type]


def test_reset_still_removes_what_apply_made(tmp_path: Path) -> None:
    """kubesmith's own directories (/etc/kubernetes, /usr/local/lib/kubesmith), the components' and the
    files it wrote into system directories (unit files, sysctl.d) all pass."""
    from kubesmith.backends.day2 import check_removable, kubesmith_paths
    from plan_support import plan_of_text

    text = spec_text("    coreDns: {enabled: false}\n")
    (tmp_path / "c.yaml").write_text(text)
    with bounded(SLOW_BOUND):
        rendered = kubesmith("render", "c.yaml", "--out-dir", "out", "--state-dir", "state", cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    files = [entry["path"] for entry in json.loads((tmp_path / "out" / "h1" / "manifest.json").read_text())["files"]]
    assert any(path.startswith("/etc/systemd/system/") for path in files)
    assert any(path.startswith("/etc/sysctl.d/") for path in files)
    host = plan_of_text(text).host("h1")
    assert "/usr/local/lib/kubesmith" in kubesmith_paths(host) and "/etc/kubernetes" in kubesmith_paths(host)
    check_removable(host, kubesmith_paths(host), files)


# ---- output and state directories --------------------------------------------------------------------

def test_render_does_not_write_through_a_link_out_of_its_output(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(spec_text())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out" / "h1").mkdir(parents=True)
    (tmp_path / "out" / "h1" / "etc").symlink_to(elsewhere)
    with bounded(SLOW_BOUND):
        result = kubesmith("render", "c.yaml", "--out-dir", "out", "--state-dir", "state", cwd=tmp_path)
    assert_clean_failure(result, 5, "out/h1/etc is a symbolic link to", "render writes only inside out")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("out", ["file", "/dev/null"])
def test_render_into_a_file_is_one_line(out: str, tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(spec_text())
    (tmp_path / "file").write_text("mine\n")
    with bounded(SLOW_BOUND):
        result = kubesmith("render", "c.yaml", "--out-dir", out, "--state-dir", "state", cwd=tmp_path)
    assert_clean_failure(result, 5, f"{out} is not a directory")
    assert (tmp_path / "file").read_text() == "mine\n"


def test_render_does_not_follow_a_planted_lock_link(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(spec_text())
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ".kubesmith-render.lock").symlink_to(victim)
    with bounded(SLOW_BOUND):
        result = kubesmith("render", "c.yaml", "--out-dir", "out", "--state-dir", "state", cwd=tmp_path)
    assert_clean_failure(result, 3, ".kubesmith-render.lock")
    assert victim.read_text() == "keep me\n"


def test_render_does_not_read_a_fifo_in_place_of_a_rendered_file(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(spec_text())
    target = tmp_path / "out" / "h1" / "etc" / "kubernetes"
    target.mkdir(parents=True)
    os.mkfifo(target / "admin.conf")
    with bounded(SLOW_BOUND):
        result = kubesmith("render", "c.yaml", "--out-dir", "out", "--state-dir", "state", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (target / "admin.conf").is_file()


@pytest.mark.parametrize("command", [["render", "c.yaml", "--out-dir", "out"], ["certs", "check-expiration", "c.yaml"],
                                     ["plan", "c.yaml", "--known-hosts", "/dev/null"],
                                     ["reset", "c.yaml", "--yes", "--purge"]])
def test_a_state_directory_that_is_a_file_is_one_line(command: list[str], tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(spec_text())
    (tmp_path / "state").write_text("")
    with bounded(SLOW_BOUND):
        result = kubesmith(*command, "--state-dir", "state", cwd=tmp_path)
    assert_clean_failure(result, 3, "state: not a directory")
    assert (tmp_path / "state").is_file()


def test_a_state_directory_with_a_link_out_is_refused(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(spec_text())
    (tmp_path / "state" / "pki").mkdir(parents=True)
    (tmp_path / "state" / "pki" / "hosts").symlink_to("/etc")
    with bounded(SLOW_BOUND):
        result = kubesmith("render", "c.yaml", "--out-dir", "out", "--state-dir", "state", cwd=tmp_path)
    assert_clean_failure(result, 3, "state/pki/hosts: a symbolic link out of the state directory")


def run_into_full(*args: str, cwd: Path) -> Result:
    """`kubesmith ARGS > /dev/full`, in this process."""
    from kubesmith.cli import cli
    from kubesmith.cli.common import run_guarded

    err = io.StringIO()
    saved_argv, saved_cwd = sys.argv, Path.cwd()
    sys.argv = ["kubesmith", *args]
    try:
        os.chdir(cwd)
        with open("/dev/full", "w") as full, contextlib.redirect_stdout(full), contextlib.redirect_stderr(err):
            code = run_guarded(cli)
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
    return Result(int(code), "", err.getvalue())


@pytest.mark.parametrize("command", [["plan", "c.yaml", "--offline"], ["plan", "c.yaml", "--offline", "-o", "json"],
                                     ["validate", "c.yaml"], ["schema"], ["options"]])
def test_a_full_output_device_is_one_line(command: list[str], tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(spec_text())
    with bounded(SLOW_BOUND):
        result = run_into_full(*command, cwd=tmp_path)
    assert_clean_failure(result, 3, "writing the output: No space left on device")


def test_a_full_output_device_in_a_real_process_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(spec_text())
    with open("/dev/full", "w") as full:
        process = subprocess.run(["kubesmith", "plan", "c.yaml", "--offline"], stdout=full, stderr=subprocess.PIPE,
                                 text=True, cwd=tmp_path, timeout=60,
                                 env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert process.returncode == 3, process.stderr
    assert process.stderr == "error: writing the output: No space left on device\n", process.stderr


@contextlib.contextmanager
def full_tmpfs(directory: Path) -> Iterator[Path]:
    directory.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(directory)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


def test_render_onto_a_full_file_system_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(spec_text())
    with full_tmpfs(tmp_path / "small") as small, bounded(SLOW_BOUND):
        result = kubesmith("render", "c.yaml", "--out-dir", str(small / "out"), "--state-dir", "state", cwd=tmp_path)
        leftovers = [p.name for p in (small / "out").rglob("*") if ".kstmp-" in p.name]
    assert_clean_failure(result, 3, "No space left on device", str(small / "out"))
    assert leftovers == []


# ---- files named on the command line -----------------------------------------------------------------

def test_a_fifo_as_the_ca_key_does_not_hang(tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "ca")
    fifo = make_file("fifo", tmp_path)
    with bounded(BOUND_SECONDS):
        result = kubesmith("token", "create", "--ca-cert", str(ca.ca_cert), "--ca-key", str(fifo),
                           "--state-dir", str(tmp_path / "state"))
    assert_clean_failure(result, 3, "not a regular file (a FIFO)")


def test_a_device_as_the_settings_file_does_not_hang(tmp_path: Path) -> None:
    with bounded(BOUND_SECONDS):
        result = kubesmith("token", "list", "--ca-config", "/dev/zero")
    assert_clean_failure(result, 3, "/dev/zero: unreadable settings (not a regular file (a character device)")


def test_a_fifo_as_an_etcd_snapshot_does_not_hang(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(spec_text())
    fifo = make_file("fifo", tmp_path)
    with bounded(BOUND_SECONDS):
        result = kubesmith("etcd", "restore", "c.yaml", str(fifo), "--yes", cwd=tmp_path)
    assert_clean_failure(result, 2, "not a regular file (a FIFO)")


def test_a_fifo_as_the_cluster_file_of_a_token_command_does_not_hang(tmp_path: Path) -> None:
    fifo = make_file("fifo", tmp_path)
    with bounded(BOUND_SECONDS):
        result = kubesmith("token", "create", str(fifo), "--ttl", "1h")
    assert_clean_failure(result, 3, "a FIFO")


# ---- tokens --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("ttl", "fragment"), [
    ("99999999999999999999d", "at most 365 days"),
    ("366d", "at most 365 days"),
    ("1000000h", "at most 365 days"),
])
def test_token_lifetimes_are_bounded(ttl: str, fragment: str, tmp_path: Path) -> None:
    """A huge --ttl used to be stored, and every `token list` after it failed with a traceback."""
    ca = make_ca(tmp_path / "ca")
    result = kubesmith("token", "create", "--ttl", ttl, *ca_args(ca))
    assert_clean_failure(result, 2, "--ttl", fragment)
    assert not (ca.directory / "state" / "tokens.json").exists()
    listed = kubesmith("token", "list", "--state-dir", str(ca.directory / "state"))
    assert listed.returncode == 0, listed.stderr


def test_the_longest_lifetime_is_accepted_and_listed(tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "ca")
    assert kubesmith("token", "create", "--ttl", "365d", *ca_args(ca)).returncode == 0
    listed = kubesmith("token", "list", "--state-dir", str(ca.directory / "state"))
    assert listed.returncode == 0 and "active" in listed.stdout, listed.stderr


def test_a_huge_default_lifetime_in_the_settings_is_refused(tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "ca")
    settings = tmp_path / "ca-service.json"
    settings.write_text(json.dumps({"default_token_ttl": 1e300, "ca_cert": str(ca.ca_cert),
                                    "ca_key": str(ca.ca_key), "state_dir": str(ca.directory / "state")}))
    result = kubesmith("token", "create", "--ca-config", str(settings))
    assert_clean_failure(result, 2, f"default_token_ttl of {settings}: a token's lifetime must be", "365 days")
    assert not (ca.directory / "state" / "tokens.json").exists()


@pytest.mark.parametrize("description", ["\x1b[2J\x1b[31mowned", "line\nbreak", "bidi \u202e txet", "bell\x07",
                                         "x" * 201])
def test_token_descriptions_are_plain_text(description: str, tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "ca")
    result = kubesmith("token", "create", "--description", description, *ca_args(ca))
    assert_clean_failure(result, 2, "--description")
    assert "\x1b" not in result.stderr and "\u202e" not in result.stderr


def store_with(tmp_path: Path, document: object | bytes) -> Path:
    """A token store holding one good record and `document` spliced in (or raw bytes)."""
    from kubesmith.ca import tokens
    from kubesmith.pki import keys

    state = tmp_path / "state"
    store = tokens.TokenStore(state / "tokens.json", keys.generate("ecdsa-p256"))
    store.create(3600, "w1", description="good")
    if isinstance(document, bytes):
        (state / "tokens.json").write_bytes(document)
    elif document is not None:
        whole = json.loads((state / "tokens.json").read_text())
        whole["tokens"].append(document)
        (state / "tokens.json").write_text(json.dumps(whole))
    return state


GOOD_RECORD = {"id": "abcdef", "created": 1.0, "expires": 2e9, "node": None, "addresses": [], "description": "",
               "nonce": "AAAA", "wrapped_key": "AAAA"}
DAMAGE = {
    "expires-huge": {**GOOD_RECORD, "expires": 1e300},
    "expires-infinite": b'{"version": 1, "tokens": [{"id": "abcdef", "created": 1, "expires": Infinity, '
                        b'"nonce": "", "wrapped_key": ""}]}',
    "created-a-string": {**GOOD_RECORD, "created": "yesterday"},
    "id-malformed": {**GOOD_RECORD, "id": "\x1b[31m"},
    "record-a-list": [1, 2, 3],
    "missing-nonce": {key: value for key, value in GOOD_RECORD.items() if key != "nonce"},
    "node-a-number": {**GOOD_RECORD, "node": 7},
    "not-json": b"{\"version\": 1, \"tok",
    "a-list": b"[]",
    "binary": b"\xff\xfe\x00garbage",
    "nested-deeply": b'{"version": 1, "tokens": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_token_store_is_named_and_repaired(damage: str, tmp_path: Path) -> None:
    state = store_with(tmp_path, DAMAGE[damage])
    listed = kubesmith("token", "list", "--state-dir", str(state))
    assert_clean_failure(listed, 3, str(state / "tokens.json"), "token store", "kubesmith token repair")
    repaired = kubesmith("token", "repair", "--state-dir", str(state))
    assert repaired.returncode == 0 and "Traceback" not in repaired.stderr, repaired.stderr
    assert "repaired" in repaired.stdout and "damaged file is" in repaired.stdout
    listed = kubesmith("token", "list", "--state-dir", str(state), "-o", "json")
    assert listed.returncode == 0, listed.stderr
    kept = [row["description"] for row in json.loads(listed.stdout)]
    assert kept == (["good"] if damage not in ("not-json", "a-list", "binary", "expires-infinite", "nested-deeply")
                    else [])
    assert any(path.name.startswith("tokens.json.damaged-") for path in state.iterdir())


def _store_document(state: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((state / "tokens.json").read_text())


def _with_version(version: object):  # type: ignore[no-untyped-def]
    def spoil(document: dict) -> None:  # type: ignore[type-arg]
        document["version"] = version
    return spoil


def _with_address(document: dict) -> None:  # type: ignore[type-arg]
    document["tokens"].append({**document["tokens"][0], "id": "zzzzzz", "addresses": ["evil.example.com"]})


def _with_twin(document: dict) -> None:  # type: ignore[type-arg]
    document["tokens"].append({**document["tokens"][0], "description": "twin"})
    document["tokens"].append({**document["tokens"][0], "id": "zzzzzz", "description": "other"})


# what `token list` accepted silently: (spoil, the message's part, what repair keeps)
SILENT_DAMAGE = {
    "version-2": (_with_version(2), "unknown store version 2: this kubesmith reads version 1", []),
    "version-true": (_with_version(True), "unknown store version True", []),
    "version-missing": (lambda document: document.pop("version"), "no store version", []),
    "address-a-name": (_with_address, "tokens[1] (address 'evil.example.com' is not an IP address)", ["good"]),
    "duplicate-id": (_with_twin, "is held by 2 records (tokens[0], tokens[1])", ["other"]),
}


@pytest.mark.parametrize("damage", sorted(SILENT_DAMAGE))
def test_a_store_token_list_once_accepted_is_named_and_repaired(damage: str, tmp_path: Path) -> None:
    """An unknown version, an address that is no IP, one id held by two records: each was listed as if
    intact (and a revocation of a twin revoked only the first). Now one error, then `token repair`."""
    spoil, fragment, kept = SILENT_DAMAGE[damage]
    state = store_with(tmp_path, None)
    document = _store_document(state)
    spoil(document)
    (state / "tokens.json").write_text(json.dumps(document))
    damaged = (state / "tokens.json").read_bytes()
    listed = kubesmith("token", "list", "--state-dir", str(state))
    assert_clean_failure(listed, 3, f"{state / 'tokens.json'}: damaged token store (", fragment,
                         "kubesmith token repair")
    repaired = kubesmith("token", "repair", "--state-dir", str(state))
    assert repaired.returncode == 0 and "Traceback" not in repaired.stderr, repaired.stderr
    assert any(line.startswith("dropped ") and fragment in line for line in repaired.stderr.splitlines()), repaired.stderr
    assert "repaired" in repaired.stdout and "damaged file is" in repaired.stdout, repaired.stdout
    asides = [path for path in state.iterdir() if path.name.startswith("tokens.json.damaged-")]
    assert len(asides) == 1 and asides[0].read_bytes() == damaged  # the backup is the file as it was
    assert (state / "tokens.json").stat().st_mode & 0o777 == 0o600
    assert not [path for path in state.iterdir() if ".kstmp-" in path.name]
    listed = kubesmith("token", "list", "--state-dir", str(state), "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert [row["description"] for row in json.loads(listed.stdout)] == kept
    assert _store_document(state)["version"] == 1
    assert "w1" in _store_document(state)["nodes"]  # a name the dropped records held stays taken


def test_a_second_repair_keeps_the_first_backup(tmp_path: Path) -> None:
    state = store_with(tmp_path, b"[]")
    assert kubesmith("token", "repair", "--state-dir", str(state)).returncode == 0
    (state / "tokens.json").write_bytes(b"{}")
    assert kubesmith("token", "repair", "--state-dir", str(state)).returncode == 0
    asides = sorted(path.read_bytes() for path in state.iterdir() if path.name.startswith("tokens.json.damaged-"))
    assert asides == [b"[]", b"{}"]


def test_repairing_an_intact_store_changes_nothing(tmp_path: Path) -> None:
    state = store_with(tmp_path, None)
    before = (state / "tokens.json").read_bytes()
    repaired = kubesmith("token", "repair", "--state-dir", str(state))
    assert repaired.returncode == 0 and "intact (1 token)" in repaired.stdout, repaired.stderr
    assert (state / "tokens.json").read_bytes() == before


def test_a_fifo_as_the_token_store_does_not_hang(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    os.mkfifo(tmp_path / "state" / "tokens.json")
    with bounded(BOUND_SECONDS):
        listed = kubesmith("token", "list", "--state-dir", str(tmp_path / "state"))
    assert_clean_failure(listed, 3, "not a regular file (a FIFO)", "kubesmith token repair")
    with bounded(BOUND_SECONDS):
        repaired = kubesmith("token", "repair", "--state-dir", str(tmp_path / "state"))
    assert repaired.returncode == 0, repaired.stderr
    assert kubesmith("token", "list", "--state-dir", str(tmp_path / "state")).returncode == 0


def test_an_old_description_with_escapes_is_listed_escaped(tmp_path: Path) -> None:
    """A record written before descriptions were checked still prints safely."""
    state = store_with(tmp_path, None)
    whole = json.loads((state / "tokens.json").read_text())
    whole["tokens"][0]["description"] = "\x1b]0;pwned\x07 \u202e"
    (state / "tokens.json").write_text(json.dumps(whole))
    listed = kubesmith("token", "list", "--state-dir", str(state))
    assert listed.returncode == 0, listed.stderr
    assert "\x1b" not in listed.stdout and "\x07" not in listed.stdout and "\u202e" not in listed.stdout
    assert "\\x1b]0;pwned\\x07 \\u202e" in listed.stdout


def test_the_corpus_is_large_enough(request: pytest.FixtureRequest) -> None:
    cases = [item for item in request.session.items if item.module.__name__ == __name__]
    assert len(cases) >= 75, len(cases)


# ---- archives are streamed to hosts, never read whole ------------------------------------------------

def test_an_archive_is_uploaded_in_chunks_root_only(local_sshd, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from kubesmith.hostfile import StreamedFile
    from kubesmith.transport import ssh
    from test_transport_ssh import _options

    source = tmp_path / "big.tar"
    source.write_bytes(os.urandom(3 << 20))
    monkeypatch.setattr(ssh, "STREAM_CHUNK", 1 << 19)
    target = tmp_path / "node" / "images" / "big.tar"
    reads: list[int] = []
    real_open = ssh.fsutil.open_regular

    class Counting:
        def __init__(self, file: io.BufferedReader) -> None:
            self.file = file

        def read(self, size: int = -1) -> bytes:
            reads.append(size)
            return self.file.read(size)

    @contextlib.contextmanager
    def counting_open(*args: object) -> Iterator[Counting]:
        with real_open(*args) as file:  # type: ignore[arg-type]
            yield Counting(file)  # type: ignore[arg-type]

    monkeypatch.setattr(ssh.fsutil, "open_regular", counting_open)

    async def scenario() -> None:
        async with ssh.SshTransport(_options(local_sshd)) as transport:
            await transport.upload("127.0.0.1", [StreamedFile(str(target), 0o600, "root", "root", source, 8 << 20)])

    asyncio.run(scenario())
    assert target.read_bytes() == source.read_bytes()
    assert target.stat().st_mode & 0o777 == 0o600
    assert reads and all(0 < size <= 1 << 19 for size in reads)  # never one read of the whole file


def test_a_fifo_streamed_to_a_host_is_refused(local_sshd, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    from kubesmith.hostfile import StreamedFile
    from kubesmith.transport.ssh import SshTransport, TransportError
    from test_transport_ssh import _options

    fifo = make_file("fifo", tmp_path)

    async def scenario() -> None:
        async with SshTransport(_options(local_sshd)) as transport:
            await transport.upload("127.0.0.1", [StreamedFile(str(tmp_path / "x.tar"), 0o600, "root", "root",
                                                              fifo, 1 << 20)])

    with bounded(SLOW_BOUND), pytest.raises(TransportError, match="not a regular file"):
        asyncio.run(scenario())
    assert not (tmp_path / "x.tar").exists()


def test_an_error_never_carries_a_terminal_escape(tmp_path: Path) -> None:
    """An archive's name from the command line is printed with its control characters escaped."""
    name = "x\x1b[2J\x1b]0;owned\x07\u202ey.tar"
    (tmp_path / name).write_text("not a tar\n")
    (tmp_path / "c.yaml").write_text(spec_text())
    with bounded(SLOW_BOUND):
        result = kubesmith("images", "import", "c.yaml", name, cwd=tmp_path)
    assert_clean_failure(result, 2, "x\\x1b[2J\\x1b]0;owned\\x07\\u202ey.tar: not an image archive")
    assert not any(c in result.stderr for c in "\x1b\x07\u202e")


RAW_CONTROLS = (b"\x1b", b"\x07", b"\r", b"\x9b", "\u202e".encode())  # \x9b: also the tail of U+009B in UTF-8
HOSTILE_NAME = "v\x1b]0;owned\x07\r\u009b\u202e\u00e9"
ESCAPED_NAME = "v\\x1b]0;owned\\x07\\x0d\\x9b\\u202e"


def _ascii_run(code: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """`code` in a child interpreter whose output encoding is ASCII in the C locale: click then writes
    to the streams' binary buffers (it deems ASCII misconfigured), where the guard was not."""
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "LC_ALL": "C", "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=cwd, env=env, timeout=60,
                          check=False)


def test_an_ascii_locale_gets_escapes_not_raw_controls(tmp_path: Path) -> None:
    """`validate` echoes the file's name: under PYTHONIOENCODING=ascii it reached the terminal raw."""
    name = f"{HOSTILE_NAME}.yaml"
    shutil.copy(ROOT / "examples" / "single-node.yaml", tmp_path / name)
    done = _ascii_run(f"import sys; sys.argv = ['kubesmith', 'validate', {name!r}]\n"
                      "from kubesmith.cli import main; main()", tmp_path)
    assert done.returncode == 0, done.stderr
    assert not any(raw in done.stdout + done.stderr for raw in RAW_CONTROLS), done.stdout
    assert done.stdout.isascii(), done.stdout  # the locale's encoding holds: é is escaped, not UTF-8
    assert f"{ESCAPED_NAME}\\xe9.yaml: valid".encode() in done.stdout, done.stdout


def test_the_guard_holds_for_both_streams_in_an_ascii_locale(tmp_path: Path) -> None:
    """Whatever a command echoes, on stdout or stderr, and whatever it prints itself."""
    code = ("import click, sys\nfrom kubesmith.cli.common import run_guarded\n"
            "@click.command()\ndef hostile():\n"
            f"    click.echo({HOSTILE_NAME!r})\n    click.echo({HOSTILE_NAME!r}, err=True)\n"
            f"    print({HOSTILE_NAME!r})\n    sys.stderr.write({HOSTILE_NAME!r} + '\\n')\n"
            "sys.exit(run_guarded(hostile))\n")
    done = _ascii_run(code, tmp_path)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    for output in (done.stdout, done.stderr):
        assert not any(raw in output for raw in RAW_CONTROLS), output
        assert output.decode("ascii").splitlines() == [f"{ESCAPED_NAME}\\xe9"] * 2, output


def test_render_streams_a_spec_archive_and_keeps_it_unchanged(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """render (as apply) never reads an operator's archive whole: in chunks to hash, copy and compare."""
    from kubesmith import fsutil

    archive = tmp_path / "big.tar"
    archive.write_bytes(oci_archive("example.local/big:1", (ImageFile("/blob", os.urandom(3 << 20), 0o644),),
                                    ("/blob",)))
    (tmp_path / "c.yaml").write_text(spec_text(f"    containerRuntime: {{images: [{archive}]}}\n"))
    reads: list[int] = []
    real_open = fsutil.open_regular

    class Counting:
        def __init__(self, file: io.BufferedReader) -> None:
            self.file = file

        def read(self, size: int = -1) -> bytes:
            reads.append(size)
            return self.file.read(size)

        def __getattr__(self, name: str) -> object:
            return getattr(self.file, name)

    @contextlib.contextmanager
    def counting_open(path: Path, *args: object) -> Iterator[object]:
        with real_open(path, *args) as file:  # type: ignore[arg-type]
            yield Counting(file) if Path(path) == archive else file

    monkeypatch.setattr(fsutil, "open_regular", counting_open)
    for expected_unchanged in (False, True):
        with bounded(SLOW_BOUND):
            result = kubesmith("render", "c.yaml", "--out-dir", "out", "--state-dir", "state", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        placed = tmp_path / "out" / "h1" / "var/lib/kubesmith/images/big.tar"
        assert placed.read_bytes() == archive.read_bytes() and placed.stat().st_mode & 0o777 == 0o600
        assert (" 0 files written" in result.stdout) == expected_unchanged, result.stdout
    assert reads and all(0 <= size <= fsutil.CHUNK for size in reads), sorted(set(reads))[-3:]


def test_run_copies_an_archive_into_its_root_unchanged(tmp_path: Path) -> None:
    """`kubesmith run` lays the rendered tree into its root: documents re-rooted, the rest (an image
    archive) copied in chunks as it is, with its mode."""
    from kubesmith.backends.run import prepare_root
    from kubesmith.layout import RunPaths
    from pki_support import plan_of

    archive = valid_oci(tmp_path / "app.tar")
    spec = tmp_path / "c.yaml"
    spec.write_text(spec_text(f"    containerRuntime: {{images: [{archive}]}}\n"))
    import shutil
    import tempfile

    state = Path(tempfile.mkdtemp(prefix="ks", dir="/tmp"))  # containerd's socket path must stay short
    try:
        with bounded(SLOW_BOUND):
            result = kubesmith("render", "c.yaml", "--out-dir", str(state / "rendered"), "--state-dir", str(state),
                               cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        paths = RunPaths(state, "h1")
        prepare_root(paths, plan_of(spec).host("h1"))
        placed = paths.root / "var/lib/kubesmith/images/app.tar"
        assert placed.read_bytes() == archive.read_bytes() and placed.stat().st_mode & 0o777 == 0o600
        assert str(paths.root) in (paths.root / "etc/containerd/config.toml").read_text()  # re-rooted document
    finally:
        shutil.rmtree(state)
