"""Flags kubesmith sets itself, which `extraArgs` may not replace.

The probes, kubeconfigs, certificates and unit files follow the typed options: an extraArgs
`secure-port: 7443` would move the API server while every client and probe kept 6443, and
`tls-private-key-file` would swap a key the PKI does not know. So such an entry is an error that
names what to set instead. tests/test_spec_security.py checks this table against the flags every
module emits, so a new flag cannot be left out.
"""

from __future__ import annotations

import functools
from typing import Any

from kubesmith.images import PAUSE_IMAGE
from kubesmith.spec.effective import go_bool, toml_value_at, value_at

# what to use instead: a bare name is an option of the same component (spec.components.<c>.<name>),
# anything else says where kubesmith takes the value from
PKI = "kubesmith's PKI (spec.pki)"
CONFIG = "kubesmith's configuration file for it; use extraConfig"
_COMMON = {"v": "verbosity", "feature-gates": "featureGates"}
_TOKEN_WEBHOOK = "kubesmith's kubelet configuration (always on: the kubelet checks bearer tokens with the API server)"
_PROBED = "its readiness probe's address (127.0.0.1: the endpoint is plain HTTP without authentication, so it " \
    "stays on loopback)"
# --master replaces the API server of the component's kubeconfig: a plain http:// one would hand kube-proxy
# made-up Services and endpoints (and the cluster's traffic with them), past kubesmith's CA
_MASTER = "its kubeconfig (the API server behind kubesmith's CA)"
_ETCD_MEMBERS = "the hosts with the etcd role (spec.hosts) and spec.components.etcd.clientPort"
_ETCD_BOOTSTRAP = "the hosts with the etcd role (spec.hosts), as --initial-cluster"
MANAGED: dict[str, dict[str, str]] = {
    "kube-apiserver": _COMMON | {
        "advertise-address": "advertiseAddress", "bind-address": "bindAddress", "secure-port": "securePort",
        "allow-privileged": "allowPrivileged", "anonymous-auth": "anonymousAuth",
        "authorization-mode": "authorizationMode", "enable-admission-plugins": "enableAdmissionPlugins",
        "authorization-config": "authorizationMode", "admission-control": "enableAdmissionPlugins",
        "admission-control-config-file": "enableAdmissionPlugins (EventRateLimit)",
        "client-ca-file": PKI, "tls-cert-file": PKI, "tls-private-key-file": PKI, "tls-cipher-suites": "tlsCipherSuites",
        "etcd-servers": _ETCD_MEMBERS, "etcd-cafile": PKI,
        "etcd-certfile": PKI, "etcd-keyfile": PKI, "kubelet-certificate-authority": PKI,
        "kubelet-client-certificate": PKI, "kubelet-client-key": PKI,
        "kubelet-preferred-address-types": "kubeletPreferredAddressTypes", "proxy-client-cert-file": PKI,
        "proxy-client-key-file": PKI, "requestheader-client-ca-file": PKI, "requestheader-allowed-names": PKI,
        "requestheader-extra-headers-prefix": PKI, "requestheader-group-headers": PKI,
        "requestheader-username-headers": PKI, "service-account-issuer": "serviceAccountIssuer",
        "service-account-key-file": PKI, "service-account-signing-key-file": PKI,
        "service-account-lookup": "kubesmith (always on, CIS 1.2.22)",
        "service-account-extend-token-expiration": "kubesmith (off: tokens expire when they say)",
        "service-cluster-ip-range": "spec.network.serviceCidr", "service-node-port-range": "serviceNodePortRange",
        "encryption-provider-config": "encryptSecrets", "audit-log-path": "auditLog.path",
        "audit-log-maxage": "auditLog.maxAge", "audit-log-maxbackup": "auditLog.maxBackup",
        "audit-log-maxsize": "auditLog.maxSize", "audit-policy-file": "kubesmith's audit policy",
        "event-ttl": "eventTtl", "profiling": "profiling",
    },
    "kube-controller-manager": _COMMON | {
        "allocate-node-cidrs": "allocateNodeCidrs", "cluster-cidr": "clusterCidr",
        "node-cidr-mask-size": "nodeCidrMaskSize", "service-cluster-ip-range": "spec.network.serviceCidr",
        "cluster-name": "metadata.name", "bind-address": "bindAddress", "secure-port": "securePort",
        "kubeconfig": PKI, "authentication-kubeconfig": PKI, "authorization-kubeconfig": PKI, "client-ca-file": PKI,
        "requestheader-client-ca-file": PKI, "root-ca-file": PKI, "cluster-signing-cert-file": PKI,
        "cluster-signing-key-file": PKI, "cluster-signing-duration": "signingDuration",
        "service-account-private-key-file": PKI, "use-service-account-credentials": "useServiceAccountCredentials",
        "controllers": "kubesmith (every controller, with bootstrapsigner and tokencleaner for joins)",
        "leader-elect": "leaderElect", "terminated-pod-gc-threshold": "terminatedPodGcThreshold",
        "profiling": "profiling", "tls-cert-file": PKI, "tls-private-key-file": PKI, "master": _MASTER,
    },
    "kube-scheduler": _COMMON | {"master": _MASTER,
        "config": CONFIG, "bind-address": "bindAddress", "secure-port": "securePort",
        "authentication-kubeconfig": PKI, "authorization-kubeconfig": PKI, "client-ca-file": PKI,
        "tls-cert-file": PKI, "tls-private-key-file": PKI, "profiling": "profiling",
    },
    "kubelet": _COMMON | {
        "config": CONFIG, "kubeconfig": PKI, "hostname-override": "spec.hosts[].name",
        "node-ip": "spec.hosts[].address", "root-dir": "rootDir", "node-labels": "spec.hosts[].labels",
        "client-ca-file": PKI, "tls-cert-file": PKI, "tls-private-key-file": PKI,
        "authentication-token-webhook": _TOKEN_WEBHOOK, "cluster-dns": "clusterDns",
        "port": "port", "healthz-port": "healthzPort", "healthz-bind-address": _PROBED,  # see MANAGED_CONFIG
        "cluster-domain": "spec.network.dnsDomain", "container-runtime-endpoint": "containerRuntimeEndpoint",
        "cgroup-driver": "cgroupDriver", "manifest-url": "nothing: _STATIC_URL",
        "register-node": "nothing: _REGISTERS", "enable-server": "nothing: _SERVES",
    },
    "kube-proxy": _COMMON | {"config": CONFIG, "hostname-override": "spec.hosts[].name",
                             "healthz-bind-address": "healthzPort", "master": _MASTER,
                             **dict.fromkeys(("cleanup", "init-only", "write-config-to"), "nothing: _EXITS")},
    "etcd": {
        "name": "spec.hosts[].name", "data-dir": "dataDir", "listen-client-urls": "clientPort",
        "advertise-client-urls": "clientPort", "listen-peer-urls": "peerPort", "initial-advertise-peer-urls": "peerPort",
        "initial-cluster": "the hosts with the etcd role (spec.hosts)", "initial-cluster-state":
            "the member's history (new on the cluster's first start, existing when a member joins one)",
        # etcd bootstraps from one source: next to --initial-cluster it stops with "multiple discovery or
        # bootstrap flags are set"
        "discovery": _ETCD_BOOTSTRAP, "discovery-srv": _ETCD_BOOTSTRAP, "discovery-srv-name": _ETCD_BOOTSTRAP,
        "discovery-fallback": _ETCD_BOOTSTRAP, "discovery-proxy": _ETCD_BOOTSTRAP,
        "initial-cluster-token": "metadata.name", "listen-metrics-urls": "metricsPort",
        "client-cert-auth": PKI, "trusted-ca-file": PKI, "cert-file": PKI, "key-file": PKI, "auto-tls": PKI,
        "peer-client-cert-auth": PKI, "peer-trusted-ca-file": PKI, "peer-cert-file": PKI, "peer-key-file": PKI,
        "peer-auto-tls": PKI, "heartbeat-interval": "heartbeatInterval", "election-timeout": "electionTimeout",
        "snapshot-count": "snapshotCount", "quota-backend-bytes": "quotaBackendBytes",
        "auto-compaction-retention": "autoCompactionRetention", "auto-compaction-mode": "autoCompactionMode",
        "log-level": "logLevel",
        "force-new-cluster": "nothing: _FORCE_NEW_CLUSTER", "unsafe-no-fsync": "nothing: _NO_FSYNC",
        # renamed without experimental- in etcd 3.6
        "experimental-peer-skip-client-san-verification": "nothing: _PEER_SAN",
        "peer-skip-client-san-verification": "nothing: _PEER_SAN",
    },
}
# switches that break the cluster or weaken it in one position only: their default (the value here) is
# harmless and passes, as Go reads it (`false`, `0`, `f`...)
_HARMLESS = {("etcd", "force-new-cluster"): False, ("etcd", "unsafe-no-fsync"): False,
             ("etcd", "experimental-peer-skip-client-san-verification"): False,
             ("etcd", "peer-skip-client-san-verification"): False,
             ("kubelet", "register-node"): True, ("kubelet", "enable-server"): True}

