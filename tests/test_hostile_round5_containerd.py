"""Hostile input, round 5 (containerd): extraConfig that weakens the node or stops containerd. Checked against
Debian's containerd 1.6.20 (`containerd --config FILE config dump`, which decodes every field and each plugin's
table as the daemon does) and its source at v1.6.20. A weakening is an exit-1 located error with no opt-out (no
CIS check names containerd's settings, and spec.security.allowInsecure takes CIS ids); its legitimate neighbour
stays valid.
"""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from conftest import kubesmith
from test_hostile_round4_consumers import HEAD_136, RUNTIME, runtime
from hostile_support import assert_refused_alone, assert_valid
from hostile_support import warm  # noqa: F401 (the module's autouse fixture)

from kubesmith.spec.effective import CONTAINERD_TYPES

CRI = "{plugins: {'io.containerd.grpc.v1.cri': %s}}"
CRI_PATH = f"{RUNTIME}.plugins.io.containerd.grpc.v1.cri"


def cri(body: str) -> str:
    return runtime(CRI % body)


# name -> (what follows `spec.kubernetesVersion: "1.36.2"`, option path of the one error, message fragment)
CASES: dict[str, tuple[str, str, str]] = {
    # config dump: "Can't convert 1.5(float64) to int", "Can't convert x(string) to int" (CR04, CR05, Y18)
    "int-given-float": (cri("{max_container_log_line_size: 1.5}"), f"{CRI_PATH}.max_container_log_line_size",
                        "as an integer, not 1.5"),
    "int-given-float-tag": (cri("{max_container_log_line_size: !!float 1e3}"),
                            f"{CRI_PATH}.max_container_log_line_size", "not 1000.0"),
    "int-given-string": (runtime("{oom_score: 'x'}"), f"{RUNTIME}.oom_score", "as an integer, not 'x'"),
    "int-given-bool-upper": (runtime("{OOM_SCORE: true}"), f"{RUNTIME}.OOM_SCORE", "as an integer"),
    # "Can't convert 10010(int64) to string": the port is a string
    "string-given-int": (cri("{stream_server_port: 10010}"), f"{CRI_PATH}.stream_server_port", "as a string"),
    # "Can't convert true(string) to bool"
    "bool-given-string": (cri("{enable_selinux: 'true'}"), f"{CRI_PATH}.enable_selinux", "as a boolean"),
    # "Can't convert 1(int64) to float64": no conversion either way
    "float-given-int": (runtime("{plugins: {'io.containerd.gc.v1.scheduler': {pause_threshold: 1}}}"),
                        f"{RUNTIME}.plugins.io.containerd.gc.v1.scheduler.pause_threshold", "decimal point"),
    # "Can't convert https://x(string) to []string(slice)"
    "list-given-string": (cri("{registry: {mirrors: {'docker.io': {endpoint: 'https://m.example'}}}}"),
                          f"{CRI_PATH}.registry.mirrors.docker.io.endpoint", "as a list of strings"),
    "list-item-not-string": (runtime("{required_plugins: [1]}"), f"{RUNTIME}.required_plugins",
                             "item 0 is 1"),
    # "unknown type for path plugins.io.containerd.grpc.v1.cri.cni (cni)"
    "table-given-string": (cri("{cni: x}"), f"{CRI_PATH}.cni", "as a table"),
    # "unmarshal text: time: missing unit in duration \"5\""; the CRI plugin: "invalid stream idle timeout"
    "duration-unreadable": (runtime("{plugins: {'io.containerd.internal.v1.restart': {interval: '5'}}}"),
                            f"{RUNTIME}.plugins.io.containerd.internal.v1.restart.interval", "not '5'"),
    "stream-idle-unreadable": (cri("{stream_idle_timeout: abc}"), f"{CRI_PATH}.stream_idle_timeout",
                               "a Go duration"),
    # cmd/containerd/command/main.go setLogLevel: logrus.ParseLevel, 'not a valid logrus Level: "bogus"' (CR06)
    "debug-level-unknown": (runtime("{debug: {level: bogus}}"), f"{RUNTIME}.debug.level", "one of panic"),
    # a directory a typed option sets: one error, the option's
    "typed-directory-wrong-type": (runtime("{root: 5}"), f"{RUNTIME}.root",
                                   "spec.components.containerRuntime.rootDir"),
    # pkg/cri/server/service.go (v1.6.20): 'failed to find snapshotter "bogus"', and the CRI does not load (CR13)
    "snapshotter-unknown": (cri("{containerd: {snapshotter: bogus}}"), f"{CRI_PATH}.containerd.snapshotter",
                            "no snapshotter 'bogus'"),
    "snapshotter-typo-upper": (cri("{containerd: {SNAPSHOTTER: overlayfss}}"), f"{CRI_PATH}.containerd.SNAPSHOTTER",
                               "did you mean 'overlayfs'"),
    "snapshotter-disabled": (runtime("{disabled_plugins: [io.containerd.snapshotter.v1.overlayfs]}"),
                             f"{RUNTIME}.disabled_plugins[0]", "overlayfs is the CRI's snapshotter (containerd "
                                                               "default)"),
    # weakenings (CR01, CR07, CR02, CR18, CR16)
    "registry-skip-verify": (cri("{registry: {configs: {'docker.io': {tls: {insecure_skip_verify: true}}}}}"),
                             f"{CRI_PATH}.registry.configs.docker.io.tls.insecure_skip_verify",
                             "without checking its certificate"),
    "registry-skip-verify-upper": (cri("{registry: {configs: {'r.example': {TLS: {INSECURE_SKIP_VERIFY: "
                                       "true}}}}}"),
                                   f"{CRI_PATH}.registry.configs.r.example.TLS.INSECURE_SKIP_VERIFY",
                                   "without checking its certificate"),
    "mirror-plain-http": (cri("{registry: {mirrors: {'docker.io': {endpoint: ['https://m.example', "
                              "'http://10.0.0.9:5000']}}}}"),
                          f"{CRI_PATH}.registry.mirrors.docker.io.endpoint[1]", "plain HTTP"),
    "mirror-plain-http-upper-scheme": (cri("{registry: {mirrors: {'docker.io': {ENDPOINT: ['HTTP://m.example']}}}}"),
                                       f"{CRI_PATH}.registry.mirrors.docker.io.ENDPOINT[0]", "plain HTTP"),
    "apparmor-off": (cri("{disable_apparmor: true}"), f"{CRI_PATH}.disable_apparmor", "without AppArmor"),
    "debug-socket-other-owner": (runtime("{debug: {address: /run/containerd/debug.sock, uid: 1000, gid: 1000}}"),
                                 f"{RUNTIME}.debug.uid", "pprof"),
    "debug-socket-other-group-upper": (runtime("{debug: {ADDRESS: /run/containerd/debug.sock, GID: 100}}"),
                                       f"{RUNTIME}.debug.GID", "pprof"),
    "debug-over-tcp": (runtime("{debug: {address: '0.0.0.0:6060'}}"), f"{RUNTIME}.debug.address",
                       "without authentication"),
    "ttrpc-socket-other-owner": (runtime("{ttrpc: {address: /run/containerd/containerd.sock.ttrpc, uid: 1000}}"),
                                 f"{RUNTIME}.ttrpc.uid", "task events"),
    "stream-server-off-loopback": (cri("{stream_server_address: 0.0.0.0, stream_server_port: '10010', "
                                       "enable_tls_streaming: false}"),
                                   f"{CRI_PATH}.stream_server_address", "without TLS"),
    "stream-server-node-address": (cri("{stream_server_address: ''}"), f"{CRI_PATH}.stream_server_address",
                                   "the node's address"),
}

