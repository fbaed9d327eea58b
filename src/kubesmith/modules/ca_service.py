"""The cluster CA service (`kubesmith ca serve`) on control-plane hosts, which hold the kubernetes-ca key.

Joining nodes obtain their certificates from it with a join token (cfssl-compatible authsign),
and agents of hosts without the CA key renew theirs over mutual TLS. Its settings go to a JSON
file that both `ca serve` and `kubesmith token` read, so the unit's command line stays short.
Ready means `/healthz` answers over TLS with a certificate from kubernetes-ca: that is what
`kube-ca-online.target` waits for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from kubesmith import layout
from kubesmith.durations import parse_duration
from kubesmith.modules.base import Module, OptionProblem, https_probe
from kubesmith.pki.certlist import Sans, authority, certificate, san_lists
from kubesmith.vocabulary.facts import Contribution, HostContext
from kubesmith.vocabulary.model import File, RestartPolicy, Service
from kubesmith.settings import CaServiceConfig
from kubesmith.vocabulary.types import CertificateLifetime, Port, StrictModel, TokenTtl

# The kubernetes-ca key as the controller-manager module places it on control-plane hosts: the CA
# service reads that one copy rather than adding a second one.
CA_KEY_PATH = layout.pki_path("controller-manager/ca.key")


class CaServiceOptions(StrictModel):
    port: Port = Field(default=8443, description="HTTPS port of the CA service (authsign, info, renewal, healthz).")
    token_ttl: TokenTtl = Field(default="1h",
                           description="Default lifetime of `kubesmith token create` tokens (e.g. 30m, 1h, 2d).")
    validity: CertificateLifetime | None = Field(default=None,
                                 description="Lifetime of certificates it issues; default: "
                                             "spec.pki.certificateValidityDays.",
                                 json_schema_extra={"x-derived-from": "spec.pki.certificateValidityDays"})
    failed_auth_delay: float = Field(default=0.5, ge=0, le=60,
                                     description="Delay after a failed authentication, doubled per further "
                                                 "failure from the same address (seconds).")
    max_failed_auth_delay: float = Field(default=10.0, ge=0, le=600,
                                         description="Upper bound of the failed-authentication delay (seconds).")


class CaServiceModule(Module):
    key = "ca_service"
    position = 100
    title = "cluster CA service (join tokens, certificate signing and renewal)"
    options = CaServiceOptions
    roles = frozenset({"control-plane"})

    def check(self, spec: Any, options: CaServiceOptions, registry: Any) -> list[OptionProblem]:
        # the delay starts at failedAuthDelay and doubles up to maxFailedAuthDelay: a bound below the start
        # would make the first delay longer than its own bound (the service would clamp it, silently)
        start, bound = options.failed_auth_delay, options.max_failed_auth_delay
        if bound >= start:
            return []
        if "max_failed_auth_delay" in options.model_fields_set:
            return [OptionProblem(("maxFailedAuthDelay",), f"{bound:g} s is below failedAuthDelay ({start:g} s), "
                                  "where the delay starts: the bound must be at least the initial delay")]
        return [OptionProblem(("failedAuthDelay",), f"{start:g} s is above maxFailedAuthDelay ({bound:g} s, its "
                              "default), the delay's upper bound: raise maxFailedAuthDelay too")]

    def contribute(self, ctx: HostContext, options: CaServiceOptions) -> Contribution:
        host = ctx.host
        serving = certificate("ca-service-serving")
        ca_cert = layout.pki_path(authority("kubernetes-ca").cert_file)
        validity = parse_duration(options.validity) if options.validity else \
            ctx.cluster.certificate_validity_days * 86400.0
        settings = CaServiceConfig(
            ca_cert=Path(ca_cert), ca_key=Path(CA_KEY_PATH), tls_cert=Path(serving.cert_path),
            tls_key=Path(serving.key_path), state_dir=Path(layout.CA_SERVICE_STATE), listen=host.address,
            port=options.port, validity_seconds=validity, default_token_ttl=parse_duration(options.token_ttl),
            failed_auth_delay=options.failed_auth_delay, max_failed_auth_delay=options.max_failed_auth_delay,
            # names no joining node may take: the hosts that never register a Node of their own here
            # (control-plane and etcd hosts), and through the API every registered Node's; not the
            # node hosts' list, which would change this file on every control-plane host when one is added
            reserved_nodes=tuple(sorted(h.name for h in ctx.cluster.hosts
                                        if {"control-plane", "etcd"} & h.roles)),
            nodes_kubeconfig=Path(layout.kubeconfig_path("scheduler")),  # its role reads Nodes; no binding needed
            removed_keys=tuple(sorted(dict(ctx.cluster.removed_keys).items())),  # removed hosts': never renewed
            service_sans=tuple(ctx.shared("ca-service-sans", lambda: service_sans(ctx))),
        )
        service = Service(
            name="kubesmith-ca",
            component=self.key,
            description="kubesmith cluster CA service",
            binary="kubesmith",
            argv=("ca", "serve", "--config", layout.CA_SERVICE_CONFIG),
            user="root",
            group="root",
            wanted_by="kube-ca-online.target",
            after=("network-online.target",),
            readiness=https_probe(host.address, options.port, "/healthz", "kubernetes-ca"),
            restart=RestartPolicy(delay_seconds=2),
            needs_files=(ca_cert, CA_KEY_PATH, serving.cert_path, serving.key_path, layout.CA_SERVICE_CONFIG),
            state_directory=layout.CA_SERVICE_STATE,
            ports=(options.port,),
        )
        return Contribution(
            services=[service],
            files=[File(path=layout.CA_SERVICE_CONFIG, mode=0o644, data=settings.to_document(), format="json")],
            certificates=["ca-service-serving"],
        )


def service_sans(ctx: HostContext) -> list[str]:
    """What the API server's certificate carries besides the hosts' own names and addresses
    (`kubernetes`, `localhost`, the service IP, the endpoint...): no joining node may carry it."""
    names, addresses = san_lists(Sans.APISERVER, ctx.cluster, ctx.host)
    hosts = {h.name for h in ctx.cluster.hosts} | {h.address for h in ctx.cluster.hosts}
    return sorted(set(names + addresses) - hosts)


MODULE = CaServiceModule()
