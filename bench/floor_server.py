"""The floor under `kubesmith ca serve`'s CPU per certificate: a control for `ca_bench.py`.

An authsign server that does only what no cfssl-compatible signer in Python can skip, with the
same parts `ca serve` uses: aiohttp over TLS (the same context), the same worker shape (forked
processes on one SO_REUSEPORT port), the HMAC check against one key, the sign request's parse
and CSR signature check, the node scope and the signing (`ca_policy`), both batched per worker
as `ca serve` batches them (`runtime.batch`), and cfssl's JSON envelope. What it leaves out is
what the service owes its operators: the token store, the failed-auth slow-down, the replay
memory, the token re-check before signing and the issuance log.

Not a product path: `ca_bench.py` starts it beside `ca serve` and cfssl so that one run shows
how much of the gap to cfssl is kubesmith's own work and how much is the platform's.

    python bench/floor_server.py PORT CA CA_KEY TLS_CERT TLS_KEY AUTH_KEY_HEX WORKERS
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import signal
import sys
from pathlib import Path

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from kubesmith.pki import keys
from kubesmith.pki.store import utc_now
from kubesmith.runtime import ca_policy, ca_service
from kubesmith.runtime.batch import IterationBatch, each

NODE = "bench"
VALIDITY = 365 * 86400.0


def application(ca_cert: x509.Certificate, ca_key: keys.PrivateKey, auth_key: bytes) -> web.Application:
    parse = IterationBatch(each(ca_policy.parse_sign_request))

    def sign(request: ca_policy.SignRequest) -> str:
        grant = ca_policy.node_grant(NODE, (), request, service_sans=frozenset())
        return ca_policy.sign(grant, request.public_key, ca_cert, ca_key, VALIDITY, utc_now()).public_bytes(
            Encoding.PEM).decode()
    issue = IterationBatch(each(sign))

    async def authsign(request: web.Request) -> web.Response:
        document = json.loads(await request.read())
        mac = ca_policy.decode_b64(document["token"], "token")
        raw = ca_policy.decode_b64(document["request"], "request")
        if not hmac.compare_digest(hmac.new(auth_key, raw, hashlib.sha256).digest(), mac):
            return ca_service.envelope(status=400, message="invalid token")
        return ca_service.envelope({"certificate": await issue(await parse(raw))})

    async def info(request: web.Request) -> web.Response:
        return ca_service.envelope({"certificate": ca_cert.public_bytes(Encoding.PEM).decode()})

    app = web.Application(client_max_size=ca_service.MAX_BODY)
    app.router.add_post("/api/v1/cfssl/authsign", authsign)
    app.router.add_route("*", "/api/v1/cfssl/info", info)
    return app


async def serve(app: web.Application, port: int, config: ca_service.CaServiceConfig) -> None:
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    sock = ca_service.port_socket(*ca_service.listen_addresses(config)[0])
    sock.listen(1024)
    await web.SockSite(runner, sock, ssl_context=ca_service.server_context(config), backlog=1024).start()
    await stop.wait()
    await runner.cleanup()


def main() -> None:
    port, ca, ca_key, tls_cert, tls_key, auth_hex, workers = sys.argv[1:8]
    config = ca_service.CaServiceConfig(Path(ca), Path(ca_key), Path(tls_cert), Path(tls_key), Path("/nonexistent"),
                                        port=int(port))
    ca_cert = x509.load_pem_x509_certificate(Path(ca).read_bytes())
    app = application(ca_cert, keys.load(Path(ca_key).read_bytes(), ca_key), bytes.fromhex(auth_hex))
    children = []
    for _ in range(int(workers) - 1):
        pid = os.fork()
        if pid == 0:
            asyncio.run(serve(app, int(port), config))
            os._exit(0)
        children.append(pid)
    try:
        asyncio.run(serve(app, int(port), config))
    finally:
        for pid in children:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
