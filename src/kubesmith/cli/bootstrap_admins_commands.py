"""`kubesmith bootstrap-admins`: admin.conf's group bound to cluster-admin, once a control-plane host's
API answers."""

from __future__ import annotations

from pathlib import Path

import click

from kubesmith.cli.common import Duration, fail, shown_path
from kubesmith.exitcodes import ExitCode


@click.command("bootstrap-admins", hidden=True)
@click.option("--kubeconfig", "kubeconfig", required=True, type=click.Path(dir_okay=False, path_type=Path),
              metavar="FILE", help="super-admin.conf (system:masters), which may create the binding.")
@click.option("--timeout", type=Duration(minimum=0.1), default="10s", show_default=True,
              help="How long the API call may take.")
def bootstrap_admins(kubeconfig: Path, timeout: float) -> None:
    """Bind admin.conf's group (kubesmith:cluster-admins) to cluster-admin, unless the binding exists.

    The `kubesmith-addons` step now creates it (an EnsureExists add-on); deleting the binding takes admin.conf's
    rights back (until this step runs again), which no change can do for super-admin.conf.
    """
    from kubesmith.apiclient import ApiError
    from kubesmith.backends.access import bind_cluster_admins

    if not kubeconfig.is_file():
        fail(f"{shown_path(kubeconfig)}: no such file", ExitCode.IO_ERROR)
    try:
        created = bind_cluster_admins(kubeconfig, timeout)
    except ApiError as exc:
        fail(str(exc), ExitCode.FAILED)
    click.echo("created the cluster-admins binding" if created else "the cluster-admins binding exists", err=True)
