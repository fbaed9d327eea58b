"""`kubesmith probe`: a batch of readiness probes run from this host, how `status` reaches components
bound to 127.0.0.1 in one SSH round trip per host. Light to start, as `wait` is: it runs on every host."""

from __future__ import annotations

import asyncio
import json
import sys

import click

from kubesmith.cli.common import Duration, emit_json, fail
from kubesmith.exitcodes import ExitCode
from kubesmith.health.wait import LocalProbeRunner, ProbeOperation, batch_document, run_operations


@click.command("probe", hidden=True)
@click.option("--timeout", type=Duration(minimum=0.1), default="3s", show_default=True, help="Timeout of each probe.")
def probe_command(timeout: float) -> None:
    """Run a batch of probe operations (JSON list on stdin) from this host; print the results as JSON.

    This is how `status` probes a host over SSH: one round trip per host, and components bound
    to 127.0.0.1 are reached from their own host.
    """
    try:
        operations = [ProbeOperation(**item) for item in json.load(sys.stdin)]
    except (ValueError, TypeError) as exc:
        fail(f"probe batch on stdin is not a JSON list of operations: {exc}", ExitCode.USAGE)
    emit_json(batch_document(asyncio.run(run_operations(LocalProbeRunner(), operations, timeout))))
