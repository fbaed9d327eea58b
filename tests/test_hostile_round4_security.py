"""Hostile inputs, audit round 4 (security and bounds): each cluster file below ends, quickly, in one located
error (option path, file:line:col), exit code 1; the legitimate neighbour next to it stays valid.

- featureGates beyond MAX_FEATURE_GATES (75,000 gates never finished validating) and apiserver.extraSans
  beyond MAX_EXTRA_SANS (a certificate over OpenSSL's and Go's limits);
- containerd extraConfig that serves its API over TCP, hands its socket to another user or group, or
  moves the metrics endpoint off loopback;
- etcd extraArgs that lose data on every start (force-new-cluster) or on a crash (unsafe-no-fsync);
- operator state (state directory, token store, CA keys) that other users may write or read.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from conftest import ROOT, kubesmith
from hostile_support import BOUND_SECONDS, assert_refused, assert_valid, bounded
from hostile_support import warm  # noqa: F401 (the module's autouse fixture)
from test_hostile_values import HEAD, HOSTS, component

from kubesmith.vocabulary.types import MAX_EXTRA_SANS, MAX_FEATURE_GATES


def gates(count: int, where: str = "spec") -> str:
    body = ", ".join(f"G{index}: true" for index in range(count))
    if where == "spec":
        return f"  featureGates: {{{body}}}\n"
    return component("kubelet", f"{{extraConfig: {{featureGates: {{{body}}}}}}}")


def sans(count: int) -> str:
    names = ", ".join(f"n{index}.example.com" for index in range(count))
    return component("apiserver", f"{{extraSans: [{names}]}}")


def runtime(body: str) -> str:
    return component("containerRuntime", f"{{extraConfig: {body}}}")


def etcd_flag(flag: str, value: str) -> str:
    return component("etcd", f"{{extraArgs: {{{flag}: {value}}}}}")


# name -> (what follows spec.kubernetesVersion, the error's path, a fragment of its message)
CASES: dict[str, tuple[str, str, str]] = {
    "gates-10000": (HOSTS + gates(10_000), "spec.featureGates", f"10000 feature gates, more than {MAX_FEATURE_GATES}"),
    "gates-config-5000": (HOSTS + gates(5000, "kubelet"), "spec.components.kubelet.extraConfig.featureGates",
                          "5000 feature gates"),
    "sans-30000": (HOSTS + sans(30_000), "spec.components.apiserver.extraSans", f"at most {MAX_EXTRA_SANS}"),
    "containerd-tcp": (HOSTS + runtime("{grpc: {tcp_address: '0.0.0.0:2376'}}"),
                       "spec.components.containerRuntime.extraConfig.grpc.tcp_address", "no authentication"),
    "containerd-metrics-exposed": (HOSTS + runtime("{metrics: {address: '0.0.0.0:1338'}}"),
                                   "spec.components.containerRuntime.extraConfig.metrics.address", "metricsPort"),
    "containerd-socket-group": (HOSTS + runtime("{grpc: {gid: 100}}"),
                                "spec.components.containerRuntime.extraConfig.grpc.gid", "local root"),
    "containerd-socket-owner": (HOSTS + runtime("{grpc: {uid: 1000}}"),
                                "spec.components.containerRuntime.extraConfig.grpc.uid", "local root"),
    "etcd-force-new-cluster": (HOSTS + etcd_flag("force-new-cluster", "true"),
                               "spec.components.etcd.extraArgs.force-new-cluster", "kubesmith etcd restore"),
    "etcd-unsafe-no-fsync": (HOSTS + etcd_flag("unsafe-no-fsync", "'true'"),
                             "spec.components.etcd.extraArgs.unsafe-no-fsync", "fsync"),
}

# name -> what follows spec.kubernetesVersion: the legitimate neighbour of a case above
ACCEPTED: dict[str, str] = {
    "gates-a-few": HOSTS + "  featureGates: {InPlacePodVerticalScaling: true}\n",
    "sans-many": HOSTS + sans(MAX_EXTRA_SANS),
    "containerd-grpc-sizes": HOSTS + runtime("{grpc: {max_recv_message_size: 16777216, uid: 0, gid: 0}}"),
    "containerd-metrics-own-port": HOSTS + runtime("{metrics: {address: '127.0.0.1:1338', grpc_histogram: true}}"),
    "containerd-metrics-typed-port": HOSTS + component("containerRuntime", "{metricsPort: 1400, extraConfig: "
                                                                           "{metrics: {address: '127.0.0.1:1400'}}}"),
    "etcd-force-new-cluster-off": HOSTS + etcd_flag("force-new-cluster", "false"),
    "etcd-unsafe-no-fsync-off": HOSTS + etcd_flag("unsafe-no-fsync", "'false'"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_value_gets_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = CASES[name]
    result = assert_refused(tmp_path, name, HEAD + text, path, fragment)
    assert re.search(rf"^error: {re.escape(path)}: ", result.stderr, re.M), result.stderr


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_legitimate_neighbour_stays_valid(name: str, tmp_path: Path) -> None:
    assert_valid(tmp_path, name, HEAD + ACCEPTED[name])


def test_unknown_gates_under_the_bound_are_reported_quickly(tmp_path: Path) -> None:
    """Every unknown gate is named (a warning: the binaries ignore it), but only the first few get a
    close-name search (the costly part)."""
    head = HEAD.replace('"1.33.2"', '"1.36.2"')  # a release whose gates kubesmith knows
    (tmp_path / "c.yaml").write_text(head + HOSTS + gates(MAX_FEATURE_GATES))
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", "c.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert sum(line.startswith("warning: spec.featureGates.") for line in result.stderr.splitlines()) == \
        MAX_FEATURE_GATES


# ---- operator state: the state directory, its CA keys and the token store


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state directory with its CAs (render may stop later, at binaries: the PKI comes first)."""
    root = tmp_path_factory.mktemp("state")
    (root / "c.yaml").write_text((ROOT / "examples" / "single-node.yaml").read_text())
    kubesmith("render", "c.yaml", "--out-dir", "o", "--state-dir", "st", cwd=root)
    assert (root / "st" / "pki" / "cas" / "kubernetes-ca.key").is_file()
    return root


