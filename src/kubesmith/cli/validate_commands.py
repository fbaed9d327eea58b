"""`kubesmith validate FILE`: every mistake in a cluster file at once, each located."""

from __future__ import annotations

import sys

import click

from kubesmith.cli.common import emit_json, load_spec_or_fail, output_option, report_problems, spec_argument
from kubesmith.exitcodes import ExitCode
from kubesmith.vocabulary.errors import SpecError


@click.command()
@spec_argument()
@output_option()
def validate(spec_file: str, output: str) -> None:
    """Check FILE: types, unknown and duplicate keys, CIDRs, hosts, versions and flags.

    Every problem is reported at once with its option path and file:line:column.
    Exits 1 when there are errors; warnings alone exit 0.
    """
    try:
        loaded = load_spec_or_fail(spec_file)
    except SpecError as exc:
        if output == "json":
            emit_json({"valid": False, "problems": [p.as_dict() for p in exc.problems]})
            sys.exit(ExitCode.INVALID_SPEC)
        raise
    if output == "json":
        emit_json({"valid": True, "problems": [p.as_dict() for p in loaded.warnings]})
        return
    report_problems(loaded.warnings)
    cluster = loaded.cluster
    click.echo(f"{spec_file}: valid (cluster {cluster.metadata.name}, Kubernetes {cluster.spec.kubernetes_version}, "
               f"{len(cluster.spec.hosts)} host{'s' if len(cluster.spec.hosts) != 1 else ''})")
