"""The `kubesmith` command. Each command group lives in its own module, imported only when used,
so that `kubesmith wait` in a unit's ExecStartPre= starts in a fraction of the full CLI's time."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

import click

from kubesmith import __version__
from kubesmith.cli.common import refuse_empty_names, run_guarded
from kubesmith.cli.verbosity import with_verbose


@dataclass(frozen=True)
class Entry:
    """Where a command lives, and the line `kubesmith --help` shows for it: listing the commands
    then imports none of them. Each command module imports what its commands use when they run, so that
    the host-side ones (probe, wait, network, node, config) never load asyncssh, pydantic or the planner
    (tests/test_light_commands.py holds them to it)."""

    module: str
    attribute: str
    summary: str
    on_hosts: bool = False  # run by kubesmith's units on the hosts, not by operators


# the order is the order of `kubesmith --help`
COMMANDS: dict[str, Entry] = {
    "init": Entry("kubesmith.cli.init_commands", "init", "Write a starting cluster file to standard output."),
    "validate": Entry("kubesmith.cli.validate_commands", "validate", "Check a cluster file: every mistake, located."),
    "plan": Entry("kubesmith.cli.plan_commands", "plan", "Show what `apply` would do."),
    "apply": Entry("kubesmith.cli.apply_commands", "apply",
                   "Make the hosts match the cluster file over SSH, in order, until healthy."),
    "status": Entry("kubesmith.cli.status_commands", "status_command",
                    "Every component on every host: running, ready, version, certificates."),
    "upgrade": Entry("kubesmith.cli.upgrade_commands", "upgrade_group",
                     "Plan a move to another Kubernetes release: versions, skew, order."),
    "render": Entry("kubesmith.cli.render_commands", "render", "Write every host's files to a directory."),
    "certs": Entry("kubesmith.cli.certs_commands", "certs", "Inspect and renew the cluster's certificates."),
    "kubeconfig": Entry("kubesmith.cli.kubeconfig_commands", "kubeconfig",
                        "Personal, short-lived, revocable kubeconfigs."),
    "token": Entry("kubesmith.cli.token_commands", "token_group", "Join tokens for new nodes."),
    "join": Entry("kubesmith.cli.join_commands", "join_command", "Join this machine as a node."),
    "images": Entry("kubesmith.cli.images_commands", "images_group", "Container images without a registry."),
    "run": Entry("kubesmith.cli.run_commands", "run_command",
                 "Run one host's services in the foreground, where no systemd runs."),
    "etcd": Entry("kubesmith.cli.etcd_commands", "etcd_group", "Snapshots of the cluster's etcd, and restores."),
    "reset": Entry("kubesmith.cli.reset_commands", "reset_command",
                   "Remove kubesmith's units, files and data from the hosts."),
    "lab": Entry("kubesmith.cli.lab_commands", "lab", "Local hosts to try kubesmith on (systemd-nspawn)."),
    "binaries": Entry("kubesmith.cli.binaries_commands", "binaries", "Kubernetes release binaries."),
    "options": Entry("kubesmith.cli.options_commands", "options", "Every option of the cluster file, documented."),
    "schema": Entry("kubesmith.cli.schema_commands", "schema", "The JSON Schema of the cluster file, for editors."),
    "version": Entry("kubesmith.cli.version_commands", "version",
                     "kubesmith's version and the Kubernetes releases it supports."),
    "completion": Entry("kubesmith.cli.completion_commands", "completion",
                        "Print a shell completion script (bash, zsh, fish)."),
    "ca": Entry("kubesmith.cli.ca_commands", "ca_group", "The cluster CA service.", on_hosts=True),
    "agent": Entry("kubesmith.cli.agent_commands", "agent_command", "Renew this host's certificates; keep its "
                   "configurations.", on_hosts=True),
    "config": Entry("kubesmith.cli.config_commands", "config_group", "Configurations the agent keeps on this host.",
                    on_hosts=True),
    "network": Entry("kubesmith.cli.network_commands", "network_group", "A node's pod network.", on_hosts=True),
    "node": Entry("kubesmith.cli.node_commands", "node_group", "A node leaving the cluster.", on_hosts=True),
    "wait": Entry("kubesmith.cli.wait_commands", "wait_command", "Wait until a probe passes.", on_hosts=True),
    "probe": Entry("kubesmith.cli.probe_commands", "probe_command", "Run a batch of probes from this host.",
                   on_hosts=True),
    "bootstrap-admins": Entry("kubesmith.cli.bootstrap_admins_commands", "bootstrap_admins",
                              "Bind admin.conf's group to cluster-admin.", on_hosts=True),
    "addons": Entry("kubesmith.cli.addons_commands", "addons_group", "Keep the cluster's add-ons applied.",
                    on_hosts=True),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        command: click.Command = getattr(importlib.import_module(entry.module), entry.attribute)
        command.short_help = entry.summary  # one text for the list and the command's own line
        return refuse_empty_names(with_verbose(command))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Operators' commands first; those kubesmith's units run on hosts apart, still listed."""
        for title, on_hosts in (("Commands", False), ("Run by kubesmith on the hosts", True)):
            with formatter.section(title):
                formatter.write_dl([(name, entry.summary) for name, entry in COMMANDS.items()
                                    if entry.on_hosts is on_hosts])


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


with_verbose(cli)  # `kubesmith -v COMMAND` as well as `kubesmith COMMAND -v`


def main() -> None:
    sys.exit(run_guarded(cli))
