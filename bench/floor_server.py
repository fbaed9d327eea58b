"""A control for `ca_bench.py`: `ca serve` without the service's duties.

The same worker pool as `ca serve` (`ca_service.WorkerPool`: forked workers on one SO_REUSEPORT
port, TLS context, batching), the same steps on each request (HMAC check, sign-request parse and
CSR signature check in a batch, the node scope, signing in a batch, cfssl's envelope), with the
same functions. Left out is what the service owes its operators: the token store (one key,
given), the failed-auth slow-down, the replay memory, the token re-check before signing and the
issuance log. Not a product path: it shows, in the same run, how much of the gap to cfssl is
those duties and how much is the rest.

    python bench/floor_server.py CA CA_KEY TLS_CERT TLS_KEY STATE_DIR AUTH_KEY_HEX [WORKERS]

Prints `serving on URL (N workers)` as `ca serve` does; stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import hmac
import json
import logging
import sys
from pathlib import Path

from aiohttp import web
from cryptography.hazmat.primitives.serialization import Encoding

from kubesmith.pki.store import utc_now
from kubesmith.runtime import ca_policy, ca_service, tokens
from kubesmith.runtime.batch import IterationBatch, each
from kubesmith.runtime.ca_service import AppFactory, CaService, SharedState

NODE = "bench"


def floor_application(auth_key: bytes) -> AppFactory:
    """Routes that authenticate with `auth_key` and sign for node `NODE`, nothing else."""
    def make(service: CaService, shared: SharedState) -> web.Application:
        def sign(granted: tuple[ca_policy.Grant, ca_policy.SignRequest]) -> str:
            grant, request = granted
            return ca_policy.sign(grant, request.public_key, service.ca_cert, service.ca_key,
                                  service.config.validity_seconds, utc_now()).public_bytes(Encoding.PEM).decode()
        parse = IterationBatch(each(ca_policy.parse_sign_request))
        issue = IterationBatch(each(sign))

        async def authsign(request: web.Request) -> web.Response:
            document = json.loads(await request.read())
            mac = ca_policy.decode_b64(document["token"], "token")
            raw = ca_policy.decode_b64(document["request"], "request")
            if not hmac.compare_digest(tokens.request_mac(auth_key, raw), mac):
                return ca_service.envelope(status=400, message="invalid token")
            sign_request = await parse(raw)
            grant = ca_policy.node_grant(NODE, (), sign_request, service_sans=service.service_sans)
            return ca_service.envelope({"certificate": await issue((grant, sign_request))})

        app = web.Application(client_max_size=ca_service.MAX_BODY)
        app.router.add_post("/api/v1/cfssl/authsign", authsign)
        app.router.add_route("*", "/api/v1/cfssl/info", ca_service.info)
        app[ca_service.SERVICE_KEY] = service
        return app
    return make


def main() -> None:
    ca, ca_key, tls_cert, tls_key, state_dir, auth_hex = sys.argv[1:7]
    workers = int(sys.argv[7]) if len(sys.argv) > 7 else 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    config = ca_service.CaServiceConfig(Path(ca), Path(ca_key), Path(tls_cert), Path(tls_key), Path(state_dir),
                                        port=0, workers=workers)
    service = CaService(config)
    ca_service.WorkerPool(service, ca_service.worker_count(config), ca_service.listen_addresses(config),
                          floor_application(bytes.fromhex(auth_hex))).serve()


if __name__ == "__main__":
    main()
