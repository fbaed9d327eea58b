"""Join tokens: never stored in clear, wrapped under the CA key, expiry and revocation enforced,
every candidate compared; and the `kubesmith token` commands."""

from __future__ import annotations

import json
import stat

import pytest

from ca_support import ca_args, make_ca
from conftest import kubesmith
from kubesmith.ca import tokens
from kubesmith.pki import keys


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ca_key():
    return keys.generate("ecdsa-p256")


def test_store_never_holds_the_token_or_its_key(tmp_path, ca_key):
    store = tokens.TokenStore(tmp_path / "tokens.json", ca_key)
    created = store.create(3600, "w1", ("10.0.0.21",), "for w1")
    text = (tmp_path / "tokens.json").read_text()
    secret = created.token.split(".")[1]
    assert created.token not in text and secret not in text
    assert created.auth_key_hex not in text
    assert tokens.auth_key(created.token).hex() not in text
    assert stat.S_IMODE((tmp_path / "tokens.json").stat().st_mode) == 0o600
    record = json.loads(text)["tokens"][0]
    assert record["id"] == created.record.id and record["node"] == "w1" and record["addresses"] == ["10.0.0.21"]


def test_wrapped_keys_need_the_ca_key(tmp_path, ca_key, caplog):
    """A key from another CA unwraps nothing; a record it wrapped is ignored (and logged) rather than
    making every other token of the store fail."""
    path = tmp_path / "tokens.json"
    created = tokens.TokenStore(path, ca_key).create(3600)
    same = tokens.TokenStore(path, ca_key).candidates()
    assert [c.key for c in same] == [tokens.auth_key(created.token)]
    stranger = tokens.TokenStore(path, keys.generate("ecdsa-p256"))
    assert stranger.candidates() == ()
    foreign = stranger.create(3600)
    assert [c.record.id for c in tokens.TokenStore(path, ca_key).candidates()] == [created.record.id]
    assert f"token {foreign.record.id} was not created with this CA key" in caplog.text


def test_expiry_and_revocation_remove_candidates(tmp_path, ca_key):
    clock = Clock()
    store = tokens.TokenStore(tmp_path / "tokens.json", ca_key, clock)
    short = store.create(60)
    long = store.create(3600)
    assert {c.record.id for c in store.candidates()} == {short.record.id, long.record.id}
    clock.now += 61
    assert {c.record.id for c in store.candidates()} == {long.record.id}
    store.revoke(long.record.id)
    assert store.candidates() == ()
    assert [r.state(clock.now) for r in store.records()] == ["expired", "revoked"]


def test_match_finds_the_right_token_among_many(tmp_path, ca_key):
    store = tokens.TokenStore(tmp_path / "tokens.json", ca_key)
    created = [store.create(3600) for _ in range(5)]
    candidates = store.candidates()
    request = b'{"certificate_request": "x"}'
    third = created[2]
    mac = tokens.request_mac(tokens.auth_key(third.token), request)
    found = tokens.match(candidates, mac, request)
    assert found is not None and found.record.id == third.record.id
    assert tokens.match(candidates, mac, request + b" ") is None  # modified request
    assert tokens.match(candidates, bytes(32), request) is None


def test_bind_at_first_use_is_kept(tmp_path, ca_key):
    store = tokens.TokenStore(tmp_path / "tokens.json", ca_key)
    created = store.create(3600)
    assert store.bind(created.record.id, "w7").node == "w7"
    assert store.bind(created.record.id, "w8").node == "w7"


def test_a_node_name_stays_taken_after_its_token_is_gone(tmp_path, ca_key):
    """Binding checks, under the store's lock, every name a token was ever created for or bound to,
    also after the token's record has been pruned; revoked or expired tokens bind to nothing."""
    clock = Clock()
    store = tokens.TokenStore(tmp_path / "tokens.json", ca_key, clock)
    first, named = store.create(60), store.create(60, "w2")
    store.bind(first.record.id, "w1")
    with pytest.raises(tokens.NodeTaken, match="'w2' already belongs"):
        store.bind(store.create(3600).record.id, "w2")
    with pytest.raises(tokens.NodeTaken, match="'cp1' already belongs"):
        store.bind(store.create(3600).record.id, "cp1", frozenset({"cp1"}))
    clock.now += 61 + tokens.PRUNE_AFTER
    later = store.create(3600)  # the save prunes the expired records
    assert first.record.id not in {r.id for r in store.records()} and named.record.id not in \
        {r.id for r in store.records()}
    for node in ("w1", "w2"):
        with pytest.raises(tokens.NodeTaken):
            store.bind(later.record.id, node)
    assert store.create(3600, "w1").record.node == "w1"  # re-joining w1 takes a token made for it
    revoked = store.create(3600)
    store.revoke(revoked.record.id)
    assert store.bind(revoked.record.id, "w3").node is None
    assert store.bind(later.record.id, "w3").node == "w3"


@pytest.mark.parametrize("text", ["", "abc.def", "ABCDEF.0123456789abcdef0123456789abcdef",
                                  "abcdef.0123456789abcdef0123456789abcde", "abcdef-0123456789abcdef0123456789abcdef"])
def test_malformed_tokens_are_refused_without_echoing(text):
    with pytest.raises(tokens.TokenError) as info:
        tokens.parse_token(text)
    assert text.partition(".")[2] not in str(info.value) or not text.partition(".")[2]


