"""Commands of the CA service, join tokens, node join and the renewal agent.

`ca serve`, `token create|list|revoke`, `join`, `agent`. Settings come from the JSON files the
ca-service and agent modules lay down (`/etc/kubesmith/ca-service.json`, `/etc/kubesmith/agent.json`);
flags override them, and without the file every path has the standard default.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from cryptography import x509

from kubesmith import layout
from kubesmith.cli.common import (DURATION, OUTPUT_TEXT_JSON, emit_json, fail, load_plan_or_fail, load_spec_or_fail, ssh_flags,
                                   report_problems)
from kubesmith.exitcodes import ExitCode
from kubesmith.pki import keys
from kubesmith.runtime import ca_policy, ca_service, tokens
from kubesmith.runtime.ca_client import CaClientError, spki_hash
from kubesmith.transport.settings import ssh_options
from kubesmith.transport.ssh import CommandResult, SshTransport, TransportError
from kubesmith.urls import url_host

CA_DEFAULTS: dict[str, Any] = {
    "ca_cert": layout.pki_path("ca.crt"), "ca_key": layout.pki_path("ca.key"),
    "tls_cert": layout.pki_path("ca-service/serving.crt"), "tls_key": layout.pki_path("ca-service/serving.key"),
    "state_dir": layout.CA_SERVICE_STATE,
}




def read_json_config(path: str, required: bool) -> dict[str, Any]:
    """A settings file written by a module; missing is fine unless the user named it."""
    try:
        document = json.loads(Path(path).read_text())
    except FileNotFoundError:
        if required:
            fail(f"{path}: no such file", ExitCode.IO_ERROR)
        return {}
    except (OSError, ValueError) as exc:
        fail(f"{path}: unreadable settings ({exc})", ExitCode.IO_ERROR)
    if not isinstance(document, dict):
        fail(f"{path}: settings must be a JSON object", ExitCode.IO_ERROR)
    return document


def ca_config(config_file: str | None, **overrides: Any) -> ca_service.CaServiceConfig:
    document = {**CA_DEFAULTS, **read_json_config(config_file or layout.CA_SERVICE_CONFIG, config_file is not None)}
    try:
        return ca_service.config_from_document(document, **overrides)
    except (ValueError, TypeError) as exc:
        fail(f"{config_file or layout.CA_SERVICE_CONFIG}: {exc}", ExitCode.USAGE)


@contextmanager
def user_errors(code: ExitCode = ExitCode.FAILED) -> Iterator[None]:
    """Expected failures become one line and an exit code, never a traceback."""
    try:
        yield
    except FileNotFoundError as exc:
        fail(f"{exc.filename}: no such file", ExitCode.IO_ERROR)
    except PermissionError as exc:
        fail(f"{exc.filename}: permission denied", ExitCode.IO_ERROR)
    except (tokens.TokenError, keys.BadKeyFile) as exc:
        fail(str(exc), ExitCode.IO_ERROR)
    except CaClientError as exc:
        fail(str(exc), code)
    except OSError as exc:
        fail(f"{exc.filename or ''}: {exc.strerror or exc}", ExitCode.IO_ERROR)


def config_option(default_path: str) -> Any:
    return click.option("--config", "config_file", default=None, metavar="FILE",
                        help=f"Settings file (default: {default_path} if it exists).")


# ---- ca serve ------------------------------------------------------------------------------

@click.group("ca")
def ca_group() -> None:
    """The cluster CA service (cfssl-compatible signing for joins and renewals)."""


@ca_group.command("serve")
@config_option(layout.CA_SERVICE_CONFIG)
@click.option("--listen", default=None, help="Address to bind (default 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="Port (0: any free port; default 8443).")
@click.option("--ca-cert", default=None, metavar="FILE", help="kubernetes-ca certificate.")
@click.option("--ca-key", default=None, metavar="FILE", help="kubernetes-ca private key.")
@click.option("--tls-cert", default=None, metavar="FILE", help="The service's own HTTPS certificate.")
@click.option("--tls-key", default=None, metavar="FILE", help="Key of the HTTPS certificate.")
@click.option("--state-dir", default=None, metavar="DIR",
              help=f"Token store directory (default {layout.CA_SERVICE_STATE}).")
@click.option("--validity", type=DURATION, default=None, help="Lifetime of issued certificates (e.g. 365d, 3m).")
@click.option("--failed-auth-delay", type=click.FloatRange(min=0), default=None,
              help="First delay after a failed authentication, doubled per failure (seconds).")
@click.option("--max-failed-auth-delay", type=click.FloatRange(min=0), default=None,
              help="Upper bound of that delay, and of how long an address's requests may queue "
                   "(beyond it: HTTP 429) (seconds).")
@click.option("--reserve-node", "reserved", multiple=True, metavar="NAME",
              help="A node name unbound tokens may not take (repeatable; the module lists the cluster's hosts).")
@click.option("--service-san", "service_sans", multiple=True, metavar="NAME|IP",
              help="A name or address of the API server that no node certificate may carry (repeatable; the "
                   "module lists what the API server's certificate carries besides the hosts).")
@click.option("--workers", type=click.IntRange(min=0), default=None,
              help="Worker processes sharing the port (default 0: one per CPU).")
def ca_serve(config_file: str | None, listen: str | None, port: int | None, ca_cert: str | None,
             ca_key: str | None, tls_cert: str | None, tls_key: str | None, state_dir: str | None,
             validity: float | None, failed_auth_delay: float | None, max_failed_auth_delay: float | None,
             reserved: tuple[str, ...], service_sans: tuple[str, ...], workers: int | None) -> None:
    """Serve cfssl's /api/v1/cfssl/authsign and /info, agent renewal and /healthz over HTTPS.

    Logs one line per issuance and per refusal to stderr (the journal under systemd), prefixed
    with the pid of the worker process that handled the request.
    """
    config = ca_config(config_file, listen=listen, port=port, ca_cert=ca_cert, ca_key=ca_key, tls_cert=tls_cert,
                       tls_key=tls_key, state_dir=state_dir, validity_seconds=validity,
                       failed_auth_delay=failed_auth_delay, max_failed_auth_delay=max_failed_auth_delay,
                       reserved_nodes=reserved or None, service_sans=service_sans or None, workers=workers)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="kubesmith ca[%(process)d]: %(message)s")
    with user_errors():
        try:
            ca_service.serve(config)
        except ValueError as exc:  # a CA key that does not match its certificate
            fail(str(exc), ExitCode.IO_ERROR)
        except RuntimeError as exc:  # a worker could not start (serving certificate, port)
            fail(str(exc), ExitCode.FAILED)
        except KeyboardInterrupt:
            pass


# ---- tokens --------------------------------------------------------------------------------

@click.group("token")
def token_group() -> None:
    """Join tokens for new nodes (stored wrapped, never in clear; expiry enforced)."""


def token_store(config: ca_service.CaServiceConfig, ca_cert: x509.Certificate | None) -> tokens.TokenStore:
    """The store, with the CA key checked against the CA certificate where that is readable (a
    token wrapped with another key would never be accepted by the CA service)."""
    with user_errors():
        key = keys.load(config.ca_key.read_bytes(), str(config.ca_key))
    if ca_cert is not None and not keys.same_public_key(ca_cert.public_key(), key.public_key()):
        fail(f"{config.ca_key} does not belong to {config.ca_cert}: tokens made with it would never be accepted",
             ExitCode.USAGE)
    return tokens.TokenStore(config.token_file, key)


def ca_certificate(config: ca_service.CaServiceConfig) -> x509.Certificate | None:
    """The CA certificate, or None where it is not readable here (the token store works without)."""
    try:
        return x509.load_pem_x509_certificate(config.ca_cert.read_bytes())
    except (OSError, ValueError):
        return None


def store_options(command: Any) -> Any:
    """Where the token store is: the CA service's settings file, or --state-dir."""
    command = click.option("--state-dir", default=None, metavar="DIR",
                           help=f"CA service state directory (default {layout.CA_SERVICE_STATE}).")(command)
    return config_option(layout.CA_SERVICE_CONFIG)(command)