# Flags a module sets as a default that extraArgs may replace: nothing else kubesmith writes follows them,
# and the flag checks judge the value (tls-min-version: VersionTLS12, or VersionTLS13 to raise it; below
# TLS 1.2 is refused, as for every component)
REPLACEABLE: dict[str, frozenset[str]] = {"kube-apiserver": frozenset({"tls-min-version"})}


# Fields of a component's configuration document (extraConfig, by section) that kubesmith sets itself, the
# same settings as managed flags: the kubelet's client CA, serving certificate and token webhook, its DNS
# server (clusterDns, which CoreDNS's Service address follows), the kubeconfig (and so the identity) the
# scheduler and kube-proxy use. extraConfig is merged over kubesmith's document, so these would replace it.
RUNC_SYSTEMD_CGROUP = ("plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes", "runc", "options",
                       "SystemdCgroup")
_DOCUMENT = {("apiVersion",): "spec.kubernetesVersion (the release's configuration API)",
             ("kind",): "the document it writes (KubeletConfiguration, KubeProxyConfiguration...)"}
#
# Bind addresses and ports: kubesmith's probes, firewall notes and port checks follow the typed ports, so
# `port`, `healthzPort` (kubelet) and `healthzBindAddress` (kube-proxy: 0.0.0.0:<healthzPort>, which its
# probe dials on the host's address) are managed. The kubelet's `healthzBindAddress` is 127.0.0.1, where
# its probe dials: the endpoint is plain HTTP without authentication, so widening it to 0.0.0.0 would serve
# it to the network, and any other address would break the probe; it is managed, not merely checked for
# the unspecified address, because no value but kubesmith's own works. The kubelet's `address` (the
# authenticated API, 0.0.0.0 already, as the API server must reach it) and kube-proxy's `bindAddress` stay
# the operator's: narrowing them to one interface is legitimate, and 0.0.0.0 widens nothing.
MANAGED_CONFIG: dict[str, dict[tuple[str, ...], str]] = {
    "kubelet": _DOCUMENT | {
        ("authentication", "webhook", "enabled"): _TOKEN_WEBHOOK,
        ("authentication", "x509", "clientCAFile"): PKI, ("tlsCertFile",): PKI, ("tlsPrivateKeyFile",): PKI,
        ("clusterDNS",): "clusterDns", ("port",): "port", ("healthzPort",): "healthzPort",
        ("healthzBindAddress",): _PROBED, ("staticPodURL",): "nothing: _STATIC_URL",
        ("clusterDomain",): "spec.network.dnsDomain", ("containerRuntimeEndpoint",): "containerRuntimeEndpoint",
        ("cgroupDriver",): "cgroupDriver", ("registerNode",): "nothing: _REGISTERS",
        ("enableServer",): "nothing: _SERVES",
    },
    "scheduler": _DOCUMENT | {("clientConnection", "kubeconfig"): PKI},
    "proxy": _DOCUMENT | {("clientConnection", "kubeconfig"): PKI, ("healthzBindAddress",): "healthzPort",
                          ("clusterCIDR",): "clusterCidr"},
    # containerd's config.toml: kubesmith writes version 2 tables (a `version: 3` file ignores them, and with
    # them SystemdCgroup and the sandbox image), the runc runtime, and the socket the kubelet dials
    "containerRuntime": {
        ("version",): "kubesmith (version 2: the format of the plugin tables it writes)",
        ("plugins", "io.containerd.grpc.v1.cri", "containerd", "default_runtime_name"):
            "kubesmith (runc, the runtime it configures)",
        ("grpc", "address"): "socket", ("plugins", "io.containerd.grpc.v1.cri", "sandbox_image"): "sandboxImage",
        # the metrics endpoint is plain HTTP without authentication, on loopback where the readiness probe dials
        ("metrics", "address"): "metricsPort",
        # containerd's API is root on the node: never over TCP, and its socket stays root's alone
        ("grpc", "tcp_address"): "nothing: _CONTAINERD_TCP", ("grpc", "uid"): "nothing: _CONTAINERD_OWNER",
        ("grpc", "gid"): "nothing: _CONTAINERD_OWNER",
        # runc's cgroup driver is the kubelet's: with two drivers each manages pods' cgroups its own way
        RUNC_SYSTEMD_CGROUP: "spec.components.kubelet.cgroupDriver",
    },
}
_CONTAINERD_TCP = ("kubesmith serves containerd's API on its unix socket only: over TCP it has no "
                   "authentication, and anyone who reaches the port runs containers as root on the node")
