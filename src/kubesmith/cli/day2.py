"""What the day-2 commands (`etcd`, `reset`) share: one SSH session to the hosts with its failures in one
line, and a question before anything is destroyed."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from kubesmith.cli.common import fail, load_plan_or_fail, require_ssh_files
from kubesmith.exitcodes import ExitCode
from kubesmith.vocabulary.model import Plan

T = TypeVar("T")


def on_hosts(spec_file: str, ssh_config: str | None, known_hosts: str | None, identity: str | None,
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


def confirm(yes: bool, question: str) -> None:
    """Ask on a terminal; without one, only --yes proceeds (a script must say so)."""
    if yes:
        return
    if not sys.stdin.isatty():
        fail(f"{question} Give --yes to proceed without a terminal.", ExitCode.USAGE)
    if not click.confirm(question, default=False):
        fail("nothing was changed", ExitCode.USAGE)
