"""`kubesmith agent`: renews before expiry with the key kept, never exposes an expired or
mismatched certificate, keeps the old one while the CA is down, recovers when it returns."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import fcntl
import json
import signal
import ssl
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from ca_support import CFSSL, KUBESMITH, create_token, load_cert, make_ca, request, start_ca_service
from conftest import kubesmith
from kubesmith import fsutil
from kubesmith.pki import documents, issue, keys

NOW = dt.datetime.now(dt.timezone.utc)


def leaf(ca_cert, ca_key, cn: str, orgs=(), usages=("digital signature", "key encipherment", "client auth"),
         validity_seconds: float = 600, age_seconds: float = 0):
    """A certificate issued `age_seconds` ago (so it can already be due for renewal). Ago from now, not
    from the module's import: the agent judges it by the clock, and a loaded run reaches a test minutes
    after collecting it (a fresh certificate then came out due)."""
    key = keys.generate("ecdsa-p256")
    issued = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=age_seconds)
    cert = issue.new_leaf(request("x", cn, orgs, usages), key.public_key(), ca_cert, ca_key,
                          validity_seconds / 86400, issued, backdate=dt.timedelta(0))
    return key, cert


def write_pair(directory: Path, name: str, key, cert, mode: int = 0o600) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.key").write_bytes(keys.to_pem(key))
    (directory / f"{name}.key").chmod(mode)
    (directory / f"{name}.crt").write_bytes(cert.public_bytes(Encoding.PEM))


def test_agent_renews_due_certificates_locally_and_reports_state(tmp_path):
    """A host holding the CA key renews itself: same key, later expiry, kubeconfig rewritten in place."""
    ca = make_ca(tmp_path / "ca")
    ca_cert, ca_key = load_cert(ca.ca_pem()), keys.load(ca.ca_key.read_bytes(), "ca")
    etc = tmp_path / "etc/kubernetes"
    pki = etc / "pki"
    pki.mkdir(parents=True)
    (pki / "ca.crt").write_bytes(ca.ca_pem())
    due_key, due = leaf(ca_cert, ca_key, "system:kube-scheduler", validity_seconds=600, age_seconds=500)
    fresh_key, fresh = leaf(ca_cert, ca_key, "kube-scheduler", validity_seconds=600, age_seconds=10)
    write_pair(pki, "scheduler-client", due_key, due)
    write_pair(pki, "scheduler-serving", fresh_key, fresh)
    kc_key, kc_cert = leaf(ca_cert, ca_key, "system:kube-scheduler", validity_seconds=600, age_seconds=500)
    kubeconfig = documents.kubeconfig("demo", "https://127.0.0.1:6443", "system:kube-scheduler", ca.ca_pem(),
                                      kc_cert.public_bytes(Encoding.PEM), keys.to_pem(kc_key))
    (etc / "scheduler.conf").write_text(yaml.safe_dump(kubeconfig))
    (etc / "scheduler.conf").chmod(0o640)
    # an etcd-ca certificate whose CA key is not on this host: reported, not renewed
    etcd_ca_key = keys.generate("ecdsa-p256")
    etcd_ca = issue.new_ca("etcd-ca", etcd_ca_key, 10, NOW)
    (pki / "etcd").mkdir()
    (pki / "etcd/ca.crt").write_bytes(etcd_ca.public_bytes(Encoding.PEM))
    etcd_key, etcd_cert = leaf(etcd_ca, etcd_ca_key, "kube-etcd-healthcheck-client", age_seconds=500)
    write_pair(pki / "etcd", "healthcheck-client", etcd_key, etcd_cert)
    key_before = (pki / "scheduler-client.key").read_bytes()

    state_file = tmp_path / "state.json"
    result = kubesmith("agent", "--once", "--host", "cp1", "--pki-dir", str(pki), "--kubeconfig-dir", str(etc),
                       "--state-file", str(state_file), "--config", _agent_config(tmp_path, ca.ca_key))
    assert result.returncode == 0, result.stderr
    # the scheduler's client certificate and kubeconfig were due; the serving and etcd ones were not
    assert "kubesmith agent: checked 4, renewed 2; next renewal due 20" in result.stderr

    renewed = load_cert((pki / "scheduler-client.crt").read_bytes())
    assert (pki / "scheduler-client.key").read_bytes() == key_before
    assert keys.same_public_key(renewed.public_key(), due_key.public_key())
    assert renewed.not_valid_after_utc > due.not_valid_after_utc and renewed.serial_number != due.serial_number
    assert issue.Identity.of_certificate(renewed) == issue.Identity.of_certificate(due)
    renewed.verify_directly_issued_by(ca_cert)
    assert load_cert((pki / "scheduler-serving.crt").read_bytes()) == fresh  # not due: untouched
    assert load_cert((pki / "etcd/healthcheck-client.crt").read_bytes()) == etcd_cert
    document = yaml.safe_load((etc / "scheduler.conf").read_text())
    embedded = load_cert(base64.b64decode(document["users"][0]["user"]["client-certificate-data"]))
    assert embedded.not_valid_after_utc > kc_cert.not_valid_after_utc
    assert keys.same_public_key(embedded.public_key(), kc_key.public_key())
    assert stat.S_IMODE((etc / "scheduler.conf").stat().st_mode) == 0o640

    state = json.loads(state_file.read_text())
    by_path = {entry["path"]: entry for entry in state["certificates"]}
    assert by_path[str(pki / "scheduler-client.crt")]["renewer"] == "local"
    assert by_path[str(pki / "scheduler-client.crt")]["last_renewal"] is not None
    assert by_path[str(pki / "etcd/healthcheck-client.crt")]["renewer"] == "none"
    assert "certs renew" in by_path[str(pki / "etcd/healthcheck-client.crt")]["last_error"]
    assert str(pki / "ca.crt") not in by_path  # CA certificates are not leaf slots
    assert state["last_renewal"] is not None and state["next_renewal"] is not None
    shown = kubesmith("agent", "--show-state", "--state-file", str(state_file))
    assert json.loads(shown.stdout)["host"] == "cp1"


def _agent_config(tmp_path: Path, ca_key: Path) -> str:
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"ca_keys": {"kubernetes-ca": str(ca_key)}, "renew_fraction": 0.5}))
    return str(path)


class Consumer(threading.Thread):
    """Reads every certificate/key pair as a component would, continuously, and records any moment
    at which a pair does not load (torn file, key mismatch) or the certificate has expired."""

    def __init__(self, pki: Path, names: tuple[str, ...]) -> None:
        super().__init__(daemon=True)
        self.pki, self.names = pki, names
        self.stop = threading.Event()
        self.checks = 0
        self.violations: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            for name in self.names:
                crt, key = self.pki / f"{name}.crt", self.pki / f"{name}.key"
                try:
                    ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(crt), str(key))
                    cert = x509.load_pem_x509_certificate(crt.read_bytes())
                except (OSError, ssl.SSLError, ValueError) as exc:
                    self.violations.append(f"{name}: {exc}")
                    continue
                now = dt.datetime.now(dt.timezone.utc)
                if not cert.not_valid_before_utc <= now < cert.not_valid_after_utc:
                    self.violations.append(f"{name}: not valid at {now} (until {cert.not_valid_after_utc})")
                self.checks += 1
            time.sleep(0.01)


def serials(pki: Path, names: tuple[str, ...]) -> dict[str, int]:
    return {name: load_cert((pki / f"{name}.crt").read_bytes()).serial_number for name in names}


def wait_until(condition, deadline: float, what: str, poll: float = 0.5):
    stop = time.monotonic() + deadline
    while time.monotonic() < stop:
        value = condition()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out waiting for {what}")


NAMES = ("kubelet-client", "kubelet-serving", "agent-client", "kube-proxy-client")


@pytest.mark.slow
@pytest.mark.skipif(CFSSL is None, reason="cfssl not installed (ca_support needs it only for cfssl tests)")
def test_agent_renews_through_the_ca_service_and_survives_its_outage(tmp_path):
    ca = make_ca(tmp_path / "ca")
    server = start_ca_service(ca, "--validity", "1m")
    agent = consumer = None
    try:
        token = create_token(ca, "--node", "w20", "--address", "127.0.0.1")
        root = tmp_path / "root"
        joined = kubesmith("join", "--server", server.url, "--token", token["token"], "--ca-hash",
                           token["ca_hash"], "--node", "w20", "--address", "127.0.0.1", "--root", str(root),
                           "--no-wait")
        assert joined.returncode == 0, joined.stderr
        pki = root / "etc/kubernetes/pki"
        first = serials(pki, NAMES)
        keys_before = {name: (pki / f"{name}.key").read_bytes() for name in NAMES}
        consumer = Consumer(pki, NAMES)
        consumer.start()
        state_file = tmp_path / "agent-state.json"
        log = (tmp_path / "agent.log").open("w")
        agent = subprocess.Popen(
            [KUBESMITH, "agent", "--host", "w20", "--pki-dir", str(pki), "--kubeconfig-dir", str(root / "etc/kubernetes"),
             "--state-file", str(state_file), "--ca-url", server.url, "--renew-fraction", "0.3",
             "--check-interval", "5s", "--retry-initial", "0.5s", "--retry-max", "2s"],
            stdout=log, stderr=subprocess.STDOUT)

        # 1. renewal through the CA service, before expiry, keys kept
        wait_until(lambda: all(serials(pki, NAMES)[n] != first[n] for n in NAMES), 90, "first renewal")
        second = serials(pki, NAMES)
        assert {name: (pki / f"{name}.key").read_bytes() for name in NAMES} == keys_before
        assert "by=agent:w20" in server.log_text()

        # 2. the CA goes away: the agent retries, the old certificates stay in place and valid
        port = int(server.url.rsplit(":", 1)[1])
        server.stop()
        # the failed pass records its error, then the retry its time (two writes: wait for both)
        state = wait_until(lambda: (found := _state_error(state_file)) and found["next_attempt"] and found, 90,
                           "the agent to report the CA unreachable and its next attempt")
        assert "CA" in state["last_error"] or "Connect" in state["last_error"] or "refused" in state["last_error"]
        time.sleep(3)  # a few more retries while down
        assert serials(pki, NAMES) == second

        # 3. the CA returns on the same address: the agent renews without being restarted
        server = start_ca_service(ca, "--validity", "1m", port=port)
        wait_until(lambda: all(serials(pki, NAMES)[n] != second[n] for n in NAMES), 60, "renewal after recovery")
        wait_until(lambda: (json.loads(state_file.read_text()) or {}).get("last_error") is None, 30,
                   "the agent to clear its error")
        assert agent.poll() is None
    finally:
        if consumer is not None:
            consumer.stop.set()
            consumer.join(10)
        if agent is not None and agent.poll() is None:
            agent.send_signal(signal.SIGTERM)
            agent.wait(15)
        server.stop()
    assert consumer.checks > 100
    assert consumer.violations == []
    assert agent.returncode == 0  # SIGTERM ends it cleanly


@pytest.mark.parametrize("agent_certificate", ["expired", "from another CA"])
def test_an_agent_certificate_the_ca_service_refuses_is_named_not_taken_for_an_outage(tmp_path, agent_certificate):
    """The CA service drops a TLS 1.3 connection whose client certificate it cannot verify, with
    no reason the client could read: the agent must say why, and how to get out, not retry an
    "unreachable" CA forever."""
    ca = make_ca(tmp_path / "ca")
    server = start_ca_service(ca, "--validity", "1m")
    try:
        token = create_token(ca, "--node", "w21")
        root = tmp_path / "root"
        joined = kubesmith("join", "--server", server.url, "--token", token["token"], "--ca-hash", token["ca_hash"],
                           "--node", "w21", "--root", str(root), "--no-wait")
        assert joined.returncode == 0, joined.stderr
        pki = root / "etc/kubernetes/pki"
        agent_key = keys.load((pki / "agent-client.key").read_bytes(), "agent-client.key")
        signer = make_ca(tmp_path / "other") if agent_certificate == "from another CA" else ca
        issued = NOW - dt.timedelta(hours=2) if agent_certificate == "expired" else NOW
        replaced = issue.new_leaf(request("x", "kubesmith:agent:w21", ("kubesmith:agents",),
                                          ("digital signature", "key encipherment", "client auth")),
                                  agent_key.public_key(), load_cert(signer.ca_pem()),
                                  keys.load(signer.ca_key.read_bytes(), "ca"), 1 / 24, issued,
                                  backdate=dt.timedelta(0))
        (pki / "agent-client.crt").write_bytes(replaced.public_bytes(Encoding.PEM))
        before = serials(pki, ("kubelet-client", "kube-proxy-client"))
        time.sleep(1.5)  # 3% of the one-minute lifetime: due
        result = kubesmith("agent", "--once", "--host", "w21", "--pki-dir", str(pki), "--kubeconfig-dir",
                           str(root / "etc/kubernetes"), "--state-file", str(tmp_path / "state.json"), "--ca-url",
                           server.url, "--renew-fraction", "0.03")
    finally:
        server.stop()
    cause = "expired at" if agent_certificate == "expired" else "is not signed by kubernetes-ca"
    assert result.returncode == 5, result.stderr
    assert "CA unreachable" not in result.stderr and "Traceback" not in result.stderr
    assert f"this host's agent certificate {cause}" in result.stderr and "join the host again" in result.stderr
    errors = {entry["path"]: entry["last_error"] for entry in json.loads((tmp_path / "state.json").read_text())
              ["certificates"]}
    assert cause in errors[str(pki / "kubelet-client.crt")]
    assert serials(pki, ("kubelet-client", "kube-proxy-client")) == before  # kept, untouched


def _state_error(path: Path) -> dict | None:
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return state if state.get("last_error") else None


def test_a_wrong_or_damaged_ca_file_is_reported_and_stops_only_its_own_renewals(tmp_path):
    """A CA key that does not belong to ca.crt signs nothing (its certificates would verify nowhere);
    a damaged CA certificate of another CA does not stop the others. Both show in the state and
    make `agent --once` fail (exit 5, listed), and an entry goes once its file is mended."""
    ca = make_ca(tmp_path / "ca")
    ca_cert, ca_key = load_cert(ca.ca_pem()), keys.load(ca.ca_key.read_bytes(), "ca")
    pki = tmp_path / "pki"
    pki.mkdir()
    (pki / "ca.crt").write_bytes(ca.ca_pem())
    (pki / "front-proxy-ca.crt").write_text("-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n")
    due_key, due = leaf(ca_cert, ca_key, "system:kube-scheduler", validity_seconds=600, age_seconds=500)
    write_pair(pki, "scheduler-client", due_key, due)
    wrong_key = make_ca(tmp_path / "other").ca_key
    state_file = tmp_path / "state.json"

    def once(key_file: Path, problems: tuple[Path, ...]) -> dict:
        result = kubesmith("agent", "--once", "--host", "cp1", "--pki-dir", str(pki), "--kubeconfig-dir",
                           str(tmp_path), "--state-file", str(state_file), "--config", _agent_config(tmp_path, key_file))
        assert result.returncode == (5 if problems else 0) and "Traceback" not in result.stderr, result.stderr
        assert all(f"{path}: " in result.stderr for path in problems), result.stderr
        return {entry["path"]: entry["last_error"] for entry in json.loads(state_file.read_text())["certificates"]}

    errors = once(wrong_key, (wrong_key, pki / "front-proxy-ca.crt"))
    assert f"does not belong to {pki / 'ca.crt'}" in errors[str(wrong_key)]
    assert "CA certificate unusable" in errors[str(pki / "front-proxy-ca.crt")]
    assert load_cert((pki / "scheduler-client.crt").read_bytes()) == due  # nothing signed with the wrong key
    errors = once(ca.ca_key, (pki / "front-proxy-ca.crt",))
    renewed = load_cert((pki / "scheduler-client.crt").read_bytes())
    renewed.verify_directly_issued_by(ca_cert)
    assert renewed.serial_number != due.serial_number and errors[str(pki / "scheduler-client.crt")] is None
    assert str(wrong_key) not in errors and str(pki / "front-proxy-ca.crt") in errors
    (pki / "front-proxy-ca.crt").unlink()
    assert str(pki / "front-proxy-ca.crt") not in once(ca.ca_key, ())


def test_a_renewal_is_dropped_if_the_key_changed_or_it_is_not_valid_yet(tmp_path):
    """The key on disk may be rotated (apply, a re-join) while the CA answers; a CA whose clock is
    ahead may return a certificate valid only later. Neither replaces the working certificate."""
    from kubesmith.agent import renewal as agent
    from kubesmith.ca.client import CaClientError
    ca = make_ca(tmp_path / "ca")
    ca_cert, ca_key = load_cert(ca.ca_pem()), keys.load(ca.ca_key.read_bytes(), "ca")
    key, cert = leaf(ca_cert, ca_key, "system:node:w1", ("system:nodes",), age_seconds=500)
    write_pair(tmp_path, "kubelet-client", key, cert)
    material = agent.load_material(agent.Slot("pem", tmp_path / "kubelet-client.crt", tmp_path / "kubelet-client.key"))
    authority = agent.Authority("kubernetes-ca", ca_cert, ca.ca_pem(), ca_key)
    later = agent.renew_locally(material, authority, NOW + dt.timedelta(minutes=30))
    with pytest.raises(CaClientError, match="valid only from"):
        agent.check_renewed(material, authority, later, NOW)
    agent.check_renewed(material, authority, agent.renew_locally(material, authority, NOW), NOW)
    forged = agent.renew_locally(material, agent.Authority("kubernetes-ca", ca_cert, ca.ca_pem(),
                                                           keys.generate("ecdsa-p256")), NOW)
    with pytest.raises(CaClientError, match="not signed by kubernetes-ca"):
        agent.check_renewed(material, authority, forged, NOW)
    agent.still_current(material)
    rotated_key, rotated = leaf(ca_cert, ca_key, "system:node:w1", ("system:nodes",))
    write_pair(tmp_path, "kubelet-client", rotated_key, rotated)
    with pytest.raises(CaClientError, match="key changed during the renewal"):
        agent.still_current(material)


def test_agent_once_says_when_it_found_nothing_to_renew(tmp_path):
    """A wrong --pki-dir is not a silent success: the summary names both places it looked."""
    result = kubesmith("agent", "--once", "--host", "cp1", "--pki-dir", str(tmp_path / "nope"),
                       "--kubeconfig-dir", str(tmp_path), "--state-file", str(tmp_path / "state.json"))
    assert result.returncode == 0, result.stderr
    assert "nothing to renew: no certificate with its key under " + str(tmp_path / "nope") in result.stderr
    assert json.loads((tmp_path / "state.json").read_text())["certificates"] == []


@contextlib.contextmanager
def held(lock_path: Path):
    """The report's lock, held as another agent's pass holds it."""
    with lock_path.open("a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def test_the_units_agent_stops_at_once_while_it_waits_for_a_manual_pass(tmp_path):
    """Waiting for the report's lock must not block the agent's event loop: SIGTERM still ends it."""
    state_file, log_path = tmp_path / "state.json", tmp_path / "agent.log"
    with held(fsutil.lock_file(state_file)), log_path.open("w") as log:
        waiting = subprocess.Popen([KUBESMITH, "agent", "--host", "cp1", "--pki-dir", str(tmp_path / "pki"),
                                    "--kubeconfig-dir", str(tmp_path), "--state-file", str(state_file)],
                                   stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: "waiting for its pass to end" in log_path.read_text(), 30, "the agent to wait")
            waiting.send_signal(signal.SIGTERM)
            assert waiting.wait(15) == 0, log_path.read_text()
        finally:
            if waiting.poll() is None:
                waiting.kill()
    assert not state_file.exists()  # it stopped without a pass


def test_an_error_stays_in_the_report_only_while_it_lasts(tmp_path):
    """Each pass says what is wrong now: a mended file leaves the report (and `--once` exit 0),
    it does not wait for the certificate's next renewal."""
    ca = make_ca(tmp_path / "ca")
    ca_cert, ca_key = load_cert(ca.ca_pem()), keys.load(ca.ca_key.read_bytes(), "ca")
    pki = tmp_path / "pki"
    pki.mkdir()
    (pki / "ca.crt").write_bytes(ca.ca_pem())
    key, cert = leaf(ca_cert, ca_key, "system:kube-scheduler", validity_seconds=600)
    write_pair(pki, "scheduler-client", keys.generate("ecdsa-p256"), cert)  # a key that is not the certificate's
    args = ("agent", "--once", "--host", "cp1", "--pki-dir", str(pki), "--kubeconfig-dir", str(tmp_path),
            "--state-file", str(tmp_path / "state.json"))
    broken = kubesmith(*args)
    assert broken.returncode == 5 and f"{pki / 'scheduler-client.crt'}: " in broken.stderr, broken.stderr
    assert _state_error(tmp_path / "state.json") is None  # not the CA: the entry carries it
    assert json.loads((tmp_path / "state.json").read_text())["certificates"][0]["last_error"]
    write_pair(pki, "scheduler-client", key, cert)  # mended; not due for minutes
    mended = kubesmith(*args)
    assert mended.returncode == 0, mended.stderr
    assert json.loads((tmp_path / "state.json").read_text())["certificates"][0]["last_error"] is None


