"""`kubesmith agent`: renews every certificate of its host long before it expires.

What it manages: every leaf certificate under the PKI directory that has its key next to it
(`X.crt` + `X.key`), and every kubeconfig in the Kubernetes directory with an embedded client
certificate and key. Nothing needs to be declared: what `render`/`join` laid down is what gets
renewed, CA certificates excluded.

When: once a certificate has used `renew_fraction` of its life (not_before to not_after,
default 2/3, from spec.pki.renewFraction), checked every `check_interval` seconds and exactly at
the next due time.

How:
* on a host that holds the issuing CA's key (a control-plane host for kubernetes-ca), the agent
  signs the renewal itself: the key is there anyway, and renewal keeps working while every CA
  service is down;
* otherwise, for kubernetes-ca certificates, it asks the CA service (`ca_urls`, tried in order)
  over mutual TLS with the host's agent certificate (`agent-client`); the CSR carries the same
  key, which proves possession to the service;
* certificates of CAs whose key is not on the host and not served (etcd-ca, front-proxy-ca on
  hosts without the key) are reported as such in the state file: `kubesmith certs renew` +
  apply renews them.

Key/certificate pairing: renewal keeps the private key and replaces only the certificate. A
reader therefore sees either the old or the new certificate (one atomic rename, mode and owner
kept), and both belong to the key on disk; there is no moment at which a new certificate meets
an old key or the reverse. A kubeconfig holds both in one file, replaced in one rename. The old
certificate stays in place until the new one is verified (signed by the CA, same key, later
expiry) and written. Key rotation is a different operation (re-join, or `certs renew` after
deleting a key), not something a timer should do.

While the CA is unreachable the agent retries with exponential backoff and jitter (tenacity),
keeps the old certificates, and records the error; when the CA returns, the next attempt renews.

Restarting consumers: under systemd, each component's `.path` unit watches its certificate and
kubeconfig files (`Service.watch_files`) and restarts it when the agent replaces one. Under
`kubesmith run`, the supervisor watches the same `watch_files` (a replaced file has a new
inode and mtime). The agent itself does not restart anything.

What it did goes into its report (`agent.report`), one pass at a time.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import aiohttp
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential_jitter

from kubesmith import fsutil
from kubesmith.agent.report import AgentState, Renewer, SlotState, Stopping, failed_slot, iso, locked_report
from kubesmith.ca import client as ca_client
from kubesmith.ca.client import CaClientError, CaUnavailable, Subject
from kubesmith.ca.policy import backdate_for
from kubesmith.formats import yaml_bytes
from kubesmith.lifetimes import renewal_due
from kubesmith.pki import keys
from kubesmith.pki.certlist import AUTHORITIES
from kubesmith.pki.issue import BACKDATE, Identity, issued_by, new_leaf, signature_problem
from kubesmith.pki.keys import PrivateKey
from kubesmith.pki.store import utc_now
from kubesmith.vocabulary.model import CertificateRequest
from kubesmith.settings import AgentConfig

LOG = logging.getLogger("kubesmith.agent")
Clock = Callable[[], dt.datetime]


@dataclass(frozen=True, slots=True)
class Slot:
    """One renewable credential: a PEM certificate with its key file, or a kubeconfig."""

    kind: Literal["pem", "kubeconfig"]
    path: Path
    key_path: Path | None = None


@dataclass(frozen=True, slots=True)
class Material:
    slot: Slot
    cert: x509.Certificate
    key: PrivateKey


@dataclass(frozen=True, slots=True)
class Authority:
    name: str
    cert: x509.Certificate
    cert_pem: bytes
    key: PrivateKey | None  # present when this host signs with it


# ---- discovery and reading

def discover(config: AgentConfig) -> list[Slot]:
    """Leaf certificates with their keys under the PKI directory, and kubeconfigs with client certs."""
    slots: list[Slot] = []
    if config.pki_dir.is_dir():
        for cert_path in sorted(config.pki_dir.rglob("*.crt")):
            key_path = cert_path.with_suffix(".key")
            if not fsutil.is_temp(cert_path) and key_path.exists() and not _is_ca(cert_path):
                slots.append(Slot("pem", cert_path, key_path))
    if config.kubeconfig_dir.is_dir():
        for path in sorted(config.kubeconfig_dir.glob("*.conf")):
            if not fsutil.is_temp(path) and _kubeconfig_user(path) is not None:
                slots.append(Slot("kubeconfig", path))
    return slots


def _is_ca(path: Path) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except (x509.ExtensionNotFound, ValueError, OSError):
        return False


def _kubeconfig_user(path: Path) -> dict[str, Any] | None:
    try:
        document = yaml.safe_load(path.read_bytes())
        user = document["users"][0]["user"]
    except (OSError, yaml.YAMLError, KeyError, IndexError, TypeError):
        return None
    if isinstance(user, dict) and "client-certificate-data" in user and "client-key-data" in user:
        return user
    return None


def load_material(slot: Slot) -> Material:
    if slot.kind == "pem":
        assert slot.key_path is not None
        cert = x509.load_pem_x509_certificate(slot.path.read_bytes())
        key = keys.load(slot.key_path.read_bytes(), str(slot.key_path))
    else:
        user = _kubeconfig_user(slot.path)
        if user is None:
            raise ValueError(f"{slot.path}: no embedded client certificate")
        cert = x509.load_pem_x509_certificate(base64.b64decode(user["client-certificate-data"]))
        key = keys.load(base64.b64decode(user["client-key-data"]), str(slot.path))
    if not keys.same_public_key(cert.public_key(), key.public_key()):
        raise ValueError(f"{slot.path}: certificate and key do not belong together")
    return Material(slot, cert, key)


def authorities(config: AgentConfig) -> tuple[list[Authority], dict[str, str]]:
    """The CAs on this host, and the problem of each CA file that cannot be used (by path): one
    damaged CA must not stop the renewals of the others. A CA key that does not belong to its
    certificate is not used (its renewals would verify nowhere)."""
    found: list[Authority] = []
    problems: dict[str, str] = {}
    for spec in AUTHORITIES:
        cert_path = config.pki_dir / spec.cert_file
        key_path = Path(config.ca_keys[spec.name]) if spec.name in config.ca_keys else config.pki_dir / spec.key_file
        if not cert_path.exists():
            continue
        try:
            pem = cert_path.read_bytes()
            cert = x509.load_pem_x509_certificate(pem)
        except (OSError, ValueError) as exc:
            problems[str(cert_path)] = f"CA certificate unusable: {exc}"
            continue
        key = None
        try:
            key = keys.load(key_path.read_bytes(), str(key_path)) if key_path.exists() else None
        except (OSError, ValueError) as exc:
            problems[str(key_path)] = f"CA key unusable: {exc}"
        if key is not None and not keys.same_public_key(cert.public_key(), key.public_key()):
            problems[str(key_path)] = f"does not belong to {cert_path}; not used for renewals"
            key = None
        found.append(Authority(spec.name, cert, pem, key))
    return found, problems


# ---- renewal of one certificate

def write_certificate(slot: Slot, cert_pem: bytes) -> None:
    """Replace only the certificate (the key stays): one atomic rename, mode and owner kept."""
    if slot.kind == "pem":
        fsutil.atomic_replace(slot.path, cert_pem)
        return
    document = yaml.safe_load(slot.path.read_bytes())
    document["users"][0]["user"]["client-certificate-data"] = base64.b64encode(cert_pem).decode()
    fsutil.atomic_replace(slot.path, yaml_bytes(document))


def renew_locally(material: Material, ca: Authority, now: dt.datetime) -> bytes:
    """Sign the renewal with a CA key held on this host, for the certificate's original lifetime."""
    assert ca.key is not None
    have = Identity.of_certificate(material.cert)
    total = material.cert.not_valid_after_utc - material.cert.not_valid_before_utc
    lifetime = total - min(BACKDATE, total / 11)  # undo the backdating the CA service or render applied
    request = CertificateRequest("renewal", ca.name, have.common_name, have.organizations,
                                 tuple(sorted(have.usages)), tuple(sorted(have.dns_names)),
                                 tuple(sorted(have.ip_addresses)), "", "", "root", "root")
    seconds = max(lifetime.total_seconds(), 60.0)
    cert = new_leaf(request, material.key.public_key(), ca.cert, ca.key, seconds / 86400.0, now,
                    backdate_for(seconds))
    return cert.public_bytes(Encoding.PEM)


