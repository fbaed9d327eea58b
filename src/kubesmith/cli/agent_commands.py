"""`kubesmith agent`: renews this host's certificates before they expire; `--once` for one pass by hand."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kubesmith import layout
from kubesmith.agent import report
from kubesmith.cli.common import DURATION, config_option, emit_json, fail, read_json_config, user_errors
from kubesmith.exitcodes import ExitCode
from kubesmith.settings import AgentConfig

if TYPE_CHECKING:
    from kubesmith.agent import renewal


def _ca_urls(urls: tuple[str, ...]) -> tuple[str, ...]:
    """The spec's rule for agent.caUrls (https://HOST[:PORT], no userinfo, query or fragment)."""
    from kubesmith.urls import ca_url_problem

    for url in urls:
        if problem := ca_url_problem(url):
            raise click.BadParameter(problem, param_hint="'--ca-url'")
    return urls


@click.command("agent")
@config_option(layout.AGENT_CONFIG)
@click.option("--host", default=None, metavar="NAME", help="This host's name.")
@click.option("--pki-dir", default=None, metavar="DIR", help=f"Certificates to renew (default {layout.PKI}).")
@click.option("--kubeconfig-dir", default=None, metavar="DIR", help=f"Kubeconfigs to renew (default {layout.ETC}).")
@click.option("--state-file", default=None, metavar="FILE", help=f"Report file (default {layout.AGENT_STATE_FILE}).")
@click.option("--ca-url", "ca_urls", multiple=True, metavar="URL", callback=lambda ctx, param, urls: _ca_urls(urls),
              help="CA service URL (repeatable, tried in order).")
@click.option("--renew-fraction", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=None,
              help="Renew once this fraction of a certificate's life is used (default 2/3).")
@click.option("--check-interval", type=DURATION, default=None, help="Time between checks (default 5m).")
@click.option("--retry-initial", type=DURATION, default=None, help="First retry pause while the CA is unreachable.")
@click.option("--retry-max", type=DURATION, default=None, help="Longest retry pause (default 60s).")
@click.option("--once", is_flag=True,
              help="One check-and-renew pass, then exit (non-zero if the CA was unreachable, a file did not "
                   "load or a renewal failed).")
@click.option("--show-state", is_flag=True, help="Print the last report (JSON) and exit.")
def agent_command(config_file: str | None, host: str | None, pki_dir: str | None, kubeconfig_dir: str | None,
                  state_file: str | None, ca_urls: tuple[str, ...], renew_fraction: float | None,
                  check_interval: float | None, retry_initial: float | None, retry_max: float | None, once: bool,
                  show_state: bool) -> None:
    """Renew this host's certificates before they expire, without an outage.

    \b
    Every check (--check-interval) looks at each certificate under --pki-dir and each
    kubeconfig under --kubeconfig-dir; one that has used --renew-fraction of its life
    is renewed with the same key and subject:
      - by the CA service (--ca-url), authenticating with this host's agent
        certificate (mutual TLS), or
      - locally, on hosts that hold that CA's key.
    The old certificate stays until the new one is written (atomically); path units
    then restart the component. While the CA service is unreachable the agent retries
    with backoff (--retry-initial .. --retry-max) and keeps the current certificate.
    Its report (--state-file) is what `kubesmith status` shows; --show-state prints it.
    A manual pass waits while the unit's agent is in one; both record in that report.
    On an etcd member with spec.components.etcd.snapshots, the running agent also
    takes the member's periodic snapshots (not --once).

    \b
    Runs as the kubesmith-agent unit on every host; by hand:
      kubesmith agent --once      one pass, a summary line; exit 4 if the CA was
                                  unreachable, 5 if a file did not load or a
                                  renewal was refused or failed
    """
    document = read_json_config(config_file or layout.AGENT_CONFIG, config_file is not None)
    if show_state:  # the report only: the rest of the file is not read, so a damaged one does not hide it
        emit_json(report.read_state(Path(state_file if state_file is not None else
                                         document.get("state_file", layout.AGENT_STATE_FILE))))
        return
    try:
        config = AgentConfig.from_document(
            document, host=host, pki_dir=pki_dir, kubeconfig_dir=kubeconfig_dir, state_file=state_file,
            ca_urls=list(ca_urls) or None, renew_fraction=renew_fraction, check_interval=check_interval,
            retry_initial=retry_initial, retry_max=retry_max)
    except TypeError as exc:
        fail(f"{config_file or layout.AGENT_CONFIG}: {exc}", ExitCode.USAGE)
    if not config.host:
        config = replace(config, host=socket.gethostname().split(".")[0])
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="kubesmith agent: %(message)s")
    with user_errors():
        if once:
            outcome = asyncio.run(_agent_once(config))
            findings = ([f"CA unreachable: {'; '.join(outcome.unavailable)}"] if outcome.unavailable else []) + \
                ([f"{len(outcome.problems)} to look at: {'; '.join(outcome.problems)}"] if outcome.problems else [])
            if findings:
                fail(f"{_once_summary(config, outcome)}; " + "; ".join(findings),
                     ExitCode.UNHEALTHY if outcome.unavailable else ExitCode.FAILED)
            click.echo(f"kubesmith agent: {_once_summary(config, outcome)}", err=True)
            return
        try:
            asyncio.run(_agent_forever(config))
        except KeyboardInterrupt:
            pass


def _once_summary(config: AgentConfig, outcome: renewal.CycleOutcome) -> str:
    if outcome.checked == 0:
        return (f"nothing to renew: no certificate with its key under {config.pki_dir} and no kubeconfig "
                f"with a client certificate under {config.kubeconfig_dir}")
    due = outcome.next_due.isoformat(timespec="seconds") if outcome.next_due else "none scheduled"
    return f"checked {outcome.checked}, renewed {outcome.renewed}; next renewal due {due}"


async def _agent_once(config: AgentConfig) -> renewal.CycleOutcome:
    import aiohttp

    from kubesmith.agent import renewal

    async with aiohttp.ClientSession(trust_env=False) as session:
        async with report.locked_report(config.state_file, config.host) as state:
            return await renewal.run_cycle(config, session, state)


async def _agent_forever(config: AgentConfig) -> None:
    from kubesmith.agent import configloop, renewal, snapshots

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    keeper = configloop.keeper_for(config)
    snapshotting = snapshots.SnapshotSettings.from_document(config.etcd_snapshots) if config.etcd_snapshots else None
    await asyncio.gather(renewal.run_agent(config, stop),
                         *([keeper.run(stop, config.state_file, config.host)] if keeper else []),
                         *([snapshots.run_snapshots(snapshotting, stop)] if snapshotting else []))