# name -> what follows `spec.kubernetesVersion: "1.36.2"`: valid, and without a warning about it
LEGITIMATE: dict[str, str] = {
    "types-as-containerd-takes-them": runtime("{oom_score: -500, debug: {level: WARNING}, plugins: {"
                                             "'io.containerd.gc.v1.scheduler': {pause_threshold: 0.05, "
                                             "schedule_delay: 1s}, 'io.containerd.grpc.v1.cri': {"
                                             "max_container_log_line_size: -1, stream_server_port: '0', "
                                             "stream_idle_timeout: 30m, enable_selinux: false, cni: "
                                             "{max_conf_num: 2}}}}"),
    # fields containerd 1.6.20 does not have, and a runtime's options, are left to it
    "unknown-fields-left-alone": cri("{image_pull_progress_timeout: 5m, containerd: {runtimes: {runc: {options: "
                                     "{IoUid: 0}}}}}"),
    # kubesmith's own `state` and CRI `containerd` table come first; containerd reads no OOM_score (not a
    # spelling it tries)
    "shadowed-and-untried-spellings": runtime("{STATE: [a], OOM_score: x, plugins: {'io.containerd.grpc.v1.cri': "
                                              "{CONTAINERD: {snapshotter: bogus}}}}"),
    "snapshotter-native": cri("{containerd: {snapshotter: native}}"),
    "snapshotter-proxy": runtime("{proxy_plugins: {stargz: {TYPE: snapshot, address: "
                                 "/run/containerd-stargz-grpc/containerd-stargz-grpc.sock}}, plugins: {"
                                 "'io.containerd.grpc.v1.cri': {containerd: {snapshotter: stargz}}}}"),
    "snapshotter-other-disabled": runtime("{disabled_plugins: [io.containerd.snapshotter.v1.overlayfs], plugins: {"
                                          "'io.containerd.grpc.v1.cri': {containerd: {snapshotter: native}}}}"),
    "registry-own-ca": cri("{registry: {configs: {'r.example': {tls: {ca_file: /etc/containerd/r.pem, "
                           "insecure_skip_verify: false}}}, mirrors: {'docker.io': {endpoint: "
                           "['https://m.example', 'https://registry-1.docker.io']}}}}"),
    # containerd pulls from a loopback registry over HTTP itself (defaultScheme: http for localhost)
    "mirror-http-loopback": cri("{registry: {mirrors: {'docker.io': {endpoint: ['http://127.0.0.1:5000', "
                                "'http://localhost:5000', 'http://[::1]:5000']}}}}"),
    "apparmor-on": cri("{disable_apparmor: false}"),
    "debug-socket-root": runtime("{debug: {address: /run/containerd/debug.sock, uid: 0, gid: 0, level: debug}}"),
    "debug-loopback-tcp": runtime("{debug: {address: '127.0.0.1:6060'}}"),
    # without an address the ttrpc socket takes the gRPC socket's owner (cmd/containerd/command/main.go)
    "ttrpc-owner-without-address": runtime("{ttrpc: {uid: 1000}}"),
    "debug-owner-without-address": runtime("{debug: {uid: 1000}}"),
    "stream-server-loopback": cri("{stream_server_address: 127.0.0.1, stream_server_port: '10010'}"),
    "stream-server-tls": cri("{stream_server_address: 0.0.0.0, enable_tls_streaming: true}"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_what_containerd_refuses_or_what_weakens_it_is_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = CASES[name]
    assert_refused_alone(tmp_path, name, HEAD_136 + text, path, fragment)


@pytest.mark.parametrize("name", sorted(LEGITIMATE))
def test_the_legitimate_neighbour_stays_valid(name: str, tmp_path: Path) -> None:
    result = assert_valid(tmp_path, name, HEAD_136 + LEGITIMATE[name])
    assert "error" not in result.stderr and "warning" not in result.stderr, result.stderr


@pytest.mark.parametrize("name", ["int-given-float", "registry-skip-verify"])
def test_plan_offline_refuses_them_too(name: str, tmp_path: Path) -> None:
    text, path, _ = CASES[name]
    (tmp_path / f"{name}.yaml").write_text(HEAD_136 + text)
    result = kubesmith("plan", f"{name}.yaml", "--offline", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert f"error: {path}: " in result.stderr and "Traceback" not in result.stderr, result.stderr


def _leaves(table: dict[str, Any], path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Each leaf of nested tables by its path; a runtime's options table is a leaf."""
    leaves: dict[tuple[str, ...], Any] = {}
    for key, value in table.items():
        if isinstance(value, dict) and key != "options":
            leaves |= _leaves(value, (*path, key))
        else:
            leaves[(*path, key)] = value
    return leaves


_DURATIONS = ("schedule_delay", "startup_delay", "interval", "stream_idle_timeout")


def _kind(path: tuple[str, ...], value: Any) -> str:
    """The kind of a value containerd writes, as CONTAINERD_TYPES names it."""
    if isinstance(value, str):
        return "duration" if path[-1] in _DURATIONS or path[0] == "timeouts" else "str"
    return {bool: "bool", int: "int", float: "float", list: "strings", dict: "map"}[type(value)]


def _named(path: tuple[str, ...]) -> tuple[str, ...]:
    """A path with the names of name tables (runtimes, stream processors, timeouts) as "*"."""
    return tuple("*" if index and (path[index - 1] in ("runtimes", "stream_processors", "timeouts")) else part
                 for index, part in enumerate(path))


@pytest.mark.skipif(shutil.which("containerd") is None, reason="containerd is not installed")
def test_the_type_table_is_containerds_default_configuration() -> None:
    """Every field `containerd config default` writes has the kind CONTAINERD_TYPES gives it (the fields of
    tables it leaves empty, such as registry.configs.<host>, come from its source)."""
    default = tomllib.loads(subprocess.run(["containerd", "config", "default"], capture_output=True, text=True,
                                           timeout=60, check=True).stdout)
    table = _leaves(CONTAINERD_TYPES)
    written = {_named(path): _kind(path, value) for path, value in _leaves(default).items()}
    assert len(written) > 130
    assert {path: kind for path, kind in written.items() if table.get(path) != kind} == {}
