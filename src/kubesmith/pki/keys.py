"""Private keys: generation per algorithm name, PEM encoding as kubeadm writes them."""

from __future__ import annotations

import hashlib

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
ALGORITHMS = ("ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-3072", "rsa-4096")
_CURVES = {"ecdsa-p256": ec.SECP256R1, "ecdsa-p384": ec.SECP384R1}


class BadKeyFile(ValueError):
    """A key file that cannot be used (corrupt or of an unsupported type)."""


def generate(algorithm: str) -> PrivateKey:
    """A new private key; ECDSA P-256 is the default because RSA keygen is ~400x slower."""
    if algorithm in _CURVES:
        return ec.generate_private_key(_CURVES[algorithm]())
    if algorithm.startswith("rsa-") and algorithm in ALGORITHMS:
        return rsa.generate_private_key(public_exponent=65537, key_size=int(algorithm[4:]))
    raise ValueError(f"unsupported key algorithm {algorithm!r}; use one of {', '.join(ALGORITHMS)}")


def to_pem(key: PrivateKey) -> bytes:
    """SEC1 ("EC PRIVATE KEY") or PKCS#1 ("RSA PRIVATE KEY"), unencrypted, as kubeadm and etcd read them."""
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def public_pem(key: PrivateKey | PublicKeyTypes) -> bytes:
    public = key.public_key() if isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)) else key
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def spki_hash(public: PublicKeyTypes) -> str:
    """`sha256:<hex>` of a public key's DER SubjectPublicKeyInfo (kubeadm's CA certificate hash): names a
    key whatever certificate carries it."""
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(der).hexdigest()


def load(pem: bytes, origin: str) -> PrivateKey:
    """Parse a key we wrote; a foreign or corrupt file is a clear error, never silently replaced."""
    try:
        key: PrivateKeyTypes = serialization.load_pem_private_key(pem, password=None,
                                                                  unsafe_skip_rsa_key_validation=True)
    except (ValueError, TypeError) as exc:
        raise BadKeyFile(f"{origin}: not a readable private key ({exc}); move it away to generate a new one") from exc
    if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
        raise BadKeyFile(f"{origin}: unsupported key type {type(key).__name__}")
    return key


def same_public_key(a: PublicKeyTypes, b: PublicKeyTypes) -> bool:
    return public_pem(a) == public_pem(b)
