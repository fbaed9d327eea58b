"""`kubesmith network up`, `images load|import` and `node drain|delete`: a node's pod network, its
images, and its leaving.

`network up` and `images load` run on nodes (their units: kubesmith-network, kubesmith-images);
`images import` runs where kubesmith runs and puts archives onto the nodes over SSH; `node drain`
and `node delete` run on a control-plane host when `apply` removes a node.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from kubesmith.cli.common import (DURATION_OR_ZERO, Duration, fail, hosts_option, load_plan_or_fail, report_problems,
                                  require_ssh_files, ssh_flags, spec_argument)
from kubesmith.exitcodes import ExitCode


def _say(line: str) -> None:
    click.echo(f"kubesmith: {line}", err=True)


@click.group("network")
def network_group() -> None:
    """A node's pod network (its units: kubesmith-network runs `network up`, kubesmith-routes `network follow`)."""


@network_group.command("up")
@click.option("--config", "config_file", required=True, metavar="FILE", help="The node's network settings.")
@click.option("--set-sysctls", is_flag=True,
              help="Set the sysctls the pods need (hosts; without it they are only checked, as `run` does).")
def network_up(config_file: str, set_sysctls: bool) -> None:
    """Make the node's pod network complete: sysctls, a route to every other node's pods, masquerading
    of pod traffic that leaves the cluster. Idempotent; exit 5 naming what failed."""
    from kubesmith.node import network

    try:
        network.bring_up(network.NetworkSettings.load(Path(config_file)), set_sysctls, _say)
    except network.NetworkError as exc:
        fail(str(exc), ExitCode.FAILED)


@network_group.command("follow")
@click.option("--config", "config_file", required=True, metavar="FILE", help="The node's network settings.")
def network_follow(config_file: str) -> None:
    """Keep a route to every other node's pods, as the cluster's Nodes announce them, and announce this
    node's own range on its Node (its unit, kubesmith-routes, runs it until stopped)."""
    from kubesmith.node import network
    from kubesmith.node.routes import Follower

    try:
        follower = Follower(network.NetworkSettings.load(Path(config_file)), _say)
    except network.NetworkError as exc:
        fail(str(exc), ExitCode.USAGE)
    asyncio.run(follower.run())


@network_group.command("down")
@click.option("--config", "config_file", required=True, metavar="FILE", help="The node's network settings.")
@click.option("--bridge", "remove_bridge", is_flag=True,
              help="Also remove the pods' bridge and their links: only once the pods are stopped (reset does).")
def network_down(config_file: str, remove_bridge: bool) -> None:
    """Undo `network up` (stopping kubesmith-network runs it): routes and masquerading go, sysctls stay, and
    the pods' bridge stays unless --bridge (running pods keep their network until the next `up`)."""
    from kubesmith.node import network

    try:
        network.bring_down(network.NetworkSettings.load(Path(config_file)), _say, remove_bridge)
    except network.NetworkError as exc:
        fail(str(exc), ExitCode.FAILED)


@click.group("images")
def images_group() -> None:
    """Container images without a registry: load archives into a node's containerd, or import them onto nodes."""


@images_group.command("load")
@click.option("--containerd", "endpoint", default="unix:///run/containerd/containerd.sock", show_default=True,
              help="containerd's socket.")
@click.option("--dir", "directory", default="/var/lib/kubesmith/images", show_default=True, metavar="DIR",
              help="Where the archives are (every *.tar).")
@click.option("--deadline", type=DURATION_OR_ZERO, default="5m", show_default=True,
              help="How long to wait for containerd to answer.")
def images_load(endpoint: str, directory: str, deadline: float) -> None:
    """Import every image archive in DIR into containerd (namespace k8s.io); archives whose images
    containerd has already are skipped. This node's kubesmith-images unit runs it."""
    from kubesmith.node.images import LoadError, load_all

    try:
        count = load_all(Path(directory), endpoint, deadline, _say)
    except LoadError as exc:
        fail(str(exc), ExitCode.FAILED)
    _say(f"{count} archive{'s' if count != 1 else ''} imported")


