"""`kubesmith certs`: check-expiration lists every CA and certificate of the PKI state directory with
its expiry and status; renew reissues certificates with their keys."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from cryptography import x509

from kubesmith.backends.render import select_hosts
from kubesmith.cli.common import emit_json, fail, hosts_option, output_option, spec_argument
from kubesmith.cli.render_commands import pki_errors, plan_and_state, state_dir_option
from kubesmith.exitcodes import ExitCode
from kubesmith.lifetimes import standing
from kubesmith.pki.issue import Identity, issued_by
from kubesmith.pki.store import PkiStore, check_owner, store_root, utc_now
from kubesmith.vocabulary.model import Plan


@click.group()
def certs() -> None:
    """Inspect and renew the cluster's certificates (kept in the PKI state directory)."""


@certs.command("check-expiration")
@spec_argument()
@output_option()
@hosts_option()
@state_dir_option()
def check_expiration(spec_file: str, output: str, hosts: tuple[str, ...], state_dir: str | None) -> None:
    """List every CA and certificate with its expiry, residual time and signing CA, as kubeadm does.

    STATUS is ok, renew-due (under the renewal threshold: the next render reissues it),
    outdated (the plan wants other names or usages), expired, or missing (never rendered).
    Nothing is created or changed.
    """
    plan, state = plan_and_state(spec_file, state_dir)
    root = store_root(state)
    if not root.is_dir():
        fail(f"no PKI state at {state}; run `kubesmith render {spec_file} --out-dir DIR` first", ExitCode.IO_ERROR)
    with pki_errors():
        check_owner(root, plan.cluster)
        rows = _expiration_rows(plan, PkiStore(root, plan.pki, plan.authorities), list(hosts) or None)
    if output == "json":
        emit_json([row.to_document() for row in rows])
    else:
        sys.stdout.write(_table(rows))


@certs.command("renew")
@spec_argument()
@click.argument("name", metavar="NAME|all")
@hosts_option()
@state_dir_option()
def renew(spec_file: str, name: str, hosts: tuple[str, ...], state_dir: str | None) -> None:
    """Reissue the certificate NAME (a certificate request name such as apiserver, kubelet-client)
    on every host that has it, or every certificate with `all`.

    The new certificate keeps the existing private key (delete a key from the state directory
    to rotate it). CAs are not renewed. Run `kubesmith render` (or apply) afterwards to ship
    the new certificates.
    """
    plan, state = plan_and_state(spec_file, state_dir)
    with pki_errors():
        selected = select_hosts(plan, list(hosts) or None)
        known = sorted({request.name for host in selected for request in host.certificates})
        if name != "all" and name not in known:
            fail(f"no certificate named {name!r} on the selected hosts; known: {', '.join(known)}, or all",
                 ExitCode.USAGE)
        wanted: Callable[[str, Any], bool] = lambda host, request: name in ("all", request.name)
        with PkiStore.open(store_root(state), plan) as store:
            requests = [(h.name, r) for h in selected for r in h.certificates if wanted(h.name, r)]
            issued = store.issue(requests, force=wanted)
    for item in issued:
        click.echo(f"{item.host}: {item.name}: renewed, expires {_when(item.not_after)}")
    click.echo(f"{len(issued)} certificate{'s' if len(issued) != 1 else ''} renewed; run `kubesmith render` "
               "to write them out")


@dataclass(frozen=True, slots=True)
class CertificateRow:
    """One line of `certs check-expiration`: a CA (no host, no CA) or a host's certificate; no expiry
    when the certificate is missing."""

    name: str
    host: str
    ca: str
    status: str
    common_name: str = ""
    expires: dt.datetime | None = None
    residual: dt.timedelta | None = None  # expires - now

    @classmethod
    def of(cls, name: str, host: str, ca: str, cert: Any, now: dt.datetime, status: str,
           common_name: str = "") -> CertificateRow:
        if cert is None:
            return cls(name, host, ca, status, common_name)
        return cls(name, host, ca, status, common_name, cert.not_valid_after_utc, cert.not_valid_after_utc - now)

    @property
    def residual_text(self) -> str:
        return _residual(self.residual) if self.residual is not None else ""

    def to_document(self) -> dict[str, Any]:
        """The row as `--output json` gives it."""
        return {"name": self.name, "host": self.host, "ca": self.ca, "common_name": self.common_name,
                "expires": self.expires.isoformat() if self.expires is not None else None,
                "residual_seconds": int(self.residual.total_seconds()) if self.residual is not None else None,
                "residual": self.residual_text, "status": self.status}


def _expiration_rows(plan: Plan, store: PkiStore, hosts: list[str] | None) -> list[CertificateRow]:
    """One row per CA and per (host, certificate); reads the store, never creates anything."""
    now = utc_now()
    cas = {ca.name: _load_if_present(store.ca_paths(ca.name)[0]) for ca in plan.authorities}
    rows = [CertificateRow.of(name, "", "", cert, now, "ok" if cert else "missing") for name, cert in cas.items()]
    for host in select_hosts(plan, hosts):
        for request in host.certificates:
            cert = store.existing(host.name, request.name)
            status = _status(plan, request, cert, cas.get(request.ca), now)
            rows.append(CertificateRow.of(request.name, host.name, request.ca, cert, now, status, request.common_name))
    return rows


def _status(plan: Plan, request: Any, cert: Any, ca_cert: Any, now: dt.datetime) -> str:
    if cert is None:
        return "missing"
    due = standing(cert, plan.pki.renew_fraction, now)
    if due == "expired":
        return "expired"
    if Identity.of_certificate(cert) != Identity.of_request(request) or ca_cert is None \
            or not issued_by(cert, ca_cert):
        return "outdated"
    return "renew-due" if due == "due" else "ok"


def _load_if_present(path: Path) -> Any:
    return x509.load_pem_x509_certificate(path.read_bytes()) if path.exists() else None


def _residual(delta: dt.timedelta) -> str:
    """kubeadm's style: 364d, 9y, 23h; <invalid> once expired."""
    seconds = delta.total_seconds()
    if seconds <= 0:
        return "<invalid>"
    days = int(seconds // 86400)
    if days >= 365 * 2:
        return f"{days // 365}y"
    if days >= 1:
        return f"{days}d"
    return f"{int(seconds // 3600)}h"


def _when(moment: dt.datetime) -> str:
    return moment.strftime("%b %d, %Y %H:%M UTC")


def _table(rows: list[CertificateRow]) -> str:
    header = ("CERTIFICATE", "HOST", "EXPIRES", "RESIDUAL TIME", "CERTIFICATE AUTHORITY", "STATUS")
    lines = [header]
    for row in rows:
        expires = _when(row.expires) if row.expires is not None else "-"
        lines.append((row.name, row.host or "-", expires, row.residual_text or "-", row.ca or "-", row.status))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "".join("   ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() + "\n"
                   for line in lines)
