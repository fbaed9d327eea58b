"""Shared pieces for components that talk to the API: their kubeconfig file and their start gate."""

from __future__ import annotations

from kubesmith import layout
from kubesmith.modules.base import HostContext, file_from, https_probe
from kubesmith.plan.model import File, Gate


def kubeconfig_file(ctx: HostContext, name: str, certificate: str, owner: str, server: str | None = None,
                    mode: int = 0o600) -> File:
    """A kubeconfig that the PKI stage fills with the CA and the client certificate named here."""
    return ctx.shared(("kubeconfig", name, certificate, owner, server, mode), lambda: file_from("kubeconfig", name, layout.kubeconfig_path(name), owner, mode,
                     server=server or ctx.cluster.api_url, ca="kubernetes-ca", certificate=certificate,
                     cluster=ctx.cluster.name))


def api_gate(ctx: HostContext, client_certificate: str) -> Gate:
    """Wait for the API at the endpoint clients use, with the component's own client certificate."""
    cluster = ctx.cluster
    return ctx.shared(("api-gate", client_certificate), lambda: Gate("API server ready", (https_probe(
        cluster.api_endpoint_host, cluster.api_endpoint_port, "/readyz", "kubernetes-ca", client_certificate),)))
