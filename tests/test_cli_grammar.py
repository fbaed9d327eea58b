"""One grammar for every command (README "Command line"): the cluster file is the first positional
argument; -o/--output is always the output format and every command that prints data offers json;
files and directories a command writes are --out FILE / --out-dir DIR; every duration takes the one
duration syntax (`90s`, `10m`, `8h`, a bare number of seconds); the same failure gets the same exit
code. The tests walk the real click tree, so a new command or option with a stray spelling fails
here, not in an operator's script. Former spellings stay as hidden aliases that warn."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from conftest import kubesmith
from kubesmith.cli import COMMANDS, cli
from kubesmith.cli.common import Duration, FormerSpelling, OutputFormat
from kubesmith.exitcodes import ExitCode
from pki_support import REPO

SINGLE = REPO / "examples" / "single-node.yaml"

# Commands in operator groups that kubesmith's units run on the hosts (the grammar's host-run rules apply)
RUN_ON_HOSTS = {"images load": "the kubesmith-images unit runs it on each node"}

# Operator commands without -o/--output: they act (progress and a summary line), print no data
NO_DATA = {
    "render": "writes files into --out-dir; prints a summary line",
    "certs renew": "renews certificates; prints one line per certificate",
    "token repair": "repairs the token store; prints what it kept and dropped",
    "join": "makes this machine a node; prints a summary line",
    "images import": "copies archives to nodes; prints progress",
    "run": "runs services in the foreground; prints their log",
    "etcd restore": "restores etcd; prints progress",
    "reset": "removes kubesmith from hosts; prints progress",
    "lab up": "starts lab hosts; prints progress",
    "lab down": "stops lab hosts; prints progress",
    "lab ssh": "an interactive shell on a host",
    "lab exec": "runs a command on a host; its output is the command's",
    "lab reboot": "reboots a host",
    "binaries fetch": "downloads binaries into --out-dir; prints progress",
    "completion": "prints a shell script, not data",
}

# Options naming a file or directory that a command reads, or state it keeps (reads and rewrites):
# neither is an output, so neither is --out/--out-dir.
READ = {"--known-hosts", "--ssh-config", "--identity", "--binaries", "--kubeconfig", "--nodes-kubeconfig",
        "--ca-cert", "--ca-key", "--tls-cert", "--tls-key", "--ca-config", "--config", "--components-file",
        "--dir"}
KEPT = {
    "--state-dir": "the PKI and cache state kubesmith keeps between runs (or the CA service's token store)",
    "--pki-dir": "the agent's (and wait's) certificates, renewed in place",
    "--kubeconfig-dir": "the kubeconfigs the agent keeps current",
    "--state-file": "the agent's own record of its state",
    "--checkpoints-dir": "the configuration keeper's checkpoints",
    "--root": "join lays a node down under this directory, as on /",
}

# Host-run commands whose --config is their own settings file (never a cluster file there)
HOST_CONFIG = {"ca serve", "agent", "network up", "network follow", "network down"}

WRITE_WORDS = re.compile(r"^--?(o|out|output|dest|destination|target|to|save|write|outdir)([-_].*)?$")
DURATION_WORDS = re.compile(r"(deadline|timeout|ttl|interval|delay|validity|retry|period|expiry|grace)")
CLUSTER_FILE = {"--spec", "--cluster", "--cluster-file", "--file", "-f", "--spec-file"}


def _commands(group: click.Group = cli, path: tuple[str, ...] = ()) -> Iterator[tuple[str, click.Command, bool]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        full = " ".join((*path, name))
        on_hosts = COMMANDS[path[0] if path else name].on_hosts or full in RUN_ON_HOSTS
        if isinstance(command, click.Group):
            yield from ((p, c, on_hosts or h) for p, c, h in _commands(command, (*path, name)))
        else:
            yield full, command, on_hosts


ALL = list(_commands())
OPERATOR = [(path, command) for path, command, on_hosts in ALL if not on_hosts]


def _current(command: click.Command) -> list[click.Parameter]:
    """The parameters as spelled now (former spellings are checked on their own)."""
    return [p for p in command.params if not isinstance(p, FormerSpelling)]


def _options(command: click.Command) -> Iterator[tuple[str, click.Option]]:
    for param in _current(command):
        if isinstance(param, click.Option):
            yield max(param.opts, key=len), param


@pytest.mark.parametrize(("path", "command"), [(path, command) for path, command, _ in ALL], ids=[p for p, _, _ in ALL])
def test_every_command_takes_verbose(path: str, command: click.Command) -> None:
    verbose = [p for p in command.params if isinstance(p, click.Option) and "--verbose" in p.opts]
    assert len(verbose) == 1 and verbose[0].opts == ["-v", "--verbose"] and verbose[0].count, path


def test_the_walk_sees_every_command() -> None:
    paths = {path for path, _, _ in ALL}
    assert {"render", "etcd snapshot", "token create", "join", "kubeconfig create", "wait", "agent"} <= paths
    assert set(NO_DATA) <= paths and set(RUN_ON_HOSTS) <= paths, "an exception names a command that is gone"


@pytest.mark.parametrize("path,command", [(p, c) for p, c, _ in ALL], ids=[p for p, _, _ in ALL])
def test_o_and_output_are_always_an_output_format_with_json(path: str, command: click.Command) -> None:
    for param in _current(command):
        spellings = set(param.opts) | set(param.secondary_opts)
        if spellings & {"-o", "--output"}:
            assert isinstance(param, click.Option) and isinstance(param.type, OutputFormat), \
                f"{path}: {'/'.join(param.opts)} is not an output format (use output_option())"
            assert {"-o", "--output"} <= spellings, f"{path}: give the format as both -o and --output"
            assert "json" in param.type.choices, f"{path}: -o/--output offers no json"


@pytest.mark.parametrize("path,command", [(p, c) for p, c, _ in ALL], ids=[p for p, _, _ in ALL])
def test_files_and_directories_written_are_out_and_out_dir(path: str, command: click.Command) -> None:
    for name, option in _options(command):
        if name == "--output":
            continue  # the format (above)
        if name == "--out":
            assert option.metavar == "FILE" and isinstance(option.type, click.Path), f"{path}: --out is a FILE"
            continue
        if name == "--out-dir":
            assert option.metavar == "DIR" and isinstance(option.type, click.Path), f"{path}: --out-dir is a DIR"
            continue
        assert not WRITE_WORDS.match(name), f"{path}: {name} writes output: spell it --out FILE or --out-dir DIR"
        names_a_path = (isinstance(option.type, click.Path) or option.metavar in ("FILE", "DIR")
                        or name.endswith(("-dir", "-file")))
        assert not names_a_path or name in READ or name in KEPT, \
            f"{path}: {name} names a file or directory: an output is --out/--out-dir; else list it in READ or KEPT"


@pytest.mark.parametrize("path,command", [(p, c) for p, c, _ in ALL], ids=[p for p, _, _ in ALL])
def test_the_cluster_file_is_the_first_positional_argument(path: str, command: click.Command) -> None:
    arguments = [p for p in _current(command) if isinstance(p, click.Argument)]
    for param in _current(command):
        spellings = set(param.opts) | set(param.secondary_opts)
        is_cluster_file = param.name in ("spec_file", "cluster_file") or spellings & CLUSTER_FILE
        if not is_cluster_file:
            continue
        assert isinstance(param, click.Argument), f"{path}: the cluster file is an option ({'/'.join(param.opts)})"
        assert arguments[0] is param, f"{path}: the cluster file is not the first positional argument"
        assert (param.metavar or "").strip("[]") == "FILE", f"{path}: the cluster file's metavar is FILE"
    if path not in HOST_CONFIG:
        assert "--config" not in {name for name, _ in _options(command)}, \
            f"{path}: --config beside a cluster file is ambiguous; name what it configures (--ca-config)"


@pytest.mark.parametrize("path,command", [(p, c) for p, c, _ in ALL], ids=[p for p, _, _ in ALL])
def test_every_duration_takes_the_one_duration_type(path: str, command: click.Command) -> None:
    for name, option in _options(command):
        if isinstance(option.type, Duration):
            continue
        assert not DURATION_WORDS.search(name), f"{path}: {name} is a duration: type=DURATION (cli.common)"
        if isinstance(option.type, (click.types.FloatParamType, click.types.IntParamType)):
            assert "second" not in (option.help or ""), f"{path}: {name} takes seconds: type=DURATION (cli.common)"


@pytest.mark.parametrize("path,command", OPERATOR, ids=[p for p, _ in OPERATOR])
def test_operator_commands_that_print_data_offer_json(path: str, command: click.Command) -> None:
    formats = [p for p in _current(command) if isinstance(p, click.Option) and "--output" in p.opts]
    if path in NO_DATA:
        assert not formats, f"{path} has -o/--output now: take it out of NO_DATA"
        return
    assert formats, f"{path} prints data without -o/--output (json); or list it in NO_DATA with a reason"


@pytest.mark.parametrize("path,command", [(p, c) for p, c, _ in ALL], ids=[p for p, _, _ in ALL])
def test_former_spellings_are_hidden_and_replaced(path: str, command: click.Command) -> None:
    ctx = click.Context(command, info_name=path)
    help_text = command.get_help(ctx)
    for former in (p for p in command.params if isinstance(p, FormerSpelling)):
        assert former.hidden and not former.expose_value
        for spelling in former.opts:
            if spelling.startswith("-"):
                assert not re.search(rf"(^|[\s,]){re.escape(spelling)}[\s,=]", help_text), \
                    f"{path}: the former {spelling} shows in --help"
        assert any(getattr(p, "former", None) is former for p in command.params), f"{path}: {former.opts} orphaned"


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("10m", 600), ("8h", 28800), ("1h30m", 5400), ("7d", 604800),
                                          ("500ms", 0.5), ("600", 600), ("600.0", 600), ("2.5s", 2.5)])
def test_the_duration_syntax(text: str, seconds: float) -> None:
    assert Duration().convert(text, None, None) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["5q", "-1", "", "10 m", "1h-5m", "0"])
def test_a_bad_duration_is_refused(text: str) -> None:
    with pytest.raises(click.BadParameter):
        Duration().convert(text, None, None)


def test_zero_and_a_minimum() -> None:
    assert Duration(minimum=0).convert("0", None, None) == 0
    with pytest.raises(click.BadParameter, match="at least 1s"):
        Duration(minimum=1).convert("500ms", None, None)


def test_a_duration_on_the_command_line_is_one_clear_line(tmp_path: Path) -> None:
    result = kubesmith("apply", str(SINGLE), "--deadline", "10 minutes")
    assert result.returncode == ExitCode.USAGE
    assert "is not a duration (examples: 90s, 15m" in result.stderr and "Traceback" not in result.stderr


def test_render_writes_to_out_dir_and_minus_o_is_no_directory(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    refused = kubesmith("render", str(SINGLE), "-o", "json", "--state-dir", state, cwd=tmp_path)
    assert refused.returncode == ExitCode.USAGE and not (tmp_path / "json").exists()
    assert "give the directory with --out-dir DIR" in refused.stderr
    old = kubesmith("render", str(SINGLE), "-o", str(tmp_path / "old"), "--state-dir", state)
    assert old.returncode == 0, old.stderr
    assert old.stderr.count("warning: -o/--output-dir is deprecated; use --out-dir") == 1
    new = kubesmith("render", str(SINGLE), "--out-dir", str(tmp_path / "new"), "--state-dir", state)
    assert new.returncode == 0 and "deprecated" not in new.stderr
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == sorted(p.name for p in (tmp_path / "old").iterdir())


@pytest.mark.parametrize("args,former", [
    (("token", "create", "--cluster", "{missing}"), "--cluster"),
    (("join", "--spec", "{missing}", "--server", "https://10.0.0.1:8443", "--ca-hash", "sha256:" + "0" * 64,
      "--token", "abcdef.0123456789abcdef0123456789abcdef", "--node", "w1", "--root", "{tmp}"), "--spec"),
    (("token", "list", "--config", "{missing}"), "--config"),
    (("etcd", "snapshot", "{missing}", "--format", "json"), "--format"),
])
def test_former_spellings_still_work_with_one_warning(tmp_path: Path, args: tuple[str, ...], former: str) -> None:
    """A script written with the old spelling still runs (here: to the missing file, exit 3)."""
    missing = str(tmp_path / "missing.yaml")
    result = kubesmith(*(a.format(missing=missing, tmp=tmp_path) for a in args))
    assert result.returncode == ExitCode.IO_ERROR, result.stderr
    assert result.stderr.count(f"warning: {former} is deprecated") == 1, result.stderr


def test_output_given_a_file_name_says_how_to_write_files() -> None:
    result = kubesmith("etcd", "snapshot", str(SINGLE), "--output", "snap.db")
    assert result.returncode == ExitCode.USAGE
    assert "write a file with --out FILE" in result.stderr


@pytest.mark.parametrize("command", [("plan",), ("status",), ("upgrade", "plan"),
                                     ("etcd", "snapshot"), ("reset", "--yes"), ("token", "create")])
def test_a_missing_known_hosts_is_the_same_exit_code_everywhere(tmp_path: Path, command: tuple[str, ...]) -> None:
    """A file the command line names that cannot be read: exit 3 from every command, before any
    host is tried (status said 3 and plan 5 before)."""
    *words, = command
    group = 2 if words[0] in ("upgrade", "etcd", "token") else 1
    args = [*words[:group], str(SINGLE), *words[group:], "--known-hosts", str(tmp_path / "known_hosts")]
    if words[0] in ("plan", "status", "reset"):
        args += ["--state-dir", str(tmp_path / "state")]
    result = kubesmith(*args)
    assert result.returncode == ExitCode.IO_ERROR, result.stderr
    assert f"known_hosts file {tmp_path / 'known_hosts'} does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_init_and_schema_print_json_and_yaml() -> None:
    import json

    import yaml

    made = kubesmith("init", "--name", "demo", "--host", "h1=10.0.0.11", "-o", "json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["kind"] == "Cluster"
    assert yaml.safe_load(kubesmith("init", "--name", "demo", "--host", "h1=10.0.0.11").stdout) == \
        json.loads(made.stdout)
    schema = kubesmith("schema", "-o", "yaml")
    assert schema.returncode == 0 and yaml.safe_load(schema.stdout) == json.loads(kubesmith("schema").stdout)


@pytest.mark.parametrize("extra", [("--out", "x.conf"), ("-o", "json")])
def test_kubeconfig_merge_excludes_out_and_another_format(extra: tuple[str, ...]) -> None:
    result = kubesmith("kubeconfig", str(SINGLE), "--merge", *extra)
    assert result.returncode == ExitCode.USAGE and result.stderr.startswith("error: "), result.stderr
