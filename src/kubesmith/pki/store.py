"""The PKI state directory: every CA, every issued leaf per host, the SA key pair, secrets.

Layout under the store root (`<state dir>/pki`):

    cas/<ca>.crt, cas/<ca>.key              the cluster's CAs
    hosts/<host>/<name>.crt, .key           each host's leaves, by certificate request name
    sa.key                                  service-account signing key (sa.pub is derived)
    secrets/encryption-key-<name>           32 random bytes, base64, for EncryptionConfiguration
    cluster.json                            whose state this is: the cluster's name and a random ID
    .lock                                   held (flock) while a process uses the store

Trust roots are minted only where no cluster lives yet: a state directory that records another
cluster is refused (a wrong --state-dir must not lend one cluster's CAs and secrets to another),
CAs are created only while the directory has no record (new, empty, or made by an older kubesmith,
which is then adopted once), and `open` says on stderr whenever it creates CAs or adopts a directory.

Idempotent by construction: an existing key file is never overwritten; a certificate is reissued
only when it is missing, says something else than its request (subject, SANs, usages), was
signed by another CA or for another key, or has less than (1 - renew_fraction) of its life left.
Keys are written (and made durable) before the certificates that use them, all atomically, so
a killed run leaves complete files only; its temp files are removed when the store is opened.
"""

from __future__ import annotations

import base64
import datetime as dt
import errno
import json
import os
import secrets
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from kubesmith import fsutil
from kubesmith.clock import utc_now
from kubesmith.documents import load_json
from kubesmith.exitcodes import UsageError
from kubesmith.lifetimes import standing
from kubesmith.pki import issue, keys
from kubesmith.pki.keys import PrivateKey
from kubesmith.vocabulary.model import CertificateAuthority, CertificateRequest, PkiSettings, Plan

Status = Literal["new", "reissued", "reused"]
Clock = Callable[[], dt.datetime]
Notify = Callable[[str], None]
RECORD = "cluster.json"


class PkiError(Exception):
    """The state directory holds something unusable; the message says what and what to do."""


class ForeignStateError(PkiError):
    """The state directory belongs to another cluster: a wrong --state-dir or $KUBESMITH_STATE_DIR."""


@dataclass(frozen=True, slots=True)
class ClusterRecord:
    """Whose PKI a state directory holds: the name tells the user, the random ID tells two
    clusters of the same name apart."""

    name: str
    id: str


def read_record(root: Path) -> ClusterRecord | None:
    """The record of the store at `root`, or None when it has none (new, or made by an older kubesmith)."""
    path = root / RECORD
    try:
        document = load_json(read_state(path, "a cluster record (JSON)"))
        return ClusterRecord(str(document["cluster"]), str(document["id"]))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise PkiError(f"{path}: unreadable cluster record ({exc}); it names the cluster this state belongs to, "
                       "restore it from a backup") from exc


def read_state(path: Path, expected: str) -> bytes:
    """A file of the state directory: a regular file of at most 1 MiB (a key or certificate is a few KB).
    A FIFO would block and a huge file fill the memory; either is a PkiError naming the file.
    FileNotFoundError passes through: callers decide what a missing file means."""
    try:
        return fsutil.read_regular(path, fsutil.SMALL_FILE_BYTES, expected)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise PkiError(f"{path}: cannot read it ({exc.strerror or exc}); the state directory holds only "
                       "regular files kubesmith wrote: restore it from a backup") from None


def check_owner(root: Path, cluster: str) -> ClusterRecord | None:
    """Refuse the state of another cluster, naming both; None when the directory records no cluster."""
    record = read_record(root)
    if record is not None and record.name != cluster:
        raise ForeignStateError(
            f"state directory {root.parent} belongs to cluster {record.name!r} (id {record.id}), not to cluster "
            f"{cluster!r} of this cluster file: refusing to use its CAs and secrets; give the --state-dir of "
            f"cluster {cluster!r} (or unset $KUBESMITH_STATE_DIR)")
    return record


def _write_record(root: Path, cluster: str) -> ClusterRecord:
    record = ClusterRecord(cluster, secrets.token_hex(16))
    fsutil.atomic_write(root / RECORD, json.dumps({"cluster": record.name, "id": record.id}).encode() + b"\n", 0o644)
    return record


