"""Stand-ins for the Kubernetes binaries, for fault injection in tests only.

Every test that starts a Kubernetes component uses the real binaries (tests/k8s_support.py). A
stand-in remains only where a test needs a fault a real binary cannot show on demand: a /readyz that
stays false (STANDIN_NEVER_READY) or answers late (STANDIN_READY_DELAY). A stand-in takes the command line
the plan gives the real binary and:

* accepts only the flags the version registry allows for that binary and version
  (unknown flag -> "unknown flag: --x" on stderr, exit 1, as pflag does), in the forms
  `--flag=value` and `--flag` (booleans); a positional argument is an error too;
* reads the TLS files it was given (a missing or unreadable file -> exit 1, as the real
  binary fails at start), and serves /healthz, /readyz, /livez and /version over TLS with
  that certificate;
* verifies client certificates against its client CA. Which paths answer without one
  follows the real counterpart:
    - kube-apiserver: none when --anonymous-auth=false (the plan's default); with anonymous
      auth on, /healthz /readyz /livez /version (system:public-info-viewer);
    - kube-controller-manager, kube-scheduler: /healthz /readyz /livez
      (--authorization-always-allow-paths default); everything else needs a client cert;
    - kubelet: nothing on the TLS port when authentication.anonymous.enabled is false;
      plain-HTTP /healthz on healthzBindAddress:healthzPort as the real kubelet;
    - kube-proxy: no TLS port; plain-HTTP /healthz and /livez on healthzBindAddress.
  A certificate from another CA fails the TLS handshake.
* is ready only when what it depends on answers with the credentials it was given:
  kube-apiserver needs etcd /health over mTLS (--etcd-servers, --etcd-cafile/certfile/keyfile);
  the others need the API server's /readyz through their kubeconfig.

Test knobs (environment):
  STANDIN_KUBERNETES_VERSION  minor version for the flag check (default: file KUBERNETES_VERSION)
  STANDIN_NEVER_READY         "1" or comma-separated binary names: /readyz and /healthz answer 503
  STANDIN_READY_DELAY         seconds, or "binary:seconds,...": not ready before this delay
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import ssl
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "src"))  # the stand-ins run from a checkout

from kubesmith.versions.registry import load_registry  # noqa: E402

HEALTH_PATHS = ("/healthz", "/readyz", "/livez")
ANONYMOUS: dict[str, tuple[str, ...]] = {
    "kube-controller-manager": HEALTH_PATHS,
    "kube-scheduler": HEALTH_PATHS,
}


class StandinError(Exception):
    """A start-up failure: printed as one line, exit 1 (like the real binaries)."""


@dataclass(frozen=True)
class Listener:
    host: str
    port: int
    tls: ssl.SSLContext | None
    anonymous: tuple[str, ...]  # paths that answer without a client certificate
    paths: tuple[str, ...] = HEALTH_PATHS + ("/version",)


@dataclass(frozen=True)
class Dependency:
    """What must answer before this stand-in reports ready."""

    url: str
    tls: ssl.SSLContext
    expect_etcd_health: bool = False


@dataclass
class State:
    binary: str
    version: str
    listeners: list[Listener]
    dependencies: list[Dependency]
    started: float = field(default_factory=time.monotonic)
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


def env_matches(variable: str, binary: str) -> str | None:
    """Value of a knob for this binary: plain value, or `name:value` items, or a bare name list."""
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return None
    for item in (part.strip() for part in raw.split(",")):
        name, sep, value = item.partition(":")
        if sep and name == binary:
            return value
        if not sep and item == binary:
            return "1"
        if not sep and item.replace(".", "", 1).isdigit():  # applies to every stand-in
            return item
    return None


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


def kubeconfig_dependency(path: str) -> Dependency:
    """The API server as this component's kubeconfig reaches it (server, CA, client cert)."""
    config = yaml.safe_load(read_file(path, "kubeconfig")) or {}
    try:
        context_name = config["current-context"]
        context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    except (KeyError, StopIteration, TypeError) as exc:
        raise StandinError(f"kubeconfig {path}: incomplete ({exc})") from None
    # inline credentials live in files only while the context loads them: no key is left in /tmp
    with tempfile.TemporaryDirectory(prefix="standin-") as scratch:
        ca = materialise(cluster, "certificate-authority", path, Path(scratch))
        cert = materialise(user, "client-certificate", path, Path(scratch))
        key = materialise(user, "client-key", path, Path(scratch))
        return Dependency(cluster["server"].rstrip("/") + "/readyz", client_context(ca, cert, key))


