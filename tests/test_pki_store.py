"""Idempotence and reissue rules of the PKI state, key algorithms, renewal, and the certs CLI."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from kubesmith.backends.render import RenderError, render
from kubesmith.pki.keys import load as load_key
from kubesmith.pki.store import PkiStore, store_root, utc_now
from pki_support import HA_SPEC, cert_at, on_host, render_spec, snapshot, write_spec
from plan_support import plan_of

HOSTS = [{"name": "cp1", "address": "10.1.0.1", "roles": ["control-plane", "etcd"]},
         {"name": "cp2", "address": "10.1.0.2", "roles": ["control-plane", "etcd"]},
         {"name": "w1", "address": "10.1.0.3", "roles": ["node"]},
         {"name": "w2", "address": "10.1.0.4", "roles": ["node"]}]


def test_rerender_keeps_keys_and_certificates_byte_identical(tmp_path):
    plan, first = render_spec(HA_SPEC, tmp_path / "state", tmp_path / "out")
    state, out = snapshot(tmp_path / "state"), snapshot(tmp_path / "out")
    _, second = render_spec(HA_SPEC, tmp_path / "state", tmp_path / "out")
    assert len(first.issued) == sum(len(host.certificates) for host in plan.hosts) >= 45
    assert second.issued == () and second.files_written == 0
    assert snapshot(tmp_path / "state") == state and snapshot(tmp_path / "out") == out


def test_changing_one_address_reissues_exactly_the_certificates_naming_it(tmp_path):
    spec = write_spec(tmp_path / "c.yaml", "addr", HOSTS, endpoint="10.1.0.100:6443")
    plan, _ = render_spec(spec, tmp_path / "state", tmp_path / "out")
    before = snapshot(tmp_path / "state")
    old = "10.1.0.2"
    expected = {(h.name, r.name) for h in plan.hosts for r in h.certificates if old in r.ip_addresses}
    assert len(expected) >= 4  # cp2's etcd server/peer/serving certs and its own apiserver cert
    moved = [dict(h, address="10.1.0.22") if h["name"] == "cp2" else h for h in HOSTS]
    _, result = render_spec(write_spec(spec, "addr", moved, endpoint="10.1.0.100:6443"), tmp_path / "state",
                            tmp_path / "out")
    assert {(i.host, i.name) for i in result.issued} == expected
    after = snapshot(tmp_path / "state")
    changed = {k for k in after if before.get(k) != after[k]}
    assert changed == {f"pki/hosts/{h}/{n}.crt" for h, n in expected}  # keys untouched
    assert {host for host, _ in expected} == {"cp2"}  # no other host's certificate names cp2's address
    apiserver = cert_at(on_host(tmp_path / "out", "cp2", "/etc/kubernetes/pki/apiserver.crt"))
    assert "10.1.0.22" in str(apiserver.extensions)


def test_certificate_reissued_only_under_the_renewal_threshold(tmp_path):
    spec = write_spec(tmp_path / "c.yaml", "clock", HOSTS[:1])
    plan = plan_of(spec)
    requests = [(h.name, r) for h in plan.hosts for r in h.certificates]
    root = store_root(tmp_path / "state")
    with PkiStore.open(root, plan) as store:
        first = {i.name: i for i in store.issue(requests)}
    # 2/3 of the year used: still more than 1/3 left -> reused; past it -> reissued with the same key
    early = lambda: utc_now() + dt.timedelta(days=240)
    late = lambda: utc_now() + dt.timedelta(days=250)
    with PkiStore.open(root, plan, clock=early) as store:
        assert {i.status for i in store.issue(requests)} == {"reused"}
    with PkiStore.open(root, plan, clock=late) as store:
        renewed = {i.name: i for i in store.issue(requests)}
    assert {i.status for i in renewed.values()} == {"reissued"}
    assert all(renewed[n].key_pem == first[n].key_pem and renewed[n].cert_pem != first[n].cert_pem for n in first)


def test_a_replaced_ca_reissues_its_leaves(tmp_path):
    spec = write_spec(tmp_path / "c.yaml", "ca", HOSTS[:1])
    plan, _ = render_spec(spec, tmp_path / "state", tmp_path / "out")
    for suffix in ("crt", "key"):
        (tmp_path / "state" / "pki" / "cas" / f"etcd-ca.{suffix}").unlink()
    (tmp_path / "state" / "pki" / "cluster.json").unlink()  # replacing a CA on purpose: the record goes too
    _, result = render_spec(spec, tmp_path / "state", tmp_path / "out")
    assert {i.name for i in result.issued} == {r.name for r in plan.host("cp1").certificates if r.ca == "etcd-ca"}


@pytest.mark.parametrize("algorithm,kind,size", [("ecdsa-p384", ec.EllipticCurvePrivateKey, 384),
                                                 ("rsa-2048", rsa.RSAPrivateKey, 2048)])
def test_key_algorithms(tmp_path, algorithm, kind, size):
    spec = write_spec(tmp_path / "c.yaml", "alg", [{"name": "n1", "address": "10.2.0.1", "roles": ["node"]},
                                                    {"name": "cp", "address": "10.2.0.2", "roles": ["control-plane", "etcd"]}],
                      key_algorithm=algorithm)
    plan, _ = render_spec(spec, tmp_path / "state", tmp_path / "out")
    for request in plan.host("n1").certificates:
        key = load_key(on_host(tmp_path / "out", "n1", request.key_path).read_bytes(), "k")
        assert isinstance(key, kind) and key.key_size == size
        run = subprocess.run(["openssl", "verify", "-CAfile", str(on_host(tmp_path / "out", "n1", "/etc/kubernetes/pki/ca.crt")),
                              str(on_host(tmp_path / "out", "n1", request.cert_path))], capture_output=True)
        assert run.returncode == 0


def test_ca_key_refused_on_a_host_that_does_not_sign(tmp_path):
    import dataclasses
    from kubesmith.vocabulary.model import File, Source
    plan = plan_of(write_spec(tmp_path / "c.yaml", "leak", HOSTS))
    w1 = plan.host("w1")
    leaky = dataclasses.replace(w1, files=w1.files + (File("/etc/kubernetes/pki/ca.key", 0o600,
                                                           source=Source("ca-private-key", "kubernetes-ca")),))
    plan = dataclasses.replace(plan, hosts=tuple(leaky if h.name == "w1" else h for h in plan.hosts))
    with pytest.raises(RenderError, match="refusing to place the kubernetes-ca private key"):
        render(plan, tmp_path / "state", tmp_path / "out", ["w1"])
    assert not (tmp_path / "out" / "w1").exists()


def test_stale_files_of_a_previous_render_are_removed(tmp_path):
    spec = write_spec(tmp_path / "c.yaml", "stale", HOSTS[:1])
    render_spec(spec, tmp_path / "state", tmp_path / "out")
    extra = [dict(HOSTS[0], roles=["control-plane", "etcd", "node"])]
    render_spec(write_spec(spec, "stale", extra), tmp_path / "state", tmp_path / "out")
    assert on_host(tmp_path / "out", "cp1", "/etc/kubernetes/kubelet.conf").exists()
    _, result = render_spec(write_spec(spec, "stale", HOSTS[:1]), tmp_path / "state", tmp_path / "out")
    assert result.files_removed >= 5
    assert not on_host(tmp_path / "out", "cp1", "/etc/kubernetes/kubelet.conf").exists()


def _cli(*args, cwd, env=None):
    return subprocess.run([sys.executable, "-c", "from kubesmith.cli import main; main()", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})


def test_cli_render_check_expiration_and_renew(tmp_path):
    spec = write_spec(tmp_path / "c.yaml", "cli", HOSTS)
    run = _cli("render", str(spec), "--out-dir", str(tmp_path / "out"), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / ".kubesmith" / "cli" / "pki" / "cas" / "kubernetes-ca.crt").exists()  # default state dir
    run = _cli("certs", "check-expiration", str(spec), "--output", "json", cwd=tmp_path)
    rows = json.loads(run.stdout)
    assert {r["name"] for r in rows if not r["host"]} == {"kubernetes-ca", "etcd-ca", "front-proxy-ca"}
    assert all(r["status"] == "ok" for r in rows)
    kubelet = next(r for r in rows if r["host"] == "w2" and r["name"] == "kubelet-client")
    assert kubelet["ca"] == "kubernetes-ca" and 364 * 86400 < kubelet["residual_seconds"] <= 365 * 86400
    table = _cli("certs", "check-expiration", str(spec), cwd=tmp_path).stdout
    assert table.splitlines()[0].split()[:3] == ["CERTIFICATE", "HOST", "EXPIRES"] and "364d" in table
    before = (tmp_path / ".kubesmith/cli/pki/hosts/cp1/apiserver.crt").read_bytes()
    key = (tmp_path / ".kubesmith/cli/pki/hosts/cp1/apiserver.key").read_bytes()
    run = _cli("certs", "renew", str(spec), "apiserver", "--host", "cp1", cwd=tmp_path)
    assert run.returncode == 0 and "cp1: apiserver: renewed" in run.stdout
    assert (tmp_path / ".kubesmith/cli/pki/hosts/cp1/apiserver.crt").read_bytes() != before
    assert (tmp_path / ".kubesmith/cli/pki/hosts/cp1/apiserver.key").read_bytes() == key
    assert (tmp_path / ".kubesmith/cli/pki/hosts/cp2/apiserver.crt").exists()
    run = _cli("certs", "renew", str(spec), "all", "--state-dir", str(tmp_path / "elsewhere"), cwd=tmp_path)
    assert run.returncode == 0 and (tmp_path / "elsewhere" / "pki" / "hosts" / "w2" / "kubelet-client.crt").exists()
    env_run = _cli("certs", "check-expiration", str(spec), cwd=tmp_path, env={"KUBESMITH_STATE_DIR": str(tmp_path / "elsewhere")})
    assert env_run.returncode == 0


@pytest.mark.parametrize("args,code,needle", [
    (("render", "{spec}", "--out-dir", "{out}", "--host", "nope"), 2, "no host named 'nope'"),
    (("certs", "renew", "{spec}", "bogus"), 2, "no certificate named 'bogus'"),
    (("certs", "check-expiration", "{spec}", "--state-dir", "{out}/none"), 3, "no PKI state"),
    (("render", "{missing}", "--out-dir", "{out}"), 3, "no such file"),
])
def test_cli_user_errors_are_one_line(tmp_path, args, code, needle):
    spec = write_spec(tmp_path / "c.yaml", "err", HOSTS[:1])
    values = {"spec": str(spec), "out": str(tmp_path / "out"), "missing": str(tmp_path / "missing.yaml")}
    run = _cli(*(a.format(**values) for a in args), cwd=tmp_path)
    assert run.returncode == code, run.stderr
    assert needle in run.stderr and "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_cli_corrupt_key_is_reported_not_replaced(tmp_path):
    spec = write_spec(tmp_path / "c.yaml", "bad", HOSTS[:1])
    assert _cli("render", str(spec), "--out-dir", str(tmp_path / "out"), cwd=tmp_path).returncode == 0
    key = tmp_path / ".kubesmith/bad/pki/hosts/cp1/apiserver.key"
    key.write_bytes(b"garbage")
    run = _cli("render", str(spec), "--out-dir", str(tmp_path / "out"), cwd=tmp_path)
    assert run.returncode == 3 and "not a readable private key" in run.stderr and "Traceback" not in run.stderr
    assert key.read_bytes() == b"garbage"
