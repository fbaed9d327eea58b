"""`token create FILE`: a join token made on a control-plane host over SSH, where that
host's CA service keeps its token store, with the URL a joining node asks."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from kubesmith.spec.model import Cluster, Host
from kubesmith.transport.ssh import SshOptions, SshTransport, TransportError
from kubesmith.urls import url_host

REMOTE_KUBESMITH = "/usr/local/bin/kubesmith"


class RemoteTokenError(Exception):
    """No such control-plane host, or the host could not make the token; the message says which."""


@dataclass(frozen=True, slots=True)
class TokenRequest:
    ttl: float | None
    node: str | None
    addresses: tuple[str, ...]
    description: str


def signing_host(cluster: Cluster, name: str | None, spec_file: str) -> Host:
    """The control-plane host named `name`, else the first one."""
    signers = cluster.control_plane_hosts
    host = next((h for h in signers if h.name == name), None) if name else signers[0]
    if host is None:
        raise RemoteTokenError(f"--on {name}: not a control-plane host of {spec_file}; control-plane hosts: "
                               f"{', '.join(h.name for h in signers)}")
    return host


async def create_on(cluster: Cluster, host: Host, options: SshOptions, request: TokenRequest) -> dict[str, Any]:
    """`kubesmith token create -o json` on `host`; its answer plus `server`, the host's CA service URL."""
    arguments = [REMOTE_KUBESMITH, "token", "create", "--output", "json", "--description", request.description]
    arguments += (["--ttl", f"{request.ttl:g}s"] if request.ttl else []) + (["--node", request.node] if request.node else [])
    arguments += [part for address in request.addresses for part in ("--address", address)]
    async with SshTransport(options) as transport:
        try:
            result = await transport.run(host.address, shlex.join(arguments))
        except TransportError as exc:
            raise RemoteTokenError(str(exc)) from None
    if not result.ok:
        raise RemoteTokenError(f"{host.name}: kubesmith token create failed: {result.stderr.strip()[-300:]}")
    try:
        info: dict[str, Any] = json.loads(result.stdout)
    except ValueError:
        raise RemoteTokenError(f"{host.name}: kubesmith token create answered something else than JSON") from None
    info["server"] = f"https://{url_host(host.address)}:{cluster.spec.components.ca_service.port}"
    return info
