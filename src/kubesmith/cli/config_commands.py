"""`kubesmith config status` and `config wait`: on a host, the configuration keeper's records,
checkpoints and the verdict of its trials.

`apply` runs it over SSH between the hosts of a roll-out: a host's new configuration must pass
its trial before the next host gets it, and a failed trial (the agent put the last-known-good
configuration back) halts the roll-out. An operator can run it too, after changing a host by hand.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from kubesmith import layout
from kubesmith.agent.checkpoints import CheckpointStore
from kubesmith.agent.configloop import Component, load_components, wait_for_verdicts
from kubesmith.agent.keeper import condition_document
from kubesmith.agent.report import iso
from kubesmith.agent.trial import TrialVerdict, short
from kubesmith.cli.common import DURATION_OR_ZERO, emit_json, fail, output_option
from kubesmith.clock import utc_now
from kubesmith.documents import reason
from kubesmith.exitcodes import ExitCode


def keeper_files(command: Callable[..., Any]) -> Callable[..., Any]:
    """--components-file and --checkpoints-dir: where the keeper's list and records are, for each command."""
    command = click.option("--checkpoints-dir", type=click.Path(file_okay=False), default=layout.CONFIG_CHECKPOINTS,
                           show_default=True, help="The keeper's checkpoints and records.")(command)
    return click.option("--components-file", type=click.Path(dir_okay=False), default=layout.COMPONENTS_FILE,
                        show_default=True, help="What the keeper keeps.")(command)


@click.group("config")
def config_group() -> None:
    """Configurations the agent keeps on this host (checkpoints, trials, last-known-good)."""


@config_group.command("wait", epilog="\b\nExit codes: 0 every trial passed, 2 an unknown component, 3 the "
                                      "components file is unreadable,\n4 a trial failed or was not decided "
                                      "within --timeout.")
@click.argument("components", nargs=-1, required=True, metavar="COMPONENT...")
@click.option("--since", type=float, default=None,
              help="Only a configuration assigned at or after this Unix time counts (host clock; default: now). "
                   "An older failure of the same configuration is not a verdict: it is on trial again.")
@click.option("--timeout", type=DURATION_OR_ZERO, default="5m", show_default=True,
              help="Give up after this long.")
@keeper_files
@output_option()
def wait_command(components: tuple[str, ...], since: float | None, timeout: float, components_file: str,
                 checkpoints_dir: str, output: str) -> None:
    """Wait until each COMPONENT's configuration on disk passed or failed its trial.

    A component whose configuration did not change passes at once (it is its last-known-good).
    """
    kept = _kept(components_file)
    started = time.time() if since is None else since
    try:
        found = asyncio.run(wait_for_verdicts(components, kept, CheckpointStore(Path(checkpoints_dir)), Path("/"),
                                              started, timeout))
    except KeyError as exc:
        fail(f"{components_file} keeps no component {exc.args[0]}", ExitCode.USAGE)
    if output == "json":
        emit_json({"components": [_document(name, found[name]) for name in components]})
    else:
        for name in components:
            click.echo(_line(name, found[name], timeout))
    if not all(v is not None and v.passed for v in found.values()):
        raise SystemExit(ExitCode.UNHEALTHY)


def _kept(components_file: str) -> tuple[Component, ...]:
    """The components the keeper keeps; exit 3 naming the file when it cannot be read."""
    try:
        return load_components(Path(components_file))[1]
    except OSError as exc:
        fail(f"{components_file}: {reason(exc)}", ExitCode.IO_ERROR)


def _document(name: str, verdict: TrialVerdict | None) -> dict[str, object]:
    if verdict is None:
        return {"component": name, "decided": False, "passed": False}
    return {"component": name, "decided": True, "passed": verdict.passed, "hash": verdict.hash,
            "reason": verdict.reason, "running": verdict.running}


def _line(name: str, verdict: TrialVerdict | None, timeout: float) -> str:
    if verdict is None:
        return f"{name}: no verdict within {timeout:g}s (is the agent running with keepConfigs?)"
    if verdict.passed:
        return f"{name}: config {short(verdict.hash)} passed its trial"
    back = f"; back on last-known-good config {short(verdict.running)}" if verdict.running else ""
    return f"{name}: config {short(verdict.hash)} failed its trial: {verdict.reason}{back}"


@config_group.command("status", epilog="\b\nExit codes: 0 every checkpoint and record intact, 3 the components file "
                                        "is unreadable,\n4 a checkpoint or record is torn or missing.")
@keeper_files
@output_option()
def status_command(components_file: str, checkpoints_dir: str, output: str) -> None:
    """Each kept component's ConfigOK condition, with every checkpoint checked against its hash."""
    kept = _kept(components_file)
    store = CheckpointStore(Path(checkpoints_dir))
    found = []
    for component in kept:
        name = component.config.name
        problems = store.problems(name)
        condition = condition_document(name, store.records(name), iso(utc_now())) if not any(
            "damaged record" in p for p in problems) else {"component": name}
        found.append({**condition, "checkpoints": len(store.hashes(name)), "problems": problems})
    if output == "json":
        emit_json({"components": found})
    else:
        for entry in found:
            click.echo(f"{entry['component']}: ConfigOK={entry.get('status', '?')}, {entry.get('message', '')}"
                       f"{': ' + str(entry['reason']) if entry.get('reason') else ''} "
                       f"({entry['checkpoints']} checkpoints)")
            for problem in entry["problems"]:
                click.echo(f"  problem: {problem}")
    if any(entry["problems"] for entry in found):
        raise SystemExit(ExitCode.UNHEALTHY)
