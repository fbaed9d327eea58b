"""`kubesmith ca serve`: the cluster CA service. Its settings come from the JSON file the ca-service
module lays down (`/etc/kubesmith/ca-service.json`); flags override them, and without the file every
path has the standard default. `token` reads the same settings (`ca_config`).
"""

from __future__ import annotations

import logging
import ssl
import sys
from typing import Any

import click

from kubesmith import layout
from kubesmith.cli.common import DURATION_OR_ZERO, SERVICE_VALIDITY, config_option, fail, read_json_config, user_errors
from kubesmith.exitcodes import ExitCode
from kubesmith.settings import CaServiceConfig


def ca_config(config_file: str | None, **overrides: Any) -> CaServiceConfig:
    """The settings file's values (a file without some has their defaults), the flags given over them."""
    document = read_json_config(config_file or layout.CA_SERVICE_CONFIG, config_file is not None)
    source = config_file or layout.CA_SERVICE_CONFIG
    try:
        config = CaServiceConfig.from_document(document, **overrides)
    except (ValueError, TypeError) as exc:
        fail(f"{source}: {exc}", ExitCode.USAGE)
    _check_token_directory(config, source, document, overrides.get("state_dir"))
    return config


def _check_token_directory(config: CaServiceConfig, source: str, document: dict[str, Any], flag: str | None) -> None:
    """The token store's directory is one of kubesmith's own: a blank `state_dir` in the settings file (the
    current directory, whatever it is), a system directory (`/`, `/etc`) or the user's home would get
    tokens.json and its lock among the system's files. Refused before anything is read or written."""
    from kubesmith.fsutil import own_directory_problem

    where = (f"--state-dir {flag!r}" if flag else f"{source}: state_dir {document['state_dir']!r}"
             if "state_dir" in document else f"the token store's directory {str(config.state_dir)!r}")
    if not flag and isinstance(document.get("state_dir"), str) and not document["state_dir"].strip():
        fail(f"{where} is empty: give the token store's directory (default {layout.CA_SERVICE_STATE})",
             ExitCode.USAGE)
    if (problem := own_directory_problem(config.state_dir)) is not None:
        fail(f"{where}: {problem}; the token store (tokens.json) needs a directory of its own (default "
             f"{layout.CA_SERVICE_STATE})", ExitCode.USAGE)


def _removed_keys(pairs: tuple[str, ...]) -> dict[str, str] | None:
    """`--removed-key sha256:HEX=HOST` flags as the settings file's mapping."""
    found: dict[str, str] = {}
    for pair in pairs:
        digest, separator, host = pair.partition("=")
        if not separator or not digest.startswith("sha256:") or not host:
            fail(f"--removed-key {pair!r}: expected sha256:<hex>=HOST", ExitCode.USAGE)
        found[digest] = host
    return found or None


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
@click.option("--validity", type=SERVICE_VALIDITY, default=None, help="Lifetime of issued certificates (e.g. 365d, 3m).")
@click.option("--failed-auth-delay", type=DURATION_OR_ZERO, default=None,
              help="First delay after a failed authentication, doubled per failure.")
@click.option("--max-failed-auth-delay", type=DURATION_OR_ZERO, default=None,
              help="Upper bound of that delay, and of how long an address's requests may queue "
                   "(beyond it: HTTP 429).")
@click.option("--reserve-node", "reserved", multiple=True, metavar="NAME",
              help="A node name unbound tokens may not take (repeatable; the module lists the cluster's hosts).")
@click.option("--nodes-kubeconfig", default=None, metavar="FILE",
              help="A kubeconfig that may read Nodes: an unbound token may not take a registered Node's name "
                   "(the module gives the scheduler's).")
@click.option("--removed-key", "removed_keys", multiple=True, metavar="SHA256=HOST",
              help="The hash (sha256:<hex>) of a removed host's public key, whose certificates are never renewed "
                   "(repeatable; the module lists the keys of the hosts apply removed).")
@click.option("--service-san", "service_sans", multiple=True, metavar="NAME|IP",
              help="A name or address of the API server that no node certificate may carry (repeatable; the "
                   "module lists what the API server's certificate carries besides the hosts).")
def ca_serve(config_file: str | None, listen: str | None, port: int | None, ca_cert: str | None,
             ca_key: str | None, tls_cert: str | None, tls_key: str | None, state_dir: str | None,
             validity: float | None, failed_auth_delay: float | None, max_failed_auth_delay: float | None,
             reserved: tuple[str, ...], nodes_kubeconfig: str | None, removed_keys: tuple[str, ...],
             service_sans: tuple[str, ...]) -> None:
    """Serve cfssl's /api/v1/cfssl/authsign and /info, agent renewal and /healthz over HTTPS.

    One process (systemd or `kubesmith run` restarts it). Logs one line per issuance and per
    refusal to stderr (the journal under systemd).
    """
    config = ca_config(config_file, listen=listen, port=port, ca_cert=ca_cert, ca_key=ca_key, tls_cert=tls_cert,
                       tls_key=tls_key, state_dir=state_dir, validity_seconds=validity,
                       failed_auth_delay=failed_auth_delay, max_failed_auth_delay=max_failed_auth_delay,
                       reserved_nodes=reserved or None, nodes_kubeconfig=nodes_kubeconfig,
                       removed_keys=_removed_keys(removed_keys),
                       service_sans=service_sans or None)
    from kubesmith.ca import server as ca_service

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="kubesmith ca[%(process)d]: %(message)s")
    with user_errors():
        try:
            ca_service.serve(config)
        except ValueError as exc:  # a CA key that does not match its certificate
            fail(str(exc), ExitCode.IO_ERROR)
        except ssl.SSLError as exc:  # a serving certificate and key that do not load together
            fail(f"{config.tls_cert}: {exc.reason or exc}", ExitCode.IO_ERROR)
        except ca_service.ListenError as exc:
            fail(str(exc), ExitCode.FAILED)
        except KeyboardInterrupt:
            pass
