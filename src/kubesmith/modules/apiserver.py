"""kube-apiserver: the API, on every control-plane host.

Secure by default (CIS Kubernetes Benchmark v1.12): no anonymous access, Node+RBAC
authorization, NodeRestriction and EventRateLimit admission, audit logging, secrets
encrypted at rest, profiling off, strong TLS ciphers.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, ValidationInfo, field_validator

from kubesmith import layout
from kubesmith.modules.base import (COMMON_FLAGS, PKI, CisRule, ComponentOptions, Managed, Module, Trial,
                                    effective_gates, feature_gates_flag, file_from, https_probe, render_flags,
                                    system_user)
from kubesmith.pki.certlist import authority, certificate
from kubesmith.vocabulary.facts import Contribution, HostContext
from kubesmith.vocabulary.model import File, Gate, Probe, Service
from kubesmith.vocabulary.types import (MAX_EXTRA_SANS, MAX_NAMES, AbsolutePath, EventTtl, IPAddress, ListItem, Port,
                                  PortRange, StrictModel, SubjectName, Text, at_most)

STRONG_CIPHERS = (
    "TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
)
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "users": ["system:kube-proxy"], "verbs": ["watch"]},
        {"level": "None", "nonResourceURLs": ["/healthz*", "/livez*", "/readyz*", "/version"]},
        {"level": "Metadata", "resources": [{"group": "", "resources": ["secrets", "configmaps"]},
                                            {"group": "authentication.k8s.io", "resources": ["tokenreviews"]}]},
        {"level": "RequestResponse", "resources": [{"group": "rbac.authorization.k8s.io"}]},
        {"level": "Metadata"},
    ],
}


# modes (6 exist), admission plugins (43), address types (5), cipher suites (~30): counted before each is checked
Names = Annotated[list[ListItem], at_most(MAX_NAMES, "names", "fewer than 50 of each kind exist")]


class AuditLog(StrictModel):
    path: AbsolutePath = Field(default=f"{layout.LOG}/audit/audit.log", description="Audit log file.")
    max_age: int = Field(default=30, ge=0, description="Days to keep rotated audit logs.")
    max_backup: int = Field(default=10, ge=0, description="Rotated audit log files to keep.")
    max_size: int = Field(default=100, ge=1, description="Megabytes before the audit log is rotated.")

    @field_validator("max_backup")
    @classmethod
    def _bounded_retention(cls, backups: int, info: ValidationInfo) -> int:
        """0 is "no limit" to both (the API server's log rotation keeps every file when neither is set): one
        of them must bound the rotated logs, or they grow until the control-plane host's disk is full, and
        etcd's with it."""
        if backups == 0 and info.data.get("max_age") == 0:
            raise ValueError("0 with maxAge 0 keeps every rotated audit log forever (0 is no limit to either): "
                             "the logs would fill the control-plane host's disk; bound the files by number or by "
                             "age (kubesmith's defaults: 10 files, 30 days)")
        return backups


class ApiserverOptions(ComponentOptions):
    secure_port: Port = Field(default=6443, description="HTTPS port of the API.")
    bind_address: IPAddress = Field(default="0.0.0.0", description="Address the API listens on.")
    advertise_address: IPAddress | None = Field(default=None, description="Address advertised to the cluster; "
                                          "default: the host's address.", json_schema_extra={"x-derived-from": "spec.hosts[].address"})
    authorization_mode: Names = Field(default=["Node", "RBAC"], min_length=1,
                                          description="Authorizers, in order.")
    enable_admission_plugins: Names = Field(
        default=["NodeRestriction", "EventRateLimit", "DenyServiceExternalIPs"],
        description="Admission plugins enabled in addition to the release's defaults. Not AlwaysPullImages: "
        "it would make every pod pull, and air-gapped nodes run imported images; the kubelet itself "
        "checks the credentials of images pulled with secrets (KubeletEnsureSecretPulledImages).")
    anonymous_auth: bool = Field(default=False, description="Allow unauthenticated requests (CIS: off).")
    allow_privileged: bool = Field(default=True, description="Allow privileged containers.")
    profiling: bool = Field(default=False, description="Serve /debug/pprof (CIS: off).")
    encrypt_secrets: bool = Field(default=True, description="Encrypt Secrets at rest with a random AES-CBC key.")
    service_node_port_range: PortRange = Field(default="30000-32767", description="Port range for NodePort services.")
    event_ttl: EventTtl = Field(default="1h", description="How long events are kept (a Go duration, at least 1m).")
    kubelet_preferred_address_types: Names = Field(
        default=["InternalIP", "Hostname", "ExternalIP"], min_length=1,
        description="Order of node addresses used to reach kubelets (at least one: with none, the API server "
        "finds no address of any node, and every exec, logs and port-forward fails).")
    service_account_issuer: Text | None = Field(
        default=None, description="Service-account token issuer; default: https://kubernetes.default.svc.<dnsDomain>.",
        json_schema_extra={"x-derived-from": "spec.network.dnsDomain"})
    extra_sans: list[SubjectName] = Field(default=[], max_length=MAX_EXTRA_SANS,
                                          description="Extra names or addresses in the serving certificate.")
    tls_cipher_suites: Names = Field(
        default=list(STRONG_CIPHERS), description="Allowed TLS cipher suites.")
    audit_log: AuditLog = Field(default_factory=AuditLog, description="Audit log rotation.")


# kube-apiserver's authorization modes (spec.checks.AUTHORIZATION_MODES names each with the file it needs)
_MODES = frozenset({"AlwaysAllow", "AlwaysDeny", "Node", "RBAC", "ABAC", "Webhook"})


def _known_modes(options: Any) -> bool:
    return all(mode in _MODES for mode in options.authorization_mode)


class ApiserverModule(Module):
    key = "apiserver"
    position = 20
    title = "Kubernetes API server"
    options = ApiserverOptions
    roles = frozenset({"control-plane"})
    binary = "kube-apiserver"
    trial = Trial("kube-apiserver", 60.0, rank=2)  # settles slower than the leader-elected controllers
    managed = Managed(
        flags=COMMON_FLAGS | {
            "advertise-address": "advertiseAddress", "bind-address": "bindAddress", "secure-port": "securePort",
            "allow-privileged": "allowPrivileged", "anonymous-auth": "anonymousAuth",
            "authorization-mode": "authorizationMode", "enable-admission-plugins": "enableAdmissionPlugins",
            "authorization-config": "authorizationMode", "admission-control": "enableAdmissionPlugins",
            "admission-control-config-file": "enableAdmissionPlugins (EventRateLimit)",
            "client-ca-file": PKI, "tls-cert-file": PKI, "tls-private-key-file": PKI,
            "tls-cipher-suites": "tlsCipherSuites",
            "etcd-servers": "the hosts with the etcd role (spec.hosts) and spec.components.etcd.clientPort",
            "etcd-cafile": PKI, "etcd-certfile": PKI, "etcd-keyfile": PKI, "kubelet-certificate-authority": PKI,
            "kubelet-client-certificate": PKI, "kubelet-client-key": PKI,
            "kubelet-preferred-address-types": "kubeletPreferredAddressTypes", "proxy-client-cert-file": PKI,
            "proxy-client-key-file": PKI, "requestheader-client-ca-file": PKI, "requestheader-allowed-names": PKI,
            "requestheader-extra-headers-prefix": PKI, "requestheader-group-headers": PKI,
            "requestheader-username-headers": PKI, "service-account-issuer": "serviceAccountIssuer",
            "service-account-key-file": PKI, "service-account-signing-key-file": PKI,
            "service-account-lookup": "kubesmith (always on, CIS 1.2.22)",
            "service-account-extend-token-expiration": "kubesmith (off: tokens expire when they say)",
            "service-cluster-ip-range": "spec.network.serviceCidr",
            "service-node-port-range": "serviceNodePortRange",
            "encryption-provider-config": "encryptSecrets", "audit-log-path": "auditLog.path",
            "audit-log-maxage": "auditLog.maxAge", "audit-log-maxbackup": "auditLog.maxBackup",
            "audit-log-maxsize": "auditLog.maxSize", "audit-policy-file": "kubesmith's audit policy",
            "event-ttl": "eventTtl", "profiling": "profiling",
            "shutdown-send-retry-after": "kubesmith (on: a stop ends in seconds, not in systemd's SIGKILL)",
        },
        # tls-min-version: VersionTLS12, or VersionTLS13 to raise it; below TLS 1.2 is refused, as for every
        # component
        replaceable=frozenset({"tls-min-version"}),
    )
    cis_rules = (
        CisRule("1.2.1", "API server --anonymous-auth=false", ("anonymousAuth",), weak=lambda o: o.anonymous_auth),
        CisRule("1.2.2", "API server --token-auth-file not set", ("extraArgs", "token-auth-file"),
                weak=lambda o: "token-auth-file" in o.extra_args),
        CisRule("1.2.6", "API server --authorization-mode not AlwaysAllow", ("authorizationMode",),
                weak=lambda o: "AlwaysAllow" in o.authorization_mode),
        # (a list with a mode kube-apiserver lacks, `node` for Node, is that one error: the spelling check's)
        CisRule("1.2.7", "API server --authorization-mode includes Node", ("authorizationMode",),
                weak=lambda o: "Node" not in o.authorization_mode and _known_modes(o)),
        CisRule("1.2.8", "API server --authorization-mode includes RBAC", ("authorizationMode",),
                weak=lambda o: "RBAC" not in o.authorization_mode and _known_modes(o)),
        CisRule("1.2.15", "API server --profiling=false", ("profiling",), weak=lambda o: o.profiling),
        CisRule("1.2.27", "API server --encryption-provider-config set", ("encryptSecrets",),
                weak=lambda o: not o.encrypt_secrets),
    )

    def contribute(self, ctx: HostContext, options: ApiserverOptions) -> Contribution:
        cluster, host = ctx.cluster, ctx.host
        pki = {name: certificate(name) for name in _CERTS}
        ca_file = layout.pki_path(authority("kubernetes-ca").cert_file)
        etcd_ca = layout.pki_path(authority("etcd-ca").cert_file)
        proxy_ca = layout.pki_path(authority("front-proxy-ca").cert_file)
        sa_pub, sa_key = layout.pki_path("sa.pub"), layout.pki_path("sa.key")
        admission = layout.config_path("admission.yaml")
        event_limits = layout.config_path("event-rate-limit.yaml")
        audit_policy = layout.config_path("audit-policy.yaml")
        encryption = layout.config_path("encryption.yaml")
        uses_event_limit = "EventRateLimit" in options.enable_admission_plugins
        flags = {
            "advertise-address": options.advertise_address or host.address,
            "bind-address": options.bind_address,
            "secure-port": options.secure_port,
            "allow-privileged": options.allow_privileged,
            "anonymous-auth": options.anonymous_auth,
            "authorization-mode": options.authorization_mode,
            "enable-admission-plugins": options.enable_admission_plugins,
            "admission-control-config-file": admission if uses_event_limit else None,
            "client-ca-file": ca_file,
            "tls-cert-file": pki["apiserver"].cert_path,
            "tls-private-key-file": pki["apiserver"].key_path,
            "tls-cipher-suites": options.tls_cipher_suites,
            "tls-min-version": "VersionTLS12",
            "etcd-servers": ",".join(map(cluster.etcd_client_url, cluster.etcd_servers_for(host))),
            "etcd-cafile": etcd_ca,
            "etcd-certfile": pki["apiserver-etcd-client"].cert_path,
            "etcd-keyfile": pki["apiserver-etcd-client"].key_path,
            "kubelet-certificate-authority": ca_file,
            "kubelet-client-certificate": pki["apiserver-kubelet-client"].cert_path,
            "kubelet-client-key": pki["apiserver-kubelet-client"].key_path,
            "kubelet-preferred-address-types": options.kubelet_preferred_address_types,
            "proxy-client-cert-file": pki["front-proxy-client"].cert_path,
            "proxy-client-key-file": pki["front-proxy-client"].key_path,
            "requestheader-client-ca-file": proxy_ca,
            "requestheader-allowed-names": "front-proxy-client",
            "requestheader-extra-headers-prefix": "X-Remote-Extra-",
            "requestheader-group-headers": "X-Remote-Group",
            "requestheader-username-headers": "X-Remote-User",
            "service-account-issuer": options.service_account_issuer
            or f"https://kubernetes.default.svc.{cluster.dns_domain}",
            "service-account-key-file": sa_pub,
            "service-account-signing-key-file": sa_key,
            "service-account-lookup": True,
            "service-account-extend-token-expiration": False,
            "service-cluster-ip-range": cluster.service_cidr,
            "service-node-port-range": options.service_node_port_range,
            "encryption-provider-config": encryption if options.encrypt_secrets else None,
            "audit-log-path": options.audit_log.path,
            "audit-log-maxage": options.audit_log.max_age,
            "audit-log-maxbackup": options.audit_log.max_backup,
            "audit-log-maxsize": options.audit_log.max_size,
            "audit-policy-file": audit_policy,
            "event-ttl": options.event_ttl,
            # Without it the HTTP server's shutdown waits up to 60 s for open watches (every kubelet's
            # and controller's), so each restart (roll-out, upgrade, renewal) stopped only when systemd
            # killed it 30 s in. With it, new requests get 429 and a Retry-After until the requests in
            # flight are done, then the server stops within 2 s.
            "shutdown-send-retry-after": True,
            "profiling": options.profiling,
            "feature-gates": feature_gates_flag(effective_gates(ctx, "kube-apiserver", options.feature_gates)),
            "v": options.verbosity,
        }
        files = [
            File(path=audit_policy, mode=0o644, data=AUDIT_POLICY, format="yaml"),
            file_from("service-account-public-key", "service-account", sa_pub, "root", 0o644),
            file_from("service-account-key", "service-account", sa_key, "kube-apiserver", 0o600),
        ]
        if uses_event_limit:
            files += _event_rate_limit_files(admission, event_limits)
        if options.encrypt_secrets:
            files.append(file_from("encryption-config", "secrets", encryption, "kube-apiserver", 0o600,
                                   provider="aescbc"))
        tls_files = tuple(path for request in pki.values() for path in (request.cert_path, request.key_path))
        local_etcd = "etcd" in host.roles
        service = Service(
            name="kube-apiserver",
            component=self.key,
            description="Kubernetes API server",
            binary="kube-apiserver",
            argv=render_flags(flags, options.extra_args),
            user="kube-apiserver",
            group="kube-apiserver",
            wanted_by="kube-apiserver-online.target",
            after=("network-online.target", "etcd.service") if local_etcd else ("network-online.target",),
            gates=(Gate("etcd reachable", tuple(
                Probe(kind="etcd", host=member.address, port=cluster.etcd_client_port, path="/health",
                      ca="etcd-ca", client_certificate="apiserver-etcd-client")
                for member in cluster.etcd_servers_for(host))),),
            readiness=https_probe(host.address, options.secure_port, "/readyz", "kubernetes-ca",
                                  "kube-healthcheck-client"),
            needs_files=(ca_file, etcd_ca, proxy_ca, sa_pub, sa_key, *tls_files),
            watch_files=tls_files,
            state_directory=None,
            ports=(options.secure_port,),
        )
        return Contribution(
            services=[service],
            files=files,
            certificates=[*_CERTS, "kube-healthcheck-client"],
            users=[system_user("kube-apiserver", "/var/lib/kube-apiserver", "Kubernetes API server")],
        )


_CERTS = ("apiserver", "apiserver-etcd-client", "apiserver-kubelet-client", "front-proxy-client")


def _event_rate_limit_files(admission: str, limits: str) -> list[File]:
    admission_doc = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [{"name": "EventRateLimit", "path": limits}],
    }
    limits_doc = {
        "apiVersion": "eventratelimit.admission.k8s.io/v1alpha1",
        "kind": "Configuration",
        "limits": [{"type": "Server", "qps": 5000, "burst": 20000},
                   {"type": "Namespace", "qps": 500, "burst": 2000}],
    }
    return [File(path=admission, mode=0o644, data=admission_doc, format="yaml"),
            File(path=limits, mode=0o644, data=limits_doc, format="yaml")]


MODULE = ApiserverModule()
