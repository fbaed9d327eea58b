"""A corpus of hostile cluster files (issue 16): each ends, quickly, in one located error (or a
documented acceptance), exit code 1 and no traceback.

Every case runs in this process under a 2-second alarm: a reader that loops (recursive aliases),
expands without bound (billion laughs) or reads without end (/dev/zero) fails the test instead
of hanging it. The cases that need no file of their own (generated, special files) are below.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, Result, kubesmith
from hostile_support import BOUND_SECONDS, assert_one_located_error, bounded
from hostile_support import warm  # noqa: F401 (the module's autouse fixture)

HOSTILE = ROOT / "tests" / "specs" / "hostile"
HEAD = (HOSTILE / "alias-recursive-list.yaml").read_text().split("  x: &a")[0]

# file stem -> (option path, message fragment)
EXPECTED: dict[str, tuple[str, str]] = {
    "alias-recursive-list": ("spec.x[0]", "recursive alias"),
    "alias-recursive-labels": ("spec.components.apiserver.extraArgs.k", "recursive alias"),
    "alias-recursive-host-labels": ("spec.hosts[0].labels.k", "recursive alias"),
    "alias-recursive-nested": ("spec.components.kubelet.extraConfig.a.b[2].c", "recursive alias"),
    "alias-merge-key-recursive": ("spec.network.<<", "recursive alias"),
    "alias-billion-laughs": ("spec.components.kubelet.extraConfig.l7", "excessive aliasing"),
    "alias-quadratic-maps": ("spec.components.kubelet.extraConfig.l9", "excessive aliasing"),
    "alias-undefined": ("(document)", "found undefined alias"),
    "control-newline-user-root": ("spec.components.apiserver.extraArgs.v", "control character (U+000A)"),
    "control-carriage-return": ("spec.components.apiserver.extraArgs.cors-allowed-origins",
                                "control character (U+000D)"),
    "control-escape-in-label": ("spec.hosts[1].labels.zone", "control character (U+001B)"),
    "control-nul-in-path": ("spec.components.etcd.dataDir", "control character (U+0000)"),
    "control-in-flag-name": ("spec.components.kubelet.extraArgs['v\\nUser']", "control character (U+000A)"),
    "control-line-separator": ("spec.components.apiserver.extraArgs.cors-allowed-origins",
                               "line separator (U+2028)"),
    "control-tab-in-metadata-label": ("spec.network.dnsDomain", "control character (U+0009)"),
    "alias-duplicate-host": ("spec.hosts[1].name", "already used by spec.hosts[0]"),
    "duration-parsecs": ("spec.components.apiserver.eventTtl", "'5 parsecs' is not a Go duration"),
    "duration-days-kubelet": ("spec.components.kubelet.streamingConnectionIdleTimeout", "'3d' is not a Go duration"),
    "duration-signing-spaces": ("spec.components.controllerManager.signingDuration", "is not a Go duration"),
    "port-range-reversed": ("spec.components.apiserver.serviceNodePortRange", "must run from low to high"),
    "port-range-zero": ("spec.components.apiserver.serviceNodePortRange", "must run from low to high"),
    "port-range-beyond": ("spec.components.apiserver.serviceNodePortRange", "within 1-65535"),
    "path-dotdot-escape": ("spec.components.etcd.dataDir", "is not a normalised path: it means '/etc'; write that"),
    "path-relative": ("spec.components.kubelet.rootDir", "must be an absolute path"),
    "path-trailing-slash": ("spec.components.etcd.dataDir", "it means '/var/lib/etcd'"),
    "path-double-slash": ("spec.components.containerRuntime.rootDir", "it means '/var/lib/containerd'"),
    "path-space": ("spec.components.apiserver.auditLog.path", "a path here may hold"),
    "path-specifier": ("spec.components.kubelet.rootDir", "a path here may hold"),
    "state-dir-shared": ("spec.components.etcd.dataDir", "overlaps /var/lib/kubelet, the state directory of "
                         "spec.components.kubelet.rootDir, on host h1"),
    "state-dir-nested": ("spec.components.etcd.dataDir", "the state directory of spec.components.kubelet.rootDir"),
    "state-dir-kubesmith": ("spec.components.etcd.dataDir", "the state directory of kubesmith's CA service"),
    "state-dir-containerd": ("spec.components.containerRuntime.rootDir",
                             "the state directory of spec.components.kubelet.rootDir"),
    "managed-secure-port": ("spec.components.apiserver.extraArgs.secure-port",
                            "from spec.components.apiserver.securePort: set that option instead"),
    "managed-etcd-servers": ("spec.components.apiserver.extraArgs.etcd-servers", "from the hosts with the etcd role"),
    "managed-tls-key": ("spec.components.apiserver.extraArgs.tls-private-key-file", "from kubesmith's PKI"),
    "managed-verbosity": ("spec.components.kubelet.extraArgs.v", "from spec.components.kubelet.verbosity"),
    "managed-feature-gates": ("spec.components.scheduler.extraArgs.feature-gates",
                              "from spec.components.scheduler.featureGates"),
    "managed-etcd-data-dir": ("spec.components.etcd.extraArgs.data-dir", "from spec.components.etcd.dataDir"),
    "managed-etcd-client-cert-auth": ("spec.components.etcd.extraArgs.client-cert-auth", "from kubesmith's PKI"),
    "managed-node-labels": ("spec.components.kubelet.extraArgs.node-labels", "from spec.hosts[].labels"),
    "managed-anonymous-auth-flag": ("spec.components.apiserver.extraArgs.anonymous-auth",
                                    "from spec.components.apiserver.anonymousAuth"),
    "managed-authorization-mode-flag": ("spec.components.apiserver.extraArgs.authorization-mode",
                                        "from spec.components.apiserver.authorizationMode"),
    "insecure-anonymous-auth": ("spec.components.apiserver.anonymousAuth", 'CIS 1.2.1 (API server --anonymous-auth'),
    "insecure-always-allow": ("spec.components.apiserver.authorizationMode", 'list "1.2.6" in '
                              "spec.security.allowInsecure"),
    "insecure-profiling": ("spec.components.scheduler.profiling", "breaks CIS 1.4.1"),
    "insecure-kubelet-read-only-port": ("spec.components.kubelet.extraArgs.read-only-port", "breaks CIS 4.2.4"),
    "insecure-kubelet-anonymous-config": ("spec.components.kubelet.extraConfig.authentication.anonymous.enabled",
                                          "breaks CIS 4.2.1"),
    "insecure-proxy-metrics": ("spec.components.proxy.metricsBindAddress", "breaks CIS 4.3.1"),
    "insecure-unknown-opt-out": ("spec.security.allowInsecure[0]", "'everything' is not a CIS Kubernetes Benchmark"),
    "yaml-python-tag": ("(document)", "could not determine a constructor for the tag"),
    "yaml-binary-tag": ("spec.network.dnsDomain", "valid string, got b'hello'"),
    "huge-integer": ("spec.components.apiserver.securePort", "does not fit in 64 bits"),
    "float-port": ("spec.components.apiserver.securePort", "valid integer, got 6443.0"),
    "long-label-value": ("spec.hosts[1].labels.zone", "is not a valid label value"),
}

# documented acceptances: stem -> what validate must still say (empty: nothing beyond "valid")
ACCEPTED: dict[str, str] = {
    "accepted-anchor-reuse": "",  # anchors and aliases within the budget are ordinary YAML
    "accepted-insecure-with-opt-out": "warning: spec.components.apiserver.profiling: breaks CIS 1.2.15",
}

# generated stem -> (text, option path, message fragment)
GENERATED: dict[str, tuple[str, str, str]] = {
    "deep-flow-nesting": (HEAD + "  x: " + "[" * 200_000 + "]" * 200_000 + "\n", "(document)",
                          "nested too deeply (more than 64 levels)"),
    "deep-block-nesting": (HEAD + "".join(f"{'  ' * (level + 1)}k{level}:\n" for level in range(300)) + "x\n",
                           "(document)", "nested too deeply (more than 64 levels)"),
    "larger-than-1-mib": (HEAD + "#" * (1 << 20) + "\n", "(document)", "larger than 1 MiB"),
    "ten-level-laughs": (HEAD + "  components:\n    kubelet:\n      extraConfig:\n        l0: &l0 [x, x]\n" + "".join(
        f"        l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 11)),
        "spec.components.kubelet.extraConfig.l", "excessive aliasing"),
}


def validate(path: Path) -> tuple[Result, float]:
    started = time.monotonic()
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", path.name, cwd=path.parent)
    return result, time.monotonic() - started


def test_corpus_is_complete() -> None:
    assert {path.stem for path in HOSTILE.glob("*.yaml")} == set(EXPECTED) | set(ACCEPTED)
    assert len(EXPECTED) + len(ACCEPTED) + len(GENERATED) + len(SPECIAL_FILES) >= 60


@pytest.mark.parametrize("stem", sorted(ACCEPTED))
def test_documented_acceptance(stem: str) -> None:
    result, seconds = validate(HOSTILE / f"{stem}.yaml")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{stem}.yaml: valid"), result.stdout
    assert ACCEPTED[stem] in result.stderr
    assert "error" not in result.stderr and seconds < BOUND_SECONDS


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_hostile_file_gets_one_located_error_quickly(stem: str) -> None:
    path, fragment = EXPECTED[stem]
    result, seconds = validate(HOSTILE / f"{stem}.yaml")
    assert_one_located_error(result, f"{stem}.yaml", path, fragment)
    assert seconds < BOUND_SECONDS


@pytest.mark.parametrize("stem", sorted(GENERATED))
def test_generated_hostile_file_gets_one_located_error_quickly(stem: str, tmp_path: Path) -> None:
    text, path, fragment = GENERATED[stem]
    (tmp_path / f"{stem}.yaml").write_text(text)
    result, seconds = validate(tmp_path / f"{stem}.yaml")
    assert_one_located_error(result, f"{stem}.yaml", path, fragment)
    assert seconds < BOUND_SECONDS


SPECIAL_FILES = ("/dev/zero", "fifo", "directory", "/dev/urandom")


@pytest.mark.parametrize("name", SPECIAL_FILES)
def test_only_regular_files_are_read(name: str, tmp_path: Path) -> None:
    """/dev/zero used to be read until 4 GB; a FIFO blocks an ordinary open until a writer comes."""
    target = Path(name)
    if name == "fifo":
        target = tmp_path / "cluster.yaml"
        os.mkfifo(target)
    elif name == "directory":
        target = tmp_path / "cluster.yaml"
        target.mkdir()
    started = time.monotonic()
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", str(target))
    assert time.monotonic() - started < BOUND_SECONDS
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    kind = {"fifo": "a FIFO", "directory": "is a directory"}.get(name, "a character device")
    assert result.stderr.startswith(f"error: {target}: "), result.stderr
    assert kind in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr


def test_a_cluster_of_a_thousand_hosts_still_loads(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from plan_bench import spec_yaml
    finally:
        sys.path.remove(str(ROOT / "bench"))
    text = spec_yaml(1000)
    assert len(text) < 100_000
    (tmp_path / "big.yaml").write_text(text)
    result = kubesmith("validate", "big.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]


def test_one_run_reports_type_errors_and_semantic_errors_together(tmp_path: Path) -> None:
    """A type error used to hide every semantic check: the overlap showed only after the fix."""
    (tmp_path / "both.yaml").write_text(HEAD.replace("  hosts:", "  network: {clusterCidr: 10.32.0.0/11, "
                                                     "serviceCidr: 10.32.0.0/16}\n  hosts:") +
                                        "  components:\n    apiserver: {securePort: \"6443\"}\n"
                                        "    etcd: {dataDir: /var/lib/kubelet}\n")
    result = kubesmith("validate", "both.yaml", cwd=tmp_path)
    errors = [line.split(": ")[1] for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == ["spec.network.serviceCidr", "spec.components.apiserver.securePort",
                      "spec.components.etcd.dataDir"], result.stderr
    assert "overlaps clusterCidr 10.32.0.0/11" in result.stderr


def test_semantic_checks_skip_what_a_dropped_part_would_falsify(tmp_path: Path) -> None:
    """The only etcd host has a bad address: its item is left out of the semantic checks, so no "no host
    has the etcd role" appears, but the network overlap still does."""
    text = HEAD.replace("roles: [control-plane, etcd, node]}", "roles: [control-plane, node]}\n"
                        "    - {name: h2, address: 10.0.0.300, roles: [etcd]}").replace(
        "  hosts:", "  network: {clusterCidr: 10.32.0.0/11, serviceCidr: 10.32.0.0/16}\n  hosts:")
    (tmp_path / "host.yaml").write_text(text)
    result = kubesmith("validate", "host.yaml", cwd=tmp_path)
    errors = [line.split(": ")[1] for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == ["spec.network.serviceCidr", "spec.hosts[1].address"], result.stderr


def test_plan_names_the_cis_check_an_opt_out_breaks() -> None:
    result = kubesmith("plan", "accepted-insecure-with-opt-out.yaml", "--offline", cwd=HOSTILE)
    assert result.returncode == 0, result.stderr
    assert "warning: spec.components.apiserver.profiling: breaks CIS 1.2.15" in result.stderr
    assert "--profiling=true" in result.stdout
