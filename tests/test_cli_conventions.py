"""One command line for every command: hosts are selected with --host everywhere (repeatable or a
comma list; --hosts only as a hidden old spelling), and the same failure gets the same exit code
from every command (README "Exit codes")."""

from __future__ import annotations

import shutil
import sys
import unicodedata
from collections.abc import Iterator

import click
import pytest

from conftest import kubesmith
from kubesmith.cli import cli
from kubesmith.cli.common import printable
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


def test_help_lists_every_command_once_without_importing_any() -> None:
    """`kubesmith --help` reads the command table only: the operators' commands, then those the
    units on hosts run, each once; not one command module is imported (each costs asyncssh,
    pydantic and the planner: seconds on a busy machine)."""
    import subprocess
    import sys

    from kubesmith.cli import COMMANDS

    program = ("import sys; sys.argv = ['kubesmith', '--help']\nfrom kubesmith.cli import cli\n"
               "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
               "print('IMPORTED', sorted(m for m in sys.modules if m.endswith('_commands') or "
               "m.startswith('kubesmith.backends')))")
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "IMPORTED []", out
    operators, _, on_hosts = out.partition("\nCommands:\n")[2].partition("Run by kubesmith on the hosts:")
    listed = [line.split()[0] for line in (operators + on_hosts).splitlines() if line[:2] == "  " and line[2:3].strip()]
    assert sorted(listed) == sorted(COMMANDS) and len(listed) == len(set(listed)), listed
    for name, entry in COMMANDS.items():
        assert f"  {name} " in (on_hosts if entry.on_hosts else operators), name
        command = cli.get_command(click.Context(cli), name)
        assert command is not None and command.get_short_help_str(limit=200) == entry.summary, name


def test_completion_scripts_complete_commands_for_each_shell() -> None:
    import os
    import subprocess

    for shell in ("bash", "zsh", "fish"):
        script = kubesmith("completion", shell)
        assert script.returncode == 0 and "_KUBESMITH_COMPLETE" in script.stdout, (shell, script.stderr)
    answer = subprocess.run(["kubesmith"], capture_output=True, text=True, check=True, env={
        **os.environ, "_KUBESMITH_COMPLETE": "bash_complete", "COMP_WORDS": "kubesmith ap", "COMP_CWORD": "1"})
    assert answer.stdout.split() == ["plain,apply"], answer.stdout
    assert kubesmith("completion", "tcsh").returncode == 2


def test_a_missing_input_of_the_hosts_files_during_apply_is_one_line_and_exit_2() -> None:
    """Met in apply, a file that cannot be rendered (no coredns binary for the DNS image: a missing
    input, like a missing binary) is one line and exit 2, never a traceback."""
    from kubesmith.backends.render import RenderError
    from kubesmith.cli.common import CommandFailed
    from kubesmith.cli.apply_commands import _on_hosts

    async def work() -> None:
        raise RenderError("/var/lib/kubesmith/images/kubesmith-coredns.tar: no coredns binary for the cluster "
                          "DNS image")

    with pytest.raises(CommandFailed) as failed:
        _on_hosts(work)
    assert failed.value.exit_code == 2 and "no coredns binary" in failed.value.message


def _printable_one_by_one(text: str, keep: str) -> str:
    """`printable` as it was first written: every character tested in turn (the reference)."""
    return "".join(c if c in keep else f"\\x{ord(c):02x}" if ord(c) < 0x100 and unicodedata.category(c) == "Cc"
                   else f"\\u{ord(c):04x}" if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") else c
                   for c in text)


@pytest.mark.parametrize("keep", ["", "\n", "\n\t", "\u202e", "ab"])
def test_printable_escapes_every_character_as_one_by_one_did(keep: str) -> None:
    """Every code point, in one text and alone amid printable ASCII: the fast paths (printable ASCII
    passed whole, a regular expression finding the rest) escape exactly what the plain loop did."""
    every = "".join(map(chr, range(sys.maxunicode + 1)))
    assert printable(every, keep) == _printable_one_by_one(every, keep)
    for code in [*range(0x200), 0x2028, 0x2029, 0x202E, 0xFEFF, 0xD800, 0xE0001, sys.maxunicode]:
        text = f"ab{chr(code)}\ncd\t"
        assert printable(text, keep) == _printable_one_by_one(text, keep)
    assert printable("x\x1b[31m\n", "\n") == "x\\x1b[31m\n"


def test_each_command_lives_in_the_file_named_after_it() -> None:
    """Issue 36: `kubesmith X` is in cli/X_commands.py (a dash as an underscore), alone, so the file
    that holds a command is found from its name; helpers go to modules without the suffix."""
    from kubesmith.cli import COMMANDS

    cli_dir = REPO / "src" / "kubesmith" / "cli"
    misplaced = {name: entry.module for name, entry in COMMANDS.items()
                 if entry.module != f"kubesmith.cli.{name.replace('-', '_')}_commands"}
    assert misplaced == {}
    files = {path.stem for path in cli_dir.glob("*_commands.py")}
    assert files == {f"{name.replace('-', '_')}_commands" for name in COMMANDS}
