"""Arbitrary strings in string options: each is refused with a located error, or reaches the
component's argv exactly as written, as systemd itself parses the unit file.

The parse is systemd's own: `systemd-analyze verify` under debug logging dumps every unit it
loaded, ExecStart= as the argv its parser produced. The only step added here is the one systemd
does at exec time, documented in systemd.service(5): `$$` passes one literal `$`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plan_support import registry
from kubesmith.backends.systemd import UnitOptions, command_line, render_unit, unit_files, write_units
from kubesmith.plan.evaluate import evaluate
from kubesmith.vocabulary.errors import SpecError
from kubesmith.spec.load import load_spec_text

pytestmark = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")

Spec = dict[str, Any]
HOSTILE = "\n\r\t\x00\x0b\x1b\x7f\x85\u2028 \"'\\;#%$={}[],:/."


def base_spec() -> Spec:
    return {"apiVersion": "kubesmith.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "prop"},
            "spec": {"kubernetesVersion": f"{registry().newest}.0",
                     "hosts": [{"name": "h1", "address": "10.0.0.11", "roles": ["control-plane", "etcd", "node"]}],
                     "components": {}}}


def component(spec: Spec, name: str) -> Spec:
    return spec["spec"]["components"].setdefault(name, {})


# option path -> (put the string there, the service whose ExecStart carries it, the argv word expected)
OPTIONS: dict[str, tuple[Callable[[Spec, str], None], str, Callable[[str], str]]] = {
    "spec.components.apiserver.extraArgs.cors-allowed-origins": (
        lambda spec, s: component(spec, "apiserver").update(extraArgs={"cors-allowed-origins": s}),
        "kube-apiserver", lambda s: f"--cors-allowed-origins={s}"),
    "spec.components.apiserver.extraArgs": (
        lambda spec, s: component(spec, "apiserver").update(extraArgs={s: "1"}),
        "kube-apiserver", lambda s: f"--{s}=1"),
    "spec.components.kubelet.extraArgs.provider-id": (
        lambda spec, s: component(spec, "kubelet").update(extraArgs={"provider-id": s}),
        "kubelet", lambda s: f"--provider-id={s}"),
    "spec.hosts[0].labels.zone": (
        lambda spec, s: spec["spec"]["hosts"][0].update(labels={"zone": s}),
        "kubelet", lambda s: f"--node-labels=zone={s}"),
    "spec.hosts[0].labels": (
        lambda spec, s: spec["spec"]["hosts"][0].update(labels={s: "a"}),
        "kubelet", lambda s: f"--node-labels={s}=a"),
    "spec.components.apiserver.auditLog.path": (
        lambda spec, s: component(spec, "apiserver").update(auditLog={"path": s}),
        "kube-apiserver", lambda s: f"--audit-log-path={s}"),
    "spec.components.apiserver.eventTtl": (
        lambda spec, s: component(spec, "apiserver").update(eventTtl=s),
        "kube-apiserver", lambda s: f"--event-ttl={s}"),
    "spec.components.etcd.dataDir": (
        lambda spec, s: component(spec, "etcd").update(dataDir=s), "etcd", lambda s: f"--data-dir={s}"),
    "spec.components.kubelet.rootDir": (
        lambda spec, s: component(spec, "kubelet").update(rootDir=s), "kubelet", lambda s: f"--root-dir={s}"),
}

strings = st.one_of(
    st.text(),
    st.text(alphabet=st.sampled_from(HOSTILE + "abz09-_"), min_size=1),
    st.lists(st.text(alphabet=st.sampled_from("abc.-_%$ \\\"';#\n"), min_size=1, max_size=4), min_size=1,
             max_size=4).map(lambda parts: "/var/lib/" + "/".join(parts)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(option=st.sampled_from(sorted(OPTIONS)), value=strings)
def test_a_string_option_is_refused_where_it_is_or_reaches_the_argv_unchanged(option: str, value: str) -> None:
    place, service, word = OPTIONS[option]
    spec = base_spec()
    place(spec, value)
    text = yaml.safe_dump(spec, allow_unicode=True, default_style='"')  # exact: escapes every odd character
    try:
        loaded = load_spec_text(text, "prop.yaml", registry())
    except SpecError as error:
        assert error.errors, error
        assert all(problem.location is not None for problem in error.problems), error
        assert any(problem.path.startswith(option) for problem in error.errors), (option, str(error))
        return
    host = evaluate(loaded.cluster, registry()).hosts[0]
    argv = systemd_argv(unit_files(host, UnitOptions(bin_dir="/bin", kubesmith="/bin/true")), service)
    assert word(value) in argv, (value, argv)


def systemd_argv(files: dict[str, str], service: str) -> list[str]:
    """ExecStart= of `service` as systemd parses it (plus the exec-time `$$` step). --root keeps
    systemd-analyze to this one unit (the machine's hundreds of units would take 4x longer)."""
    relative = f"etc/systemd/system/{service}.service"
    with tempfile.TemporaryDirectory() as directory:
        write_units(Path(directory), {relative: files[relative]})
        environment = {**os.environ, "SYSTEMD_LOG_LEVEL": "debug", "SYSTEMD_LOG_TARGET": "console"}
        result = subprocess.run(["systemd-analyze", "verify", "--man=no", "--generators=no", f"--root={directory}",
                                 f"{service}.service"], capture_output=True, env=environment, timeout=30)
    return [exec_time(word) for word in exec_start(result.stdout, service)]


def exec_start(dump: bytes, service: str) -> list[str]:
    lines = iter(dump.splitlines())
    for line in lines:
        if line.strip() == f"-> Unit {service}.service:".encode():
            break
    section = b""
    for line in lines:
        if line.strip().startswith(b"-> Unit "):
            break
        if line.strip().startswith(b"-> Exec"):
            section = line.strip()
        elif section == b"-> ExecStart:" and line.strip().startswith(b"Command Line: "):
            return dumped_words(line.strip().removeprefix(b"Command Line: "))
    raise AssertionError(f"no ExecStart= of {service} in systemd's dump:\n{dump.decode(errors='replace')}")


_DUMP_ESCAPES = {b"n": b"\n", b"t": b"\t", b"r": b"\r", b"a": b"\a", b"b": b"\b", b"f": b"\f", b"v": b"\v",
                 b"\\": b"\\", b'"': b'"', b"$": b"$", b"`": b"`", b"'": b"'"}


def dumped_words(line: bytes) -> list[str]:
    """Split systemd's "Command Line:" (words joined by spaces, a word needing it in double quotes
    with C escapes: shell_maybe_quote()) back into the argv systemd holds."""
    words: list[str] = []
    for match in re.finditer(rb'"((?:[^"\\]|\\.)*)"|(\S+)', line):
        if match[2] is not None:
            words.append(match[2].decode())
            continue
        raw, out, index = match[1], bytearray(), 0
        while index < len(raw):
            if raw[index:index + 1] != b"\\":
                out += raw[index:index + 1]
                index += 1
            elif re.fullmatch(rb"[0-7]{3}", raw[index + 1:index + 4]):
                out.append(int(raw[index + 1:index + 4], 8))
                index += 4
            else:
                out += _DUMP_ESCAPES[raw[index + 1:index + 2]]
                index += 2
        words.append(out.decode())
    return words


def exec_time(word: str) -> str:
    """systemd expands `$NAME`/`${NAME}` when it executes the line and passes `$$` as `$`: every `$`
    must come doubled, or the component would get a variable's value instead of the text."""
    assert all(len(run) % 2 == 0 for run in re.findall(r"\$+", word)), f"{word!r} would expand a variable"
    return word.replace("$$", "$")


def test_systemd_parses_every_escaped_word_back_to_itself() -> None:
    """Defence in depth: even a word the spec would refuse comes back whole, and no line of it can
    become a unit setting of its own (the `User=root` of issue 16)."""
    words = ["/bin/true", "2\nUser=root", "a\rb", "\x1b[31m", "tab\there", "\x7f\x85\u2028\u2029", "#comment",
             ";semicolon", "a b", "quote\"s'", "back\\slash\\", "%n%%", "$HOME$$x${Y}", "", "é😀", "\ufeffbom",
             "ends with backslash \\"]
    argv = systemd_argv({"etc/systemd/system/probe.service": command_line_unit(words)}, "probe")
    assert argv == words


def command_line_unit(words: list[str]) -> str:
    return render_unit([("Service", [("Type", "exec"), ("User", "nobody"), ("ExecStart", command_line(words))])])


@pytest.mark.parametrize("value", ["a b\"c'd\\e;#f%g$h{}[],=:", "#leading-hash", "é😀 ünïcode", ""])
def test_printable_hostile_values_reach_the_argv_unchanged(value: str) -> None:
    """A plain string flag (a list flag such as --cors-allowed-origins refuses quotes and whitespace: Go's
    CSV reader would split it otherwise than written)."""
    spec = base_spec()
    spec["spec"]["components"]["apiserver"] = {"extraArgs": {"external-hostname": value}}
    loaded = load_spec_text(yaml.safe_dump(spec, allow_unicode=True, default_style='"'), "p.yaml", registry())
    host = evaluate(loaded.cluster, registry()).hosts[0]
    argv = systemd_argv(unit_files(host, UnitOptions(bin_dir="/bin", kubesmith="/bin/true")), "kube-apiserver")
    assert f"--external-hostname={value}" in argv


def test_a_newline_in_an_option_is_a_located_error() -> None:
    spec = base_spec()
    spec["spec"]["components"]["apiserver"] = {"extraArgs": {"v": "2\nUser=root"}}
    with pytest.raises(SpecError) as caught:
        load_spec_text(yaml.safe_dump(spec, default_style='"'), "p.yaml", registry())
    [problem] = caught.value.errors
    assert problem.path == "spec.components.apiserver.extraArgs.v"
    assert "control character (U+000A)" in problem.message and problem.location is not None