def materialise(entry: dict[str, Any], name: str, source: str, scratch: Path) -> str:
    """A file path for a kubeconfig credential given as path or as inline base64 data."""
    if entry.get(name):
        value = entry[name]
        return value if os.path.isabs(value) else str(Path(source).parent / value)
    data = entry.get(f"{name}-data")
    if not data:
        raise StandinError(f"kubeconfig {source}: neither {name} nor {name}-data")
    written = scratch / f"{name}.pem"
    written.write_bytes(base64.b64decode(data))
    return str(written)


# -- per binary --------------------------------------------------------------------------------

def split_host_port(value: str, default_port: int) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    return (host.strip("[]"), int(port)) if sep else (value, default_port)


def apiserver(flags: dict[str, str]) -> tuple[list[Listener], list[Dependency]]:
    tls = server_context(flags["tls-cert-file"], flags["tls-private-key-file"], flags.get("client-ca-file"))
    anonymous = ("/healthz", "/readyz", "/livez", "/version") if flags.get("anonymous-auth", "true") == "true" else ()
    listener = Listener(flags.get("bind-address", "0.0.0.0"), int(flags.get("secure-port", "6443")), tls, anonymous)
    etcd_tls = client_context(flags["etcd-cafile"], flags.get("etcd-certfile"), flags.get("etcd-keyfile"))
    dependencies = [Dependency(url.rstrip("/") + "/health", etcd_tls, True)
                    for url in flags["etcd-servers"].split(",")]
    return [listener], dependencies


def controller(binary: str, default_port: int, flags: dict[str, str]) -> tuple[list[Listener], list[Dependency]]:
    if "tls-cert-file" not in flags:
        raise StandinError("this stand-in needs --tls-cert-file (self-signed serving is not imitated)")
    tls = server_context(flags["tls-cert-file"], flags["tls-private-key-file"], flags.get("client-ca-file"))
    listener = Listener(flags.get("bind-address", "0.0.0.0"), int(flags.get("secure-port", str(default_port))),
                        tls, ANONYMOUS[binary])
    kubeconfig = flags.get("kubeconfig") or config_kubeconfig(flags.get("config"))
    return [listener], [kubeconfig_dependency(kubeconfig)] if kubeconfig else []


def config_kubeconfig(path: str | None) -> str | None:
    if not path:
        return None
    document = yaml.safe_load(read_file(path, "config")) or {}
    return (document.get("clientConnection") or {}).get("kubeconfig")


def kubelet(flags: dict[str, str]) -> tuple[list[Listener], list[Dependency]]:
    config = yaml.safe_load(read_file(flags["config"], "config")) or {}
    authn = config.get("authentication") or {}
    anonymous = (authn.get("anonymous") or {}).get("enabled", False)
    tls = server_context(config["tlsCertFile"], config["tlsPrivateKeyFile"],
                         (authn.get("x509") or {}).get("clientCAFile"))
    listeners = [
        Listener(config.get("address", "0.0.0.0"), int(config.get("port", 10250)), tls,
                 HEALTH_PATHS if anonymous else (), HEALTH_PATHS),
        Listener(config.get("healthzBindAddress", "127.0.0.1"), int(config.get("healthzPort", 10248)), None,
                 ("/healthz",), ("/healthz",)),
    ]
    kubeconfig = flags.get("kubeconfig")
    return listeners, [kubeconfig_dependency(kubeconfig)] if kubeconfig else []


