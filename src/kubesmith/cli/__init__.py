"""The `kubesmith` command. Each command group lives in its own module and registers here."""

from __future__ import annotations

import sys

import click

from kubesmith import __version__
from kubesmith.cli import spec_commands
from kubesmith.cli.common import run_guarded


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="kubesmith")
def cli() -> None:
    """Turn one declarative file into a running, secure Kubernetes cluster.

    \b
    Typical flow:
      kubesmith init --name demo --host h1=10.0.0.11 > cluster.yaml
      kubesmith validate cluster.yaml     typed errors with file:line:column
      kubesmith plan cluster.yaml         every host's services, files, certificates
      kubesmith options                   every option with type, default, description

    \b
    Exit codes: 0 ok, 1 invalid cluster file, 2 bad command line, 3 file not readable/writable,
    4 unhealthy or not ready in time, 5 an operation on hosts failed.
    """


for command in spec_commands.COMMANDS:
    cli.add_command(command)


def main() -> None:
    sys.exit(run_guarded(cli))