def token_options(command: Any) -> Any:
    """The token store and the CA key that wraps its HMAC keys (creating tokens needs both)."""
    command = click.option("--ca-cert", default=None, metavar="FILE",
                           help="kubernetes-ca certificate (for the --ca-hash that joins need).")(command)
    command = click.option("--ca-key", default=None, metavar="FILE",
                           help="kubernetes-ca private key (wraps the stored HMAC keys).")(command)
    return store_options(command)


@token_group.command("create")
@click.option("--ttl", type=DURATION, default=None, help="Lifetime of the token (default: the CA service's "
              "tokenTtl setting, else 1h).")
@click.option("--node", default=None, metavar="NAME",
              help="The node this token may join as (default: the first node name it is used for).")
@click.option("--address", "addresses", multiple=True, metavar="IP",
              help="IP address the node's serving certificate may carry (repeatable).")
@click.option("--description", default="", help="Free text shown by `token list`.")
@click.option("--output", "-o", type=OUTPUT_TEXT_JSON, default="text", show_default=True)
@click.option("--cluster", "cluster_file", default=None, metavar="FILE",
              help="Create the token over SSH on a control-plane host of this cluster file (the one given by "
                   "--on, else the first), and print the complete join command for that host's CA service.")
@click.option("--on", "on_host", default=None, metavar="HOST", help="With --cluster: the control-plane host.")
@ssh_flags("with --cluster")
@token_options
def token_create(ttl: float | None, node: str | None, addresses: tuple[str, ...], description: str, output: str,
                 cluster_file: str | None, on_host: str | None, ssh_config: str | None, known_hosts: str | None,
                 identity: str | None, config_file: str | None, state_dir: str | None, ca_key: str | None,
                 ca_cert: str | None) -> None:
    """Create a join token; prints it once (it is not stored), with its cfssl auth key.

    Run it on a control-plane host (its CA service keeps the token store), or from anywhere
    with --cluster FILE, which runs it there over SSH.
    """
    _check_addresses(addresses)
    if node is not None:
        _check_node_name(node)
    if cluster_file is not None:
        ssh = (ssh_config, known_hosts, identity)
        _token_create_remote(cluster_file, on_host, ssh, ttl, node, addresses, description, output)
        return
    config = ca_config(config_file, state_dir=state_dir, ca_key=ca_key, ca_cert=ca_cert)
    certificate = ca_certificate(config)
    store = token_store(config, certificate)
    _check_not_service_sans(node, addresses, config.service_sans)
    ttl = ttl or config.default_token_ttl
    with user_errors():
        created = store.create(ttl, node, addresses, description)
    ca_hash = spki_hash(certificate) if certificate is not None else "sha256:<hash of the CA public key>"
    info = {"token": created.token, "id": created.record.id, "expires": _iso(created.record.expires),
            "node": node, "addresses": list(addresses), "cfssl_auth_key": created.auth_key_hex, "ca_hash": ca_hash}
    if output == "json":
        emit_json(info)
        return
    click.echo(created.token)
    click.echo(f"id {info['id']}, expires {info['expires']}, node {node or '(first to join)'}", err=True)
    click.echo(f"cfssl auth key (hex, type standard): {created.auth_key_hex}", err=True)
    click.echo(f"join with: {join_command_line('https://<control-plane>:<port>', created.token, ca_hash)}", err=True)


