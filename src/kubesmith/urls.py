"""Addresses in URLs and HOST:PORT strings: IPv6 literals need brackets there, names and IPv4 do not."""

from __future__ import annotations

from urllib.parse import urlsplit


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def ca_url_problem(url: str) -> str | None:
    """Why `url` is not https://HOST[:PORT][/PATH] of a CA service the agent renews through, or None:
    renewal is mutual TLS (http:// would be a downgrade, and no client certificate goes with it),
    credentials in the URL would sit in every node's agent configuration, and the agent appends its
    API's path to the URL (a query or fragment would swallow it)."""
    shown = repr(url) if len(url) <= 80 else f"{url[:80]!r}…({len(url)} characters)"
    if not url.strip():
        return f"{shown} is empty: write https://HOST[:PORT] of a CA service"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"{shown} is not a URL: {exc}"
    if parts.scheme.lower() != "https":
        return f"{shown} must start with https:// (renewal is mutual TLS; http:// would be a downgrade)"
    if not parts.hostname:
        return f"{shown} names no host (https://HOST[:PORT])"
    if "@" in parts.netloc:
        return f"{shown} carries user information (USER:PASSWORD@): the agent authenticates with its certificate"
    if parts.query or parts.fragment or url.rstrip().endswith(("?", "#")):
        return f"{shown} has a query or fragment: the agent appends the CA service's path to the URL"
    if port == 0 or any(c.isspace() for c in url):
        return f"{shown} is not https://HOST[:PORT] (no spaces, a port 1-65535)"
    return None
