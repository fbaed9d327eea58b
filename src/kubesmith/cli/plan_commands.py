"""`kubesmith plan FILE`: what `apply` would do, from the spec alone (--offline) or against the hosts."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kubesmith.cli.common import (hosts_option, load_spec_or_fail, output_option, refuse_unknown_hosts,
                                  report_problems, spec_argument, ssh_flags)

# the planner, the registry and the live diff's SSH are imported when the plan is made, not for `--help`


@click.command()
@spec_argument()
@click.option("--offline", is_flag=True, help="Show the desired state without connecting to any host.")
@hosts_option()
@output_option()
@click.option("--binaries", "binaries_dir", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="Binaries apply would ship (live diff only); without it they are left out of the comparison.")
@ssh_flags("live diff only")
@click.option("--state-dir", default=None, help="PKI state (live diff only).")
def plan(spec_file: str, offline: bool, hosts: tuple[str, ...], output: str, binaries_dir: Path | None,
         ssh_config: str | None, known_hosts: str | None, identity: str | None, state_dir: str | None) -> None:
    """Show what `apply` would do.

    With --offline: the desired state of every host — services with their full command
    lines, users, ordering and readiness probes, targets, files and certificates; the JSON
    form is byte-identical for the same spec. Without it, kubesmith also connects to the
    hosts and shows, per host, the files it would add, change or remove, the units it would
    start or restart and the users it would create — changing nothing. Without --binaries it
    compares everything but the binaries, and names those it left out. Hosts that cannot be
    reached within the connect deadline are named together, in one error (exit 5).
    """
    if not offline:
        from kubesmith.cli.apply_commands import show_live_diff

        show_live_diff(spec_file, state_dir, ",".join(hosts) or None, ssh_config, known_hosts, identity,
                       binaries_dir, output)
        return
    from kubesmith.plan.evaluate import evaluate_lazily

    from kubesmith.gcpause import gc_frozen
    from kubesmith.versions.registry import load_registry

    loaded = load_spec_or_fail(spec_file)
    report_problems(loaded.warnings)
    refuse_unknown_hosts([host.name for host in loaded.cluster.spec.hosts], hosts, spec_file)
    # each host is planned as it is written, then let go: memory stays flat however many hosts
    result, planned = evaluate_lazily(loaded.cluster, load_registry(), only=frozenset(hosts) if hosts else None)
    with gc_frozen():
        if output == "json":
            from kubesmith.plan.jsonout import write_plan_json

            write_plan_json(result, sys.stdout, planned)
        else:
            from kubesmith.plan.text import plan_text_chunks

            sys.stdout.writelines(plan_text_chunks(result, planned))
