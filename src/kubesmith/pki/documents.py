"""Documents built from key material: kubeconfigs and the at-rest EncryptionConfiguration.

Both are plain dicts, serialised by the renderer with yaml.safe_dump; nothing is templated.
"""

from __future__ import annotations

import base64
from typing import Any

ENCRYPTION_PROVIDERS = ("aescbc", "aesgcm", "secretbox")


def kubeconfig(cluster: str, server: str, user: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes) -> dict[str, Any]:
    """A self-contained kubeconfig (CA and client credentials embedded, as kubeadm writes them)."""
    context = f"{user}@{cluster}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"certificate-authority-data": _b64(ca_pem), "server": server}}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": user}}],
        "current-context": context,
        "preferences": {},
        "users": [{"name": user, "user": {"client-certificate-data": _b64(cert_pem),
                                          "client-key-data": _b64(key_pem)}}],
    }


def encryption_config(provider: str, secret: bytes, key_name: str = "key1") -> dict[str, Any]:
    """Secrets encrypted with `provider`; identity last so data written before encryption stays readable."""
    if provider not in ENCRYPTION_PROVIDERS:
        raise ValueError(f"unsupported encryption provider {provider!r}; use one of {', '.join(ENCRYPTION_PROVIDERS)}")
    return {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "EncryptionConfiguration",
        "resources": [{
            "resources": ["secrets"],
            "providers": [{provider: {"keys": [{"name": key_name, "secret": _b64(secret)}]}}, {"identity": {}}],
        }],
    }


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
