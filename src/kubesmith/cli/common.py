"""What every command shares: loading the spec with friendly errors, output formats, exit codes."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import sys
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from kubesmith.exitcodes import ExitCode, UsageError
from kubesmith.vocabulary.errors import Problem, SpecError
from kubesmith.lifetimes import SERVICE_VALIDITY_MAX_DAYS

if TYPE_CHECKING:
    from kubesmith.vocabulary.environment import HostEnvironment
    from kubesmith.vocabulary.history import History
    from kubesmith.vocabulary.model import Plan
    from kubesmith.spec.load import LoadedSpec


class CommandFailed(click.ClickException):
    """A user-facing failure with its own exit code; printed as one line, never a traceback."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.exit_code = int(code)

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {printable(self.format_message(), keep=chr(10))}", err=True)


def run_guarded(command: click.Command) -> int:
    """Run the CLI; anything that escapes is turned into a message, and only bugs show a traceback.
    Whatever it writes to stdout and stderr goes through `printable`: text from the cluster file, a
    state directory or the command line (a flag value with a bidi override, a path with an escape
    sequence) reaches the terminal escaped, whichever message, table or plan carries it."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = PrintableStream(sys.stdout), PrintableStream(sys.stderr)
    try:
        return _run_guarded(command)
    finally:
        sys.stdout, sys.stderr = saved


class PrintableStream:
    """A text stream that writes `printable(text)`, keeping line breaks and tabs, in what the stream's
    encoding can carry (the rest as escapes: an ASCII locale reads `\\xe9`, and a write never fails with
    UnicodeEncodeError); all else is the stream's.

    It shows no binary `buffer`: click writes to the buffer of a stream whose encoding is ASCII, past
    the guard; without one, click writes here, whatever the locale."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: Any) -> int:
        if not isinstance(text, str):
            return self._stream.write(text)  # type: ignore[no-any-return]  # refused: a text stream takes no bytes
        safe = printable(text, keep="\n\t")
        encoding = getattr(self._stream, "encoding", None)
        if encoding and not safe.isascii():
            safe = safe.encode(encoding, "backslashreplace").decode(encoding)
        self._stream.write(safe)
        return len(text)

    def writelines(self, lines: Iterable[Any]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        if name == "buffer":
            raise AttributeError(name)
        return getattr(self._stream, name)


def unfiltered(stream: Any) -> Any:
    """The stream under a PrintableStream: for a writer that draws with escape sequences itself (the
    live progress view) and sanitises the text it draws."""
    return stream._stream if isinstance(stream, PrintableStream) else stream


def _run_guarded(command: click.Command) -> int:
    try:
        command.main(standalone_mode=False)
        sys.stdout.flush()  # a full or broken output device fails here, not in the interpreter's exit
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except SpecError as exc:
        report_problems(exc.problems)
        return ExitCode.INVALID_SPEC
    except UsageError as exc:
        click.echo(f"error: {printable(str(exc))}", err=True)
        return ExitCode.USAGE
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except OSError as exc:  # what no command expects: a full disk or output device, a vanished pipe
        return _io_failed(exc)
    return ExitCode.OK


def _io_failed(exc: OSError) -> int:
    """One line for a failed read or write (nothing when the reader of stdout went away), then the
    output streams are pointed at /dev/null so the interpreter's own flush at exit cannot fail again."""
    where = f"{exc.filename}" if exc.filename else "writing the output"
    for stream in (sys.stdout, sys.stderr):
        if isinstance(exc, BrokenPipeError) and stream is sys.stderr:
            continue
        _discard_pending(stream)
    if not isinstance(exc, BrokenPipeError):
        try:
            click.echo(f"error: {where}: {exc.strerror or exc}", err=True)
            sys.stderr.flush()
        except OSError:
            _discard_pending(sys.stderr)
    return ExitCode.IO_ERROR


def _discard_pending(stream: Any) -> None:
    """Send what `stream` still buffers, and all it gets later, to /dev/null (only a stream on a file
    descriptor: tests hand in memory streams)."""
    try:
        descriptor = stream.fileno()
    except (OSError, ValueError, AttributeError):
        return
    try:
        stream.flush()
        return
    except OSError:
        pass
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, descriptor)
    finally:
        os.close(null)