def test_passes_of_the_units_agent_and_agent_once_take_turns_and_share_the_report(tmp_path):
    """A manual pass beside the unit's agent waits for the running pass, and each pass starts
    from the report the other left: a renewal stays recorded after a pass that renewed nothing."""
    ca = make_ca(tmp_path / "ca")
    ca_cert, ca_key = load_cert(ca.ca_pem()), keys.load(ca.ca_key.read_bytes(), "ca")
    pki = tmp_path / "pki"
    pki.mkdir()
    (pki / "ca.crt").write_bytes(ca.ca_pem())
    due_key, due = leaf(ca_cert, ca_key, "system:kube-scheduler", validity_seconds=600, age_seconds=500)
    write_pair(pki, "scheduler-client", due_key, due)
    state_file = tmp_path / "state.json"
    args = ["agent", "--once", "--host", "cp1", "--pki-dir", str(pki), "--kubeconfig-dir", str(tmp_path),
            "--state-file", str(state_file), "--config", _agent_config(tmp_path, ca.ca_key)]
    log_path = tmp_path / "once.log"
    with held(fsutil.lock_file(state_file)), log_path.open("w") as log:  # the unit's agent is in a pass
        waiting = subprocess.Popen([KUBESMITH, *args], stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: "waiting for its pass to end" in log_path.read_text(), 30, "the manual pass to wait")
            assert waiting.poll() is None and load_cert((pki / "scheduler-client.crt").read_bytes()) == due
        except BaseException:
            waiting.kill()
            raise
    assert waiting.wait(60) == 0, log_path.read_text()
    renewed = json.loads(state_file.read_text())
    assert renewed["last_renewal"] is not None and renewed["certificates"][0]["last_renewal"] is not None
    again = kubesmith(*args)  # nothing due now: the report still says when it was renewed
    assert again.returncode == 0 and "renewed 0" in again.stderr, again.stderr
    kept = json.loads(state_file.read_text())
    assert kept["last_renewal"] == renewed["last_renewal"]
    assert kept["certificates"][0]["last_renewal"] == renewed["certificates"][0]["last_renewal"]
    assert kept["last_check"] >= renewed["last_check"]


