"""`kubesmith reset`: kubesmith's units, files and data taken off the hosts; the state directory only on --purge."""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from kubesmith.cli.common import (check_host_names, fail, hosts_option, load_plan_or_fail, progress, spec_argument,
                                  ssh_flags)
from kubesmith.cli.day2 import confirm, on_hosts
from kubesmith.exitcodes import ExitCode
from kubesmith.pki.store import default_state_dir


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
    confirm(yes, f"Remove cluster {plan.cluster!r} from {', '.join(selected)} (units, files, etcd data)?")
    on_hosts(spec_file, ssh_config, known_hosts, identity,
              lambda transport, plan: reset(transport, plan, selected, progress))
    if state.is_dir():  # their etcd data is gone: the next apply founds or joins them anew
        forget(state, selected)
        forget_hosts(state, selected)
    click.echo(f"reset {', '.join(selected)}")
    if purge and state.is_dir():
        shutil.rmtree(state, ignore_errors=True)
        click.echo(f"removed the state directory {state}")