def to_stderr(message: str) -> None:
    """The default for `PkiStore.open`'s notices: every command that may mint a trust root says so,
    whichever backend opened the store."""
    print(f"kubesmith: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class Authority:
    name: str
    cert: x509.Certificate
    key: PrivateKey
    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True, slots=True)
class Issued:
    """One leaf certificate of one host, as it now stands in the store."""

    host: str
    name: str
    ca: str
    cert_pem: bytes
    key_pem: bytes
    not_after: dt.datetime
    status: Status
    reason: str = ""  # why it was (re)issued


@dataclass(frozen=True, slots=True)
class _Work:
    host: str
    request: CertificateRequest
    key: PrivateKey | None
    key_pem: bytes | None
    cert: x509.Certificate | None
    cert_pem: bytes | None
    reason: str | None  # None: reuse as is


class PkiStore:
    """Issues and keeps the cluster's key material; use `PkiStore.open` to hold the lock."""

    def __init__(self, root: Path, settings: PkiSettings, authorities: Iterable[CertificateAuthority],
                 clock: Clock = utc_now, new_authorities: bool = False) -> None:
        self.root = root
        self.settings = settings
        self._authority_specs = {ca.name: ca for ca in authorities}
        self._clock = clock
        self._authorities: dict[str, Authority] = {}
        self._new_authorities = new_authorities  # may a CA key be created? Only before the record exists

    @classmethod
    @contextmanager
    def open(cls, root: Path, plan: Plan, clock: Clock = utc_now, notify: Notify = to_stderr) -> Iterator[PkiStore]:
        """The store for `plan`, locked against concurrent runs, with a killed run's temp files removed;
        refused when it belongs to another cluster; a directory without a record gets its CAs (all of
        them, then the record) and `notify` hears what was created or adopted."""
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        fsutil.check_private(root.parent, root, root / "cas", root / "secrets")
        waiting = lambda holder: notify(f"waiting for {holder}, which is using the PKI state in {root.parent}")
        with fsutil.exclusive(root / ".lock", waiting):
            fsutil.remove_stale_temps(root)
            if check_owner(root, plan.cluster) is not None:
                yield cls(root, plan.pki, plan.authorities, clock)
                return
            store = cls(root, plan.pki, plan.authorities, clock, new_authorities=True)
            notify(store._claim(plan.cluster))
            store._new_authorities = False
            yield store

    def _claim(self, cluster: str) -> str:
        """Make every missing CA, then record the cluster: a run killed in between leaves no record and
        the next one finishes the job. Returns what to tell the user."""
        had = [name for name in self._authority_specs if self.ca_paths(name)[1].exists()]
        for name in self._authority_specs:
            self.authority(name)
        record = _write_record(self.root, cluster)
        if not had:
            return (f"created new CAs for cluster {cluster!r} in {self.root.parent} (id {record.id}): the directory was new "
                    "or empty. If this cluster already has CAs elsewhere, stop and give that --state-dir "
                    "(or fix $KUBESMITH_STATE_DIR): hosts will not trust these")
        made = sorted(set(self._authority_specs) - set(had))
        extra = f"; created the missing {', '.join(made)}" if made else ""
        return (f"state directory {self.root.parent} had no cluster record (made by an older kubesmith): it now belongs "
                f"to cluster {cluster!r} (id {record.id}){extra}")

    # ---- paths

    def ca_paths(self, ca: str) -> tuple[Path, Path]:
        return self.root / "cas" / f"{ca}.crt", self.root / "cas" / f"{ca}.key"

    def leaf_paths(self, host: str, name: str) -> tuple[Path, Path]:
        directory = self.root / "hosts" / host
        return directory / f"{name}.crt", directory / f"{name}.key"

    # ---- authorities and secrets

    def authority(self, name: str) -> Authority:
        """The CA `name`, created on first use (key first, then its self-signed certificate)."""
        if name not in self._authorities:
            self._authorities[name] = self._ensure_authority(name)
        return self._authorities[name]

    def service_account_key(self) -> tuple[bytes, bytes]:
        """(private PEM, public PEM) of the cluster's service-account signing key."""
        key, pem = self._ensure_key(self.root / "sa.key")
        return pem, keys.public_pem(key)

    def encryption_secret(self, name: str) -> bytes:
        """32 random bytes for at-rest encryption, created once and kept."""
        path = self.root / "secrets" / f"encryption-key-{name}"
        if not path.exists():
            fsutil.atomic_write(path, base64.b64encode(secrets.token_bytes(32)) + b"\n", 0o600)
        secret = base64.b64decode(read_state(path, "a base64 encryption key").strip(), validate=True)
        if len(secret) != 32:
            raise PkiError(f"{path}: expected 32 bytes of base64 key material, found {len(secret)}")
        return secret

    # ---- leaves

    def existing(self, host: str, name: str) -> x509.Certificate | None:
        cert_path, _ = self.leaf_paths(host, name)
        return _load_cert(cert_path) if cert_path.exists() else None

    def issue(self, requests: Iterable[tuple[str, CertificateRequest]],
              force: Callable[[str, CertificateRequest], bool] = lambda host, request: False) -> list[Issued]:
        """Bring every (host, request) up to date in one batch; `force` renews with the same key."""
        now = self._clock()
        work = [self._assess(host, request, now, force(host, request)) for host, request in requests]
        work = self._write_new_keys(work)
        return self._write_certificates(work, now)

    # ---- internals

    def _ensure_authority(self, name: str) -> Authority:
        spec = self._authority_specs.get(name)
        if spec is None:
            raise PkiError(f"no certificate authority named {name!r} in the plan")
        cert_path, key_path = self.ca_paths(name)
        if not key_path.exists() and not self._new_authorities:
            raise PkiError(
                f"{key_path} is missing: kubesmith creates CAs only in a new state directory, and a new {name} "
                "would not be trusted by any host. Restore the key from a backup; to replace the CA on purpose "
                f"(every certificate it signed is reissued), also delete {self.root / RECORD} and render again")
        key, key_pem = self._ensure_key(key_path)
        cert = _load_cert(cert_path) if cert_path.exists() else None
        if cert is None or not keys.same_public_key(cert.public_key(), key.public_key()):
            cert = issue.new_ca(spec.common_name, key, self.settings.ca_validity_days, self._clock())
            fsutil.atomic_write(cert_path, _cert_pem(cert), 0o644)
        return Authority(name, cert, key, _cert_pem(cert), key_pem)

    def _ensure_key(self, path: Path) -> tuple[PrivateKey, bytes]:
        if path.exists():
            fsutil.check_private(path, secret=True)
            pem = read_state(path, "a PEM private key")
            return keys.load(pem, str(path)), pem
        key = keys.generate(self.settings.key_algorithm)
        pem = keys.to_pem(key)
        fsutil.atomic_write(path, pem, 0o600)
        return key, pem

    def _assess(self, host: str, request: CertificateRequest, now: dt.datetime, force: bool) -> _Work:
        cert_path, key_path = self.leaf_paths(host, request.name)
        key_pem = read_state(key_path, "a PEM private key") if key_path.exists() else None
        key = keys.load(key_pem, str(key_path)) if key_pem is not None else None
        cert_pem = read_state(cert_path, "a PEM certificate") if cert_path.exists() else None
        cert = _load_cert(cert_path, cert_pem) if cert_pem is not None else None
        reason = "renewal requested" if force else self.reissue_reason(request, cert, key, now)
        return _Work(host, request, key, key_pem, cert, cert_pem, reason)

    def reissue_reason(self, request: CertificateRequest, cert: x509.Certificate | None, key: PrivateKey | None,
                       now: dt.datetime) -> str | None:
        """Why the stored certificate cannot serve `request` any more, or None to reuse it."""
        if cert is None:
            return "not issued yet"
        if key is None or not keys.same_public_key(cert.public_key(), key.public_key()):
            return "key replaced"
        if not issue.issued_by(cert, self.authority(request.ca).cert):
            return f"not signed by the current {request.ca}"
        want, have = issue.Identity.of_request(request), issue.Identity.of_certificate(cert)
        for field, label in (("common_name", "common name"), ("organizations", "organizations"),
                             ("dns_names", "DNS names"), ("ip_addresses", "IP addresses"), ("usages", "usages")):
            if getattr(want, field) != getattr(have, field):
                return f"{label} changed"
        due = standing(cert, self.settings.renew_fraction, now)
        return None if due == "valid" else "due for renewal" if due == "due" else "expired"

    def _write_new_keys(self, work: list[_Work]) -> list[_Work]:
        """Generate keys where missing and write them all (durably) before any certificate."""
        pending: list[fsutil.Pending] = []
        done: list[_Work] = []
        for item in work:
            if item.key is None:
                key = keys.generate(self.settings.key_algorithm)
                pem = keys.to_pem(key)
                pending.append(fsutil.Pending(self.leaf_paths(item.host, item.request.name)[1], pem, 0o600))
                item = _Work(item.host, item.request, key, pem, item.cert, item.cert_pem, item.reason or "new key")
            done.append(item)
        fsutil.write_many(pending)
        return done

    def _write_certificates(self, work: list[_Work], now: dt.datetime) -> list[Issued]:
        pending: list[fsutil.Pending] = []
        results: list[Issued] = []
        days = self.settings.certificate_validity_days
        for item in work:
            assert item.key is not None and item.key_pem is not None
            if item.reason is None and item.cert is not None and item.cert_pem is not None:
                results.append(Issued(item.host, item.request.name, item.request.ca, item.cert_pem, item.key_pem,
                                      item.cert.not_valid_after_utc, "reused"))
                continue
            ca = self.authority(item.request.ca)
            cert = issue.new_leaf(item.request, item.key.public_key(), ca.cert, ca.key, days, now)
            pem = _cert_pem(cert)
            pending.append(fsutil.Pending(self.leaf_paths(item.host, item.request.name)[0], pem, 0o644))
            status: Status = "new" if item.cert is None else "reissued"
            results.append(Issued(item.host, item.request.name, item.request.ca, pem, item.key_pem,
                                  cert.not_valid_after_utc, status, item.reason or ""))
        fsutil.write_many(pending)
        return results


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(Encoding.PEM)


