"""`kubesmith wait`: the readiness gate that runs on hosts, in units (every ExecStartPre=) and over SSH.

Kept apart from the other commands so it starts fast: units run `wait` on every start.
"""

from __future__ import annotations

import asyncio

import click

from kubesmith import layout
from kubesmith.cli.common import DURATION_OR_ZERO, Duration, fail
from kubesmith.exitcodes import ExitCode
from kubesmith.health.probespec import ProbeSpec, ProbeSyntaxError, parse_probe
from kubesmith.health.wait import LocalProbeRunner, WaitPolicy, wait_ready

WAIT_HELP_EPILOG = """\b
Probe forms (one argument each; relative file paths are under --pki-dir):
  https://HOST:PORT/PATH?ca=FILE[&cert=FILE&key=FILE][&servername=NAME]
  http://HOST:PORT/PATH
  tcp://HOST:PORT
  etcd://HOST:PORT?ca=FILE&cert=FILE&key=FILE     GET /health over mTLS, needs health=true

\b
Exit codes: 0 ready, 2 bad command line or probe, 4 not ready before the deadline.
"""


@click.command("wait", epilog=WAIT_HELP_EPILOG)
@click.argument("probes", nargs=-1, required=True, metavar="PROBE...")
@click.option("--deadline", type=DURATION_OR_ZERO, default="5m", show_default=True,
              help="Give up after this long (0: one attempt).")
@click.option("--any", "any_of", is_flag=True, help="Ready when any one probe passes (default: all).")
@click.option("--pki-dir", default=layout.PKI, show_default=True, help="Base for relative credential paths.")
@click.option("--max-interval", type=Duration(minimum=0.01), default="2s", show_default=True,
              help="Longest pause between attempts (backoff is exponential with jitter).")
@click.option("--attempt-timeout", type=Duration(minimum=0.1), default="5s", show_default=True,
              help="Timeout of one attempt.")
@click.option("--quiet", is_flag=True, help="Do not log failed attempts.")
def wait_command(probes: tuple[str, ...], deadline: float, any_of: bool, pki_dir: str,
                 max_interval: float, attempt_timeout: float, quiet: bool) -> None:
    """Wait until PROBE... are ready, with backoff and a deadline; never interactive.

    Used as ExecStartPre= gate and by "online" units; logs one line per failed attempt.
    """
    specs = parse_probes(probes, pki_dir)
    policy = WaitPolicy(deadline=deadline, max_interval=max_interval, attempt_timeout=attempt_timeout)

    def log(line: str) -> None:
        if not quiet:
            click.echo(f"kubesmith wait: {line}", err=True)

    outcome = asyncio.run(wait_ready(specs, LocalProbeRunner(), policy, any_of=any_of, log=log))
    if not outcome.ready:
        fail(f"not ready after {outcome.attempts} attempt{'s' if outcome.attempts != 1 else ''} "
             f"in {outcome.elapsed:.1f}s (deadline {deadline:g}s)", ExitCode.UNHEALTHY)
    if not quiet:
        click.echo(f"kubesmith wait: ready after {outcome.attempts} attempt(s) in {outcome.elapsed:.2f}s",
                   err=True)


def parse_probes(arguments: tuple[str, ...], pki_dir: str) -> list[ProbeSpec]:
    try:
        return [parse_probe(argument).resolved(pki_dir) for argument in arguments]
    except ProbeSyntaxError as exc:
        fail(str(exc), ExitCode.USAGE)
