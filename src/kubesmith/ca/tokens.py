"""Join tokens: short-lived secrets that let a new node obtain its certificates from the CA service.

A token looks like kubeadm's: `<id>.<secret>` (6 + 32 characters of [a-z0-9], ~165 bits of secret).
The id is public (`token list`, logs); the secret never leaves the operator and the joining node.

What the HMAC needs, and what is stored
---------------------------------------
cfssl's `authsign` authenticates a request with HMAC-SHA256(key, request). HMAC is symmetric:
whoever verifies must hold the key itself, so no one-way hash of the token can serve as a
verifier the way a password hash does. The key is derived from the token,
`key = SHA-256("kubesmith-authsign-v1" NUL token)` (`auth_key`), so `kubesmith join` needs only
the token, and `token create` prints the key in hex for real cfssl clients (`auth_key` in a cfssl
client config).

Storing SHA-256(token), the obvious scheme, would make the stored value *be* the HMAC key: a
leaked store (a backup, a wrong mode) would let anyone sign with every live token. Instead the
store keeps each key wrapped with AES-256-GCM under a key derived (HKDF) from the kubernetes-ca
private key, bound to the token id. Reading the store alone yields nothing usable; whoever can
read the CA key can sign certificates anyway, so the wrapping adds no new secret to protect.
The token text itself is never stored.

Verification (`match`) computes the HMAC with every active token's key and compares each with
`hmac.compare_digest`, without stopping at the first match, so timing reveals neither which
token matched nor how many bytes did. Expired and revoked tokens are never candidates.

The store is one JSON file (mode 0600), replaced atomically; read-modify-write cycles hold an
flock so `token create` and the CA service (binding a token to a node at first use) never lose
each other's updates. The CA service re-reads the file when it changes.

Binding happens under that lock too, and the store remembers every node name a token was ever
created for or bound to (`nodes`, kept when old records are pruned): two unbound tokens racing
for one name cannot both win, and a name stays taken after its token is gone. Re-joining a
known node takes a token created for it (`token create --node`).
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import ipaddress
import itertools
import json
import logging
import os
import secrets
import stat
import string
import time
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from kubesmith import fsutil
from kubesmith.documents import load_json, reason
from kubesmith.pki.keys import PrivateKey
from kubesmith.lifetimes import TOKEN_MAX_DAYS

ALPHABET = string.ascii_lowercase + string.digits
ID_LENGTH, SECRET_LENGTH = 6, 32
AUTH_DOMAIN = b"kubesmith-authsign-v1\x00"
WRAP_INFO = b"kubesmith token store v1"
PRUNE_AFTER = 24 * 3600.0  # expired or revoked records stay listed this long, then disappear
MAX_TTL = TOKEN_MAX_DAYS * 86400.0  # a join token lives a year at most (kubeadm's default: a day)
MAX_DESCRIPTION = 200  # characters of a token's free-text description
MAX_STORE_BYTES = 16 << 20  # the token store: a record is ~400 bytes
STORE_VERSION = 1  # the store's format; a store of another is read by no command
LATEST_TIME = 253402300799.0  # 9999-12-31T23:59:59Z: any later time in a record is damage
Clock = Callable[[], float]
LOG = logging.getLogger("kubesmith.ca")


class TokenError(Exception):
    """A token operation that cannot be done (malformed token, unknown id, unreadable store)."""


class NodeTaken(TokenError):
    """An unbound token asked for a node name that is reserved or that a token already holds."""

    @classmethod
    def of(cls, node: str) -> NodeTaken:
        return cls(f"node name {node!r} already belongs to the cluster; create a token with --node for it")


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """What the store keeps about one token: never the token, only its wrapped HMAC key."""

    id: str
    created: float
    expires: float
    node: str | None  # None: bound to the first node name it is used for
    addresses: tuple[str, ...]  # IP SANs the node's serving certificate may carry
    description: str
    nonce: str  # base64 AES-GCM nonce
    wrapped_key: str  # base64 AES-GCM(wrap key, auth key, aad=id)
    revoked: float | None = None

    def active(self, now: float) -> bool:
        return self.revoked is None and now < self.expires

    def state(self, now: float) -> str:
        if self.revoked is not None:
            return "revoked"
        return "active" if now < self.expires else "expired"


@dataclass(frozen=True, slots=True)
class NewToken:
    token: str
    record: TokenRecord

    @property
    def auth_key_hex(self) -> str:
        """The key a cfssl client puts in its `auth_keys` entry (type "standard")."""
        return auth_key(self.token).hex()


@dataclass(frozen=True, slots=True)
class Candidate:
    """An active token with its key unwrapped, held in memory by the CA service only."""

    record: TokenRecord
    key: bytes


def new_token() -> str:
    pick = secrets.choice
    return "".join(pick(ALPHABET) for _ in range(ID_LENGTH)) + "." + \
        "".join(pick(ALPHABET) for _ in range(SECRET_LENGTH))


def parse_token(token: str) -> tuple[str, str]:
    """(id, secret) of a well-formed token; the message never echoes the secret."""
    token_id, dot, secret = token.strip().partition(".")
    if not dot or len(token_id) != ID_LENGTH or len(secret) != SECRET_LENGTH \
            or not set(token_id + secret) <= set(ALPHABET):
        raise TokenError(f"malformed token: expected <{ID_LENGTH} chars>.<{SECRET_LENGTH} chars> of [a-z0-9]")
    return token_id, secret


def check_ttl(ttl: float) -> None:
    """A lifetime a record can hold and a listing can print: positive, at most MAX_TTL (a huge one
    overflowed every date after it, and `token list` failed for good)."""
    if not 0 < ttl <= MAX_TTL:
        raise TokenError(f"a token's lifetime must be more than 0 and at most {MAX_TTL / 86400:.0f} days; "
                         f"got {ttl:g} seconds")


def check_description(description: str) -> None:
    """Free text printed by `token list`: no control characters (an escape sequence would drive the
    reader's terminal), bounded."""
    bad = next((c for c in description if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")), None)
    if bad is not None:
        raise TokenError(f"the description holds the control character U+{ord(bad):04X}; use plain text")
    if len(description) > MAX_DESCRIPTION:
        raise TokenError(f"the description is longer than {MAX_DESCRIPTION} characters")


def auth_key(token: str) -> bytes:
    """The HMAC key for cfssl authsign derived from a token (both ends compute it)."""
    parse_token(token)
    return hashlib.sha256(AUTH_DOMAIN + token.strip().encode()).digest()


def request_mac(key: bytes, request: bytes) -> bytes:
    return hmac.new(key, request, hashlib.sha256).digest()


def match(candidates: tuple[Candidate, ...], mac: bytes, request: bytes) -> Candidate | None:
    """The candidate whose key produced `mac` over `request`; every candidate is compared."""
    found: Candidate | None = None
    for candidate in candidates:
        if hmac.compare_digest(request_mac(candidate.key, request), mac) and found is None:
            found = candidate
    return found


def wrapping_key(ca_key: PrivateKey) -> bytes:
    """AES-256 key for the store, derived from the CA private key (see the module docstring)."""
    material = ca_key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=WRAP_INFO).derive(material)


class TokenFile:
    """The records of one token store (`<state dir>/tokens.json`): listing, revoking and binding
    touch no key, so a token can be revoked wherever the store is writable, even without the CA key."""

    def __init__(self, path: Path, clock: Clock = time.time) -> None:
        self.path = path
        self._clock = clock

    def records(self) -> list[TokenRecord]:
        return _read_store(self.path)[0]

    def repair(self) -> tuple[int, list[str], Path | None]:
        """Keep the intact records of a damaged store: (records kept, a line per thing dropped, where the
        damaged file was set aside). An intact store is left as it is."""
        with self._locked():
            _tighten(self.path)
            try:
                kept, nodes, dropped = _parse(_store_document(self.path))
            except TokenError as exc:  # unreadable as a whole: nothing of it is kept
                kept, nodes, dropped = [], frozenset(), [str(exc).split("; `kubesmith")[0]]
            if not dropped:
                return len(kept), [], None
            aside = _aside(self.path)
            os.replace(self.path, aside)  # the damaged file, bad records and all, stays as the backup
            self._save(kept, nodes)
            return len(kept), dropped, aside

    def revoke(self, token_id: str) -> TokenRecord:
        return self._update(token_id, lambda record, nodes: record if record.revoked is not None
                            else replace(record, revoked=self._clock()))

    def bind(self, token_id: str, node: str, reserved: frozenset[str] = frozenset()) -> TokenRecord:
        """Bind an unbound, active token to `node` at first use; a bound or inactive token is
        returned as it is (the caller compares). NodeTaken if `node` is reserved or known."""
        def change(record: TokenRecord, nodes: frozenset[str]) -> TokenRecord:
            if record.node is not None or not record.active(self._clock()):
                return record
            if node in reserved or node in nodes:
                raise NodeTaken.of(node)
            return replace(record, node=node)
        return self._update(token_id, change)

    def _update(self, token_id: str, change: Callable[[TokenRecord, frozenset[str]], TokenRecord]) -> TokenRecord:
        """Change one record under the lock (`change` also sees the known node names); the file
        is rewritten only when the record changed."""
        with self._locked():
            records, nodes = _read_store(self.path)
            for index, record in enumerate(records):
                if record.id == token_id:
                    records[index] = changed = change(record, nodes)
                    if changed != record:
                        self._save(records, nodes)
                    return changed
        raise TokenError(f"no token with id {token_id!r} (see `kubesmith token list`)")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fsutil.check_private(self.path.parent)
        with open(fsutil.lock_file(self.path), "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _save(self, records: list[TokenRecord], nodes: frozenset[str]) -> None:
        now = self._clock()
        kept = [r for r in records if (r.revoked or r.expires) + PRUNE_AFTER > now]
        known = sorted(nodes | {r.node for r in records if r.node is not None})
        document = {"version": STORE_VERSION, "tokens": [asdict(record) for record in kept], "nodes": known}
        fsutil.atomic_write(self.path, (json.dumps(document, indent=2, sort_keys=True) + "\n").encode(), 0o600)
        os.chmod(self.path, 0o600)


class TokenStore(TokenFile):
    """A token store with the CA key: creating tokens and unwrapping their HMAC keys need it."""

    def __init__(self, path: Path, ca_key: PrivateKey, clock: Clock = time.time) -> None:
        super().__init__(path, clock)
        self._aead = AESGCM(wrapping_key(ca_key))
        self._cache: tuple[tuple[int, int, int], tuple[Candidate | None, ...]] | None = None

    def create(self, ttl: float, node: str | None = None, addresses: tuple[str, ...] = (),
               description: str = "") -> NewToken:
        check_ttl(ttl)
        check_description(description)
        token = new_token()
        token_id = parse_token(token)[0]
        now = self._clock()
        nonce = secrets.token_bytes(12)
        wrapped = self._aead.encrypt(nonce, auth_key(token), token_id.encode())
        record = TokenRecord(token_id, now, now + ttl, node, tuple(addresses), description,
                             _b64(nonce), _b64(wrapped))
        with self._locked():
            records, nodes = _read_store(self.path)
            if any(existing.id == token_id for existing in records):  # 36^6 ids: astronomically rare
                raise TokenError("token id collision; run the command again")
            self._save([*records, record], nodes)
        return NewToken(token, record)

    # ---- the CA service

    def candidates(self) -> tuple[Candidate, ...]:
        """Active tokens with unwrapped keys; re-read only when the file changed."""
        now = self._clock()
        try:
            stat = self.path.stat()
            signature = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            signature = (0, 0, 0)
        except OSError as exc:  # as for a read that fails
            raise TokenError(f"{self.path}: unreadable token store ({exc})") from exc
        if self._cache is None or self._cache[0] != signature:
            self._cache = (signature, tuple(self._usable(r) for r in self.records() if r.active(now)))
        return tuple(c for c in self._cache[1] if c is not None and c.record.active(now))

    # ---- internals

    def _usable(self, record: TokenRecord) -> Candidate | None:
        """The record with its key, or None (logged) when this CA key cannot unwrap it: one record
        from another CA key must not make every other token fail."""
        try:
            return Candidate(record, self._unwrap(record))
        except TokenError as exc:
            LOG.warning("%s; that token is ignored", exc)
            return None

    def _unwrap(self, record: TokenRecord) -> bytes:
        try:
            return self._aead.decrypt(base64.b64decode(record.nonce), base64.b64decode(record.wrapped_key),
                                      record.id.encode())
        except Exception as exc:  # InvalidTag: another CA key, or a tampered record
            raise TokenError(f"{self.path}: token {record.id} was not created with this CA key") from exc


def _read_store(path: Path) -> tuple[list[TokenRecord], frozenset[str]]:
    """The records of a token store and every node name it knows; no CA key is needed. A damaged store
    is a TokenError naming the file, the first damaged part and `kubesmith token repair`."""
    records, nodes, damage = _parse(_store_document(path))
    if damage:
        more = f" and {len(damage) - 1} more" if len(damage) > 1 else ""
        raise TokenError(f"{path}: damaged token store ({damage[0]}{more}); `kubesmith token repair` keeps the "
                         "intact records and sets the file aside")
    return records, nodes


def _parse(document: dict[str, Any] | None) -> tuple[list[TokenRecord], frozenset[str], list[str]]:
    """The intact records of a store's document, every node name it knows, and a line per damaged part
    (what `token repair` drops): the one reading of a store, strict for every command, salvaging for repair."""
    if document is None:
        return [], frozenset(), []
    damage: list[str] = []
    version = document.get("version")
    items = document.get("tokens")
    records: list[tuple[int, TokenRecord]] = []
    if type(version) is not int or version != STORE_VERSION:  # `true` and 1.0 equal 1 too
        said = f"unknown store version {version!r}" if "version" in document else "no store version"
        damage.append(f"{said}: this kubesmith reads version {STORE_VERSION}, so none of its tokens is read")
    elif not isinstance(items, list):
        damage.append("the list of tokens (missing or not a list)")
    else:
        for index, item in enumerate(items):
            try:
                records.append((index, _record(item)))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                damage.append(f"tokens[{index}] ({reason(exc)})")
    holders: dict[str, list[int]] = {}
    for index, record in records:
        holders.setdefault(record.id, []).append(index)
    for token_id, indexes in holders.items():
        if len(indexes) > 1:  # which one a revocation meant cannot be told: neither is kept
            damage.append(f"token id {token_id!r} is held by {len(indexes)} records "
                          f"({', '.join(f'tokens[{i}]' for i in indexes)})")
    kept = [record for _, record in records if len(holders[record.id]) == 1]
    names = document.get("nodes", [])
    nodes = set()
    if not isinstance(names, list):
        damage.append("the list of node names (not a list)")
    for name in names if isinstance(names, list) else ():
        try:
            nodes.add(_node_name(name))
        except ValueError as exc:
            damage.append(f"a node name ({exc})")
    known = nodes | {r.node for _, r in records if r.node is not None}  # a name once used stays taken
    return kept, frozenset(known), damage


def _aside(path: Path) -> Path:
    """Where a damaged store is set aside: beside it, named by the time, never over an earlier one."""
    stem = f"{path.name}.damaged-{time.strftime('%Y%m%dT%H%M%S')}"
    names = (path.with_name(stem + (f".{count}" if count else "")) for count in itertools.count())
    return next(aside for aside in names if not os.path.lexists(aside))


def _tighten(path: Path) -> None:
    """`token repair` leaves the store no wider than 0600 (its own, not a planted link's target)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and info.st_mode & 0o077:
        os.chmod(path, 0o600)


def _store_document(path: Path) -> dict[str, Any] | None:
    """The store's JSON object (None: no store yet); bounded, a regular file in a directory only its owner
    may change, itself readable by its owner only (its records name every node's token)."""
    fsutil.check_private(path.parent)
    fsutil.check_private(path, secret=True)
    try:
        document = load_json(fsutil.read_regular(path, MAX_STORE_BYTES, "a token store"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise TokenError(f"{path}: unreadable token store ({reason(exc)}); `kubesmith token repair` sets it aside "
                         "and starts an empty one") from exc
    if not isinstance(document, dict):
        raise TokenError(f"{path}: damaged token store (not a JSON object); `kubesmith token repair` sets it "
                         "aside and starts an empty one")
    return document


def _record(item: dict[str, Any]) -> TokenRecord:
    """One record, every field checked: a store edited by hand must not fail later, in a listing."""
    record = TokenRecord(id=_text(item["id"], "id"), created=_time(item["created"], "created"),
                         expires=_time(item["expires"], "expires"),
                         node=None if item.get("node") is None else _node_name(item["node"]),
                         addresses=tuple(_address(a) for a in item.get("addresses") or ()),
                         description=_text(item.get("description", ""), "description"),
                         nonce=_text(item["nonce"], "nonce"), wrapped_key=_text(item["wrapped_key"], "wrapped_key"),
                         revoked=None if item.get("revoked") is None else _time(item["revoked"], "revoked"))
    if len(record.id) != ID_LENGTH or not set(record.id) <= set(ALPHABET):
        raise ValueError(f"token id {record.id!r} is malformed")
    return record


def _time(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= LATEST_TIME:
        raise ValueError(f"{field} {value!r} is not a time between 1970 and 9999")
    return float(value)


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{field} {value!r} is not a string")
    return value


def _address(value: Any) -> str:
    """An IP address a node's serving certificate may carry (`token create --address`)."""
    try:
        if isinstance(value, str) and "%" not in value:
            ipaddress.ip_address(value)
            return value
    except ValueError:
        pass
    raise ValueError(f"address {value!r} is not an IP address")


def _node_name(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > 253 or \
            any(unicodedata.category(c).startswith(("C", "Z")) for c in value):
        raise ValueError(f"node name {value!r} is malformed")
    return value


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
