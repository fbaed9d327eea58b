"""A stand-in for kube-apiserver, for fault injection in tests only.

Every test that starts a Kubernetes component uses the real binaries (tests/k8s_support.py). This
stand-in remains only for the one fault a real binary cannot show on demand: a /readyz that stays
false (STANDIN_NEVER_READY; tests/test_run_supervisor.py). It takes the command line the plan gives
the real kube-apiserver and:

* accepts only the flags the version registry allows for kube-apiserver at that version
  (unknown flag -> "unknown flag: --x" on stderr, exit 1, as pflag does), in the forms
  `--flag=value` and `--flag` (booleans); a positional argument is an error too;
* reads the TLS files it was given (a missing or unreadable file -> exit 1, as the real
  binary fails at start), and serves /healthz, /readyz, /livez and /version over TLS with
  that certificate (--bind-address, --secure-port);
* verifies client certificates against --client-ca-file: a certificate from another CA fails
  the TLS handshake. Without one, no path answers when --anonymous-auth=false (the plan's
  default; 401); with anonymous auth on, /healthz /readyz /livez /version do
  (system:public-info-viewer);
* is live at once (/livez 200), and ready (/healthz, /readyz 200) only while etcd /health answers
  {"health": "true"} over mTLS (--etcd-servers, --etcd-cafile/certfile/keyfile; any one server is
  enough);
* answers `--version` alone with "Kubernetes v<minor>.0-standin".

Test knobs (environment):
  STANDIN_KUBERNETES_VERSION  minor version for the flag check (default: file KUBERNETES_VERSION)
  STANDIN_NEVER_READY         "1" or comma-separated binary names: /readyz and /healthz answer 503
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "src"))  # the stand-ins run from a checkout

from kubesmith.versions.registry import load_registry  # noqa: E402

PATHS = ("/healthz", "/readyz", "/livez", "/version")


class StandinError(Exception):
    """A start-up failure: printed as one line, exit 1 (like the real binaries)."""


@dataclass(frozen=True)
class Listener:
    host: str
    port: int
    tls: ssl.SSLContext
    anonymous: tuple[str, ...]  # paths that answer without a client certificate


@dataclass(frozen=True)
class Dependency:
    """An etcd member whose /health must answer before this stand-in reports ready."""

    url: str
    tls: ssl.SSLContext


@dataclass
class State:
    binary: str
    version: str
    listener: Listener
    dependencies: list[Dependency]
    dependency_ok: bool = False
    dependency_reason: str = "not checked yet"


# -- command line ------------------------------------------------------------------------------

def kubernetes_version() -> str:
    value = os.environ.get("STANDIN_KUBERNETES_VERSION") or (HERE / "KUBERNETES_VERSION").read_text().strip()
    return ".".join(value.lstrip("v").split(".")[:2])


def parse_flags(binary: str, minor: str, argv: list[str]) -> dict[str, str]:
    """`--flag=value` / `--flag` only, each allowed for `binary` at `minor`."""
    registry = load_registry()
    allowed = registry.flags(binary, minor)
    flags: dict[str, str] = {}
    for argument in argv:
        if not argument.startswith("--"):
            raise StandinError(f"unexpected argument {argument!r} ({binary} takes flags only)")
        name, has_value, value = argument[2:].partition("=")
        if name not in allowed:
            raise StandinError(f"unknown flag: --{name}")
        flags[name] = value if has_value else "true"
    return flags


# -- TLS ---------------------------------------------------------------------------------------

def read_file(path: str, what: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise StandinError(f"cannot read {what} {path}: {exc.strerror}") from None


def server_context(cert: str, key: str, client_ca: str | None) -> ssl.SSLContext:
    read_file(cert, "certificate")
    read_file(key, "private key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        raise StandinError(f"invalid serving certificate/key {cert}: {exc.reason}") from None
    if client_ca:
        read_file(client_ca, "client CA")
        context.load_verify_locations(cafile=client_ca)
        context.verify_mode = ssl.CERT_OPTIONAL  # a presented certificate must chain to client_ca
    return context


def client_context(ca: str, cert: str | None, key: str | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=ca)
    if cert and key:
        context.load_cert_chain(cert, key)
    return context


# -- kube-apiserver -----------------------------------------------------------------------------

def apiserver(flags: dict[str, str]) -> tuple[Listener, list[Dependency]]:
    try:
        tls = server_context(flags["tls-cert-file"], flags["tls-private-key-file"], flags.get("client-ca-file"))
        anonymous = PATHS if flags.get("anonymous-auth", "true") == "true" else ()
        listener = Listener(flags.get("bind-address", "0.0.0.0"), int(flags.get("secure-port", "6443")), tls, anonymous)
        etcd_tls = client_context(flags["etcd-cafile"], flags.get("etcd-certfile"), flags.get("etcd-keyfile"))
        dependencies = [Dependency(url.rstrip("/") + "/health", etcd_tls) for url in flags["etcd-servers"].split(",")]
    except KeyError as exc:
        raise StandinError(f"required setting missing: {exc.args[0]}") from None
    return listener, dependencies


# -- serving -----------------------------------------------------------------------------------

def never_ready(binary: str) -> bool:
    """STANDIN_NEVER_READY is "1" or a comma-separated list of binary names that includes this one."""
    names = {part.strip() for part in os.environ.get("STANDIN_NEVER_READY", "").split(",")}
    return "1" in names or binary in names


def health(state: State, path: str) -> tuple[int, str]:
    if path == "/livez":
        return 200, "ok"
    if never_ready(state.binary):
        return 503, "[-]standin failed: STANDIN_NEVER_READY is set"
    if not state.dependency_ok:
        return 503, f"[-]dependency failed: {state.dependency_reason}"
    return 200, "ok"


def handler(state: State) -> Any:
    async def handle(request: web.Request) -> web.Response:
        path = request.path
        if path not in PATHS:
            return web.Response(status=404, text="404 page not found (stand-in)\n")
        if path not in state.listener.anonymous:
            if not request.transport or not request.transport.get_extra_info("peercert"):
                return web.Response(status=401, text="Unauthorized: client certificate required\n")
        if path == "/version":
            major, minor = state.version.split(".")
            return web.json_response({"major": major, "minor": minor, "gitVersion": f"v{state.version}.0-standin"})
        status, text = health(state, path)
        return web.Response(status=status, text=text + "\n")
    return handle


async def watch_dependencies(state: State) -> None:
    """Keep `dependency_ok` current; any one answering dependency is enough (as etcd-servers)."""
    while True:
        reasons = []
        ok = not state.dependencies
        for dependency in state.dependencies:
            good, reason = await check_dependency(dependency)
            ok = ok or good
            reasons.append(f"{dependency.url}: {reason}")
        state.dependency_ok, state.dependency_reason = ok, "; ".join(reasons)
        await asyncio.sleep(0.1 if not ok else 0.5)


async def check_dependency(dependency: Dependency) -> tuple[bool, str]:
    try:
        connector = aiohttp.TCPConnector(ssl=dependency.tls, force_close=True)
        async with aiohttp.ClientSession(connector=connector, trust_env=False,
                                         timeout=aiohttp.ClientTimeout(total=2)) as session:
            async with session.get(dependency.url) as response:
                body = await response.text()
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"
    if response.status != 200:
        return False, f"HTTP {response.status}"
    if json.loads(body).get("health") != "true":
        return False, f"etcd unhealthy: {body.strip()}"
    return True, "ok"


async def serve(state: State) -> None:
    listener = state.listener
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handler(state))
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, listener.host, listener.port, ssl_context=listener.tls, reuse_address=True).start()
    print(f"{state.binary} (stand-in, Kubernetes {state.version}): serving https://"
          f"{listener.host}:{listener.port}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    watcher = asyncio.create_task(watch_dependencies(state))
    await stop.wait()
    watcher.cancel()
    await runner.cleanup()


def main(binary: str) -> int:
    """Entry point of the stand-in executable (tests/standins/kube-apiserver)."""
    argv = sys.argv[1:]
    if argv == ["--version"]:  # as the real binaries answer (kubesmith checks the release)
        print(f"Kubernetes v{kubernetes_version()}.0-standin")
        return 0
    try:
        version = kubernetes_version()
        flags = parse_flags(binary, version, argv)
        listener, dependencies = apiserver(flags)
        state = State(binary, version, listener, dependencies)
        asyncio.run(serve(state))
    except StandinError as exc:
        print(f"Error: {exc}", file=sys.stderr, flush=True)
        return 1
    except OSError as exc:
        print(f"Error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0
