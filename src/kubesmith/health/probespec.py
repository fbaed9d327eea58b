"""Probe specifications as one command-line argument, shared by units, `wait`, `run` and `status`.

A plan `Probe` names its credentials (a CA name, a certificate request name). On a host those
become files. `probe_argument` turns a plan probe into the single argument that
`kubesmith wait` takes, and `parse_probe` turns it back, so the systemd backend, the
supervisor and `status` all probe exactly the same thing.

Grammar (a URL; query values are percent-encoded file paths)::

    https://HOST:PORT/PATH?ca=FILE&cert=FILE&key=FILE&servername=NAME
    http://HOST:PORT/PATH
    tcp://HOST:PORT
    etcd://HOST:PORT[/PATH]?ca=FILE&cert=FILE&key=FILE     (GET /health over TLS, body health=true)
    dns://HOST:PORT/NAME                                    (an A query for NAME over UDP answers)

Relative FILE values are resolved against the PKI directory (`--pki-dir`, default
/etc/kubernetes/pki), so units stay short and a supervisor running under a state
directory only has to pass a different PKI directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Literal
from urllib.parse import parse_qs, quote, urlsplit

from kubesmith import layout
from kubesmith.urls import url_host

if TYPE_CHECKING:
    from kubesmith.vocabulary.model import HostPlan, Probe

Scheme = Literal["https", "http", "tcp", "etcd", "dns"]
SCHEMES: tuple[str, ...] = ("https", "http", "tcp", "etcd", "dns")
QUERY_KEYS = ("ca", "cert", "key", "servername")


class ProbeSyntaxError(ValueError):
    """A probe argument that cannot be understood (a usage error, exit code 2)."""


@dataclass(frozen=True, slots=True)
class ProbeSpec:
    """A probe with concrete credential files: what `kubesmith wait` executes."""

    scheme: Scheme
    host: str
    port: int
    path: str = ""
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None

    @property
    def url(self) -> str:
        """The HTTP(S) URL a client connects to (etcd probes are HTTPS underneath)."""
        scheme = "https" if self.scheme == "etcd" else self.scheme
        return f"{scheme}://{url_host(self.host)}:{self.port}{self.http_path}"

    @property
    def http_path(self) -> str:
        if self.scheme == "etcd":
            return self.path or "/health"
        return self.path or "/"

    @property
    def label(self) -> str:
        """Short human name for log lines: scheme://host:port/path."""
        suffix = "" if self.scheme == "tcp" else self.http_path
        return f"{self.scheme}://{url_host(self.host)}:{self.port}{suffix}"

    def resolved(self, pki_dir: str) -> ProbeSpec:
        """The same probe with relative credential paths made absolute under `pki_dir`."""
        def absolute(value: str | None) -> str | None:
            if value is None or value.startswith("/"):
                return value
            return str(PurePosixPath(pki_dir) / value)
        return ProbeSpec(self.scheme, self.host, self.port, self.path, absolute(self.ca_file),
                         absolute(self.cert_file), absolute(self.key_file), self.server_name)


def format_probe(spec: ProbeSpec) -> str:
    """The one-argument form of a probe (inverse of `parse_probe`)."""
    path = "" if spec.scheme == "tcp" else quote(spec.path, safe="/-._~")
    query = [(key, value) for key, value in (("ca", spec.ca_file), ("cert", spec.cert_file),
                                              ("key", spec.key_file), ("servername", spec.server_name))
             if value is not None]
    text = "&".join(f"{key}={quote(value, safe='/-._~:')}" for key, value in query)
    return f"{spec.scheme}://{url_host(spec.host)}:{spec.port}{path}" + (f"?{text}" if text else "")


def parse_probe(argument: str) -> ProbeSpec:
    """Parse one probe argument; raises ProbeSyntaxError with a message fit for the user."""
    parts = urlsplit(argument)
    if parts.scheme not in SCHEMES:
        raise ProbeSyntaxError(f"{argument!r}: scheme must be one of {', '.join(SCHEMES)}")
    try:
        port = parts.port
    except ValueError as exc:
        raise ProbeSyntaxError(f"{argument!r}: {exc}") from None
    if not parts.hostname or port is None:
        raise ProbeSyntaxError(f"{argument!r}: expected {parts.scheme}://HOST:PORT")
    query = _query(argument, parts.query)
    if parts.scheme in ("http", "tcp", "dns") and set(query) - {"servername"}:
        raise ProbeSyntaxError(f"{argument!r}: {parts.scheme} probes take no TLS credentials")
    if (query.get("cert") is None) != (query.get("key") is None):
        raise ProbeSyntaxError(f"{argument!r}: cert= and key= go together")
    if parts.scheme in ("https", "etcd") and query.get("ca") is None:
        raise ProbeSyntaxError(f"{argument!r}: TLS probes need ca= (the CA that signed the server)")
    return ProbeSpec(parts.scheme, parts.hostname, port, parts.path,  # type: ignore[arg-type]
                     query.get("ca"), query.get("cert"), query.get("key"), query.get("servername"))


def _query(argument: str, text: str) -> dict[str, str]:
    values = parse_qs(text, keep_blank_values=True, strict_parsing=False)
    unknown = sorted(set(values) - set(QUERY_KEYS))
    if unknown:
        raise ProbeSyntaxError(f"{argument!r}: unknown parameter {unknown[0]!r} "
                               f"(known: {', '.join(QUERY_KEYS)})")
    for key, items in values.items():
        if len(items) != 1 or not items[0]:
            raise ProbeSyntaxError(f"{argument!r}: {key}= must be given once, non-empty")
    return {key: items[0] for key, items in values.items()}


def spec_for(probe: Probe, host: HostPlan, pki_dir: str = layout.PKI) -> ProbeSpec:
    """Resolve a plan probe's credential names to files, relative to the PKI directory.

    The client certificate is the one `host` holds under that name: a gate on host A that
    probes host B presents A's certificate.
    """
    from kubesmith.pki.certlist import authority  # the plan's side: `wait` and `probe` parse, never resolve

    ca_file = authority(probe.ca).cert_file if probe.ca else None
    cert_file = key_file = None
    if probe.client_certificate:
        request = host.certificate(probe.client_certificate)
        cert_file = _relative(request.cert_path, pki_dir)
        key_file = _relative(request.key_path, pki_dir)
    return ProbeSpec(probe.kind, probe.host, probe.port, probe.path, ca_file, cert_file, key_file,
                     probe.server_name)


def probe_argument(probe: Probe, host: HostPlan) -> str:
    """The `kubesmith wait` argument for a plan probe (used by units, `run` and `status`)."""
    return format_probe(spec_for(probe, host))


def _relative(path: str, pki_dir: str) -> str:
    prefix = pki_dir.rstrip("/") + "/"
    return path[len(prefix):] if path.startswith(prefix) else path
