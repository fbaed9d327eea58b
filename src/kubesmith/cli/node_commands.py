"""`kubesmith node drain|uncordon|delete`: a node leaving the cluster through the API, run on a
control-plane host when `apply` removes or upgrades a node; `node shutdown-delay`, the kubelet's
ExecStartPre on every node."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from kubesmith.cli.common import DURATION_OR_ZERO, Duration, fail, progress, say
from kubesmith.exitcodes import ExitCode


@click.group("node")
def node_group() -> None:
    """A node leaving the cluster, through the API (run by `apply` on a control-plane host)."""


def _kubeconfig_option(function):  # type: ignore[no-untyped-def]
    function = click.option("--server", default=None, metavar="URL",
                            help="The API server to ask instead of the kubeconfig's (apply: this host's own, "
                                 "which answers while a virtual IP moves).")(function)
    return click.option("--kubeconfig", "kubeconfig", required=True, metavar="FILE",
                        type=click.Path(dir_okay=False, path_type=Path),
                        help="A kubeconfig with embedded credentials that may evict pods and delete nodes "
                             "(apply uses the host's super-admin.conf).")(function)


def _credentials(kubeconfig: Path, server: str | None):  # type: ignore[no-untyped-def]
    import dataclasses

    from kubesmith.apiclient import ApiError, Credentials

    try:
        credentials = Credentials.of_kubeconfig(kubeconfig)
    except ApiError as exc:
        fail(str(exc), ExitCode.IO_ERROR)
    return dataclasses.replace(credentials, server=server) if server else credentials


@node_group.command("drain")
@click.argument("node")
@_kubeconfig_option
@click.option("--timeout", type=Duration(minimum=1), default="2m", show_default=True,
              help="How long to wait for every pod to leave; evictions a PodDisruptionBudget refuses are asked "
                   "again until then.")
def node_drain(node: str, kubeconfig: Path, server: str | None, timeout: float) -> None:
    """Cordon NODE and evict its pods (not DaemonSet or static pods), honouring PodDisruptionBudgets."""
    from kubesmith.apiclient import ApiError
    from kubesmith.backends.drain import DrainError, drain

    try:
        evicted = asyncio.run(drain(_credentials(kubeconfig, server), node, timeout, say))
    except (ApiError, DrainError) as exc:
        fail(str(exc), ExitCode.FAILED)
    say(f"{node}: drained ({evicted} pod{'s' if evicted != 1 else ''} evicted)")


def _on_node(action: Any, node: str, kubeconfig: Path, server: str | None) -> bool:
    """One API call about NODE; an API error is the command's one error line."""
    from kubesmith.apiclient import ApiError

    try:
        return bool(asyncio.run(action(_credentials(kubeconfig, server), node)))
    except ApiError as exc:
        fail(str(exc), ExitCode.FAILED)


@node_group.command("uncordon")
@click.argument("node")
@_kubeconfig_option
def node_uncordon(node: str, kubeconfig: Path, server: str | None) -> None:
    """Mark NODE schedulable again (what an upgrade does once the node is back Ready)."""
    from kubesmith.backends.drain import uncordon

    say(f"{node}: uncordoned" if _on_node(uncordon, node, kubeconfig, server) else f"{node}: no such Node")


@node_group.command("delete")
@click.argument("node")
@_kubeconfig_option
def node_delete(node: str, kubeconfig: Path, server: str | None) -> None:
    """Delete NODE's Node object (stop its kubelet first, or it registers again)."""
    from kubesmith.backends.drain import delete_node

    say(f"{node}: Node deleted" if _on_node(delete_node, node, kubeconfig, server) else f"{node}: no such Node")


@node_group.command("shutdown-delay", hidden=True)
@click.option("--seconds", type=DURATION_OR_ZERO, required=True, help="The kubelet's shutdownGracePeriod.")
@click.option("--deadline", type=DURATION_OR_ZERO, default="10s", show_default=True,
              help="How long to wait for logind to take the new setting.")
def shutdown_delay_command(seconds: float, deadline: float) -> None:
    """Have logind allow the kubelet's shutdown delay before the kubelet starts (its ExecStartPre)."""
    from kubesmith.node.logind import ensure_inhibit_delay

    if ensure_inhibit_delay(seconds, deadline, progress):
        click.echo(f"logind allows {seconds:g}s of shutdown delay", err=True)