@images_group.command("import")
@spec_argument()
@click.argument("archives", nargs=-1, required=True, metavar="ARCHIVE...",
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@hosts_option("only_hosts", "Only these nodes")
@ssh_flags()
def images_import(spec_file: str, archives: tuple[Path, ...], only_hosts: tuple[str, ...], ssh_config: str | None,
                  known_hosts: str | None, identity: str | None) -> None:
    """Put image archives (OCI layout or `docker save` tarballs) on every node of FILE (or --host ones)
    and import them into containerd there: what an air-gapped cluster uses instead of a registry.
    To have apply bring them every time, list them in spec.components.containerRuntime.images."""
    from kubesmith.backends.node_images import ImageImportError, import_to
    from kubesmith.backends.ssh_settings import ssh_options
    from kubesmith.cli.common import check_host_names
    from kubesmith.images import ImageError, check_archive
    from kubesmith.transport.ssh import SshTransport

    loaded, plan = load_plan_or_fail(spec_file)
    report_problems(loaded.warnings)
    check_host_names(plan, only_hosts, spec_file)
    nodes = [h for h in plan.hosts if "node" in h.roles and (not only_hosts or h.name in only_hosts)]
    if not nodes:
        fail(f"no node host{' among ' + ', '.join(only_hosts) if only_hosts else ''} in {spec_file}", ExitCode.USAGE)
    contents: dict[str, Path] = {}
    for archive in archives:
        try:
            names = check_archive(archive)  # streamed: an archive is never read whole
        except ImageError as exc:
            fail(f"{archive}: {exc}", ExitCode.USAGE)
        except OSError as exc:
            fail(f"{archive}: {exc.strerror or exc}", ExitCode.USAGE)
        if archive.name in contents:
            fail(f"{archive}: another archive has the file name {archive.name}; both would land at one path on "
                 "the nodes", ExitCode.USAGE)
        _say(f"{archive}: {', '.join(names)}")
        contents[archive.name] = archive
    options, _ = ssh_options(loaded.cluster, ssh_config, known_hosts, identity)
    require_ssh_files(options.problem())

    async def run() -> None:
        async with SshTransport(options) as transport:
            await import_to(transport, nodes, contents, _say)

    try:
        asyncio.run(run())
    except ImageImportError as exc:
        fail(str(exc), ExitCode.FAILED)


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
        evicted = asyncio.run(drain(_credentials(kubeconfig, server), node, timeout, _say))
    except (ApiError, DrainError) as exc:
        fail(str(exc), ExitCode.FAILED)
    _say(f"{node}: drained ({evicted} pod{'s' if evicted != 1 else ''} evicted)")


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

    _say(f"{node}: uncordoned" if _on_node(uncordon, node, kubeconfig, server) else f"{node}: no such Node")


@node_group.command("delete")
@click.argument("node")
@_kubeconfig_option
def node_delete(node: str, kubeconfig: Path, server: str | None) -> None:
    """Delete NODE's Node object (stop its kubelet first, or it registers again)."""
    from kubesmith.backends.drain import delete_node

    _say(f"{node}: Node deleted" if _on_node(delete_node, node, kubeconfig, server) else f"{node}: no such Node")


@node_group.command("shutdown-delay", hidden=True)
@click.option("--seconds", type=DURATION_OR_ZERO, required=True, help="The kubelet's shutdownGracePeriod.")
@click.option("--deadline", type=DURATION_OR_ZERO, default="10s", show_default=True,
              help="How long to wait for logind to take the new setting.")
def shutdown_delay_command(seconds: float, deadline: float) -> None:
    """Have logind allow the kubelet's shutdown delay before the kubelet starts (its ExecStartPre)."""
    from kubesmith.node.logind import ensure_inhibit_delay

    if ensure_inhibit_delay(seconds, deadline, lambda line: click.echo(line, err=True)):
        click.echo(f"logind allows {seconds:g}s of shutdown delay", err=True)