_CONTAINERD_OWNER = ("the containerd socket stays owned by root (uid and gid 0): whoever may open it runs "
                     "containers as root on the node, so another owner or group is local root for its members")
_FORCE_NEW_CLUSTER = ("it rewrites the membership to this one member on every start: in a cluster of several "
                      "members each restart splits it and loses writes; it belongs to a one-off recovery, "
                      "which `kubesmith etcd restore` (a snapshot restore) does")
# a node with the node role is one the cluster schedules onto and reaches: kubesmith waits for it to register
# and be Ready, and the API server dials its kubelet's port for logs, exec, port-forward and metrics
_REGISTERS = ("the kubelet would never register its Node: nothing is scheduled there, and kubesmith waits for "
              "every node to register and be Ready; a host without workloads takes no node role")
_SERVES = ("the kubelet would serve no API on its port: the API server's logs, exec, port-forward and metrics "
           "through it would fail; a host without workloads takes no node role")
# no CIS check names it, and spec.security.allowInsecure takes CIS ids only: no opt-in
_PEER_SAN = ("etcd would accept a peer's client certificate whatever addresses it names: any certificate of the "
             "etcd peer CA could join or impersonate a member from anywhere; kubesmith's peer certificates name "
             "each member's address, so nothing needs it")
_NO_FSYNC = ("etcd would not fsync its log: a crash or power loss loses acknowledged writes or corrupts "
             "the data directory")