def fail(message: str, code: ExitCode = ExitCode.FAILED) -> NoReturn:
    raise CommandFailed(message, code)


def progress(line: str) -> None:
    """A line of what a long command is doing, on standard error: standard output stays its result."""
    click.echo(line, err=True)


def say(line: str) -> None:
    """progress() under kubesmith's name: the host-side commands' lines land in a unit's journal."""
    click.echo(f"kubesmith: {line}", err=True)


def report_problems(problems: tuple[Problem, ...] | list[Problem]) -> None:
    errors = sum(1 for problem in problems if problem.severity == "error")
    for problem in problems:
        click.echo(printable(("error: " if problem.severity == "error" else "") + str(problem)), err=True)
    if errors:
        click.echo(f"{errors} error{'s' if errors != 1 else ''} found", err=True)


def shown_path(path: Any) -> str:
    """A path from the command line or a file, for a one-line message: a newline or escape in it is shown
    escaped (a crafted name must not forge a second message line), a very long one cut (`short`)."""
    text = str(path)
    return printable(text) if len(text) <= 160 else short(text)


def load_spec_or_fail(path: str) -> LoadedSpec:
    """Load a spec; a missing or unreadable file is an I/O error (exit 3), a bad spec exit 1."""
    from kubesmith.spec.load import load_spec_file  # heavy (pydantic models): only commands that need it

    try:
        return load_spec_file(Path(path))
    except FileNotFoundError:
        fail(f"{shown_path(path)}: no such file", ExitCode.IO_ERROR)
    except IsADirectoryError:
        fail(f"{shown_path(path)}: is a directory, expected a cluster file", ExitCode.IO_ERROR)
    except UnicodeDecodeError as exc:
        fail(f"{shown_path(path)}: not UTF-8 text ({exc.reason} at byte {exc.start})", ExitCode.IO_ERROR)
    except OSError as exc:
        fail(f"{shown_path(path)}: {exc.strerror}", ExitCode.IO_ERROR)


class _HostOption(click.Option):
    """--host, with the old spelling --hosts accepted but left out of --help."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        record = super().get_help_record(ctx)
        return (record[0].replace(", --hosts", ""), record[1]) if record else None


def hosts_option(dest: str = "hosts", help_text: str = "Only these hosts") -> Callable[[Callable[..., Any]], Any]:
    """--host NAME on every command that takes a selection of hosts: repeatable, or a comma list (H1,H2);
    the value is a tuple of names in order, without repeats."""

    def split(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
        names = [name.strip() for value in values for name in value.split(",")]
        if any(not name for name in names):  # `--host ''` or `a,,b` must not widen the selection to all hosts
            raise click.BadParameter(f"{printable(repr(','.join(values)))} holds an empty host name", ctx, param)
        return tuple(dict.fromkeys(names))

    return click.option("--host", "--hosts", dest, cls=_HostOption, multiple=True, metavar="NAME", callback=split,
                        help=f"{help_text} (repeatable, or a comma list H1,H2; default: all).")


def ssh_flags(when: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--ssh-config, --known-hosts, --identity: how every command that reaches hosts logs in."""
    note = f" ({when})" if when else ""
    flags = (
        click.option("--ssh-config", default=None,
                     help=f"OpenSSH client config (default: spec.ssh, or the lab's){note}."),
        click.option("--known-hosts", default=None, help=f"known_hosts file; unknown host keys are refused{note}."),
        click.option("--identity", default=None, help=f"Private key to log in with{note}."),
    )

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        for flag in reversed(flags):
            function = flag(function)
        return function

    return decorate


def load_plan_or_fail(path: str, environments: Mapping[str, HostEnvironment] | None = None,
                      history: History | None = None) -> tuple[LoadedSpec, Plan]:
    """The spec and its plan (with what was observed of hosts, and how etcd's members first
    started): where every command that acts on hosts starts."""
    from kubesmith.plan.evaluate import evaluate
    from kubesmith.versions.registry import load_registry

    loaded = load_spec_or_fail(path)
    return loaded, evaluate(loaded.cluster, load_registry(), environments, history)


def check_host_names(plan: Plan, names: Iterable[str], path: str) -> None:
    """Refuse (exit 2) a host name the cluster file does not have, listing the ones it has."""
    refuse_unknown_hosts([host.name for host in plan.hosts], names, path)


