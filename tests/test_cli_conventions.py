"""One command line for every command: hosts are selected with --host everywhere (repeatable or a
comma list; --hosts only as a hidden old spelling), and the same failure gets the same exit code
from every command (README "Exit codes")."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import click
import pytest

from conftest import kubesmith
from kubesmith.cli import cli
from kubesmith.exitcodes import ExitCode
from pki_support import REPO

SINGLE = REPO / "examples" / "single-node.yaml"
ONE_HOST = {"run", "agent", "init"}  # --host names the one host to act as (init: NAME=ADDRESS), not a selection


def _commands(group: click.Group = cli, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


def _host_options(command: click.Command) -> list[click.Option]:
    return [p for p in command.params if isinstance(p, click.Option)
            and any(o.lstrip("-") in ("host", "hosts", "only-hosts", "node-names") for o in p.opts + p.secondary_opts)]


ALL = list(_commands())


def test_every_command_was_walked():
    names = {" ".join(path) for path, _ in ALL}
    assert {"apply", "plan", "status", "render", "reset", "images import", "certs renew", "lab status"} <= names


@pytest.mark.parametrize("path,command", ALL, ids=[" ".join(path) for path, _ in ALL])
def test_hosts_are_selected_with_host_everywhere(path, command):
    ctx = click.Context(command, info_name=path[-1])
    shown = command.get_help(ctx)
    assert "--hosts" not in shown
    for option in _host_options(command):
        assert option.opts[0] == "--host", f"{' '.join(path)} spells it {option.opts[0]}"
        if path[-1] in ONE_HOST:
            continue
        assert option.multiple, f"{' '.join(path)} --host takes one host only"
        assert option.process_value(ctx, ("a,b", "c", " a")) == ("a", "b", "c")  # as `--host a,b --hosts c --host a`
        assert "--hosts" in option.opts + option.secondary_opts  # the old spelling still works


def test_missing_binaries_are_a_usage_error_for_plan_and_run(tmp_path):
    if shutil.which("kube-apiserver"):  # `run` would find it and start a control plane on this machine
        pytest.skip("kube-apiserver is on PATH")
    empty = tmp_path / "bin"
    empty.mkdir()
    planned = kubesmith("plan", str(SINGLE), "--binaries", str(empty), "--state-dir", str(tmp_path / "state"))
    ran = kubesmith("run", str(SINGLE), "--host", "node1", "--binaries", str(empty),
                    "--state-dir", str(tmp_path / "state"))
    for result in (planned, ran):
        assert result.returncode == ExitCode.USAGE, result.stderr
        assert "kube-apiserver" in result.stderr and "--binaries DIR" in result.stderr
    assert not (tmp_path / "state" / "run").exists()  # nothing was started


def test_lab_status_without_a_lab_is_unhealthy_not_failed(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBESMITH_LAB_STATE", str(tmp_path / "lab"))
    result = kubesmith("lab", "status")
    assert result.returncode == ExitCode.UNHEALTHY and "no lab is up" in result.stderr