_EXITS = "kube-proxy would clean up, initialise or write its configuration, and exit, instead of proxying"
_NOTHING = {"nothing: _FORCE_NEW_CLUSTER": lambda: _FORCE_NEW_CLUSTER, "nothing: _NO_FSYNC": lambda: _NO_FSYNC,
            "nothing: _EXITS": lambda: _EXITS,
            "nothing: _PEER_SAN": lambda: _PEER_SAN, "nothing: _REGISTERS": lambda: _REGISTERS,
            "nothing: _SERVES": lambda: _SERVES,
            "nothing: _STATIC_URL": lambda: _STATIC_URL, "nothing: _CONTAINERD_TCP": lambda: _CONTAINERD_TCP,
            "nothing: _CONTAINERD_OWNER": lambda: _CONTAINERD_OWNER}
# a URL the kubelet would fetch pods from and run unadmitted (privileged, hostPath...), over plain HTTP too
_STATIC_URL = ("kubesmith runs no static pods from a URL: the kubelet would run whatever that server hands it, "
               "past authorization and admission; deploy workloads through the API (spec.addons)")


def managed_flag_problem(binary: str, component: str, flag: str, value: Any = None) -> str | None:
    """Why extraArgs may not set `flag` of `binary` (to `value`), or None when it may."""
    if (binary, flag) in _HARMLESS and go_bool(value) is _HARMLESS[(binary, flag)]:
        return None
    instead = MANAGED.get(binary, {}).get(flag)
    return None if instead is None else _managed(f"--{flag}", component, instead, "extraArgs")


