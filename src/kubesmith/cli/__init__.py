"""The `kubesmith` command. Each command group lives in its own module, imported only when used,
so that `kubesmith wait` in a unit's ExecStartPre= starts in a fraction of the full CLI's time."""

from __future__ import annotations

import importlib
import sys

import click

from kubesmith import __version__
from kubesmith.cli.common import run_guarded

# command name -> (module, attribute); the order is the order of `kubesmith --help`
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("kubesmith.cli.spec_commands", "init"),
    "validate": ("kubesmith.cli.spec_commands", "validate"),
    "plan": ("kubesmith.cli.spec_commands", "plan"),
    "apply": ("kubesmith.cli.host_commands", "apply"),
    "status": ("kubesmith.cli.runtime_commands", "status_command"),
    "upgrade": ("kubesmith.cli.upgrade_commands", "upgrade_group"),
    "render": ("kubesmith.cli.pki_commands", "render"),
    "certs": ("kubesmith.cli.pki_commands", "certs"),
    "kubeconfig": ("kubesmith.cli.access_commands", "kubeconfig"),
    "token": ("kubesmith.cli.token_commands", "token_group"),
    "join": ("kubesmith.cli.join_commands", "join_command"),
    "images": ("kubesmith.cli.node_commands", "images_group"),
    "run": ("kubesmith.cli.runtime_commands", "run_command"),
    "etcd": ("kubesmith.cli.day2_commands", "etcd_group"),
    "reset": ("kubesmith.cli.day2_commands", "reset_command"),
    "lab": ("kubesmith.cli.lab_commands", "lab"),
    "binaries": ("kubesmith.cli.host_commands", "binaries"),
    "options": ("kubesmith.cli.spec_commands", "options"),
    "schema": ("kubesmith.cli.spec_commands", "schema"),
    "version": ("kubesmith.cli.spec_commands", "version"),
    "ca": ("kubesmith.cli.ca_commands", "ca_group"),
    "agent": ("kubesmith.cli.agent_commands", "agent_command"),
    "config": ("kubesmith.cli.config_commands", "config_group"),
    "network": ("kubesmith.cli.node_commands", "network_group"),
    "node": ("kubesmith.cli.node_commands", "node_group"),
    "wait": ("kubesmith.cli.wait_commands", "wait_command"),
    "probe": ("kubesmith.cli.wait_commands", "probe_command"),
    "bootstrap-admins": ("kubesmith.cli.bootstrap_commands", "bootstrap_admins"),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attribute = COMMANDS[cmd_name]
        command: click.Command = getattr(importlib.import_module(module), attribute)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=formatter.width - 20)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="kubesmith")
def cli() -> None:
    """Turn one declarative file into a running, secure Kubernetes cluster.

    \b
    Typical flow:
      kubesmith init --name demo --host h1=10.0.0.11 > cluster.yaml
      kubesmith validate cluster.yaml     typed errors with file:line:column
      kubesmith plan cluster.yaml         what apply would change on which host (--offline: desired state)
      kubesmith apply cluster.yaml        PKI, files, units over SSH; start in order; wait until healthy
      kubesmith status cluster.yaml       every component on every host

    \b
    Try it on one machine:
      kubesmith lab up 3 && kubesmith apply examples/lab.yaml --binaries DIR

    \b
    Exit codes: 0 ok, 1 invalid cluster file, 2 bad command line, 3 file not readable/writable,
    4 unhealthy or not ready in time, 5 an operation on hosts failed, 6 a host failed preflight
    (nothing was changed).
    """


def main() -> None:
    sys.exit(run_guarded(cli))