def _load_cert(path: Path, pem: bytes | None = None) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem if pem is not None else read_state(path, "a PEM certificate"))
    except ValueError as exc:
        raise PkiError(f"{path}: not a readable certificate ({exc}); delete it to have it reissued") from exc


def default_state_dir(spec_file: Path, cluster: str, override: str | None = None) -> Path:
    """--state-dir, else $KUBESMITH_STATE_DIR, else <directory of the spec file>/.kubesmith/<cluster>. A
    blank variable is refused as a blank --state-dir is: it would put the CAs in a directory named by spaces."""
    env = os.environ.get("KUBESMITH_STATE_DIR")
    if not override and env and not env.strip():
        raise UsageError(f"$KUBESMITH_STATE_DIR: {env!r} is empty: give a path (for the current directory, write .), "
                         "or unset it")
    chosen = Path(override) if override else Path(env) if env else spec_file.resolve().parent / ".kubesmith" / cluster
    if (problem := fsutil.own_directory_problem(chosen)) is not None:  # before any walk of it, or write
        source = (f"--state-dir {override!r}" if override else f"$KUBESMITH_STATE_DIR ({env!r})" if env
                  else f"the default state directory {str(chosen)!r}")
        raise UsageError(f"{source}: {problem}; the state directory holds the cluster's CAs and keys, and "
                         "`reset --purge` deletes it: give a directory of its own (say ./.kubesmith/"
                         f"{cluster})")
    return checked_state_dir(chosen)


def checked_state_dir(path: Path) -> Path:
    """`path`, when it can be the state directory: missing, or a directory no symbolic link leads out of
    (keys written through one would land elsewhere); OSError naming the path otherwise."""
    if path.is_symlink() and not path.exists():  # mkdir would fail with "File exists", naming nothing
        raise FileNotFoundError(errno.ENOENT, f"a symbolic link to {os.readlink(path)}, which does not exist (or "
                                "loops); the state directory holds the cluster's CAs and keys: make the directory "
                                "it names, or give another with --state-dir", str(path))
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a directory; the state directory holds the cluster's CAs "
                                 "and keys (give another with --state-dir)", str(path))
    if path.is_dir() and (link := fsutil.link_out(path)) is not None:
        raise OSError(errno.EXDEV, f"a symbolic link out of the state directory {path} (to "
                      f"{os.path.realpath(link)}): kubesmith writes keys only inside it; replace the link with "
                      "what it points to", str(link))
    fsutil.check_private(path)  # others could swap its CAs and keys
    return path


def store_root(state_dir: Path) -> Path:
    return state_dir / "pki"
