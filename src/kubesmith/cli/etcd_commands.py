"""`kubesmith etcd snapshot` and `kubesmith etcd restore`: the cluster's etcd saved, and put back."""

from __future__ import annotations

import time
from pathlib import Path

import click

from kubesmith.cli.common import (DURATION, emit_json, fail, out_option, output_option, progress, renamed,
                                  spec_argument, ssh_flags)
from kubesmith.cli.day2 import confirm, on_hosts
from kubesmith.exitcodes import ExitCode

SNAPSHOT_LIMIT = 16 << 30  # an etcd snapshot: etcd's largest backend quota is 8 GiB


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
    from kubesmith.fsutil import out_file_problem

    if out_file and (problem := out_file_problem(Path(out_file))) is not None:  # before a host is reached
        fail(f"--out {out_file!r}: {problem}", ExitCode.USAGE)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    _, taken = on_hosts(spec_file, ssh_config, known_hosts, identity, lambda transport, plan: snapshot(
        transport, plan, Path(out_file or f"etcd-{plan.cluster}-{stamp}.db"), progress))
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
    confirm(yes, f"Replace the whole state of this cluster with {snapshot_file}?")
    _, removed = on_hosts(spec_file, ssh_config, known_hosts, identity, lambda transport, plan: restore(
        transport, plan, snapshot_file, progress, deadline=deadline))
    click.echo(f"restored {snapshot_file} on {len(removed)} member{'s' if len(removed) != 1 else ''}; "
               "the cluster is healthy and the old data was removed")
