"""Building certificates: self-signed CAs and leaves from the plan's `CertificateRequest`s.

Conventions follow kubeadm: CAs valid 10 years, leaves 1 year (both from `PkiSettings`), both
backdated 5 minutes for clock skew; random serials; SKI on every certificate and AKI pointing
at the issuer; usages mapped to keyUsage (critical) and extendedKeyUsage.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubesmith.pki.keys import PrivateKey
from kubesmith.vocabulary.model import CertificateRequest

BACKDATE = dt.timedelta(minutes=5)
_KEY_USAGES = {"digital signature": "digital_signature", "key encipherment": "key_encipherment",
               "cert sign": "key_cert_sign", "crl sign": "crl_sign"}
_EXTENDED = {"server auth": ExtendedKeyUsageOID.SERVER_AUTH, "client auth": ExtendedKeyUsageOID.CLIENT_AUTH}
_KU_FIELDS = ("digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
              "key_agreement", "key_cert_sign", "crl_sign", "encipher_only", "decipher_only")


@dataclass(frozen=True, slots=True)
class Identity:
    """What a certificate must say; compared with an existing certificate to decide on reissue."""

    common_name: str
    organizations: tuple[str, ...]
    usages: frozenset[str]
    dns_names: frozenset[str]
    ip_addresses: frozenset[str]

    @staticmethod
    def of_request(request: CertificateRequest) -> Identity:
        return Identity(request.common_name, tuple(request.organizations), frozenset(request.usages),
                        frozenset(request.dns_names), frozenset(_normal_ip(ip) for ip in request.ip_addresses))

    @staticmethod
    def of_certificate(cert: x509.Certificate) -> Identity:
        subject = cert.subject
        cn = [a.value for a in subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
        orgs = tuple(str(a.value) for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME))
        dns: frozenset[str] = frozenset()
        ips: frozenset[str] = frozenset()
        san = _extension(cert, x509.SubjectAlternativeName)
        if san is not None:
            dns = frozenset(san.get_values_for_type(x509.DNSName))
            ips = frozenset(str(ip) for ip in san.get_values_for_type(x509.IPAddress))
        return Identity(str(cn[0]) if cn else "", orgs, usages_of(cert), dns, ips)


def new_ca(common_name: str, key: PrivateKey, validity_days: int, now: dt.datetime) -> x509.Certificate:
    """A self-signed CA: basicConstraints CA (critical), keyUsage certSign/crlSign/digitalSignature."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    public = key.public_key()
    builder = (x509.CertificateBuilder()
               .subject_name(name).issuer_name(name).public_key(public)
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - BACKDATE).not_valid_after(now + dt.timedelta(days=validity_days))
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .add_extension(_key_usage({"digital_signature", "key_cert_sign", "crl_sign"}), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False))
    return builder.sign(key, _hash_for(key))


def new_leaf(request: CertificateRequest, public: PublicKeyTypes, ca_cert: x509.Certificate, ca_key: PrivateKey,
             validity_days: float, now: dt.datetime, backdate: dt.timedelta = BACKDATE) -> x509.Certificate:
    """A leaf for `request`, signed by the CA; never outlives the CA.

    `backdate` exists for short-lived certificates (the CA service issuing minutes of validity):
    five minutes of backdating would make such a certificate due for renewal the moment it exists.
    """
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in request.organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, request.common_name))
    not_after = min(now + dt.timedelta(days=validity_days), ca_cert.not_valid_after_utc)
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name(attributes)).issuer_name(ca_cert.subject).public_key(public)  # type: ignore[arg-type]
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - backdate).not_valid_after(not_after)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(_key_usage({_KEY_USAGES[u] for u in request.usages if u in _KEY_USAGES}), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)  # type: ignore[arg-type]
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False))
    extended = [_EXTENDED[u] for u in request.usages if u in _EXTENDED]
    if extended:
        builder = builder.add_extension(x509.ExtendedKeyUsage(extended), critical=False)
    names = subject_alt_names(request.dns_names, request.ip_addresses)
    if names is not None:
        builder = builder.add_extension(names, critical=False)
    return builder.sign(ca_key, _hash_for(ca_key))


def subject_alt_names(dns_names: Sequence[str], ip_addresses: Sequence[str]) -> x509.SubjectAlternativeName | None:
    """The SAN extension for names and addresses (certificates and CSRs alike); None when both are empty."""
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    return x509.SubjectAlternativeName(names) if names else None


def usages_of(cert: x509.Certificate) -> frozenset[str]:
    """The plan's usage names that a certificate carries."""
    found: set[str] = set()
    ku = _extension(cert, x509.KeyUsage)
    if ku is not None:
        found |= {name for name, attr in _KEY_USAGES.items() if _ku_flag(ku, attr)}
    eku = _extension(cert, x509.ExtendedKeyUsage)
    if eku is not None:
        found |= {name for name, oid in _EXTENDED.items() if oid in eku}
    return frozenset(found)


def issued_by(cert: x509.Certificate, ca_cert: x509.Certificate) -> bool:
    """Whether `ca_cert` (by subject and key identifier) issued `cert`; a replaced CA means reissue."""
    if cert.issuer != ca_cert.subject:
        return False
    aki = _extension(cert, x509.AuthorityKeyIdentifier)
    ski = _extension(ca_cert, x509.SubjectKeyIdentifier)
    return aki is not None and ski is not None and aki.key_identifier == ski.digest


def signature_problem(cert: x509.Certificate, issuer: x509.Certificate) -> str | None:
    """Why `issuer` did not sign `cert` (the failure's class name: InvalidSignature, or ValueError /
    TypeError for another issuer name or key type), or None when it did: `issued_by` compares
    names and key identifiers only, this checks the signature."""
    try:
        cert.verify_directly_issued_by(issuer)
    except Exception as exc:  # noqa: BLE001 - each caller words its own refusal
        return exc.__class__.__name__
    return None


def _key_usage(enabled: set[str]) -> x509.KeyUsage:
    return x509.KeyUsage(**{name: name in enabled for name in _KU_FIELDS})


def _ku_flag(ku: x509.KeyUsage, attr: str) -> bool:
    return bool(getattr(ku, attr))


def _extension(cert: x509.Certificate, kind: type) -> object | None:  # type: ignore[type-arg]
    try:
        return cert.extensions.get_extension_for_class(kind).value
    except x509.ExtensionNotFound:
        return None


def _hash_for(key: PrivateKey) -> hashes.HashAlgorithm:
    if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.key_size >= 384:
        return hashes.SHA384()
    if isinstance(key, rsa.RSAPrivateKey) or isinstance(key, ec.EllipticCurvePrivateKey):
        return hashes.SHA256()
    raise ValueError(f"unsupported key type {type(key).__name__}")


def _normal_ip(value: str) -> str:
    return str(ipaddress.ip_address(value))
