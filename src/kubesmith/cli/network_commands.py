"""`kubesmith network up|follow|down`: a node's pod network, run by its units kubesmith-network and
kubesmith-routes (sysctls, a route to every other node's pods, masquerading of traffic leaving the cluster)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from kubesmith.cli.common import fail, say
from kubesmith.exitcodes import ExitCode


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
        network.bring_up(network.NetworkSettings.load(Path(config_file)), set_sysctls, say)
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
        follower = Follower(network.NetworkSettings.load(Path(config_file)), say)
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
        network.bring_down(network.NetworkSettings.load(Path(config_file)), say, remove_bridge)
    except network.NetworkError as exc:
        fail(str(exc), ExitCode.FAILED)