def kube_proxy(flags: dict[str, str]) -> tuple[list[Listener], list[Dependency]]:
    config = yaml.safe_load(read_file(flags["config"], "config")) or {}
    host, port = split_host_port(config.get("healthzBindAddress", "0.0.0.0:10256"), 10256)
    listener = Listener(host, port, None, ("/healthz", "/livez"), ("/healthz", "/livez"))
    kubeconfig = (config.get("clientConnection") or {}).get("kubeconfig")
    return [listener], [kubeconfig_dependency(kubeconfig)] if kubeconfig else []


def configure(binary: str, flags: dict[str, str]) -> tuple[list[Listener], list[Dependency]]:
    try:
        if binary == "kube-apiserver":
            return apiserver(flags)
        if binary == "kube-controller-manager":
            return controller(binary, 10257, flags)
        if binary == "kube-scheduler":
            return controller(binary, 10259, flags)
        if binary == "kubelet":
            return kubelet(flags)
        if binary == "kube-proxy":
            return kube_proxy(flags)
    except KeyError as exc:
        raise StandinError(f"required setting missing: {exc.args[0]}") from None
    raise StandinError(f"no stand-in for {binary}")


# -- serving -----------------------------------------------------------------------------------

def ready_delay(binary: str) -> float:
    value = env_matches("STANDIN_READY_DELAY", binary)
    try:
        return float(value) if value else 0.0
    except ValueError:
        return 0.0


def never_ready(binary: str) -> bool:
    return env_matches("STANDIN_NEVER_READY", binary) is not None


def health(state: State, path: str) -> tuple[int, str]:
    if path == "/livez":
        return 200, "ok"
    if never_ready(state.binary):
        return 503, "[-]standin failed: STANDIN_NEVER_READY is set"
    if time.monotonic() - state.started < ready_delay(state.binary):
        return 503, "[-]standin failed: STANDIN_READY_DELAY not yet elapsed"
    if not state.dependency_ok:
        return 503, f"[-]dependency failed: {state.dependency_reason}"
    return 200, "ok"


def handler(state: State, listener: Listener) -> Any:
    async def handle(request: web.Request) -> web.Response:
        path = request.path
        if path not in listener.paths:
            return web.Response(status=404, text="404 page not found (stand-in)\n")
        if listener.tls is not None and path not in listener.anonymous:
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
    if dependency.expect_etcd_health and json.loads(body).get("health") != "true":
        return False, f"etcd unhealthy: {body.strip()}"
    return True, "ok"


async def serve(state: State) -> None:
    runners = []
    for listener in state.listeners:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", handler(state, listener))
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        await web.TCPSite(runner, listener.host, listener.port, ssl_context=listener.tls,
                          reuse_address=True).start()
        runners.append(runner)
        scheme = "https" if listener.tls else "http"
        print(f"{state.binary} (stand-in, Kubernetes {state.version}): serving {scheme}://"
              f"{listener.host}:{listener.port}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    watcher = asyncio.create_task(watch_dependencies(state))
    await stop.wait()
    watcher.cancel()
    for runner in runners:
        await runner.cleanup()


def main(binary: str) -> int:
    """Entry point of each stand-in executable."""
    argv = sys.argv[1:]
    if argv == ["--version"]:  # as the real binaries answer (kubesmith checks the release)
        print(f"Kubernetes v{kubernetes_version()}.0-standin")
        return 0
    try:
        version = kubernetes_version()
        flags = parse_flags(binary, version, argv)
        listeners, dependencies = configure(binary, flags)
        state = State(binary, version, listeners, dependencies)
        asyncio.run(serve(state))
    except StandinError as exc:
        print(f"Error: {exc}", file=sys.stderr, flush=True)
        return 1
    except OSError as exc:
        print(f"Error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0