def test_agent_settings_errors_are_one_line(tmp_path):
    missing = kubesmith("agent", "--config", str(tmp_path / "nope.json"), "--once")
    assert missing.returncode == 3 and "no such file" in missing.stderr and "Traceback" not in missing.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"host": "x", "surprise": 1}))
    result = kubesmith("agent", "--config", str(bad), "--once")
    assert result.returncode == 2 and "surprise" in result.stderr


def test_modules_wire_the_agent_and_ca_service_into_the_plan():
    from kubesmith.plan.evaluate import evaluate
    from kubesmith.spec.load import load_spec_text
    from kubesmith.versions.registry import load_registry

    spec = load_spec_text("""\
apiVersion: kubesmith.io/v1alpha1
kind: Cluster
metadata: {name: demo}
spec:
  kubernetesVersion: "1.33.2"
  pki: {renewFraction: 0.75}
  hosts:
    - {name: cp1, address: 10.0.0.11, roles: [control-plane, etcd]}
    - {name: cp2, address: 10.0.0.12, roles: [control-plane, etcd]}
    - {name: w1, address: 10.0.0.21, roles: [node]}
  components:
    caService: {port: 9443, tokenTtl: 2h}
    apiserver: {extraSans: [api, 192.0.2.10, 10.0.0.21]}
""", "cluster.yaml")
    plan = evaluate(spec.cluster, load_registry())
    cp1, w1 = plan.host("cp1"), plan.host("w1")
    ca = cp1.service("kubesmith-ca")
    assert ca.wanted_by == "kube-ca-online.target" and ca.readiness.port == 9443
    assert "kube-ca-online" in {t.name for t in cp1.targets}
    assert "kubesmith-ca" not in {s.name for s in w1.services}
    settings = next(f.data for f in cp1.files if f.path == "/etc/kubesmith/ca-service.json")
    assert settings["default_token_ttl"] == 7200 and settings["reserved_nodes"] == ["cp1", "cp2"]  # w1 is reserved through its Node
    assert settings["nodes_kubeconfig"] == "/etc/kubernetes/scheduler.conf"
    # the API server's names and addresses, less the hosts' own (w1's address is an extra SAN here)
    assert settings["service_sans"] == ["10.32.0.1", "127.0.0.1", "192.0.2.10", "api", "kubernetes",
                                        "kubernetes.default", "kubernetes.default.svc",
                                        "kubernetes.default.svc.cluster.local", "localhost"]
    assert {r.name for r in cp1.certificates} >= {"ca-service-serving", "agent-client"}
    agent = next(f.data for f in w1.files if f.path == "/etc/kubesmith/agent.json")
    assert agent["ca_urls"] == ["https://10.0.0.11:9443", "https://10.0.0.12:9443"]
    assert agent["renew_fraction"] == 0.75 and agent["ca_keys"] == {}
    cp_agent = next(f.data for f in cp1.files if f.path == "/etc/kubesmith/agent.json")
    assert cp_agent["ca_keys"] == {"kubernetes-ca": "/etc/kubernetes/pki/controller-manager/ca.key"}
    assert w1.certificate("agent-client").common_name == "kubesmith:agent:w1"
    serving = cp1.certificate("ca-service-serving")
    assert "10.0.0.11" in serving.ip_addresses and "server auth" in serving.usages


