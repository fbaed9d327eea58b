"""`kubesmith wait` and `kubesmith probe`: readiness checks that run on hosts, in units and over SSH.

Kept apart from the other commands so they start fast: units run `wait` on every start.
"""

from __future__ import annotations

import asyncio
import json

import click

from kubesmith import layout
from kubesmith.cli.common import emit_json, fail
from kubesmith.exitcodes import ExitCode
from kubesmith.runtime.probespec import ProbeSpec, ProbeSyntaxError, parse_probe
from kubesmith.runtime.wait import LocalProbeRunner, WaitPolicy, run_probe, wait_ready

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
@click.option("--deadline", type=click.FloatRange(min=0), default=300.0, show_default=True,
              help="Give up after this many seconds (0: one attempt).")
@click.option("--any", "any_of", is_flag=True, help="Ready when any one probe passes (default: all).")
@click.option("--pki-dir", default=layout.PKI, show_default=True, help="Base for relative credential paths.")
@click.option("--max-interval", type=click.FloatRange(min=0.01), default=2.0, show_default=True,
              help="Longest pause between attempts (backoff is exponential with jitter).")
@click.option("--attempt-timeout", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
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


@click.command("probe", hidden=True)
@click.argument("probe_argument", metavar="PROBE")
@click.option("--mode", type=click.Choice(["check", "request", "expiry"]), default="check", show_default=True)
@click.option("--method", default="GET")
@click.option("--path", "request_path", default="/")
@click.option("--body", default=None, help="JSON request body.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=3.0)
@click.option("--pki-dir", default=layout.PKI, show_default=True)
def probe_command(probe_argument: str, mode: str, method: str, request_path: str, body: str | None,
                  timeout: float, pki_dir: str) -> None:
    """One probe from this host, answered as JSON: how `status` probes hosts over SSH."""
    spec = parse_probes((probe_argument,), pki_dir)[0]
    emit_json(asyncio.run(run_probe(LocalProbeRunner(), spec, mode, method, request_path,
                                    json.loads(body) if body else None, timeout)))