def refuse_unknown_hosts(known: list[str], names: Iterable[str], path: str) -> None:
    """check_host_names, before the hosts are planned: `known` are the cluster file's host names."""
    have = set(known)
    unknown = [name for name in names if name not in have]
    if unknown:
        fail(f"no host named {unknown[0]!r} in {path}; hosts: {', '.join(known)}", ExitCode.USAGE)


def read_json_config(path: str, required: bool) -> dict[str, Any]:
    """A settings file written by a module; missing is fine unless the user named it."""
    from kubesmith.documents import load_json, reason
    from kubesmith.fsutil import SMALL_FILE_BYTES, read_regular

    try:
        document = load_json(read_regular(Path(path), SMALL_FILE_BYTES, "a JSON settings file"))
    except FileNotFoundError:
        if required:
            fail(f"{shown_path(path)}: no such file", ExitCode.IO_ERROR)
        return {}
    except (OSError, ValueError) as exc:
        fail(f"{shown_path(path)}: unreadable settings ({reason(exc)})", ExitCode.IO_ERROR)
    if not isinstance(document, dict):
        fail(f"{shown_path(path)}: settings must be a JSON object", ExitCode.IO_ERROR)
    return document


def config_option(default_path: str) -> Any:
    return click.option("--config", "config_file", default=None, metavar="FILE",
                        help=f"Settings file (default: {default_path} if it exists).")


@contextmanager
def user_errors(code: ExitCode = ExitCode.FAILED) -> Iterator[None]:
    """Expected failures of the host-side commands become one line and an exit code, never a traceback."""
    from kubesmith.ca.client import CaClientError
    from kubesmith.ca.tokens import TokenError
    from kubesmith.pki.keys import BadKeyFile

    try:
        yield
    except FileNotFoundError as exc:
        fail(f"{shown_path(exc.filename)}: no such file", ExitCode.IO_ERROR)
    except PermissionError as exc:
        fail(f"{shown_path(exc.filename)}: permission denied", ExitCode.IO_ERROR)
    except (TokenError, BadKeyFile) as exc:
        fail(str(exc), ExitCode.IO_ERROR)
    except CaClientError as exc:
        fail(str(exc), code)
    except OSError as exc:
        fail(f"{shown_path(exc.filename or '')}: {exc.strerror or exc}", ExitCode.IO_ERROR)


def check_addresses(addresses: tuple[str, ...], option: str = "--address") -> tuple[str, ...]:
    """The addresses in canonical form (as the cluster file holds them); one that is no address, or one no
    client can reach the node at (unspecified, multicast...), is a usage error."""
    from kubesmith.vocabulary.types import canonical_ip, unusable

    canonical = []
    for address in addresses:
        try:
            text = canonical_ip(address)
        except ValueError as exc:
            fail(f"{option} {address!r}: {exc}" if "is not a valid" not in str(exc) else
                 f"{option} {address!r} is not an IP address", ExitCode.USAGE)
        parsed = ipaddress.ip_address(text)  # loopback and link-local: a test node, a point-to-point link
        if not parsed.is_loopback and (reason := unusable(parsed, link_local=True)):
            fail(f"{option} {address!r} is {reason}: a node's certificate names an address its clients reach it at",
                 ExitCode.USAGE)
        canonical.append(text)
    return tuple(canonical)


def check_node_name(node: str, what: str = "--node") -> None:
    from kubesmith.ca import policy

    try:
        policy.check_node_name(node)
    except policy.PolicyError as exc:
        fail(f"{what}: {exc}", ExitCode.USAGE)


class _PreflightOption(click.Option):
    """--ignore-preflight, whose help names the checks: read from the preflight module when the help is
    read, not when the command is defined (it imports the planner and the PKI: `status`, which shares a
    module with `run`, and `apply --help` would pay for it)."""

    @property  # type: ignore[override]
    def help(self) -> str:
        from kubesmith.backends.preflight import NAMES

        return f"Skip these preflight checks (comma-separated, or all): {', '.join(NAMES)}."

    @help.setter
    def help(self, value: str | None) -> None:
        pass  # always the text above