# Flags a binary ignores next to the configuration file kubesmith gives it (--config), so a value there would
# pass without effect: kube-proxy takes only its logging flags over the file (copyLogsFromFlags; v1.36.2
# starts with --proxy-mode=bogus or --conntrack-max-per-core=-5 next to --config), kube-scheduler ignores
# the deprecated flags its --help says so of (its leader election flags still apply)
_LOGGING_FLAGS = frozenset({"v", "vmodule", "logging-format", "log-flush-frequency", "log-json-info-buffer-size",
                            "log-json-split-stream", "log-text-info-buffer-size", "log-text-split-stream"})
_IGNORED_WITH_CONFIG: dict[str, Any] = {
    "kube-proxy": lambda flag: flag not in _LOGGING_FLAGS,
    "kube-scheduler": frozenset({"contention-profiling", "kube-api-burst", "kube-api-content-type", "kube-api-qps",
                                 "kubeconfig", "pod-max-in-unschedulable-pods-duration"}).__contains__,
}


def ignored_flag_problem(binary: str, component: str, flag: str) -> str | None:
    """Why an extraArgs `flag` the binary knows would do nothing (it reads that setting from kubesmith's
    configuration file for it), or None."""
    ignored = _IGNORED_WITH_CONFIG.get(binary)
    if ignored is None or not ignored(flag):
        return None
    return (f"{binary} ignores --{flag} next to the configuration file kubesmith gives it (--config): set the "
            f"field in spec.components.{component}.extraConfig instead")


def managed_config_problem(section: str, path: tuple[str, ...]) -> str | None:
    """Why extraConfig of `section` may not set the field at `path`, or None when it may."""
    instead = MANAGED_CONFIG.get(section, {}).get(path)
    return None if instead is None else _managed(".".join(path), section, instead, "extraConfig")


# The values kubesmith writes itself where every supported release agrees (versions/data: 1.28 to 1.37):
# a pasted configuration that repeats them (its apiVersion and kind, the CIS value of the token webhook)
# replaces nothing, so it is no error.
SAME_AS_KUBESMITH: dict[str, dict[tuple[str, ...], Any]] = {
    "kubelet": {("apiVersion",): "kubelet.config.k8s.io/v1beta1", ("kind",): "KubeletConfiguration",
                ("authentication", "webhook", "enabled"): True, ("healthzBindAddress",): "127.0.0.1",
                ("registerNode",): True, ("enableServer",): True},
    "scheduler": {("apiVersion",): "kubescheduler.config.k8s.io/v1", ("kind",): "KubeSchedulerConfiguration"},
    "proxy": {("apiVersion",): "kubeproxy.config.k8s.io/v1alpha1", ("kind",): "KubeProxyConfiguration"},
    "containerRuntime": {("version",): 2,
                         ("plugins", "io.containerd.grpc.v1.cri", "containerd", "default_runtime_name"): "runc",
                         ("grpc", "tcp_address"): "", ("grpc", "uid"): 0, ("grpc", "gid"): 0},
}


def _raw(data: Any, *path: str, default: Any = None) -> Any:
    present, value = value_at(data, path)
    return value if present and value is not None else default


