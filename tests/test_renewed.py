"""apply keeps a certificate the agent renewed on a host, and only a true renewal."""

from __future__ import annotations

import dataclasses
import datetime as dt

import yaml
from cryptography.hazmat.primitives import serialization

from kubesmith.backends.renewed import is_renewal
from kubesmith.pki import documents, keys
from kubesmith.pki.issue import new_ca, new_leaf
from kubesmith.vocabulary.model import CertificateRequest

NOW = dt.datetime(2026, 11, 21, tzinfo=dt.timezone.utc)
REQUEST = CertificateRequest("kubelet-client", "kubernetes-ca", "system:node:w1", ("system:nodes",),
                             ("digital signature", "key encipherment", "client auth"), (), (),
                             "/etc/kubernetes/pki/kubelet-client.crt", "/etc/kubernetes/pki/kubelet-client.key",
                             "root", "root")
CA_KEY = keys.generate("ecdsa-p256")
CA = new_ca("kubernetes-ca", CA_KEY, 3650, NOW)
KEY = keys.generate("ecdsa-p256")


def pem(request: CertificateRequest = REQUEST, key: keys.PrivateKey = KEY, days: float = 365,
        at: dt.datetime = NOW, ca: tuple = (CA, CA_KEY)) -> bytes:  # type: ignore[type-arg]
    return new_leaf(request, key.public_key(), ca[0], ca[1], days, at).public_bytes(serialization.Encoding.PEM)


def test_a_later_certificate_for_the_same_key_and_identity_is_a_renewal() -> None:
    planned, renewed = pem(), pem(at=NOW + dt.timedelta(days=200))
    assert is_renewal("certificate", planned, renewed, NOW + dt.timedelta(days=201))


def test_not_a_renewal_when_anything_but_the_dates_differs() -> None:
    planned = pem()
    later = NOW + dt.timedelta(days=200)
    other_ca_key = keys.generate("ecdsa-p256")
    other_ca = new_ca("kubernetes-ca", other_ca_key, 3650, NOW)
    assert not is_renewal("certificate", planned, pem(key=keys.generate("ecdsa-p256"), at=later), later)
    assert not is_renewal("certificate", planned, pem(dataclasses.replace(REQUEST, common_name="system:node:w2"),
                                                      at=later), later)
    assert not is_renewal("certificate", planned, pem(ca=(other_ca, other_ca_key), at=later), later)
    assert not is_renewal("certificate", planned, pem(days=10), NOW)  # shorter-lived: not newer
    assert not is_renewal("certificate", planned, pem(at=later, days=1), later + dt.timedelta(days=2))  # expired
    assert not is_renewal("certificate", planned, b"not a certificate", NOW)


def test_kubeconfigs_differ_only_in_the_client_certificate() -> None:
    ca_pem = CA.public_bytes(serialization.Encoding.PEM)
    key_pem = keys.to_pem(KEY)

    def config(cert: bytes, server: str = "https://10.0.0.10:6443") -> bytes:
        return yaml.safe_dump(documents.kubeconfig("demo", server, "kubelet", ca_pem, cert, key_pem)).encode()

    later = NOW + dt.timedelta(days=200)
    planned = config(pem())
    assert is_renewal("kubeconfig", planned, config(pem(at=later)), later)
    assert not is_renewal("kubeconfig", planned, config(pem(at=later), server="https://10.0.0.99:6443"), later)
    assert not is_renewal("kubeconfig", planned, config(pem(days=10)), NOW)
