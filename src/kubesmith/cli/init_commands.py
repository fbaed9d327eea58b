"""`kubesmith init`: a starting cluster file, checked by the same loader as `validate` before it is written."""

from __future__ import annotations

import sys
from typing import Any

import click

from kubesmith.cli.common import emit_json, fail, output_option, report_problems
from kubesmith.exitcodes import ExitCode
from kubesmith.vocabulary.errors import SpecError


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