def test_token_commands(tmp_path):
    ca = make_ca(tmp_path / "ca")
    created = kubesmith("token", "create", "--ttl", "30m", "--node", "w1", "--address", "10.0.0.21",
                        "--description", "rack 4", "-o", "json", *ca_args(ca))
    assert created.returncode == 0, created.stderr
    info = json.loads(created.stdout)
    assert tokens.parse_token(info["token"])[0] == info["id"]
    assert info["cfssl_auth_key"] == tokens.auth_key(info["token"]).hex()
    assert info["ca_hash"].startswith("sha256:") and len(info["ca_hash"]) == 71
    text = kubesmith("token", "create", *ca_args(ca))
    token = text.stdout.strip()
    assert text.returncode == 0 and tokens.parse_token(token) and text.stdout == token + "\n"
    secret = token.partition(".")[2]  # the secret once, on stdout; stderr is often logged
    assert secret not in text.stderr and tokens.auth_key(token).hex() not in text.stderr
    assert "KUBESMITH_JOIN_TOKEN=<token> kubesmith join --server" in text.stderr
    assert "--token" not in text.stderr  # not in the join's argv, which every user's ps shows
    listed = kubesmith("token", "list", "--state-dir", str(ca.directory / "state"), "-o", "json")
    rows = {row["id"]: row for row in json.loads(listed.stdout)}
    assert rows[info["id"]]["node"] == "w1" and rows[info["id"]]["state"] == "active"
    assert rows[info["id"]]["description"] == "rack 4"
    revoked = kubesmith("token", "revoke", info["id"], "--state-dir", str(ca.directory / "state"))
    assert revoked.returncode == 0, revoked.stderr
    listed = kubesmith("token", "list", "--state-dir", str(ca.directory / "state"))
    assert any(line.startswith(info["id"]) and "revoked" in line for line in listed.stdout.splitlines())


def test_revoking_needs_the_token_store_only(tmp_path, ca_key):
    """A leaked token is revoked without the CA key (here no key file exists at all); the key-holding
    store then offers it to no request."""
    store = tokens.TokenStore(tmp_path / "state" / "tokens.json", ca_key)
    leaked, kept = store.create(3600, "w1"), store.create(3600, "w2")
    revoked = kubesmith("token", "revoke", leaked.record.id, "--state-dir", str(tmp_path / "state"), "-o", "json")
    assert revoked.returncode == 0, revoked.stderr
    row = json.loads(revoked.stdout)
    assert (row["id"], row["node"], row["state"]) == (leaked.record.id, "w1", "revoked")
    assert [c.record.id for c in store.candidates()] == [kept.record.id]
    first = store.records()[0].revoked
    again = kubesmith("token", "revoke", leaked.record.id, "--state-dir", str(tmp_path / "state"))
    assert again.returncode == 0 and store.records()[0].revoked == first  # idempotent: the first time stays


def test_token_command_errors_are_one_line(tmp_path):
    ca = make_ca(tmp_path / "ca")
    other = make_ca(tmp_path / "other")
    wrong_key = kubesmith("token", "create", "--ca-cert", str(ca.ca_cert), "--ca-key", str(other.ca_key),
                          "--state-dir", str(ca.directory / "state"))
    assert wrong_key.returncode == 2 and f"{other.ca_key} does not belong to {ca.ca_cert}" in wrong_key.stderr
    assert not (ca.directory / "state" / "tokens.json").exists()
    unknown = kubesmith("token", "revoke", "zzzzzz", "--state-dir", str(ca.directory / "state"))
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and "no token" in unknown.stderr
    bad_ttl = kubesmith("token", "create", "--ttl", "soon", *ca_args(ca))
    assert bad_ttl.returncode == 2 and "not a duration" in bad_ttl.stderr
    missing = kubesmith("token", "create", "--ca-key", str(tmp_path / "nope.key"), "--state-dir", str(tmp_path))
    assert missing.returncode == 3 and "Traceback" not in missing.stderr and "nope.key" in missing.stderr


@pytest.mark.parametrize(("address", "says"), [
    ("0.0.0.0", "is the unspecified address"), ("224.0.0.1", "is a multicast address"),
    ("fe80::1%eth0", "has a zone suffix"), ("::ffff:10.0.0.5", "IPv4-mapped IPv6 address: write '10.0.0.5'"),
    ("0.1.2.3", "0.0.0.0/8"),
])
def test_token_addresses_no_client_can_reach_are_refused(tmp_path, address, says):
    ca = make_ca(tmp_path / "ca")
    result = kubesmith("token", "create", "--address", "10.0.0.21", "--address", address, *ca_args(ca))
    assert result.returncode == 2 and says in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert f"--address {address!r} " in result.stderr or f"--address {address!r}:" in result.stderr, result.stderr
    assert not (ca.directory / "state" / "tokens.json").exists()


def test_token_addresses_are_stored_in_canonical_form(tmp_path):
    ca = make_ca(tmp_path / "ca")
    created = kubesmith("token", "create", "--address", "FD00:0::5", "--address", "127.0.0.1", *ca_args(ca))
    assert created.returncode == 0, created.stderr
    stored = json.loads((ca.directory / "state" / "tokens.json").read_text())
    assert stored["tokens"][0]["addresses"] == ["fd00::5", "127.0.0.1"]
