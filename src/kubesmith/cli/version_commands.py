"""`kubesmith version`: kubesmith's version and the Kubernetes releases its registry supports."""

from __future__ import annotations

import click

from kubesmith import __version__
from kubesmith.cli.common import emit_json, output_option


@click.command()
@output_option()
def version(output: str) -> None:
    """Show kubesmith's version and the Kubernetes releases it supports."""
    from kubesmith.versions.registry import load_registry

    registry = load_registry()
    info = {"kubesmith": __version__, "kubernetes": list(registry.minors)}
    if output == "json":
        emit_json(info)
    else:
        click.echo(f"kubesmith {__version__}; Kubernetes {registry.minors[0]} to {registry.newest}")
