"""Small test PKI: CAs and leaf certificates written as PEM files (cryptography, ECDSA P-256)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class CaFiles:
    name: str
    cert: Path
    key: Path
    private: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    def issue(self, directory: Path, name: str, server: bool = False, client: bool = False) -> Pair:
        key = ec.generate_private_key(ec.SECP256R1())
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        builder = _base(name, key.public_key(), self.certificate.subject).add_extension(
            x509.ExtendedKeyUsage(usages), critical=False)
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = builder.sign(self.private, hashes.SHA256())
        return _write(directory, name, cert, key)


def make_ca(directory: Path, name: str) -> CaFiles:
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (_base(name, key.public_key(), subject)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    pair = _write(directory, name, cert, key)
    return CaFiles(name, pair.cert, pair.key, key, cert)


def _base(name: str, public, issuer: x509.Name) -> x509.CertificateBuilder:  # type: ignore[no-untyped-def]
    now = dt.datetime.now(dt.timezone.utc)
    return (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(issuer).public_key(public).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=30)))


def _write(directory: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Pair:
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return Pair(cert_path, key_path)


def served_certificate(sock: socket.socket, ca_file: Path) -> x509.Certificate:
    """The certificate a TLS server presents on a connected socket, verified against ca_file.

    TLS 1.3: the client's side of the handshake completes before the server judges the client's
    (absent) certificate, so this works against servers that demand client certificates too.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.check_hostname = False
    context.load_verify_locations(cafile=str(ca_file))
    with context.wrap_socket(sock) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)