async def renew_remotely(config: AgentConfig, session: aiohttp.ClientSession, material: Material,
                         ca: Authority, now: dt.datetime) -> bytes:
    """Ask the CA services in order; CaUnavailable only when none answered."""
    have = Identity.of_certificate(material.cert)
    subject = Subject(have.common_name, have.organizations, tuple(sorted(have.dns_names)),
                      tuple(sorted(have.ip_addresses)))
    agent_cert = config.pki_dir / f"{config.agent_certificate}.crt"
    agent_key = config.pki_dir / f"{config.agent_certificate}.key"
    check_agent_certificate(agent_cert, config.host, ca, now)
    errors: list[str] = []
    for url in config.ca_urls:
        try:
            return await ca_client.renew(session, url, material.key, material.cert, subject, ca.cert_pem,
                                         str(agent_cert), str(agent_key))
        except CaUnavailable as exc:
            errors.append(str(exc))
    raise CaUnavailable("; ".join(errors) or "no CA service URL configured")


def check_agent_certificate(path: Path, host: str, ca: Authority, now: dt.datetime) -> None:
    """The CA service drops the connection of a client certificate it cannot verify, and under
    TLS 1.3 the client learns no reason: an expired agent certificate would read as "CA
    unreachable" forever. Name the cause, and the way out, instead."""
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise CaClientError(f"{path}: this host's agent certificate does not load ({exc})") from None
    way_out = (f"the CA service refuses it, so nothing on this host renews through it; join the host again "
               f"(`kubesmith token create --node {host}`, then `kubesmith join` on it)")
    if signature_problem(cert, ca.cert):
        raise CaClientError(f"{path}: this host's agent certificate is not signed by {ca.name}; {way_out}")
    if now >= cert.not_valid_after_utc:
        raise CaClientError(f"{path}: this host's agent certificate expired at {iso(cert.not_valid_after_utc)}; "
                            f"{way_out}")
    if now < cert.not_valid_before_utc:
        raise CaClientError(f"{path}: this host's agent certificate is valid only from "
                            f"{iso(cert.not_valid_before_utc)}; is this host's clock behind?")