def _token_create_remote(cluster_file: str, on_host: str | None, ssh: tuple[str | None, str | None, str | None],
                         ttl: float | None, node: str | None, addresses: tuple[str, ...], description: str,
                         output: str) -> None:
    loaded = load_spec_or_fail(cluster_file)
    signers = loaded.cluster.control_plane_hosts
    host = next((h for h in signers if h.name == on_host), None) if on_host else signers[0]
    if host is None:
        fail(f"--on {on_host}: not a control-plane host of {cluster_file}; control-plane hosts: "
             f"{', '.join(h.name for h in signers)}", ExitCode.USAGE)
    arguments = ["/usr/local/bin/kubesmith", "token", "create", "--output", "json", "--description", description]
    arguments += (["--ttl", f"{ttl:g}s"] if ttl else []) + (["--node", node] if node else [])
    arguments += [part for address in addresses for part in ("--address", address)]
    options, _ = ssh_options(loaded.cluster, *ssh)

    async def remote() -> CommandResult:
        async with SshTransport(options) as transport:
            return await transport.run(host.address, shlex.join(arguments))

    try:
        result = asyncio.run(remote())
    except TransportError as exc:
        fail(str(exc), ExitCode.FAILED)
    if not result.ok:
        fail(f"{host.name}: kubesmith token create failed: {result.stderr.strip()[-300:]}", ExitCode.FAILED)
    info = json.loads(result.stdout)
    port = loaded.cluster.spec.components.ca_service.port
    info["server"] = f"https://{url_host(host.address)}:{port}"
    if output == "json":
        emit_json(info)
        return
    click.echo(info["token"])
    click.echo(f"id {info['id']} on {host.name}, expires {info['expires']}, node {node or '(first to join)'}", err=True)
    click.echo(f"join with: {join_command_line(info['server'], info['token'], info['ca_hash'])}", err=True)