@pytest.mark.parametrize(("where", "mode", "fragment"), [
    ("st", 0o777, "so others can write it"),
    ("st", 0o775, "so its group can write it"),
    ("st/pki/cas", 0o757, "chmod 700 st/pki/cas"),
    ("st/pki/cas/kubernetes-ca.key", 0o644, "so others can read it"),
    ("st/pki/cas/kubernetes-ca.key", 0o640, "chmod 600 st/pki/cas/kubernetes-ca.key"),
])
def test_state_others_may_change_or_read_is_refused(rendered: Path, where: str, mode: int, fragment: str) -> None:
    path = rendered / where
    before = path.stat().st_mode & 0o7777
    os.chmod(path, mode)
    try:
        result = kubesmith("render", "c.yaml", "--out-dir", "o", "--state-dir", "st", cwd=rendered)
    finally:
        os.chmod(path, before)
    assert result.returncode != 0, result.stderr
    assert f"error: {where}: " in result.stderr and fragment in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_state_only_its_owner_may_change_is_used(rendered: Path) -> None:
    """0755 directories (tmp_path's, mkdir's under the usual umask) and 0644 certificates stay fine."""
    os.chmod(rendered / "st", 0o755)
    result = kubesmith("render", "c.yaml", "--out-dir", "o", "--state-dir", "st", cwd=rendered)
    assert "mode 0" not in result.stderr, result.stderr


def test_token_store_others_may_write_is_refused_and_repair_tightens_it(rendered: Path) -> None:
    key = str(rendered / "st" / "pki" / "cas" / "kubernetes-ca.key")
    tok = rendered / "tok"
    tok.mkdir(mode=0o700)
    assert kubesmith("token", "create", "--state-dir", "tok", "--ca-key", key, "--ttl", "1h",
                     cwd=rendered).returncode == 0
    store = tok / "tokens.json"
    assert store.stat().st_mode & 0o777 == 0o600
    os.chmod(store, 0o666)
    listed = kubesmith("token", "list", "--state-dir", "tok", cwd=rendered)
    assert listed.returncode == 3 and "chmod 600 tok/tokens.json" in listed.stderr, listed.stderr
    repaired = kubesmith("token", "repair", "--state-dir", "tok", cwd=rendered)
    assert repaired.returncode == 0, repaired.stderr
    assert store.stat().st_mode & 0o777 == 0o600
    assert kubesmith("token", "list", "--state-dir", "tok", cwd=rendered).returncode == 0
    os.chmod(tok, 0o777)
    try:
        created = kubesmith("token", "create", "--state-dir", "tok", "--ca-key", key, "--ttl", "1h", cwd=rendered)
    finally:
        os.chmod(tok, 0o700)
    assert created.returncode == 3 and "chmod 700 tok" in created.stderr, created.stderr
    os.chmod(key, 0o644)
    try:
        created = kubesmith("token", "create", "--state-dir", "tok", "--ca-key", key, "--ttl", "1h", cwd=rendered)
    finally:
        os.chmod(key, 0o600)
    assert created.returncode == 3 and "so others can read it" in created.stderr, created.stderr


def test_state_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a directory to another user")
    state = tmp_path / "st"
    state.mkdir(mode=0o700)
    os.chown(state, 65534, 65534)
    (tmp_path / "c.yaml").write_text((ROOT / "examples" / "single-node.yaml").read_text())
    result = kubesmith("render", "c.yaml", "--out-dir", "o", "--state-dir", "st", cwd=tmp_path)
    assert result.returncode != 0 and "owned by uid 65534" in result.stderr, result.stderr