def ignore_preflight_flag() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--ignore-preflight NAME,...: preflight checks to skip (kubeadm's flag); an unknown name is a usage error."""

    def convert(ctx: click.Context, param: click.Parameter, value: str | None) -> frozenset[str]:
        from kubesmith.backends.preflight import parse_ignored  # the command runs preflight: it loads it anyway

        try:
            return parse_ignored(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None

    return click.option("--ignore-preflight", "ignore_preflight", cls=_PreflightOption, default=None,
                        metavar="NAME,...", callback=convert)


def preflight_failed(failures: Iterable[Any]) -> NoReturn:
    """Every preflight failure on its own line, then the summary; exit 6."""
    from kubesmith.backends.preflight import report_lines

    *lines, summary = report_lines(list(failures))
    for line in lines:
        click.echo(line, err=True)
    fail(summary, ExitCode.PREFLIGHT)


def printable(text: str, keep: str = "") -> str:
    """`text` from a user or a file, safe to print: control, format and line-separator characters
    (escape sequences that would drive the reader's terminal) are shown as escapes instead, and so are
    surrogates (undecodable bytes of a file name, which no output encoding takes); the characters in
    `keep` (a message's own line breaks) stay.

    Every write to stdout comes here (`PrintableStream`), and `plan -o json` of 10,000 hosts is 300 MB:
    text of printable ASCII alone is passed as it is, known by deleting those bytes from its ASCII
    encoding (in C, a byte at a time); elsewhere only the characters outside printable ASCII are looked
    at one by one, found by a regular expression. Testing each character in Python took 40 s."""
    if text.isascii() and not text.encode("ascii").translate(None, _clean_ascii(keep)):
        return text
    return _suspects(keep).sub(_escaped, text)


@lru_cache(maxsize=16)
def _clean_ascii(keep: str) -> bytes:
    """The bytes of printable ASCII and of the ASCII characters in `keep`."""
    return bytes(range(0x20, 0x7f)) + "".join(c for c in keep if c.isascii()).encode("ascii")


@lru_cache(maxsize=16)
def _suspects(keep: str) -> re.Pattern[str]:
    """Any character but printable ASCII and those in `keep`."""
    kept = "".join(f"\\U{ord(c):08x}" for c in sorted(set(keep)))
    return re.compile(f"[^\\x20-\\x7e{kept}]")


def _escaped(match: re.Match[str]) -> str:
    c = match.group()
    if ord(c) < 0x100 and unicodedata.category(c) == "Cc":
        return f"\\x{ord(c):02x}"
    return f"\\u{ord(c):04x}" if unicodedata.category(c) in _UNPRINTABLE else c


_UNPRINTABLE = ("Cc", "Cf", "Cs", "Zl", "Zp")


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


# What a path or a name on the command line may not be: the empty string (`--out-dir ''` wrote into the
# current directory, `--state-dir ''` fell back to the default, `--host ''` selected every host), nor
# spaces alone, nor a path component longer than the kernel takes.
NAME_PARAMETERS = ("dir", "file", "path", "host", "node", "name", "config", "identity", "known_hosts", "binaries",
                   "out", "kubeconfig", "state")
NAME_COMPONENT_MAX = 255  # NAME_MAX: one component of a path
PATH_MAX = 4096


class _NonEmpty:
    """A path or name parameter's check before its own type's (a mixin on that type: click.Path stays a
    click.Path): no empty or blank value, no path longer than PATH_MAX or with a component longer than
    NAME_MAX; each names its flag (a usage error, exit 2)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            if not value.strip():
                name = (param.name or "") if param else ""
                hint = ("a path (for the current directory, write .)" if isinstance(self, click.Path) or any(
                    word in name for word in ("dir", "file", "path", "config", "identity", "known", "binaries", "out"))
                    else "a name")
                self.fail(f"{printable(repr(value))} is empty: give {hint}", param, ctx)  # type: ignore[attr-defined]
            if problem := path_length_problem(value):
                self.fail(problem, param, ctx)  # type: ignore[attr-defined]
        return super().convert(value, param, ctx)  # type: ignore[misc]


class NonEmptyPath(_NonEmpty, click.Path):
    pass


class NonEmptyString(_NonEmpty, click.types.StringParamType):
    pass


def path_length_problem(value: str) -> str | None:
    """Why `value` is longer than any path the kernel opens (ENAMETOOLONG), or None."""
    shown = short(value)
    if len(value.encode(errors="surrogateescape")) >= PATH_MAX:
        return f"{shown} is longer than {PATH_MAX - 1} bytes, the longest path the system takes"
    if any(len(part.encode(errors="surrogateescape")) > NAME_COMPONENT_MAX for part in value.split("/")):
        return f"{shown} has a component longer than {NAME_COMPONENT_MAX} bytes, the longest file name the system takes"
    return None


def short(value: str, keep: int = 80) -> str:
    """`value` quoted and escaped for a message, cut to its first `keep` characters when longer."""
    if len(value) <= keep:
        return printable(repr(value))
    return printable(repr(value[:keep])) + f"…({len(value)} characters)"


def refuse_empty_names(command: click.Command) -> click.Command:
    """Give every path or name parameter of `command` (and of the commands under it) the NonEmpty check;
    idempotent. One place, so that no command forgets it."""
    for param in command.params:
        names = (param.name or "").lower()
        if isinstance(param.type, _NonEmpty) or not any(word in names for word in NAME_PARAMETERS):
            continue
        if param.type is click.STRING:
            param.type = NonEmptyString()
        elif type(param.type) is click.Path:
            checked = object.__new__(NonEmptyPath)
            checked.__dict__.update(param.type.__dict__)
            param.type = checked
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            refuse_empty_names(sub)
    return command


def spec_argument(required: bool = True, former: tuple[str, ...] = ()) -> Any:
    """The cluster file: always the first positional argument (FILE); `former` are the options that
    named it before (`--spec`, `--cluster`), still accepted with a warning."""
    argument = click.argument("spec_file", metavar="FILE" if required else "[FILE]", required=required,
                              cls=RenamedArgument, type=click.Path(dir_okay=True, path_type=str))
    return _with_former(argument, former)


class Duration(click.ParamType):
    """Every duration option's one syntax: `90s`, `10m`, `1h30m`, `7d`, `500ms`, or a bare number of
    seconds (what units and older scripts pass), as seconds. One type, so no command reads
    `600.0` where another wants `8h`; `minimum` is the shortest value it takes (0: zero too)."""

    name = "duration"

    def __init__(self, minimum: float | None = None, maximum: float | None = None, what: str = "") -> None:
        self.minimum = minimum
        self.maximum = maximum  # a lifetime that becomes certificate dates: a huge one overflows them
        self.what = what

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        from kubesmith.durations import duration_seconds

        try:
            seconds = float(value) if isinstance(value, (int, float)) else duration_seconds(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if self.minimum is None and seconds <= 0:
            self.fail(f"{value!r}: a duration must be positive", param, ctx)
        if self.minimum is not None and seconds < self.minimum:
            self.fail(f"{value!r}: at least {self.minimum:g}s", param, ctx)
        if self.maximum is not None and seconds > self.maximum:
            self.fail(f"{value!r}: at most {self.maximum / 86400:g} days ({self.what})", param, ctx)
        return seconds


DURATION = Duration()
DURATION_OR_ZERO = Duration(minimum=0)
# lifetimes that end up as certificate or token dates: bounded when parsed, before anything is done
CERTIFICATE_TTL = Duration(maximum=365 * 86400, what="a person's certificate lives a year at most")
SERVICE_VALIDITY = Duration(maximum=SERVICE_VALIDITY_MAX_DAYS * 86400, what="no issued certificate outlives the ten years of its CA")

FORMAT_NAMES = ("text", "json", "yaml", "md")


class OutputFormat(click.Choice):
    """-o/--output: always the output format. A value that is not one (a file name, as `--output FILE`
    once was in some commands) gets the spellings that do write files."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value in self.choices:
            return value
        self.fail(f"{value!r} is not an output format ({', '.join(map(str, self.choices))}); -o/--output is the "
                  "format: write a file with --out FILE, a directory with --out-dir DIR", param, ctx)


def output_option(*formats: str, help_text: str = "Output format.") -> Callable[[Callable[..., Any]], Any]:
    """-o/--output FORMAT on every command that prints data: text (or md, yaml) first, json always."""
    choices = formats or ("text", "json")
    return click.option("-o", "--output", "output", cls=RenamedOption, type=OutputFormat(choices),
                        default=choices[0], show_default=True, help=help_text)


class FormerSpelling(click.Option):
    """A spelling an option or argument had before (`--output-dir`, `--spec FILE`): hidden from help and
    completion, it still works for the scripts and units written with it; the parameter that
    replaced it (`current`) takes its value and says so in one warning line."""

    def __init__(self, opts: tuple[str, ...], target: str, current: str, refuse_formats: bool = False) -> None:
        super().__init__([*opts, f"former_{target}"], hidden=True, expose_value=False, metavar="VALUE")
        self.current = current
        self.refuse_formats = refuse_formats

    def value_for(self, ctx: click.Context, opts: Mapping[str, Any]) -> Any:
        """The value given to this spelling, or _NOT_GIVEN; warns (once per use) that it is deprecated."""
        value = opts.get(self.name or "", _NOT_GIVEN)
        if value is _NOT_GIVEN:
            return value
        spelled = "/".join(self.opts)
        if self.refuse_formats and value in FORMAT_NAMES:
            raise click.UsageError(f"{spelled} {value}: -o/--output is the output format now; give the directory "
                                   f"with {self.current} DIR", ctx)
        if not ctx.resilient_parsing:
            click.echo(f"warning: {spelled} is deprecated; use {self.current}", err=True)
        return value


_NOT_GIVEN = object()


class _Renamed:
    """Mixin for a parameter with former spellings: when it is not given, a former spelling's value is."""

    former: FormerSpelling | None = None

    def consume_value(self, ctx: click.Context, opts: Mapping[str, Any]) -> tuple[Any, Any]:
        value, source = super().consume_value(ctx, opts)  # type: ignore[misc]
        if self.former is not None and source is not click.core.ParameterSource.COMMANDLINE:
            former = self.former.value_for(ctx, opts)
            if former is not _NOT_GIVEN:
                return former, click.core.ParameterSource.COMMANDLINE
        return value, source


class RenamedOption(_Renamed, click.Option):
    """An option whose former spellings still work (see FormerSpelling)."""


class RenamedArgument(_Renamed, click.Argument):
    """An argument once given as an option (`--spec FILE`, `--cluster FILE`)."""


def renamed(*former: str, refuse_formats: bool = False) -> Callable[[Callable[..., Any]], Any]:
    """Give the parameter declared just below (a RenamedOption or RenamedArgument) the former
    spellings `former`; put it directly above that parameter's decorator."""

    def decorate(function: Callable[..., Any]) -> Any:
        params: list[click.Parameter] = getattr(function, "__click_params__", [])
        target = params[-1] if params else None
        if not isinstance(target, _Renamed):
            raise TypeError("renamed() must sit directly above a RenamedOption or RenamedArgument")
        current = (max(target.opts, key=len) if isinstance(target, click.Option)
                   else f"{(target.metavar or 'FILE').strip('[]')} as the first argument")
        target.former = FormerSpelling(former, str(target.name), current, refuse_formats)
        params.append(target.former)
        return function

    return decorate


def out_option(help_text: str, *former: str) -> Callable[[Callable[..., Any]], Any]:
    """--out FILE: where a command writes a file (never -o, which is a format). The command checks
    the path itself, so that a bad one is its own one-line failure with its own exit code."""
    return _with_former(click.option("--out", "out_file", cls=RenamedOption, default=None, metavar="FILE",
                                     type=click.Path(), help=help_text), former)


def out_dir_option(help_text: str, *former: str, required: bool = False,
                   refuse_formats: bool = False) -> Callable[[Callable[..., Any]], Any]:
    """--out-dir DIR: where a command writes a tree of files (checked by the command, as --out)."""
    return _with_former(click.option("--out-dir", "out_dir", cls=RenamedOption, required=required, default=None,
                                     metavar="DIR", type=click.Path(), help=help_text),
                        former, refuse_formats)


def _with_former(option: Callable[[Callable[..., Any]], Any], former: tuple[str, ...],
                 refuse_formats: bool = False) -> Callable[[Callable[..., Any]], Any]:
    if not former:
        return option
    return lambda function: renamed(*former, refuse_formats=refuse_formats)(option(function))


def require_ssh_files(problem: str | None) -> None:
    """A file the SSH settings name that is missing or unusable (known_hosts, identity, config) is
    the same failure in every command: exit 3 (a file could not be read), said once, before any host
    is tried (`SshOptions.problem()`)."""
    if problem is not None:
        fail(problem, ExitCode.IO_ERROR)
