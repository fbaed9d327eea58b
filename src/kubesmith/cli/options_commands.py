"""`kubesmith options`: every option of the cluster file, documented (Markdown or JSON)."""

from __future__ import annotations

import click

from kubesmith.cli.common import emit_json, output_option


@click.command()
@output_option("md", "json")
def options(output: str) -> None:
    """Document every option of the cluster file: path, type, default and description."""
    from kubesmith.spec.docs import option_docs, options_markdown

    docs = option_docs()
    if output == "json":
        emit_json([{"path": d.path, "type": d.type, "default": d.default, "description": d.description}
                   for d in docs])
    else:
        click.echo(options_markdown(docs))