@token_group.command("list")
@click.option("--output", "-o", type=OUTPUT_TEXT_JSON, default="text", show_default=True)
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
    lines += [(r["id"], r["node"] or "-", r["expires"], r["state"], r["description"]) for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(5)]
    for line in lines:
        click.echo("   ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())


@token_group.command("revoke")
@click.argument("token_id", metavar="ID")
@click.option("--output", "-o", type=OUTPUT_TEXT_JSON, default="text", show_default=True)
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


def _check_addresses(addresses: tuple[str, ...]) -> None:
    import ipaddress
    for address in addresses:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            fail(f"--address {address!r} is not an IP address", ExitCode.USAGE)


def _check_node_name(node: str, what: str = "--node") -> None:
    try:
        ca_policy.check_node_name(node)
    except ca_policy.PolicyError as exc:
        fail(f"{what}: {exc}", ExitCode.USAGE)


def _check_not_service_sans(node: str | None, addresses: tuple[str, ...], service_sans: tuple[str, ...]) -> None:
    """What the CA service would refuse to sign for this token, refused before the token exists."""
    try:
        ca_policy.check_service_sans(ca_policy.claimed_names(node, addresses), ca_policy.normalized_sans(service_sans))
    except ca_policy.PolicyError as exc:
        fail(str(exc), ExitCode.USAGE)


def _iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- join -----------------------------------------------------------------------------------

@click.command("join")
@click.option("--server", required=True, metavar="URL", help="CA service URL, e.g. https://10.0.0.11:8443.")
@click.option("--token", required=True, envvar="KUBESMITH_JOIN_TOKEN", help="Join token (or $KUBESMITH_JOIN_TOKEN).")
@click.option("--ca-hash", required=True, metavar="sha256:HEX",
              help="SHA-256 of the CA certificate's SubjectPublicKeyInfo (as kubeadm's "
                   "--discovery-token-ca-cert-hash; printed by `token create`).")
@click.option("--node", default=None, metavar="NAME", help="This node's name (default: the host name).")
@click.option("--address", "addresses", multiple=True, metavar="IP",
              help="This node's address for its serving certificate (repeatable; default: from --spec).")
@click.option("--spec", "spec_file", default=None, metavar="FILE",
              help="The cluster file listing this node: its files and units are laid down too.")
@click.option("--root", default="/", show_default=True, metavar="DIR",
              help="Write everything under DIR (tests, images); no symbolic link may lead out of it.")
@click.option("--no-wait", is_flag=True, help="Do not start units or wait for node-online.target.")
@click.option("--deadline", type=click.FloatRange(min=1), default=600.0, show_default=True,
              help="Seconds to wait for node-online.target.")
def join_command(server: str, token: str, ca_hash: str, node: str | None, addresses: tuple[str, ...],
                 spec_file: str | None, root: str, no_wait: bool, deadline: float) -> None:
    """Join this machine as a node: pin the CA by hash, create keys here, obtain certificates with
    the token, write them atomically, lay down the node's units and wait for node-online.target.

    Waiting is skipped with --no-wait, with --root other than /, or where systemd is not running.
    """
    import socket

    from kubesmith.runtime import join as join_runtime

    _check_addresses(addresses)
    try:
        ca_client_pin(ca_hash)
        tokens.parse_token(token)
    except (ValueError, tokens.TokenError) as exc:
        fail(str(exc), ExitCode.USAGE)
    name = node or socket.gethostname().split(".")[0].lower()
    _check_node_name(name, "--node" if node else "this host's name (pass --node)")
    host_plan, cluster, algorithm = None, "kubernetes", "ecdsa-p256"
    if spec_file:
        host_plan, cluster, algorithm = _host_plan(spec_file, name, observe=Path(root).resolve() == Path("/"))
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


def ca_client_pin(pin: str) -> str:
    from kubesmith.runtime.ca_client import parse_pin
    return parse_pin(pin)


def _host_plan(spec_file: str, name: str, observe: bool) -> tuple[Any, str, str]:
    """The node's plan; for this machine (not an image under --root) planned for what it is like."""
    from kubesmith.plan.environment import observe_local

    loaded, plan = load_plan_or_fail(spec_file, {name: observe_local()} if observe else None)
    report_problems(loaded.warnings)
    try:
        return plan.host(name), plan.cluster, plan.pki.key_algorithm
    except KeyError:
        fail(f"{spec_file}: no host named {name!r}; add the node to spec.hosts first (or pass --node)",
             ExitCode.USAGE)


# ---- agent ----------------------------------------------------------------------------------

@click.command("agent")
@config_option(layout.AGENT_CONFIG)
@click.option("--host", default=None, metavar="NAME", help="This host's name.")
@click.option("--pki-dir", default=None, metavar="DIR", help=f"Certificates to renew (default {layout.PKI}).")
@click.option("--kubeconfig-dir", default=None, metavar="DIR", help=f"Kubeconfigs to renew (default {layout.ETC}).")
@click.option("--state-file", default=None, metavar="FILE", help=f"Report file (default {layout.AGENT_STATE_FILE}).")
@click.option("--ca-url", "ca_urls", multiple=True, metavar="URL", help="CA service URL (repeatable, tried in order).")
@click.option("--renew-fraction", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=None,
              help="Renew once this fraction of a certificate's life is used (default 2/3).")
@click.option("--check-interval", type=DURATION, default=None, help="Time between checks (default 5m).")
@click.option("--retry-initial", type=DURATION, default=None, help="First retry pause while the CA is unreachable.")
@click.option("--retry-max", type=DURATION, default=None, help="Longest retry pause (default 60s).")
@click.option("--once", is_flag=True,
              help="One check-and-renew pass, then exit (non-zero if the CA was unreachable, a file did not "
                   "load or a renewal failed).")
@click.option("--show-state", is_flag=True, help="Print the last report (JSON) and exit.")
def agent_command(config_file: str | None, host: str | None, pki_dir: str | None, kubeconfig_dir: str | None,
                  state_file: str | None, ca_urls: tuple[str, ...], renew_fraction: float | None,
                  check_interval: float | None, retry_initial: float | None, retry_max: float | None, once: bool,
                  show_state: bool) -> None:
    """Renew this host's certificates before they expire, without an outage.

    \b
    Every check (--check-interval) looks at each certificate under --pki-dir and each
    kubeconfig under --kubeconfig-dir; one that has used --renew-fraction of its life
    is renewed with the same key and subject:
      - by the CA service (--ca-url), authenticating with this host's agent
        certificate (mutual TLS), or
      - locally, on hosts that hold that CA's key.
    The old certificate stays until the new one is written (atomically); path units
    then restart the component. While the CA service is unreachable the agent retries
    with backoff (--retry-initial .. --retry-max) and keeps the current certificate.
    Its report (--state-file) is what `kubesmith status` shows; --show-state prints it.
    A manual pass waits while the unit's agent is in one; both record in that report.

    \b
    Runs as the kubesmith-agent unit on every host; by hand:
      kubesmith agent --once      one pass, a summary line; exit 4 if the CA was
                                  unreachable, 5 if a file did not load or a
                                  renewal was refused or failed
    """
    from kubesmith.runtime import agent

    document = read_json_config(config_file or layout.AGENT_CONFIG, config_file is not None)
    overrides = {"host": host, "pki_dir": pki_dir, "kubeconfig_dir": kubeconfig_dir, "state_file": state_file,
                 "ca_urls": list(ca_urls) or None, "renew_fraction": renew_fraction,
                 "check_interval": check_interval, "retry_initial": retry_initial, "retry_max": retry_max}
    merged = {"pki_dir": layout.PKI, "kubeconfig_dir": layout.ETC, "state_file": layout.AGENT_STATE_FILE,
              **document, **{k: v for k, v in overrides.items() if v is not None}}
    if show_state:
        emit_json(agent.read_state(Path(merged["state_file"])))
        return
    if not merged.get("host"):
        import socket
        merged["host"] = socket.gethostname().split(".")[0]
    try:
        config = agent.AgentConfig(host=str(merged.pop("host")), pki_dir=Path(merged.pop("pki_dir")),
                                   kubeconfig_dir=Path(merged.pop("kubeconfig_dir")),
                                   state_file=Path(merged.pop("state_file")),
                                   ca_urls=tuple(merged.pop("ca_urls", ()) or ()), **merged)
    except TypeError as exc:
        fail(f"{config_file or layout.AGENT_CONFIG}: {exc}", ExitCode.USAGE)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="kubesmith agent: %(message)s")
    with user_errors():
        if once:
            outcome = asyncio.run(_agent_once(config))
            findings = ([f"CA unreachable: {'; '.join(outcome.unavailable)}"] if outcome.unavailable else []) + \
                ([f"{len(outcome.problems)} to look at: {'; '.join(outcome.problems)}"] if outcome.problems else [])
            if findings:
                fail(f"{_once_summary(config, outcome)}; " + "; ".join(findings),
                     ExitCode.UNHEALTHY if outcome.unavailable else ExitCode.FAILED)
            click.echo(f"kubesmith agent: {_once_summary(config, outcome)}", err=True)
            return
        try:
            asyncio.run(_agent_forever(config))
        except KeyboardInterrupt:
            pass


def _once_summary(config: Any, outcome: Any) -> str:
    if outcome.checked == 0:
        return (f"nothing to renew: no certificate with its key under {config.pki_dir} and no kubeconfig "
                f"with a client certificate under {config.kubeconfig_dir}")
    due = outcome.next_due.isoformat(timespec="seconds") if outcome.next_due else "none scheduled"
    return f"checked {outcome.checked}, renewed {outcome.renewed}; next renewal due {due}"


async def _agent_once(config: Any) -> Any:
    import aiohttp

    from kubesmith.runtime import agent

    async with aiohttp.ClientSession(trust_env=False) as session:
        async with agent.locked_report(config) as state:
            return await agent.run_cycle(config, session, state)


async def _agent_forever(config: Any) -> None:
    import signal

    from kubesmith.runtime import agent

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await agent.run_agent(config, stop)