def test_the_settings_files_read_back_as_the_modules_wrote_them(tmp_path):
    """The modules write AgentConfig and CaServiceConfig through to_document(); the agent and `ca serve`
    read them with from_document(): every host's file reads back to the same document, and flags
    override the file's values."""
    from plan_support import plan_of

    from kubesmith.settings import AgentConfig, CaServiceConfig

    plan = plan_of(Path(__file__).resolve().parents[1] / "examples" / "lab.yaml")
    for host in plan.hosts:
        document = next(f.data for f in host.files if f.path == "/etc/kubesmith/agent.json")
        config = AgentConfig.from_document(document)
        assert config.host == host.name and config.to_document() == document
        assert "retry_initial" not in document and "agent_certificate" not in document  # never written
    config = AgentConfig.from_document(document, host=None, pki_dir=str(tmp_path), retry_initial=2.0)
    assert config.host == host.name and config.pki_dir == tmp_path and config.retry_initial == 2.0
    assert AgentConfig.from_document(config.to_document()) == config
    assert AgentConfig.from_document({}).host == ""  # the command names the machine

    served = [f.data for host in plan.hosts for f in host.files if f.path == "/etc/kubesmith/ca-service.json"]
    assert served
    for document in served:
        assert CaServiceConfig.from_document(document).to_document() == document
    config = CaServiceConfig.from_document({**served[0], "removed_keys": {"sha256:b": "h2", "sha256:a": "h1"}},
                                           port=9999, reserved_nodes=None, state_dir=str(tmp_path))
    assert config.port == 9999 and config.reserved_nodes == tuple(served[0]["reserved_nodes"])
    assert config.removed_keys == (("sha256:a", "h1"), ("sha256:b", "h2")) and config.token_file.parent == tmp_path
    assert CaServiceConfig.from_document(config.to_document()) == config
    assert CaServiceConfig.from_document({}) == CaServiceConfig()  # no file: the standard paths
    with pytest.raises(ValueError, match="unknown CA service setting 'surprise'"):
        CaServiceConfig.from_document({"surprise": 1})
