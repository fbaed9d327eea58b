"""Day-2 commands: `etcd snapshot`, `etcd restore`, `reset`."""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from kubesmith.cli.common import (DURATION, check_host_names, emit_json, fail, hosts_option,
                                  load_plan_or_fail, out_option, output_option, renamed, require_ssh_files,
                                  spec_argument, ssh_flags)
from kubesmith.exitcodes import ExitCode
from kubesmith.pki.store import default_state_dir
from kubesmith.vocabulary.model import Plan

T = TypeVar("T")
SNAPSHOT_LIMIT = 16 << 30  # an etcd snapshot: etcd's largest backend quota is 8 GiB


def _progress(line: str) -> None:
    click.echo(line, err=True)


def _on_hosts(spec_file: str, ssh_config: str | None, known_hosts: str | None, identity: str | None,
              work: Callable[[Any, Plan], Awaitable[T]]) -> tuple[Plan, T]:
    """Run `work(transport, plan)`; a failed step is one line naming host and step (exit 5)."""
    from kubesmith.backends.day2 import Day2Error
    from kubesmith.backends.ssh_settings import ssh_options
    from kubesmith.transport.ssh import SshTransport, TransportError

    loaded, plan = load_plan_or_fail(spec_file)
    options, _ = ssh_options(loaded.cluster, ssh_config, known_hosts, identity)
    require_ssh_files(options.problem())

    async def run() -> T:
        async with SshTransport(options) as transport:
            return await work(transport, plan)

    try:
        return plan, asyncio.run(run())
    except (Day2Error, TransportError) as exc:
        fail(str(exc), ExitCode.FAILED)


def _confirm(yes: bool, question: str) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        fail(f"{question} Give --yes to proceed without a terminal.", ExitCode.USAGE)
    if not click.confirm(question, default=False):
        fail("nothing was changed", ExitCode.USAGE)


@click.group("etcd")
def etcd_group() -> None:
    """Snapshots of the cluster's etcd and restoring one (etcd's disaster-recovery procedure)."""


@etcd_group.command("snapshot")
@spec_argument()
@out_option("Where to write it (0600); default: etcd-<cluster>-<UTC time>.db here.")
@renamed("--format")
@output_option()
@ssh_flags()
def snapshot_command(spec_file: str, out_file: str | None, output: str, ssh_config: str | None,
                     known_hosts: str | None, identity: str | None) -> None:
    """Save a consistent snapshot through the etcd API of the first healthy member; print its hash and revision."""
    from kubesmith.backends.day2 import snapshot

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    _, taken = _on_hosts(spec_file, ssh_config, known_hosts, identity, lambda transport, plan: snapshot(
        transport, plan, Path(out_file or f"etcd-{plan.cluster}-{stamp}.db"), _progress))
    if output == "json":
        emit_json({"path": str(taken.path), "member": taken.member, "revision": taken.revision, "hash": taken.hash,
                   "keys": taken.keys, "size": taken.size, "sha256": taken.sha256})
    else:
        click.echo(f"{taken.path}: revision {taken.revision}, hash {taken.hash}, {taken.keys} keys, "
                   f"{taken.size} bytes, sha256 {taken.sha256} (from {taken.member})")


@etcd_group.command("restore")
@spec_argument()
@click.argument("snapshot_file", metavar="SNAPSHOT", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--deadline", type=DURATION, default="10m", show_default=True,
              help="How long etcd and the API servers may take.")
@ssh_flags()
def restore_command(spec_file: str, snapshot_file: Path, yes: bool, deadline: float, ssh_config: str | None,
                    known_hosts: str | None, identity: str | None) -> None:
    """Replace the cluster's state with SNAPSHOT on every etcd member.

    Checks the file's integrity first (nothing changes when it fails), stops the API servers and
    etcd, restores each member's data as a new cluster with the old data kept aside, starts etcd,
    then the API servers, and removes the old data once they are healthy.
    """
    from kubesmith.backends.day2 import integrity_problem, restore

    from kubesmith.fsutil import read_regular

    try:
        data = read_regular(snapshot_file, SNAPSHOT_LIMIT, "an etcd snapshot")
    except OSError as exc:
        fail(f"{snapshot_file}: {exc.strerror or exc}", ExitCode.USAGE)
    problem = integrity_problem(data)
    if problem:
        fail(f"{snapshot_file} {problem}; nothing was changed", ExitCode.FAILED)
    _confirm(yes, f"Replace the whole state of this cluster with {snapshot_file}?")
    _, removed = _on_hosts(spec_file, ssh_config, known_hosts, identity, lambda transport, plan: restore(
        transport, plan, snapshot_file, _progress, deadline=deadline))
    click.echo(f"restored {snapshot_file} on {len(removed)} member{'s' if len(removed) != 1 else ''}; "
               "the cluster is healthy and the old data was removed")


def _check_purgeable(state: Path, cluster: str) -> None:
    """--purge deletes a directory kubesmith made for this cluster (its PKI records the cluster), never
    another (a mistyped --state-dir such as / or $HOME); checked before any host is touched."""
    from kubesmith.pki.store import PkiError, read_record, store_root

    if not state.exists():
        return
    try:
        record = read_record(store_root(state)) if state.is_dir() else None
    except PkiError as exc:
        fail(f"--purge: {exc}", ExitCode.USAGE)
    if record is None or record.name != cluster:
        whose = f"cluster {record.name!r}" if record else "no cluster (no pki/cluster.json)"
        fail(f"--purge: {state} is not the state directory of cluster {cluster!r} (it records {whose}); "
             "refusing to delete it, and no host was changed", ExitCode.USAGE)


@click.command("reset")
@spec_argument()
@hosts_option()
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--purge", is_flag=True, help="Also delete the cluster's state directory (its CAs and keys).")
@click.option("--state-dir", default=None, metavar="DIR", help="The cluster's state directory (it forgets the reset hosts' etcd membership).")
@ssh_flags()
def reset_command(spec_file: str, hosts: tuple[str, ...], yes: bool, purge: bool, state_dir: str | None,
                  ssh_config: str | None, known_hosts: str | None, identity: str | None) -> None:
    """Stop and remove kubesmith's units, files and data directories on the hosts.

    Refuses a host whose manifest names another cluster (or none) before touching any. The
    state directory stays, unless --purge: a later `apply` builds the cluster again with the
    same CAs, so old kubeconfigs work again. An etcd member of a cluster that keeps running
    (other members are not reset) leaves etcd first; the state directory forgets the reset
    hosts, so the next apply founds the cluster anew (every host reset) or has them join it.
    """
    from kubesmith.backends.day2 import reset
    from kubesmith.backends.etcd_members import forget
    from kubesmith.backends.removal import forget_hosts

    _, plan = load_plan_or_fail(spec_file)
    selected = list(hosts) or [host.name for host in plan.hosts]
    check_host_names(plan, selected, spec_file)
    state = default_state_dir(Path(spec_file), plan.cluster, state_dir)
    if purge:
        _check_purgeable(state, plan.cluster)
    _confirm(yes, f"Remove cluster {plan.cluster!r} from {', '.join(selected)} (units, files, etcd data)?")
    _on_hosts(spec_file, ssh_config, known_hosts, identity,
              lambda transport, plan: reset(transport, plan, selected, _progress))
    if state.is_dir():  # their etcd data is gone: the next apply founds or joins them anew
        forget(state, selected)
        forget_hosts(state, selected)
    click.echo(f"reset {', '.join(selected)}")
    if purge and state.is_dir():
        shutil.rmtree(state, ignore_errors=True)
        click.echo(f"removed the state directory {state}")
