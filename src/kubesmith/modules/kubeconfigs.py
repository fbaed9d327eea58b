"""Shared pieces for components that talk to the API: their kubeconfig file and their start gate."""

from __future__ import annotations

from kubesmith import layout
from kubesmith.modules.api_load_balancer import enabled_on, local_address
from kubesmith.modules.base import file_from, https_probe
from kubesmith.vocabulary.facts import HostContext
from kubesmith.vocabulary.model import File, Gate
from kubesmith.urls import url_host


def api_address(ctx: HostContext) -> tuple[str, int]:
    """Where this host's components reach the API: a control-plane host's own API server (so losing
    another control-plane host takes nothing from it), every other host its local load balancer over all
    API servers, or the cluster's endpoint when that is an external load balancer (or the local one is off)."""
    if "control-plane" in ctx.host.roles:
        return ctx.host.address, ctx.cluster.api_port
    if enabled_on(ctx):
        return local_address(ctx)
    return ctx.cluster.api_endpoint_host, ctx.cluster.api_endpoint_port


def kubeconfig_file(ctx: HostContext, name: str, certificate: str, owner: str, server: str | None = None,
                    mode: int = 0o600) -> File:
    """A kubeconfig that the PKI stage fills with the CA and the client certificate named here."""
    host, port = api_address(ctx)
    server = server or f"https://{url_host(host)}:{port}"
    return ctx.shared(("kubeconfig", name, certificate, owner, server, mode), lambda: file_from(
        "kubeconfig", name, layout.kubeconfig_path(name), owner, mode, server=server, ca="kubernetes-ca",
        certificate=certificate, cluster=ctx.cluster.name))


def api_gate(ctx: HostContext, client_certificate: str) -> Gate:
    """Wait for the API where this host's components reach it, with the component's own client certificate."""
    host, port = api_address(ctx)
    return ctx.shared(("api-gate", client_certificate, host, port), lambda: Gate("API server ready", (https_probe(
        host, port, "/readyz", "kubernetes-ca", client_certificate),)))
