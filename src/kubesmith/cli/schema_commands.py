"""`kubesmith schema`: the cluster file's JSON Schema, for editors and CI linters.

Apart from `options`: the two share no code, the schema comes from the model (pydantic), the options from
the spec's documentation."""

from __future__ import annotations

import sys

import click

from kubesmith.cli.common import emit_json, output_option


@click.command()
@output_option("json", "yaml")
def schema(output: str) -> None:
    """Print the JSON Schema of the cluster file, for editors and CI linters."""
    import yaml

    from kubesmith.spec.model import Cluster

    document = Cluster.model_json_schema(by_alias=True)
    document["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    document["title"] = "kubesmith Cluster"
    if output == "yaml":
        sys.stdout.write(yaml.safe_dump(document, sort_keys=True))
    else:
        emit_json(document)
