"""`kubesmith join`: this machine becomes a node, with a token and the CA pinned by its key's hash."""

from __future__ import annotations

import socket
from pathlib import Path

import click

from kubesmith import layout
from kubesmith.backends import join as join_runtime
from kubesmith.backends import preflight
from kubesmith.ca import tokens
from kubesmith.ca.client import parse_pin
from kubesmith.cli.common import (Duration, check_addresses, check_node_name, fail, ignore_preflight_flag,
                                  load_plan_or_fail, preflight_failed, report_problems, spec_argument, user_errors)
from kubesmith.exitcodes import ExitCode
from kubesmith.node.observe import observe_local
from kubesmith.vocabulary.model import HostPlan


@click.command("join")
@spec_argument(required=False, former=("--spec",))
@click.option("--server", required=True, metavar="URL", help="CA service URL, e.g. https://10.0.0.11:8443.")
@click.option("--token", required=True, envvar="KUBESMITH_JOIN_TOKEN", help="Join token (or $KUBESMITH_JOIN_TOKEN).")
@click.option("--ca-hash", required=True, metavar="sha256:HEX",
              help="SHA-256 of the CA certificate's SubjectPublicKeyInfo (as kubeadm's "
                   "--discovery-token-ca-cert-hash; printed by `token create`).")
@click.option("--node", default=None, metavar="NAME", help="This node's name (default: the host name).")
@click.option("--address", "addresses", multiple=True, metavar="IP",
              help="This node's address for its serving certificate (repeatable; default: from FILE).")
@click.option("--root", default="/", show_default=True, metavar="DIR",
              help="Write everything under DIR (tests, images); no symbolic link may lead out of it.")
@click.option("--no-wait", is_flag=True, help="Do not start units or wait for node-online.target.")
@click.option("--deadline", type=Duration(minimum=1), default="10m", show_default=True,
              help="How long to wait for node-online.target.")
@ignore_preflight_flag()
def join_command(spec_file: str | None, server: str, token: str, ca_hash: str, node: str | None,
                 addresses: tuple[str, ...], root: str, no_wait: bool, deadline: float,
                 ignore_preflight: frozenset[str]) -> None:
    """Join this machine as a node: pin the CA by hash, create keys here, obtain certificates with
    the token, write them atomically, lay down the node's units and wait for node-online.target.
    With the cluster FILE listing this node, its files and units are laid down too.

    Waiting is skipped with --no-wait, with --root other than /, or where systemd is not running.
    With FILE and --root /, preflight first checks this machine as the node (as `apply --help`
    lists; exit 6 names each failure, and nothing is written).
    """
    addresses = check_addresses(addresses)
    try:
        parse_pin(ca_hash)
        tokens.parse_token(token)
    except (ValueError, tokens.TokenError) as exc:
        fail(str(exc), ExitCode.USAGE)
    name = node or socket.gethostname().split(".")[0].lower()
    check_node_name(name, "--node" if node else "this host's name (pass --node)")
    host_plan, cluster, algorithm = None, "kubernetes", "ecdsa-p256"
    if spec_file:
        observe = Path(root).resolve() == Path("/")
        host_plan, cluster, algorithm = _host_plan(spec_file, name, observe, ignore_preflight)
        addresses = addresses or (host_plan.address,)
    options = join_runtime.JoinOptions(server=server, token=token, ca_hash=ca_hash, node=name,
                                       addresses=addresses, root=Path(root), host_plan=host_plan, cluster=cluster,
                                       key_algorithm=algorithm, wait=not no_wait, deadline=deadline)
    with user_errors():
        try:
            result = join_runtime.join(options)
        except join_runtime.JoinError as exc:
            fail(str(exc))
    click.echo(f"joined as {result.node}: {len(result.certificates)} certificates "
               f"({', '.join(result.certificates)}), {result.files_written} files, {result.units_written} unit files"
               + ("; node-online.target is active" if result.waited else ""))
    if result.note:
        click.echo(result.note, err=True)


def _host_plan(spec_file: str, name: str, observe: bool, ignore_preflight: frozenset[str]
               ) -> tuple[HostPlan, str, str]:
    """The node's plan; for this machine (not an image under --root) planned for what it is like,
    and checked (preflight) against it: the binaries its units start are the ones installed here."""
    loaded, plan = load_plan_or_fail(spec_file, {name: observe_local()} if observe else None)
    report_problems(loaded.warnings)
    try:
        host = plan.host(name)
    except KeyError:
        fail(f"{spec_file}: no host named {name!r}; add the node to spec.hosts first (or pass --node)",
             ExitCode.USAGE)
    if observe:
        installed = {Path(s.binary).name: path for s in host.services
                     if (path := Path(s.binary if s.binary.startswith("/") else f"{layout.BIN}/{s.binary}")).exists()}
        try:
            preflight.require(plan, [name], installed, ignore_preflight, binaries_where=None)
        except preflight.PreflightError as exc:
            preflight_failed(exc.failures)
    return host, plan.cluster, plan.pki.key_algorithm
