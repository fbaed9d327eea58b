"""`kubesmith token create|list|repair|revoke`: join tokens for new nodes, in the CA service's token store."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import click
from cryptography import x509

from kubesmith import fsutil, layout
from kubesmith.backends import remote_tokens
from kubesmith.backends.ssh_settings import ssh_options
from kubesmith.ca import policy as ca_policy, tokens
from kubesmith.ca.client import spki_hash
from kubesmith.cli.ca_commands import ca_config
from kubesmith.cli.common import (DURATION, RenamedOption, check_addresses, check_node_name, emit_json, fail,
                                  load_spec_or_fail, output_option, printable, renamed, require_ssh_files,
                                  spec_argument, ssh_flags, user_errors)
from kubesmith.exitcodes import ExitCode
from kubesmith.fsutil import SMALL_FILE_BYTES, read_regular
from kubesmith.pki import keys
from kubesmith.settings import CaServiceConfig


@click.group("token")
def token_group() -> None:
    """Join tokens for new nodes (stored wrapped, never in clear; expiry enforced)."""


def token_store(config: CaServiceConfig, ca_cert: x509.Certificate | None) -> tokens.TokenStore:
    """The store, with the CA key checked against the CA certificate where that is readable (a
    token wrapped with another key would never be accepted by the CA service)."""
    with user_errors():
        fsutil.check_private(config.ca_key, secret=True)  # a CA key others can read or swap is no secret
        key = keys.load(read_regular(config.ca_key, SMALL_FILE_BYTES, "a private key"), str(config.ca_key))
    if ca_cert is not None and not keys.same_public_key(ca_cert.public_key(), key.public_key()):
        fail(f"{config.ca_key} does not belong to {config.ca_cert}: tokens made with it would never be accepted",
             ExitCode.USAGE)
    return tokens.TokenStore(config.token_file, key)


def ca_certificate(config: CaServiceConfig) -> x509.Certificate | None:
    """The CA certificate, or None where it is not readable here (the token store works without)."""
    try:
        return x509.load_pem_x509_certificate(read_regular(config.ca_cert, SMALL_FILE_BYTES, "a certificate"))
    except (OSError, ValueError):
        return None


def store_options(command: Any) -> Any:
    """Where the token store is: the CA service's settings file (--ca-config: on an operator's command
    line --config would read as the cluster file), or --state-dir."""
    command = click.option("--state-dir", default=None, metavar="DIR",
                           help=f"CA service state directory (default {layout.CA_SERVICE_STATE}).")(command)
    command = renamed("--config")(click.option(
        "--ca-config", "config_file", cls=RenamedOption, default=None, metavar="FILE",
        help=f"The CA service's settings file (default: {layout.CA_SERVICE_CONFIG} if it exists).")(command))
    return command


def token_options(command: Any) -> Any:
    """The token store and the CA key that wraps its HMAC keys (creating tokens needs both)."""
    command = click.option("--ca-cert", default=None, metavar="FILE",
                           help="kubernetes-ca certificate (for the --ca-hash that joins need).")(command)
    command = click.option("--ca-key", default=None, metavar="FILE",
                           help="kubernetes-ca private key (wraps the stored HMAC keys).")(command)
    return store_options(command)


@token_group.command("create")
@spec_argument(required=False, former=("--cluster",))
@click.option("--ttl", type=DURATION, default=None, help="Lifetime of the token, at most 365d (default: the CA "
              "service's default_token_ttl setting, else 1h).")
@click.option("--node", default=None, metavar="NAME",
              help="The node this token may join as (default: the first node name it is used for).")
@click.option("--address", "addresses", multiple=True, metavar="IP",
              help="IP address the node's serving certificate may carry (repeatable).")
@click.option("--description", default="", help="Plain text shown by `token list` (at most 200 characters).")
@output_option()
@click.option("--on", "on_host", default=None, metavar="HOST", help="With FILE: the control-plane host.")
@ssh_flags("with FILE")
@token_options
def token_create(spec_file: str | None, ttl: float | None, node: str | None, addresses: tuple[str, ...],
                 description: str, output: str, on_host: str | None, ssh_config: str | None, known_hosts: str | None,
                 identity: str | None, config_file: str | None, state_dir: str | None, ca_key: str | None,
                 ca_cert: str | None) -> None:
    """Create a join token and print it once, on stdout only (it is not stored).

    stdout gets the token alone (`TOKEN=$(kubesmith token create ...)`); stderr, which is often
    logged, gets what is not secret: the token's id, expiry and node, and the join command with
    the token left out (set KUBESMITH_JOIN_TOKEN to it on the node). With --output json, stdout
    gets one object with the token, the join's --ca-hash (and --server, with FILE) and the
    cfssl auth key (the token's HMAC key, as secret as the token), and stderr nothing.

    Run it on a control-plane host (its CA service keeps the token store), or from anywhere
    with the cluster FILE: the token is then created over SSH on a control-plane host of FILE
    (the one given by --on, else the first), and the complete join command names that host's
    CA service.
    """
    addresses = check_addresses(addresses)
    if node is not None:
        check_node_name(node)
    _check_token_text(ttl, description, "--ttl")
    if spec_file is not None:
        request = remote_tokens.TokenRequest(ttl, node, addresses, description)
        _token_create_remote(spec_file, on_host, (ssh_config, known_hosts, identity), request, output)
        return
    config = ca_config(config_file, state_dir=state_dir, ca_key=ca_key, ca_cert=ca_cert)
    certificate = ca_certificate(config)
    store = token_store(config, certificate)
    _check_not_service_sans(node, addresses, config.service_sans)
    if ttl is None:
        ttl = config.default_token_ttl
        _check_token_text(ttl, description, f"default_token_ttl of {config_file or layout.CA_SERVICE_CONFIG}")
    with user_errors():
        created = store.create(ttl, node, addresses, description)
    ca_hash = spki_hash(certificate) if certificate is not None else "sha256:<hash of the CA public key>"
    info = {"token": created.token, "id": created.record.id, "expires": _iso(created.record.expires),
            "node": node, "addresses": list(addresses), "cfssl_auth_key": created.auth_key_hex, "ca_hash": ca_hash}
    _print_created(info, "https://<control-plane>:<port>", "", output)


def _token_create_remote(cluster_file: str, on_host: str | None, ssh: tuple[str | None, str | None, str | None],
                         request: remote_tokens.TokenRequest, output: str) -> None:
    loaded = load_spec_or_fail(cluster_file)
    options, _ = ssh_options(loaded.cluster, *ssh)
    require_ssh_files(options.problem())
    try:
        host = remote_tokens.signing_host(loaded.cluster, on_host, cluster_file)
    except remote_tokens.RemoteTokenError as exc:
        fail(str(exc), ExitCode.USAGE)
    try:
        info = asyncio.run(remote_tokens.create_on(loaded.cluster, host, options, request))
    except remote_tokens.RemoteTokenError as exc:
        fail(str(exc), ExitCode.FAILED)
    _print_created({**info, "node": request.node}, info["server"], f" on {host.name}", output)


def _print_created(info: dict[str, Any], server: str, where: str, output: str) -> None:
    """The token once, on stdout; on stderr (often logged) only what is not secret."""
    if output == "json":
        emit_json(info)
        return
    click.echo(info["token"])
    click.echo(f"token id {info['id']}{where}, expires {info['expires']}, node {info['node'] or '(first to join)'}",
               err=True)
    click.echo(f"join with (KUBESMITH_JOIN_TOKEN holds the token printed on stdout): "
               f"{join_command_line(server, '<token>', info['ca_hash'])}", err=True)


@token_group.command("list")
@output_option()
@store_options
def token_list(output: str, state_dir: str | None, config_file: str | None) -> None:
    """List tokens (id, node, expiry, state); the tokens themselves are not stored."""
    config = ca_config(config_file, state_dir=state_dir)
    with user_errors():
        records = tokens.TokenFile(config.token_file).records()
    now = dt.datetime.now(dt.timezone.utc).timestamp()
    rows = [_token_row(record, now) for record in records]
    if output == "json":
        emit_json(rows)
        return
    lines = [("ID", "NODE", "EXPIRES", "STATE", "DESCRIPTION")]
    lines += [(printable(r["id"]), printable(r["node"] or "-"), r["expires"], r["state"], printable(r["description"]))
              for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(5)]
    for line in lines:
        click.echo("   ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())


@token_group.command("repair")
@store_options
def token_repair(state_dir: str | None, config_file: str | None) -> None:
    """Make a damaged token store usable again: its intact records are kept, the damaged file is set
    aside beside it (tokens.json.damaged-<time>) and each dropped record is named. An intact store
    is left alone. Needs only the store, not the CA key."""
    config = ca_config(config_file, state_dir=state_dir)
    with user_errors():
        kept, dropped, aside = tokens.TokenFile(config.token_file).repair()
    if aside is None:
        click.echo(f"{config.token_file}: intact ({kept} token{'s' if kept != 1 else ''}); nothing to repair")
        return
    for line in dropped:
        click.echo(f"dropped {printable(line)}", err=True)
    click.echo(f"{config.token_file}: repaired, {kept} token{'s' if kept != 1 else ''} kept, {len(dropped)} "
               f"damaged part{'s' if len(dropped) != 1 else ''} dropped; the damaged file is {aside}")


@token_group.command("revoke")
@click.argument("token_id", metavar="ID")
@output_option()
@store_options
def token_revoke(token_id: str, output: str, state_dir: str | None, config_file: str | None) -> None:
    """Revoke the token ID at once (the CA service re-reads the store on its next request).

    Needs only the token store, not the CA key: revoking a leaked token never waits for key access.
    """
    config = ca_config(config_file, state_dir=state_dir)
    with user_errors():
        try:
            record = tokens.TokenFile(config.token_file).revoke(token_id)
        except tokens.TokenError as exc:
            fail(str(exc), ExitCode.USAGE)
    if output == "json":
        emit_json(_token_row(record, dt.datetime.now(dt.timezone.utc).timestamp()))
        return
    click.echo(f"token {record.id} revoked")


def _token_row(record: tokens.TokenRecord, now: float) -> dict[str, Any]:
    return {"id": record.id, "node": record.node, "addresses": list(record.addresses),
            "created": _iso(record.created), "expires": _iso(record.expires), "state": record.state(now),
            "description": record.description}


def join_command_line(server: str, token: str, ca_hash: str) -> str:
    """The token goes in the environment: a `--token` argument is readable in every user's `ps`."""
    return f"KUBESMITH_JOIN_TOKEN={token} kubesmith join --server {server} --ca-hash {ca_hash}"


def _check_not_service_sans(node: str | None, addresses: tuple[str, ...], service_sans: tuple[str, ...]) -> None:
    """What the CA service would refuse to sign for this token, refused before the token exists."""
    try:
        ca_policy.check_service_sans(ca_policy.claimed_names(node, addresses), ca_policy.normalized_sans(service_sans))
    except ca_policy.PolicyError as exc:
        fail(str(exc), ExitCode.USAGE)


def _check_token_text(ttl: float | None, description: str, source: str) -> None:
    """A lifetime and a description the store can hold and `token list` can print, refused up front."""
    try:
        if ttl is not None:
            tokens.check_ttl(ttl)
    except tokens.TokenError as exc:
        fail(f"{source}: {exc}", ExitCode.USAGE)
    try:
        tokens.check_description(description)
    except tokens.TokenError as exc:
        fail(f"--description: {exc}", ExitCode.USAGE)


def _iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