def check_renewed(material: Material, ca: Authority, pem: bytes, now: dt.datetime) -> None:
    """The new certificate must be signed by the CA, for our key, valid now, and outlive the old one."""
    cert = x509.load_pem_x509_certificate(pem)
    if signature_problem(cert, ca.cert):
        raise CaClientError(f"{material.slot.path}: the renewed certificate is not signed by {ca.name}")
    if not keys.same_public_key(cert.public_key(), material.key.public_key()):
        raise CaClientError(f"{material.slot.path}: the renewed certificate is for another key")
    if cert.not_valid_before_utc > now:
        raise CaClientError(f"{material.slot.path}: the renewed certificate is valid only from "
                            f"{cert.not_valid_before_utc.isoformat()} (is the CA's clock ahead?)")
    if cert.not_valid_after_utc <= material.cert.not_valid_after_utc:
        raise CaClientError(f"{material.slot.path}: the renewed certificate does not outlive the current one")


def still_current(material: Material) -> None:
    """The key on disk must still be the one the renewal was for: `apply` or a re-join may have
    rotated key and certificate while the CA service was answering."""
    if not keys.same_public_key(load_material(material.slot).key.public_key(), material.key.public_key()):
        raise CaClientError(f"{material.slot.path}: its key changed during the renewal; the renewed "
                            "certificate is dropped")


def renewer_for(config: AgentConfig, ca: Authority | None) -> Renewer:
    if ca is None:
        return "none"
    if ca.key is not None:
        return "local"
    if ca.name == "kubernetes-ca" and config.ca_urls:
        return "ca-service"
    return "none"


# ---- one cycle

@dataclass(frozen=True, slots=True)
class CycleOutcome:
    checked: int  # certificates and kubeconfigs found
    renewed: int
    unavailable: tuple[str, ...]  # errors worth a quick retry (CA unreachable)
    next_due: dt.datetime | None
    problems: tuple[str, ...] = ()  # unreadable files and refused or failed renewals: "<path>: <error>"