def typed_values(spec: Any) -> dict[str, dict[tuple[str, ...], Any]]:
    """What kubesmith writes for the managed fields a typed option (or spec.network) sets, from raw data
    (defaults: the models'); a field it derives from the host (cgroupDriver, unset) is absent."""
    components = _raw(spec, "components", default={})
    kubelet, proxy = _raw(components, "kubelet", default={}), _raw(components, "proxy", default={})
    runtime = _raw(components, "containerRuntime", default={})
    socket = _raw(runtime, "socket", default="/run/containerd/containerd.sock")
    values: dict[str, dict[tuple[str, ...], Any]] = {
        "kubelet": {("port",): _raw(kubelet, "port", default=10250),
                    ("healthzPort",): _raw(kubelet, "healthzPort", default=10248),
                    ("clusterDomain",): _raw(spec, "network", "dnsDomain", default="cluster.local"),
                    ("containerRuntimeEndpoint",): _raw(kubelet, "containerRuntimeEndpoint", default=f"unix://{socket}")},
        "proxy": {("clusterCIDR",): _raw(proxy, "clusterCidr",
                                          default=_raw(spec, "network", "clusterCidr", default="10.200.0.0/16"))},
        "containerRuntime": {("grpc", "address"): socket,
                             ("metrics", "address"): f"127.0.0.1:{_raw(runtime, 'metricsPort', default=1338)}"},
    }
    if "cgroupDriver" in kubelet:
        values["kubelet"][("cgroupDriver",)] = kubelet["cgroupDriver"]
        values["containerRuntime"][RUNC_SYSTEMD_CGROUP] = kubelet["cgroupDriver"] == "systemd"
    values["containerRuntime"][("plugins", "io.containerd.grpc.v1.cri", "sandbox_image")] = \
        _raw(runtime, "sandboxImage", default=PAUSE_IMAGE)
    return values


def managed_config_findings(components: Any, spec: Any = None) -> list[tuple[tuple[str, ...], str, str]]:
    """Every managed field set in an extraConfig (raw data: spec.components), located; a value equal to what
    kubesmith writes there replaces nothing and passes."""
    findings: list[tuple[tuple[str, ...], str, str]] = []
    typed = typed_values(spec if isinstance(spec, dict) else {"components": components})
    for section, fields in MANAGED_CONFIG.items():
        config = components.get(section) if isinstance(components, dict) else None
        config = config.get("extraConfig") if isinstance(config, dict) else None
        same = SAME_AS_KUBESMITH.get(section, {}) | typed.get(section, {})
        for path in fields:
            found = config_field(section, config, path)
            if found is None or (path in same and found[1] == same[path] and type(found[1]) is type(same[path])):
                continue
            if problem := managed_config_problem(section, path):
                findings.append((("spec", "components", section, "extraConfig", *found[0]), problem, "error"))
    return findings


def config_field(section: str, config: Any, path: tuple[str, ...]) -> tuple[tuple[str, ...], Any] | None:
    """(keys as spelled, value) of the field at `path` of a section's extraConfig, matched as its component
    matches keys: the kubelet, kube-proxy and kube-scheduler exactly (their decoders are case-sensitive; the
    v1.36.2 kubelet and kube-proxy ignore MaxPods or MetricsBindAddress as unknown fields), containerd as
    go-toml v1 does, past the tables kubesmith writes itself. None: not set there."""
    if section == "containerRuntime":
        return toml_value_at(config, containerd_written(), path)
    present, value = value_at(config, path)
    return (path, value) if present else None


@functools.cache
def containerd_written() -> dict[str, Any]:
    """kubesmith's own config.toml (its keys decide which spellings of extraConfig containerd reads)."""
    from kubesmith.modules.container_runtime import ContainerRuntimeOptions, containerd_config
    from kubesmith.plan.environment import HostEnvironment
    return containerd_config(ContainerRuntimeOptions(), HostEnvironment())


def _managed(what: str, component: str, instead: str, route: str) -> str:
    if instead in _NOTHING:
        return f"{what}: {_NOTHING[instead]()}"
    if instead.replace(".", "").isalnum() and instead[:1].islower() and " " not in instead:
        option = instead if "." in instead and instead.split(".")[0] in ("spec", "metadata") else \
            f"spec.components.{component}.{instead}"
        return f"kubesmith sets {what} from {option}: set that option instead ({route} cannot replace it)"
    return f"kubesmith sets {what} itself, from {instead}; {route} cannot replace it"


def extra_args_of(section: Any) -> dict[Any, Any]:
    extra = section.get("extraArgs") if isinstance(section, dict) else None
    return extra if isinstance(extra, dict) else {}
