"""A small client of the Kubernetes API: the calls kubesmith makes (bindings, drains, Node routes),
with the credentials of a kubeconfig that embeds them, as kubesmith writes them. It sits at the
bottom of the package ladder because both the machine running kubesmith (access, drain) and the
hosts (the route follower) call the API.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import yaml

from kubesmith import fsutil


class ApiError(Exception):
    """An API call failed or the API cannot be reached; the message names the call and the answer."""


@dataclass(frozen=True, slots=True)
class Credentials:
    """Where the API is and who asks: a server, the CA to trust, a client certificate and key."""

    server: str
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    @classmethod
    def of_kubeconfig(cls, path: Path) -> Credentials:
        """The first cluster and user of a self-contained kubeconfig (as kubesmith writes them)."""
        try:
            document = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise ApiError(f"{path}: {exc.strerror or exc}") from None
        except (yaml.YAMLError, ValueError) as exc:
            raise ApiError(f"{path}: not a kubeconfig with embedded credentials (not YAML: {exc})") from None
        fields = [_kubeconfig_field(path, document, section, field) for section, field in (
            ("clusters", "server"), ("clusters", "certificate-authority-data"), ("users", "client-certificate-data"),
            ("users", "client-key-data"))]
        try:
            return cls(fields[0], *(base64.b64decode(text) for text in fields[1:]))
        except ValueError:
            raise ApiError(f"{path}: not a kubeconfig with embedded credentials (its certificate or key data "
                           "is not base64)") from None


def _kubeconfig_field(path: Path, document: object, section: str, field: str) -> str:
    """`clusters[0].cluster.server` and its kin, or an error naming the first one missing."""
    entry = section.removesuffix("s")
    value: object = document
    for step in (section, 0, entry, field):
        if isinstance(step, int):
            value = value[0] if isinstance(value, list) and value else None
        else:
            value = value.get(step) if isinstance(value, dict) else None
    if not isinstance(value, str) or not value:
        raise ApiError(f"{path}: not a kubeconfig with embedded credentials (no {section}[0].{entry}.{field})")
    return value


def tls_context(credentials: Credentials) -> ssl.SSLContext:
    """Trusts the credentials' CA and presents their client certificate."""
    context = ssl.create_default_context(cadata=credentials.ca_pem.decode())
    with tempfile.TemporaryDirectory(prefix="kubesmith-access-") as scratch:
        cert_file, key_file = Path(scratch) / "client.crt", Path(scratch) / "client.key"
        fsutil.atomic_write(cert_file, credentials.cert_pem, 0o600)
        fsutil.atomic_write(key_file, credentials.key_pem, 0o600)
        context.load_cert_chain(cert_file, key_file)  # takes paths only; gone with the scratch directory
    return context


async def api_request(credentials: Credentials, method: str, path: str, body: Any, timeout: float,
                      accept: tuple[int, ...] = (), content_type: str = "application/json"
                      ) -> tuple[int, dict[str, Any]]:
    """(status, JSON body or {}) of one API call; a status >= 300 not in `accept` is an ApiError.
    (`content_type`: a PATCH names its kind, application/merge-patch+json for one.)"""
    context = tls_context(credentials)
    server = credentials.server
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            data = None if body is None else json.dumps(body)
            async with session.request(method, f"{server}{path}", data=data, ssl=context,
                                       headers={"Content-Type": content_type}) as response:
                text = await response.text()
                if response.status < 300 or response.status in accept:
                    is_json = response.content_type == "application/json"
                    return response.status, (json.loads(text) if is_json and text else {})
                raise ApiError(f"{method} {server}{path}: HTTP {response.status}: {text.strip()[:300]}")
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        raise ApiError(f"cannot reach the API at {server}: {_unreachable(exc)}") from None


async def first_watch_event(credentials: Credentials, path: str, resource_version: str, seconds: int) -> bool:
    """Wait until the collection at `path` changes after `resource_version` (True), or `seconds` pass
    without a change (False): one watch request, closed at its first event."""
    query = f"?watch=1&resourceVersion={quote(resource_version)}&timeoutSeconds={seconds}"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=seconds + 30)) as session:
            async with session.get(f"{credentials.server}{path}{query}", ssl=tls_context(credentials)) as response:
                if response.status >= 300:
                    text = await response.text()
                    raise ApiError(f"watch {credentials.server}{path}: HTTP {response.status}: {text.strip()[:300]}")
                return bool(await response.content.readline())
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        raise ApiError(f"cannot reach the API at {credentials.server}: {_unreachable(exc)}") from None


def _unreachable(exc: BaseException) -> str:
    """Why a request never got an answer, for one line: aiohttp's connector error without the repr of
    the TLS context it carries (`ssl:<ssl.SSLContext object at 0x7f...>`), a timeout named as one."""
    if isinstance(exc, asyncio.TimeoutError):
        return "no answer in time"
    return re.sub(r" ssl:(<[^>]*>|\S+)", "", str(exc)) or type(exc).__name__