async def run_cycle(config: AgentConfig, session: aiohttp.ClientSession, state: AgentState,
                    clock: Clock = utc_now) -> CycleOutcome:
    """Renew every due certificate once; record everything in `state`."""
    cas, ca_problems = authorities(config)
    for path, problem in ca_problems.items():
        state.slots[path] = failed_slot(state.slots.get(path), path, problem)
    renewed, unavailable, problems = 0, [], [f"{path}: {problem}" for path, problem in ca_problems.items()]
    next_due: dt.datetime | None = None
    slots = discover(config)
    for slot in slots:
        key = str(slot.path)
        try:
            material = load_material(slot)
        except (ValueError, OSError) as exc:
            state.slots[key] = failed_slot(state.slots.get(key), key, str(exc))
            problems.append(f"{key}: {exc}")
            continue
        ca = next((a for a in cas if issued_by(material.cert, a.cert)), None)
        renewer = renewer_for(config, ca)
        previous = state.slots.get(key)
        entry = _slot_state(material, ca, renewer, config.renew_fraction, previous)
        now = clock()
        schedule = renewer != "none"
        due_now = now >= renewal_due(material.cert, config.renew_fraction)
        if due_now and renewer != "none":
            assert ca is not None
            try:
                pem = renew_locally(material, ca, now) if renewer == "local" else \
                    await renew_remotely(config, session, material, ca, now)
                check_renewed(material, ca, pem, clock())
                still_current(material)
                write_certificate(slot, pem)
                material = load_material(slot)
                entry = _slot_state(material, ca, renewer, config.renew_fraction, previous)
                entry = replace(entry, last_renewal=iso(now), last_error=None)
                state.last_renewal = iso(now)
                renewed += 1
                LOG.info("renewed %s (%s) via %s; expires %s", slot.path, entry.subject, renewer, entry.not_after)
            except CaUnavailable as exc:
                unavailable.append(f"{slot.path}: {exc}")
                entry = replace(entry, last_error=str(exc))
            except (CaClientError, ValueError, OSError) as exc:
                LOG.error("renewal of %s refused or failed: %s", slot.path, exc)
                problems.append(f"{slot.path}: {exc}")
                entry = replace(entry, last_error=str(exc))
                schedule = False  # retried at the next regular check, not in a tight loop
        elif renewer == "none" and due_now:
            entry = replace(entry, last_error=f"due, but no key for {ca.name if ca else 'its CA'} on this host and "
                                              "no CA service for it: renew with `kubesmith certs renew` + apply")
        state.slots[key] = entry
        if schedule:
            due = renewal_due(material.cert, config.renew_fraction)
            next_due = due if next_due is None or due < next_due else next_due
    seen = set(ca_problems) | {str(slot.path) for slot in slots}
    state.slots = {path: entry for path, entry in state.slots.items() if path in seen}  # gone, or mended
    state.last_check = iso(clock())
    state.next_renewal = iso(next_due) if next_due else None
    state.last_error, state.next_attempt = "; ".join(unavailable) or None, None
    return CycleOutcome(len(slots), renewed, tuple(unavailable), next_due, tuple(problems))


# ---- the loop

async def run_agent(config: AgentConfig, stop: asyncio.Event, clock: Clock = utc_now) -> None:
    """Cycle until `stop` is set; retries with backoff while the CA is unreachable."""
    async with aiohttp.ClientSession(trust_env=False) as session:
        while not stop.is_set():
            outcome = await _cycle_with_retries(config, session, stop, clock)
            if outcome is None:
                break
            await sleep_unless_stopped(stop, _pause(config, outcome.next_due, clock()))


async def _cycle_with_retries(config: AgentConfig, session: aiohttp.ClientSession, stop: asyncio.Event,
                              clock: Clock) -> CycleOutcome | None:
    def before_sleep(retry_state: RetryCallState) -> None:
        error = retry_state.outcome.exception() if retry_state.outcome else None
        pause = retry_state.next_action.sleep if retry_state.next_action else 0.0
        LOG.warning("CA unreachable (attempt %d), keeping current certificates, retrying in %.1fs: %s",
                    retry_state.attempt_number, pause, error)

    async def attempt() -> CycleOutcome:
        async with locked_report(config.state_file, config.host, stop) as state:
            outcome = await run_cycle(config, session, state, clock)
        if outcome.unavailable:
            raise CaUnavailable("; ".join(outcome.unavailable))
        return outcome

    async def pause(seconds: float) -> None:
        async with locked_report(config.state_file, config.host, stop) as state:
            state.next_attempt = iso(clock() + dt.timedelta(seconds=seconds))
        await sleep_unless_stopped(stop, seconds)

    retrying = AsyncRetrying(retry=retry_if_exception_type(CaUnavailable),
                             wait=wait_exponential_jitter(initial=config.retry_initial, max=config.retry_max),
                             stop=lambda _: stop.is_set(), sleep=pause, before_sleep=before_sleep, reraise=True)
    try:
        return await retrying(attempt)
    except (CaUnavailable, Stopping):  # only when stopping
        return None


def _pause(config: AgentConfig, next_due: dt.datetime | None, now: dt.datetime) -> float:
    if next_due is None:
        return config.check_interval
    return max(0.5, min(config.check_interval, (next_due - now).total_seconds() + 0.05))


async def sleep_unless_stopped(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except asyncio.TimeoutError:
        pass


def _slot_state(material: Material, ca: Authority | None, renewer: Renewer, fraction: float,
                previous: SlotState | None) -> SlotState:
    return SlotState(path=str(material.slot.path), subject=Identity.of_certificate(material.cert).common_name,
                     ca=ca.name if ca else "unknown", not_after=iso(material.cert.not_valid_after_utc),
                     renew_at=iso(renewal_due(material.cert, fraction)), renewer=renewer,
                     last_renewal=previous.last_renewal if previous else None)  # errors: this pass's only
