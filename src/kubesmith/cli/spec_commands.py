"""Commands that work on the spec alone: validate, plan, options, schema, init, version."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from kubesmith import __version__
from kubesmith.cli.common import (emit_json, fail, hosts_option, load_spec_or_fail, output_option,
                                  refuse_unknown_hosts, report_problems, spec_argument, ssh_flags)
from kubesmith.exitcodes import ExitCode
from kubesmith.vocabulary.errors import SpecError

# Each command imports what it uses: the spec's model (pydantic), the planner, PyYAML and the registry cost
# more than `--help` does; `validate` needs the loader alone.


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


@click.command()
@click.option("--name", required=True, help="Cluster name (a DNS label).")
@click.option("--host", "host_args", multiple=True, metavar="NAME=ADDRESS[:ROLE,ROLE]",
              help="A host; roles from control-plane, etcd, node. Repeatable. Default: this machine, by its "
                   "host name and the address of its default route, with every role.")
@click.option("--kubernetes-version", default=None, help="Release to run; default: the release kubesmith is tested with.")
@click.option("--endpoint", default=None, metavar="HOST:PORT", help="Load-balanced API endpoint for HA.")
@output_option("yaml", "json")
def init(name: str, host_args: tuple[str, ...], kubernetes_version: str | None, endpoint: str | None,
         output: str) -> None:
    """Write a starting cluster file to standard output.

    Without roles, one host gets every role; with several, the first one or three become
    control-plane + etcd and the rest nodes. Without --host, the cluster is this machine.

    \b
    Examples:
      kubesmith init --name demo > cluster.yaml      # this machine, for `kubesmith run`
      kubesmith init --name demo --host h1=10.0.0.11 --host h2=10.0.0.12:node > cluster.yaml
    """
    import yaml

    from kubesmith.spec.load import load_spec_text
    from kubesmith.spec.model import API_VERSION
    from kubesmith.versions.registry import load_registry

    hosts = [_parse_host(arg) for arg in host_args] or [_this_machine()]
    _default_roles(hosts)
    version = kubernetes_version or load_registry().tested_release
    document: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "Cluster", "metadata": {"name": name},
                                "spec": {"kubernetesVersion": version}}
    if endpoint:
        document["spec"]["controlPlaneEndpoint"] = endpoint
    document["spec"]["hosts"] = hosts
    if any(":" in host["address"] for host in hosts if "control-plane" in host.get("roles", ())):
        # the API server advertises its host's address, which must be of the service range's family; the
        # built-in pod network is IPv4 only, so an IPv6 cluster brings its own
        document["spec"]["network"] = dict(IPV6_NETWORK)
        document["spec"]["components"] = {"podNetwork": {"enabled": False}}
    text = yaml.safe_dump(document, sort_keys=False, default_flow_style=None)
    try:
        loaded = load_spec_text(text, "(generated)")
    except SpecError as exc:
        report_problems(exc.problems)
        fail("the arguments do not make a valid cluster; see the problems above", ExitCode.USAGE)
    report_problems(loaded.warnings)
    if output == "json":
        emit_json(document)
    else:
        sys.stdout.write(text)


IPV6_NETWORK = {"clusterCidr": "fd01::/48", "serviceCidr": "fd02::/112"}


def _this_machine() -> dict[str, Any]:
    from kubesmith.node.observe import local_host_name, primary_address

    address = primary_address()
    if address is None:
        fail("this machine has no default route, so its address is unknown; give --host NAME=ADDRESS",
             ExitCode.USAGE)
    return {"name": local_host_name(), "address": address}


def _parse_host(argument: str) -> dict[str, Any]:
    name, sep, rest = argument.partition("=")
    if not sep or not name or not rest:
        fail(f"--host {argument!r}: expected NAME=ADDRESS[:ROLE,ROLE]", ExitCode.USAGE)
    address, roles = rest, ""
    if rest.count(":") == 1 or (rest.count(":") > 1 and rest.rsplit(":", 1)[1].replace(",", "").replace("-", "")
                                .isalpha()):
        address, roles = rest.rsplit(":", 1)
    entry: dict[str, Any] = {"name": name, "address": address.strip("[]")}
    if roles:
        entry["roles"] = [role.strip() for role in roles.split(",") if role.strip()]
    return entry


def _default_roles(hosts: list[dict[str, Any]]) -> None:
    """Give roles to hosts written without them.

    When the explicit roles already include a control plane and etcd, the others are nodes. Otherwise
    the hosts without roles follow the rule for a fresh cluster: a lone host gets every role, else the
    first one (or three, from four hosts on) become control-plane + etcd and the rest nodes.
    """
    unassigned = [host for host in hosts if "roles" not in host]
    explicit = {role for host in hosts for role in host.get("roles", ())}
    if {"control-plane", "etcd"} <= explicit:
        for host in unassigned:
            host["roles"] = ["node"]
        return
    if len(unassigned) == 1:
        unassigned[0]["roles"] = ["control-plane", "etcd", "node"]
        return
    control_planes = 3 if len(unassigned) >= 4 else 1
    for index, host in enumerate(unassigned):
        host["roles"] = ["control-plane", "etcd"] if index < control_planes else ["node"]


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
