"""Addresses in URLs and HOST:PORT strings: IPv6 literals need brackets there, names and IPv4 do not."""

from __future__ import annotations


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
