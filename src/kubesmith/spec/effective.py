"""Values as their binaries read them, so a check sees what takes effect and not what the file spells.

A flag's value is parsed by Go (pflag; etcd by Go's flag package): a boolean is any of strconv.ParseBool's
twelve spellings (`1`, `t`, `TRUE`... and their false twins), a duration is time.ParseDuration's (an int64 of
nanoseconds), a list is one comma-separated value. And one setting can be reached several ways: the typed
option, the flag in `extraArgs`, the field of the component's configuration file in `extraConfig` (the
kubelet's flags win over its file). Each setting a security check guards is named once, in SETTINGS; the
file may set it in one place only, so what takes effect is never a question of precedence, and security.py
reads the value from wherever it is set. (Other settings keep their documented precedence: extraConfig
is merged over the typed options.)
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubesmith.durations import go_duration_ns, go_duration_problem
from kubesmith.vocabulary.errors import LocPart, yaml_text
from kubesmith.spec.flagtypes import flag_type_problem
from kubesmith.vocabulary.types import GO_INT_RANGES, go_int

Loc = tuple[LocPart, ...]
Finding = tuple[Loc, str, str]
GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_LIST_SEPARATORS = re.compile(r"[\"'\s]")


def go_bool(value: Any) -> bool | None:
    """strconv.ParseBool of the flag's text (YAML's true renders `true`, 1 renders `1`); None: refused."""
    if isinstance(value, bool):
        return value
    text = str(value)
    return True if text in GO_TRUE else False if text in GO_FALSE else None


def go_strings(value: Any) -> list[str]:
    """A string-list flag's items: pflag reads one CSV record (items with quotes or spaces are refused first)."""
    text = _text(value)
    return text.split(",") if text else []


# Go's tls.InsecureCipherSuites() (crypto/tls/cipher_suites.go): RC4, 3DES and CBC with SHA-256. Every
# Kubernetes binary still accepts them in --tls-cipher-suites / tlsCipherSuites.
GO_INSECURE_CIPHERS = frozenset({
    "TLS_RSA_WITH_RC4_128_SHA", "TLS_RSA_WITH_3DES_EDE_CBC_SHA", "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA", "TLS_ECDHE_RSA_WITH_RC4_128_SHA", "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
})
# Every name Go's crypto/tls knows (tls.CipherSuites() and tls.InsecureCipherSuites()), with the two
# CHACHA20 aliases without _SHA256 that component-base's --tls-cipher-suites also takes: a binary refuses
# to start with any other name ("Cipher suite TLS_FOO not supported or doesn't exist").
GO_SECURE_CIPHERS = frozenset({
    "TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA", "TLS_RSA_WITH_AES_256_CBC_SHA", "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
})
# TLS versions as Kubernetes binaries (--tls-min-version, tlsMinVersion) and etcd (--tls-min-version) name
# them: kubesmith serves TLS 1.2 or newer, so the older two weaken it; any other name stops the binary
TLS_VERSIONS = {"kubernetes": (("VersionTLS12", "VersionTLS13"), ("VersionTLS10", "VersionTLS11")),
                "etcd": (("TLS1.2", "TLS1.3"), ("TLS1.0", "TLS1.1"))}
# what a component's --authorization-always-allow-paths may hold: its health endpoints (the default)
HEALTH_PATHS = ("/healthz", "/readyz", "/livez")


def cipher_problem(name: Any) -> str | None:
    """Why the TLS cipher suite `name` is refused, or None."""
    if name in GO_INSECURE_CIPHERS:
        return (f"{name} is one of Go's insecure cipher suites (tls.InsecureCipherSuites: RC4, 3DES, CBC with "
                "SHA-256); name only suites Go counts as secure (CIS 1.2.29, 4.2.12)")
    if name not in GO_SECURE_CIPHERS:
        close = difflib.get_close_matches(str(name), sorted(GO_SECURE_CIPHERS), n=1, cutoff=0.75)
        hint = f"did you mean {close[0]!r}?" if close else "name one of Go's secure suites (tls.CipherSuites())"
        return f"Go knows no cipher suite {name!r}: the component refuses to start; {hint}"
    return None


def tls_version_problem(value: Any, family: str = "kubernetes") -> str | None:
    """Why the minimum TLS version `value` is refused (below TLS 1.2, or unknown), or None."""
    good, weak = TLS_VERSIONS[family]
    if value in weak:
        return (f"{value} is below TLS 1.2, which kubesmith requires of every endpoint (older versions have "
                f"known attacks); use {good[0]} or {good[1]}")
    if value not in good:
        return f"the component reads the minimum TLS version as {' or '.join(good)}, not {yaml_text(value)}"
    return None


def list_flag_problem(flag: str, items: list[str]) -> str | None:
    """Why a list flag's items weaken what the flag guards, or None: insecure ciphers, paths that skip
    authorization beyond the health endpoints."""
    for item in items:
        if flag in ("tls-cipher-suites", "cipher-suites") and (problem := cipher_problem(item)):
            return problem
        if flag == "authorization-always-allow-paths" and item not in HEALTH_PATHS:
            # no opt-in: spec.security.allowInsecure takes CIS ids, and no CIS check names this flag
            how = ("; to scrape metrics, give the scraper a token: a ServiceAccount bound to a ClusterRole "
                   "allowing get on the non-resource URL /metrics (Prometheus's bearer_token_file)"
                   if item.rstrip("*").rstrip("/") in ("/metrics", "") or item.startswith("/metrics") else "")
            return (f"{item!r} would be served to anyone without authorization; only the health endpoints "
                    f"({', '.join(HEALTH_PATHS)}) may skip it{how}")
    return None


def flag_value_problem(binary: str, flag: str, kind: str | None, value: Any, minor: str | None = None) -> str | None:
    """Why `binary` cannot parse `value` for `flag` of type `kind`, or None (unknown kinds are not checked)."""
    text = _text(value)
    if problem := list_flag_problem(flag, go_strings(value)):
        return problem
    if kind == "bool" and go_bool(value) is None:
        return (f"{binary} reads --{flag} as a boolean (1, t, T, TRUE, true, True, 0, f, F, FALSE, false or False), "
                f"not {text!r}")
    if kind == "duration" and (problem := go_duration_problem(text, positive=flag in POSITIVE_DURATION_FLAGS)):
        # a zero one (well-formed, not negative) says what zero does where that is not a period's spin
        why = f": {SHORT_DURATION_WHY[flag]}" if flag in SHORT_DURATION_WHY and not go_duration_problem(text) else ""
        return f"{binary} reads --{flag} as a Go duration: {problem}{why}"
    if kind == "duration" and flag in POSITIVE_DURATION_FLAGS and go_duration_ns(text) < SHORTEST_PERIOD_NS:
        why = SHORT_DURATION_WHY.get(flag, "a period this short repeats its work without pause, as a zero one would "
                                           "(a kubelet at 1ns patches its Node status on end)")
        return f"{text!r} is shorter than {SHORTEST_PERIOD}, the shortest kubesmith takes for --{flag}: {why}"
    if kind in GO_INT_RANGES and go_int(value, kind) is None:
        low, high = GO_INT_RANGES[kind]
        return f"{binary} reads --{flag} as an integer ({kind}, {low} to {high}), not {text!r}"
    if kind in ("float", "float32") and not _finite(text):
        return f"{binary} reads --{flag} as a finite number, not {text!r}"
    if problem := flag_type_problem(binary, flag, kind, text):
        return problem
    if kind == "strings" and (found := _LIST_SEPARATORS.search(text)):
        return (f"{binary} reads --{flag} as a comma-separated list; an item may not hold quotes or whitespace "
                f"(found {found.group()!r} at position {found.start() + 1}): Go's CSV reader would change the items")
    if flag == "tls-min-version":
        return tls_version_problem(text, "etcd" if binary == "etcd" else "kubernetes")
    return flag_setting_problem(binary, flag, text, minor)


def flag_setting_problem(binary: str, flag: str, text: str, minor: str | None = None) -> str | None:
    """Why `binary` refuses, at its start, a well-typed value of `flag` (or the value weakens it), or None."""
    if binary == "kube-apiserver" and flag == "etcd-servers-overrides":
        # "/group/resource#server;server,..." (a comma between overrides, a semicolon between servers)
        servers = [url for item in text.split(",") for url in item.partition("#")[2].split(";") if url]
        if plain := next((url for url in servers if not url.startswith("https://")), None):
            return (f"{plain} is no https:// URL: the API server would store those resources in an etcd it reaches "
                    "without TLS and without kubesmith's client certificate")
    if (choice := FLAG_CHOICES.get(flag)) and binary in choice[0] and text not in choice[1]:
        return (f"{binary} takes --{flag} as {' or '.join(repr(item) for item in choice[1] if item)}, not {text!r}: "
                f"it refuses to start")
    if (bounds := FLAG_BOUNDS.get(flag)) and binary in bounds[0] and _finite(text) and \
            not bounds[1] <= float(text) <= bounds[2]:
        span = f"from {bounds[1]:g} to {bounds[2]:g}" if math.isfinite(bounds[2]) else f"{bounds[1]:g} or more"
        return f"{binary} takes --{flag} {span}, not {text}: {bounds[3]}"
    if binary == "kube-apiserver" and flag == "endpoint-reconciler-type" and text == "none":
        return ("with endpoint-reconciler-type none nothing keeps the kubernetes Service's endpoints: pods (CoreDNS "
                "first) could not reach the API server; use lease (the default)")
    if binary == "kube-apiserver" and (problem := _api_setting_problem(flag, text)):
        return problem
    if flag in ("emulated-version", "min-compatibility-version") and minor and \
            (problem := emulation_problem(flag, text, minor)):
        return f"{binary}: {problem}"
    if binary == "kube-apiserver" and flag == "oidc-issuer-url" and not text.startswith("https://"):
        # v1.36.2: 'jwt[0].issuer.url: Invalid value: "http://evil": URL scheme must be https'
        return (f"{text!r} is no https:// URL: kube-apiserver refuses an OIDC issuer reached without TLS (anyone "
                "on the path could mint tokens it accepts)")
    if binary == "kube-apiserver" and flag == "service-account-max-token-expiration":
        try:
            nanoseconds = go_duration_ns(text)
        except ValueError:
            nanoseconds = None  # the type check names it
        if nanoseconds and not 3600 * 10**9 <= nanoseconds <= (1 << 32) * 10**9:
            return (f"{text} is not between 1 hour and 2^32 seconds: kube-apiserver refuses to start (0 means no "
                    "maximum)")
    if binary == "kube-apiserver" and flag in ("max-requests-inflight", "max-mutating-requests-inflight"):
        number = go_int(text)
        if number is not None and number < 0:
            return f"kube-apiserver refuses a negative --{flag} ({number}); 0 means no limit"
    # 1.28's kubelet still has in-tree providers (DisableCloudProviders turned on by default in 1.29)
    if binary == "kubelet" and flag == "cloud-provider" and text not in ("", "external") and minor != "1.28":
        return (f"the kubelet takes --cloud-provider only as external or empty: the in-tree cloud providers such "
                f"as {text!r} were removed (an external cloud-controller-manager replaces them)")
    if binary == "kube-apiserver" and flag in ("enable-admission-plugins", "disable-admission-plugins"):
        for plugin in go_strings(text):
            if problem := admission_plugin_problem(plugin):
                return problem
    return None


_KUBERNETES = frozenset({"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"})
_APISERVER = frozenset({"kube-apiserver"})
# The values a flag takes (its binary's option validation refuses to start with any other; v1.36.2's errors:
# 'invalid audit log mode bogus, allowed modes are "batch,blocking,blocking-strict"', 'invalid group version,
# allowed versions are ["audit.k8s.io/v1"]', '--storage-media-type "application/xml" invalid', 'resourceLock
# value must be "leases"'
# (kube-controller-manager; kube-scheduler's --help says "Supported options are 'leases'" too, and client-go's
# resourcelock.New refuses the others: "endpoints lock is removed"), 'Unsupported log format'; the endpoint
# reconcilers are the three --help lists, none refused on its own)
FLAG_CHOICES: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {
    "audit-log-format": (_APISERVER, ("legacy", "json")),
    **dict.fromkeys(("audit-log-mode", "audit-webhook-mode"), (_APISERVER, ("batch", "blocking", "blocking-strict"))),
    **dict.fromkeys(("audit-log-version", "audit-webhook-version"), (_APISERVER, ("audit.k8s.io/v1",))),
    "storage-media-type": (_APISERVER, ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")),
    "storage-backend": (_APISERVER, ("", "etcd3")),
    "endpoint-reconciler-type": (_APISERVER, ("master-count", "lease", "none")),
    "leader-elect-resource-lock": (frozenset({"kube-controller-manager", "kube-scheduler"}), ("leases",)),
    "logging-format": (_KUBERNETES, ("text", "json")),
}
# (binaries, lowest, highest, what a value outside does) of a number flag: "--goaway-chance can not be less than 0
# or greater than 0.02", "--min-request-timeout can not be negative value"; the others start (v1.35.6 and v1.36.2)
# and then misbehave, as each reason says
_REFUSES = "it refuses to start"
FLAG_BOUNDS: dict[str, tuple[frozenset[str], float, float, str]] = {
    "goaway-chance": (_APISERVER, 0, 0.02, _REFUSES),
    # k8s.io/apiserver endpoints/request GetTimeoutForWatch: "a timeout of zero value implies that ... the server
    # option --min-request-timeout has a value of zero and hence, the watch request will timeout immediately"
    "min-request-timeout": (_APISERVER, 1, math.inf, "it refuses a negative one, and at 0 every watch that gives no "
                                                     "timeoutSeconds of its own (kubectl get -w) ends as it starts"),
    # storage/etcd3 leaseManager.GetLease grants each TTL'd object (every Event) an etcd lease of its TTL plus the
    # reuse duration, and reuses it only within that time: 0 grants a lease per write, the load the flag's help
    # warns of ("a too small value may cause performance problems at storage layer"), and a negative one cuts
    # every such object's TTL short as well
    "lease-reuse-duration-seconds": (_APISERVER, 1, math.inf, "at 0 it asks etcd for a new lease on every Event "
                                     "written, and a negative value also lets Events expire before their TTL"),
    # a hidden flag, deprecated and a no-op in v1.35.6 and v1.36.2 ("watch caches are sized automatically");
    # --watch-cache-sizes refuses a negative size ("watch cache size cannot be negative")
    "default-watch-cache-size": (_APISERVER, 0, math.inf, "no cache holds a negative number of objects, and "
                                 "kube-apiserver sizes its watch caches itself (v1.35 and v1.36 ignore this deprecated "
                                 "flag; leave it out)"),
}
# component-base's versions: major.minor (a leading v allowed, no patch), of the component "kube" alone; the
# binary emulates at most three minors back, and is compatible back to those ('emulation version 1.30 is not
# between [1.33, 1.36.0]', 'minCompatibilityVersion version 1.37 is not between [1.33, 1.36]'; releases before
# 1.33 emulated fewer: their binary names that)
_EMULATED = re.compile(r"v?(\d+)\.(\d+)")


def emulation_problem(flag: str, text: str, minor: str) -> str | None:
    """Why a binary of release `minor` refuses --emulated-version or --min-compatibility-version `text`
    (its range; --min-compatibility-version's top is the emulated version, by default the release)."""
    major, release = (int(part) for part in minor.split("."))
    for item in go_strings(text):
        component, _, version = item.rpartition("=")
        if component not in ("", "kube"):
            return f"--{flag}: no component {component!r} is registered (only kube)"
        match = _EMULATED.fullmatch(version)
        if match is None:
            return f"--{flag} takes a version as major.minor (1.{release}), not {version!r}"
        if int(match.group(1)) != major or not release - 3 <= int(match.group(2)) <= release:
            return (f"--{flag} {version} is not between {major}.{release - 3} and {minor}, the versions a {minor} "
                    "binary emulates or stays compatible with: it refuses to start")
    return None


def _api_setting_problem(flag: str, text: str) -> str | None:
    """kube-apiserver's --runtime-config keys ("runtime-config invalid key apps", "invalid runtime-config with
    only api/all=false") and --watch-cache-sizes items ("invalid value of watch cache size: pods")."""
    if flag == "runtime-config":
        pairs = [item.partition("=") for item in text.split(",") if item]
        odd = next((key.strip() for key, _, _ in pairs if key.strip() != "v1" and key.strip().count("/") not in (1, 2)),
                   None)
        if odd is not None:
            return (f"kube-apiserver has no API {odd!r} to turn on or off: a key is group/version, "
                    "group/version/resource, v1 or api/all (api/ga, api/beta, api/alpha); it refuses to start")
        if [(key.strip(), value.strip()) for key, _, value in pairs] == [("api/all", "false")]:
            return "api/all=false alone turns off every API, v1 included: kube-apiserver refuses to start"
    if flag == "watch-cache-sizes":
        for item in go_strings(text):
            resource, hash_, size = item.partition("#")
            if not hash_ or not resource or go_int(size) is None or go_int(size) < 0:
                return (f"kube-apiserver takes each --watch-cache-sizes item as resource[.group]#size, size a whole "
                        f"number from 0, not {item!r}: it refuses to start")
    return None
# systemd-resolved's stub file: it names only 127.0.0.53, resolved's listener on the host's loopback
SYSTEMD_STUB_RESOLV_CONF = "/run/systemd/resolve/stub-resolv.conf"


def resolv_conf_problem(path: str) -> str | None:
    """Why the kubelet may not hand pods `path` as their resolv.conf: pods with dnsPolicy Default (CoreDNS
    among them, forwarding there) would query 127.0.0.53 in their own network namespace, where nothing answers."""
    if path.rstrip("/") != SYSTEMD_STUB_RESOLV_CONF:
        return None
    return (f"{path} is systemd-resolved's stub, naming only 127.0.0.53 on the host's loopback: pods with "
            "dnsPolicy Default (CoreDNS, which forwards there) would query their own loopback, where nothing "
            "answers; use /run/systemd/resolve/resolv.conf, which names the upstream servers")


# The admission plugins kube-apiserver registers in the supported releases (its --help lists them under
# --enable-admission-plugins; checked against v1.35.6's and v1.36.2's, older names kept for older
# releases): it refuses to start with any other name
ADMISSION_PLUGINS = frozenset({
    "AlwaysAdmit", "AlwaysDeny", "AlwaysPullImages", "CertificateApproval", "CertificateSigning",
    "CertificateSubjectRestriction", "ClusterTrustBundleAttest", "DefaultIngressClass", "DefaultStorageClass",
    "DefaultTolerationSeconds", "DenyServiceExternalIPs", "EventRateLimit", "ExtendedResourceToleration",
    "ImagePolicyWebhook", "JobValidation", "LimitPodHardAntiAffinityTopology", "LimitRanger", "MutatingAdmissionPolicy",
    "MutatingAdmissionWebhook", "NamespaceAutoProvision", "NamespaceExists", "NamespaceLifecycle",
    "NodeDeclaredFeatureValidator", "NodeRestriction", "OwnerReferencesPermissionEnforcement",
    "PersistentVolumeClaimResize", "PersistentVolumeLabel", "PodGroupProtection", "PodGroupWorkloadExists",
    "PodNodeSelector", "PodResizeValidator", "PodSecurity", "PodTolerationRestriction",
    "PodTopologyLabels", "Priority", "ResourceQuota", "RuntimeClass", "SecurityContextDeny", "ServiceAccount",
    "StorageObjectInUseProtection", "TaintNodesByCondition", "ValidatingAdmissionPolicy", "ValidatingAdmissionWebhook",
})
# removed plugins, with the release that removed them (removed_flags.json's removed_values)
REMOVED_ADMISSION_PLUGINS = {"Initializers": "1.14", "PodSecurityPolicy": "1.25", "PodPreset": "1.20"}


def admission_plugin_problem(plugin: str) -> str | None:
    """Why kube-apiserver refuses the admission plugin `plugin`, or None."""
    if plugin in REMOVED_ADMISSION_PLUGINS:
        return (f"the admission plugin {plugin} was removed in Kubernetes {REMOVED_ADMISSION_PLUGINS[plugin]}: "
                "kube-apiserver refuses to start with it")
    if plugin not in ADMISSION_PLUGINS:
        close = difflib.get_close_matches(plugin, sorted(ADMISSION_PLUGINS), n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"kube-apiserver has no admission plugin {plugin!r}: it refuses to start with it{hint}"
    return None


# Duration fields of each component's configuration document (extraConfig), read with the same parser as
# duration flags (Go's time.ParseDuration through encoding/json's metav1.Duration). Zero is never refused
# here: in the configuration FILE each component defaults a zero period (kubelet v1beta1 SetDefaults:
# syncFrequency 1m, nodeStatusUpdateFrequency 10s, runtimeRequestTimeout 2m...; kube-proxy v1alpha1:
# iptables.syncPeriod 30s, a zero ipvs/nftables period is defaulted before validation; the scheduler's
# leaderElection: 15s/10s/2s), or reads 0 as "off" (shutdownGracePeriod, imageMaximumGCAge); kubeadm's
# generated files write 0s for every such field (checked against the v1.36.2 binaries). Negative is refused.
# True marks a *metav1.Duration pointer, where null means "default" too (kube-proxy's conntrack TCP
# timeouts); a null non-pointer duration stops the binary ('time: invalid duration ""').
# (streamingConnectionIdleTimeout is a SETTING as well: the CIS check reads it.)
CONFIG_DURATIONS: dict[str, dict[tuple[str, ...], bool]] = {
    "kubelet": {
        ("syncFrequency",): False, ("fileCheckFrequency",): False, ("httpCheckFrequency",): False,
        ("nodeStatusUpdateFrequency",): False, ("nodeStatusReportFrequency",): False,
        ("runtimeRequestTimeout",): False, ("cpuManagerReconcilePeriod",): False, ("volumeStatsAggPeriod",): False,
        ("imageMinimumGCAge",): False, ("imageMaximumGCAge",): False, ("evictionPressureTransitionPeriod",): False,
        ("shutdownGracePeriod",): False, ("shutdownGracePeriodCriticalPods",): False,
        ("authentication", "webhook", "cacheTTL"): False, ("authorization", "webhook", "cacheAuthorizedTTL"): False,
        ("authorization", "webhook", "cacheUnauthorizedTTL"): False,
    },
    "proxy": {
        ("syncPeriod",): False, ("minSyncPeriod",): False, ("configSyncPeriod",): False,
        ("iptables", "syncPeriod"): False, ("iptables", "minSyncPeriod"): False,
        ("ipvs", "syncPeriod"): False, ("ipvs", "minSyncPeriod"): False, ("ipvs", "tcpTimeout"): False,
        ("ipvs", "tcpFinTimeout"): False, ("ipvs", "udpTimeout"): False,
        ("nftables", "syncPeriod"): False, ("nftables", "minSyncPeriod"): False,
        ("conntrack", "tcpEstablishedTimeout"): True, ("conntrack", "tcpCloseWaitTimeout"): True,
        ("conntrack", "udpTimeout"): False, ("conntrack", "udpStreamTimeout"): False,
    },
    "scheduler": {
        ("leaderElection", "leaseDuration"): False, ("leaderElection", "renewDeadline"): False,
        ("leaderElection", "retryPeriod"): False,
    },
}
# the same periods as flags (any component): no flag defaults a zero it is given, so 0 is refused there, and so
# is anything under SHORTEST_PERIOD (their defaults run from 1s to 2m: `1ns` passed "never zero" but spins as
# zero does)
SHORTEST_PERIOD = "1s"
SHORTEST_PERIOD_NS = go_duration_ns(SHORTEST_PERIOD)
POSITIVE_DURATION_FLAGS = frozenset({
    "sync-frequency", "file-check-frequency", "http-check-frequency", "node-status-update-frequency",
    "node-status-report-frequency", "runtime-request-timeout", "cpu-manager-reconcile-period",
    "iptables-sync-period", "ipvs-sync-period", "leader-elect-lease-duration", "leader-elect-renew-deadline",
    "leader-elect-retry-period",
    # kube-controller-manager's loop periods: 0 makes a ticker panic or wait.Until spin (1ns as well)
    "horizontal-pod-autoscaler-sync-period", "node-monitor-period", "resource-quota-sync-period",
    "pvclaimbinder-sync-period", "route-reconciliation-period",
    # kube-apiserver's deadline for each request that is not a watch or another long-running one
    "request-timeout",
})
# why a flag of POSITIVE_DURATION_FLAGS is no setting at zero or under SHORTEST_PERIOD, when it is not a period
SHORT_DURATION_WHY = {
    # k8s.io/apiserver filters.WithRequestDeadline: the request's context ends at its start plus this timeout
    "request-timeout": "kube-apiserver ends every request (get, list, create, update) when this runs out: at 0 "
                       "each one times out as it arrives, and under a second large lists would (the default is 1m0s)",
}


def config_duration_findings(components: Any, aliases: dict[str, str]) -> Iterator[Finding]:
    """Every known duration field of an extraConfig, read as its component reads it, located."""
    for section, fields in CONFIG_DURATIONS.items():
        options = getattr(components, aliases[section])
        for path, nullable in fields.items():
            present, value = config_value(options, path)
            if not present or (value is None and nullable):
                continue
            field = ".".join(path)
            problem = go_duration_problem(value) if isinstance(value, str) else \
                f"the component reads {field} as a Go duration such as 90s; got {yaml_text(value)}"
            if problem:
                yield (("spec", "components", section, "extraConfig", *path), f"{field}: {problem}", "error")


def _finite(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _text(value: Any) -> str:
    """The flag's text as render_flags writes it."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting of a component and every place the file can give it."""

    flag: str
    config: tuple[str, ...] | None  # field path in the component's configuration document (extraConfig)
    option: str | None  # the typed option (attribute name), when there is one
    kind: str  # what the configuration document holds: bool, int, str, duration, list
    flag_read: bool = True  # False: the binary ignores the flag next to kubesmith's --config (kube-proxy)


SETTINGS: dict[str, tuple[Setting, ...]] = {
    "kubelet": (
        Setting("anonymous-auth", ("authentication", "anonymous", "enabled"), None, "bool"),
        Setting("authorization-mode", ("authorization", "mode"), None, "str"),
        Setting("read-only-port", ("readOnlyPort",), None, "int"),
        Setting("make-iptables-util-chains", ("makeIPTablesUtilChains",), None, "bool"),
        Setting("seccomp-default", ("seccompDefault",), "seccomp_default", "bool"),
        Setting("protect-kernel-defaults", ("protectKernelDefaults",), "protect_kernel_defaults", "bool"),
        Setting("streaming-connection-idle-timeout", ("streamingConnectionIdleTimeout",),
                "streaming_connection_idle_timeout", "duration"),
        # not a security setting, but one list in two places: the file's list replaces the option's
        Setting("register-with-taints", ("registerWithTaints",), "register_with_taints", "list"),
    ),
    "proxy": (
        Setting("metrics-bind-address", ("metricsBindAddress",), "metrics_bind_address", "str", flag_read=False),
    ),
}


def config_value(options: Any, path: tuple[str, ...]) -> tuple[bool, Any]:
    """(found, value) of `path` in the options' extraConfig."""
    return value_at(getattr(options, "extra_config", {}), path)


def value_at(document: Any, path: tuple[str, ...]) -> tuple[bool, Any]:
    """(found, value) of the field at `path` in nested mappings (a configuration document, raw or typed)."""
    value = document
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def toml_keys(name: str) -> tuple[str, ...]:
    """The keys containerd 1.6 (go-toml v1's Unmarshal) reads a field named `name` from, in its order: the name,
    lower case, upper case, first letter lowered; the first the table holds wins. `containerd config dump`
    (1.6.20) reads grpc.TCP_ADDRESS, UID and a [GRPC] table, and ignores Address, Tcp_Address and Uid."""
    return tuple(dict.fromkeys((name, name.lower(), name.upper(), name[:1].lower() + name[1:])))


# tables of containerd's config.toml whose keys are names (plugin ids, runtime names, registry hosts, proxy
# plugins, stream processors, timeouts): go-toml v1 takes a map's keys as spelled
_TOML_NAME_TABLES = ("plugins", "runtimes", "mirrors", "configs", "auths", "headers", "proxy_plugins",
                     "stream_processors", "timeouts")


def toml_value_at(extra: Any, written: Any, path: tuple[str, ...]) -> tuple[tuple[str, ...], Any] | None:
    """(keys as spelled, value) of the field at `path` where containerd reads it from `extra` (extraConfig,
    merged key by key over kubesmith's `written` document); None when it reads kubesmith's value, or nothing."""
    keys: list[str] = []
    for index, part in enumerate(path):
        extra_level = extra if isinstance(extra, dict) else {}
        written_level = written if isinstance(written, dict) else {}
        candidates = (part,) if index and path[index - 1] in _TOML_NAME_TABLES else toml_keys(part)
        key = next((key for key in candidates if key in extra_level or key in written_level), None)
        if key is None or key not in extra_level:
            return None
        keys.append(key)
        extra, written = extra_level[key], written_level.get(key)
    return tuple(keys), extra


def places(options: Any, setting: Setting) -> list[tuple[Loc, Any]]:
    """Where the file sets `setting`, with the value given there (loc under spec.components.<c>)."""
    found: list[tuple[Loc, Any]] = []
    if setting.option and setting.option in options.model_fields_set:
        alias = type(options).model_fields[setting.option].alias or setting.option
        found.append(((alias,), getattr(options, setting.option)))
    if setting.flag_read and setting.flag in options.extra_args:
        found.append((("extraArgs", setting.flag), options.extra_args[setting.flag]))
    if setting.config is not None:
        present, value = config_value(options, setting.config)
        if present:
            found.append((("extraConfig", *setting.config), value))
    return found


def effective(options: Any, component: str, flag: str) -> tuple[Loc, Any] | None:
    """Where and how the file sets the setting of `flag` (one place: setting_findings refuses more)."""
    setting = next(s for s in SETTINGS[component] if s.flag == flag)
    found = places(options, setting)
    return found[0] if found else None


def setting_findings(components: Any, aliases: dict[str, str]) -> Iterator[Finding]:
    """A setting given in two places, and configuration fields of the wrong type, each located."""
    for component, settings in SETTINGS.items():
        options = getattr(components, aliases[component])
        for setting in settings:
            found = places(options, setting)
            for loc, _ in found[1:]:
                yield (("spec", "components", component, *loc), f"sets what {_path(component, found[0][0])} "
                       "already sets: give each setting in one place (the component would take one and ignore "
                       "the other)", "error")
            if setting.config is not None:
                present, value = config_value(options, setting.config)
                if present and (problem := _config_type_problem(setting, value)):
                    yield (("spec", "components", component, "extraConfig", *setting.config), problem, "error")


def _path(component: str, loc: Loc) -> str:
    return "spec.components." + component + "." + ".".join(str(part) for part in loc)


def _config_type_problem(setting: Setting, value: Any) -> str | None:
    field = ".".join(setting.config or ())
    expected = {"bool": (bool,), "int": (int,), "str": (str,), "duration": (str,), "list": (list,)}[setting.kind]
    if not isinstance(value, expected) or (setting.kind == "int" and isinstance(value, bool)):
        names = {"bool": "a boolean (true or false)", "int": "an integer", "str": "a string",
                 "duration": "a Go duration such as 4h", "list": "a list"}
        return f"the component reads {field} as {names[setting.kind]}; got {yaml_text(value)}"
    if setting.kind == "duration":
        return go_duration_problem(value)
    return None


# The JSON type of the top-level fields of each configuration document an operator commonly sets in
# extraConfig (KubeletConfiguration v1beta1, KubeProxyConfiguration v1alpha1, KubeSchedulerConfiguration
# v1): a mismatch (`tlsCipherSuites: "TLS_..."`, `authentication: "x"`) used to pass validate and stop
# the binary at its start ("cannot unmarshal string into Go struct field"). Durations are CONFIG_DURATIONS',
# guarded settings SETTINGS', managed fields spec.managed's; unknown fields are left to the component.
# Kinds: bool, int (integers: Go's int32/int64 fields, and the QPS fields, int32 in the kubelet), str,
# strings (a list of strings), list (of objects), map. A null is the field left unset: JSON allows it.
CONFIG_TYPES: dict[str, dict[str, str]] = {
    "kubelet": {
        **dict.fromkeys(("serializeImagePulls", "failSwapOn", "cgroupsPerQOS", "enableServer", "registerNode",
                         "enableDebuggingHandlers", "enableContentionProfiling", "enableControllerAttachDetach",
                         "rotateCertificates", "serverTLSBootstrap", "localStorageCapacityIsolation",
                         "enableSystemLogHandler", "enableProfilingHandler", "enableDebugFlagsHandler",
                         "kernelMemcgNotification", "failCgroupV1", "registerSchedulable"), "bool"),
        **dict.fromkeys(("maxPods", "podPidsLimit", "podsPerCore", "eventRecordQPS", "eventBurst",
                         "registryPullQPS", "registryBurst", "kubeAPIQPS", "kubeAPIBurst", "maxOpenFiles",
                         "imageGCHighThresholdPercent", "imageGCLowThresholdPercent", "containerLogMaxFiles",
                         "containerLogMaxWorkers", "maxParallelImagePulls", "oomScoreAdj", "nodeStatusMaxImages",
                         "evictionMaxPodGracePeriod"), "int"),
        **dict.fromkeys(("cgroupDriver", "cgroupRoot", "containerRuntimeEndpoint", "imageServiceEndpoint",
                         "clusterDomain", "resolvConf", "providerID", "hairpinMode", "cpuManagerPolicy",
                         "memoryManagerPolicy", "topologyManagerPolicy", "topologyManagerScope",
                         "containerLogMaxSize", "configMapAndSecretChangeDetectionStrategy", "tlsMinVersion",
                         "kubeletCgroups", "systemCgroups", "kubeReservedCgroup", "systemReservedCgroup",
                         "podCIDR"), "str"),
        **dict.fromkeys(("tlsCipherSuites", "enforceNodeAllocatable", "allowedUnsafeSysctls"), "strings"),
        **dict.fromkeys(("shutdownGracePeriodByPodPriority", "reservedMemory"), "list"),
        **dict.fromkeys(("authentication", "authorization", "featureGates", "cpuManagerPolicyOptions",
                         "topologyManagerPolicyOptions", "logging", "memorySwap", "staticPodURLHeader", "tracing"),
                        "map"),
        # map[string]string: "cannot unmarshal number into Go struct field KubeletConfiguration.kubeReserved of
        # type string" (kubeReserved: {memory: 0} stops the v1.36.2 kubelet)
        **dict.fromkeys(("evictionHard", "evictionSoft", "evictionSoftGracePeriod", "evictionMinimumReclaim",
                         "systemReserved", "kubeReserved"), "strmap"),
    },
    "proxy": {
        **dict.fromkeys(("bindAddressHardFail", "enableProfiling"), "bool"),
        "oomScoreAdj": "int",
        **dict.fromkeys(("mode", "clusterCIDR", "bindAddress", "portRange", "detectLocalMode", "hostnameOverride",
                         "showHiddenMetricsForVersion"), "str"),
        "nodePortAddresses": "strings",
        **dict.fromkeys(("featureGates", "iptables", "ipvs", "nftables", "conntrack", "detectLocal", "logging",
                         "winkernel", "clientConnection"), "map"),
    },
    "scheduler": {
        **dict.fromkeys(("enableProfiling", "enableContentionProfiling", "delayCacheUntilActive"), "bool"),
        **dict.fromkeys(("parallelism", "percentageOfNodesToScore", "podInitialBackoffSeconds",
                         "podMaxBackoffSeconds"), "int"),
        # a list of objects: 'json: cannot unmarshal string into Go struct field KubeSchedulerConfiguration.extenders
        # of type v1.Extender' (a null item is an empty object)
        **dict.fromkeys(("profiles", "extenders"), "objects"),
        **dict.fromkeys(("leaderElection", "clientConnection"), "map"),
    },
}
_KIND_NAMES = {"bool": "a boolean (true or false)", "int": "an integer", "str": "a string",
               "strings": "a list of strings", "list": "a list", "map": "a mapping",
               "strmap": "a mapping", "objects": "a list"}
# what each item of a strmap or objects field is
_ITEM_NAMES = {"strmap": "a mapping of strings (quote a number: '0', '100Mi')", "objects": "a list of mappings"}


def config_type_findings(components: Any, aliases: dict[str, str]) -> Iterator[Finding]:
    """Every CONFIG_TYPES field of an extraConfig whose value is not of its JSON type, located."""
    for section, fields in CONFIG_TYPES.items():
        config = getattr(getattr(components, aliases[section]), "extra_config", {})
        for field, kind in fields.items():
            if field in config and (problem := _json_type_problem(field, kind, config[field])):
                yield ("spec", "components", section, "extraConfig", field), problem, "error"
    yield from _unknown_scheduler_fields(getattr(getattr(components, aliases["scheduler"]), "extra_config", {}))
    # the scheduler's own validation: "podMaxBackoffSeconds ... must be greater than or equal to
    # PodInitialBackoffSeconds" (defaults 1 and 10)
    config = getattr(getattr(components, aliases["scheduler"]), "extra_config", {})
    initial, maximum = config.get("podInitialBackoffSeconds", 1), config.get("podMaxBackoffSeconds", 10)
    if all(isinstance(value, int) and not isinstance(value, bool) for value in (initial, maximum)) and \
            maximum < initial:
        set_max = "podMaxBackoffSeconds" in config
        field = "podMaxBackoffSeconds" if set_max else "podInitialBackoffSeconds"
        yield (("spec", "components", "scheduler", "extraConfig", field),
               f"podMaxBackoffSeconds ({maximum}{'' if set_max else ', its default'}) is below "
               f"podInitialBackoffSeconds ({initial}), where the backoff starts: kube-scheduler refuses to start",
               "error")


# The fields of the objects inside KubeSchedulerConfiguration v1 that kubesmith checks (each set accepted by
# v1.36.2): kube-scheduler decodes the whole document strictly, nested objects too ('strict decoding error:
# unknown field "leaderElection.LeaderElect"', or "extenders[0].Bogus"). Keys of a list's items: "name[]".
SCHEDULER_NESTED_FIELDS: dict[str, frozenset[str]] = {
    "leaderElection": frozenset({"leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceLock",
                                 "resourceName", "resourceNamespace"}),
    "clientConnection": frozenset({"kubeconfig", "acceptContentTypes", "contentType", "qps", "burst"}),
    "profiles[]": frozenset({"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"}),
    "extenders[]": frozenset({"urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb",
                              "enableHTTPS", "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources",
                              "ignorable"}),
}


def _unknown_scheduler_fields(config: dict[str, Any]) -> Iterator[Finding]:
    """kube-scheduler decodes its configuration strictly ("strict decoding error: unknown field") and exits;
    the kubelet and kube-proxy fall back to lenient decoding and ignore such a field. Keys are matched
    exactly, as its decoder does: `LeaderElection` is no `leaderElection`. CONFIG_TYPES holds every field of
    KubeSchedulerConfiguration v1 but apiVersion and kind, which kubesmith writes."""
    known = frozenset(CONFIG_TYPES["scheduler"]) | {"apiVersion", "kind"}
    objects: list[tuple[Loc, str, Any, frozenset[str]]] = [((), "KubeSchedulerConfiguration", config, known)]
    for field, fields in SCHEDULER_NESTED_FIELDS.items():
        name = field.removesuffix("[]")
        value = config.get(name)
        if field.endswith("[]"):
            objects += [((name, index), f"{name}[{index}]", item, fields)
                        for index, item in enumerate(value if isinstance(value, list) else ())]
        else:
            objects.append(((name,), name, value, fields))
    for loc, what, value, fields in objects:
        for key in (value if isinstance(value, dict) else ()):
            if key in fields:
                continue
            close = difflib.get_close_matches(str(key), sorted(fields), n=1, cutoff=0.6)
            shown = sorted(fields - {"apiVersion", "kind"})
            hint = f"did you mean {close[0]}?" if close else f"it has {', '.join(shown)}"
            yield (("spec", "components", "scheduler", "extraConfig", *loc, key), f"{what} has no field "
                   f"{yaml_text(key)}, and kube-scheduler refuses to start on an unknown field: {hint}", "error")


def _holds_bad_number(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return not -(1 << 63) <= value <= (1 << 63) - 1
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return any(_holds_bad_number(item) for item in items)


def _json_type_problem(field: str, kind: str, value: Any) -> str | None:
    if value is None:
        return None
    expected = {"bool": bool, "int": int, "str": str, "strings": list, "list": list, "map": dict, "strmap": dict,
                "objects": list}[kind]
    wrong = not isinstance(value, expected) or (kind == "int" and isinstance(value, bool))
    if not wrong and kind in ("strmap", "objects"):
        items = value.items() if kind == "strmap" else enumerate(value)
        want = str if kind == "strmap" else dict
        # (an item holding NaN or a number beyond 64 bits is that error, which the value checks name)
        odd = next(((key, item) for key, item in items if item is not None and not isinstance(item, want)
                    and not _holds_bad_number(item)), None)
        if odd is None:
            return None
        where = f"{field}.{odd[0]}" if kind == "strmap" else f"{field}[{odd[0]}]"
        return f"the component reads {field} as {_ITEM_NAMES[kind]}; {where} is {yaml_text(odd[1])}"
    if not wrong and kind == "strings":
        odd = next((item for item in value if not isinstance(item, str)), None)
        if odd is None:
            return None
        return f"the component reads {field} as {_KIND_NAMES[kind]}; item {value.index(odd)} is {yaml_text(odd)}"
    if wrong:
        hint = " (one item per line, or [A, B])" if kind == "strings" and isinstance(value, str) else ""
        return f"the component reads {field} as {_KIND_NAMES[kind]}{hint}; got {yaml_text(value)}"
    return None


# The TOML type of every field of containerd 1.6's config.toml (version 2): `containerd config default`
# (Debian's 1.6.20), with the CRI registry's tables it leaves empty (pkg/cri/config: Mirror, RegistryConfig,
# TLSConfig, AuthConfig) and the runtime tables (runtimes.<name> as default_runtime). go-toml v1 converts
# no type, not even an integer into a float, and `containerd config dump` and its start stop at the first
# mismatch ("Can't convert 1.5(float64) to int", "Can't convert 10010(int64) to string", "Can't convert
# 1(int64) to float64"); a duration that does not parse stops it too ("time: missing unit in duration").
# "*": a table of names. Fields not listed are left alone (containerd ignores unknown keys), and so are a
# runtime's options, which it decodes for the runtime type when it creates a container.
_CONTAINERD_RUNTIME: dict[str, Any] = {
    **dict.fromkeys(("runtime_type", "runtime_engine", "runtime_root", "runtime_path", "base_runtime_spec",
                     "cni_conf_dir"), "str"),
    "cni_max_conf_num": "int", "container_annotations": "strings", "pod_annotations": "strings",
    "privileged_without_host_devices": "bool", "options": "map",
}
_CRI_TYPES: dict[str, Any] = {
    **dict.fromkeys(("device_ownership_from_security_context", "disable_apparmor", "disable_cgroup",
                     "disable_hugetlb_controller", "disable_proc_mount", "disable_tcp_service", "enable_selinux",
                     "enable_tls_streaming", "enable_unprivileged_icmp", "enable_unprivileged_ports",
                     "ignore_image_defined_volumes", "netns_mounts_under_state_dir", "restrict_oom_score_adj",
                     "systemd_cgroup", "tolerate_missing_hugetlb_controller"), "bool"),
    **dict.fromkeys(("max_concurrent_downloads", "max_container_log_line_size", "selinux_category_range",
                     "stats_collect_period"), "int"),
    **dict.fromkeys(("sandbox_image", "stream_server_address", "stream_server_port", "unset_seccomp_profile"),
                    "str"),
    # read by the CRI plugin as it starts ("invalid stream idle timeout"): without it, no pod
    "stream_idle_timeout": "duration",
    "cni": {**dict.fromkeys(("bin_dir", "conf_dir", "conf_template", "ip_pref"), "str"), "max_conf_num": "int"},
    "containerd": {
        **dict.fromkeys(("default_runtime_name", "snapshotter"), "str"),
        **dict.fromkeys(("disable_snapshot_annotations", "discard_unpacked_layers", "ignore_rdt_not_enabled_errors",
                         "no_pivot"), "bool"),
        "default_runtime": _CONTAINERD_RUNTIME, "untrusted_workload_runtime": _CONTAINERD_RUNTIME,
        "runtimes": {"*": _CONTAINERD_RUNTIME},
    },
    "image_decryption": {"key_model": "str"},
    "registry": {
        "config_path": "str", "mirrors": {"*": {"endpoint": "strings"}}, "headers": {"*": "strings"},
        "auths": {"*": dict.fromkeys(("username", "password", "auth", "identitytoken"), "str")},
        "configs": {"*": {"auth": dict.fromkeys(("username", "password", "auth", "identitytoken"), "str"),
                          "tls": {"insecure_skip_verify": "bool",
                                  **dict.fromkeys(("ca_file", "cert_file", "key_file"), "str")}}},
    },
    "x509_key_pair_streaming": dict.fromkeys(("tls_cert_file", "tls_key_file"), "str"),
}
CONTAINERD_TYPES: dict[str, Any] = {
    **dict.fromkeys(("version", "oom_score"), "int"),
    **dict.fromkeys(("root", "state", "temp", "plugin_dir"), "str"),
    **dict.fromkeys(("disabled_plugins", "required_plugins", "imports"), "strings"),
    "cgroup": {"path": "str"},
    "debug": {**dict.fromkeys(("address", "format", "level"), "str"), **dict.fromkeys(("uid", "gid"), "int")},
    "grpc": {**dict.fromkeys(("address", "tcp_address", "tcp_tls_ca", "tcp_tls_cert", "tcp_tls_key"), "str"),
             **dict.fromkeys(("uid", "gid", "max_recv_message_size", "max_send_message_size"), "int")},
    "ttrpc": {"address": "str", **dict.fromkeys(("uid", "gid"), "int")},
    "metrics": {"address": "str", "grpc_histogram": "bool"},
    "timeouts": {"*": "duration"},
    "proxy_plugins": {"*": dict.fromkeys(("type", "address"), "str")},
    "stream_processors": {"*": {**dict.fromkeys(("accepts", "args", "env"), "strings"),
                                **dict.fromkeys(("returns", "path"), "str")}},
    "plugins": {
        "io.containerd.grpc.v1.cri": _CRI_TYPES,
        "io.containerd.gc.v1.scheduler": {**dict.fromkeys(("deletion_threshold", "mutation_threshold"), "int"),
                                          "pause_threshold": "float",
                                          **dict.fromkeys(("schedule_delay", "startup_delay"), "duration")},
        "io.containerd.internal.v1.opt": {"path": "str"},
        "io.containerd.internal.v1.restart": {"interval": "duration"},
        "io.containerd.metadata.v1.bolt": {"content_sharing_policy": "str"},
        "io.containerd.monitor.v1.cgroups": {"no_prometheus": "bool"},
        "io.containerd.runtime.v1.linux": {**dict.fromkeys(("runtime", "runtime_root", "shim"), "str"),
                                           **dict.fromkeys(("no_shim", "shim_debug"), "bool")},
        "io.containerd.runtime.v2.task": {"platforms": "strings", "sched_core": "bool"},
        "io.containerd.service.v1.diff-service": {"default": "strings"},
        "io.containerd.service.v1.tasks-service": {"rdt_config_file": "str"},
        **dict.fromkeys(("io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                         "io.containerd.snapshotter.v1.native", "io.containerd.snapshotter.v1.zfs"),
                        {"root_path": "str"}),
        "io.containerd.snapshotter.v1.devmapper": {
            **dict.fromkeys(("base_image_size", "fs_options", "fs_type", "pool_name", "root_path"), "str"),
            **dict.fromkeys(("async_remove", "discard_blocks"), "bool")},
        "io.containerd.snapshotter.v1.overlayfs": {"root_path": "str", "upperdir_label": "bool"},
    },
}
_TOML_KINDS = {"int": "an integer", "float": "a number with a decimal point (such as 0.5)", "str": "a string",
               "bool": "a boolean (true or false)", "strings": "a list of strings", "map": "a table",
               "duration": "a Go duration in a string (such as 10s)"}


def toml_type_findings(extra: Any, written: Any, types: dict[str, Any] = CONTAINERD_TYPES,
                       skip: frozenset[tuple[str, ...]] = frozenset(), path: tuple[str, ...] = (),
                       spelled: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    """(keys as spelled, why) for every field of containerd's extraConfig whose TOML type CONTAINERD_TYPES
    contradicts, keys matched as containerd matches them (toml_keys); `skip`: fields checked elsewhere."""
    if not isinstance(extra, dict):
        return
    written = written if isinstance(written, dict) else {}
    by_name = bool(path) and path[-1] in _TOML_NAME_TABLES
    for field, kind in types.items():
        if field == "*":
            matched = [(str(key), key) for key in extra if key not in types]
        else:
            candidates = (field,) if by_name else toml_keys(field)
            key = next((key for key in candidates if key in extra or key in written), None)
            matched = [(field, key)] if key is not None and key in extra else []
        for name, key in matched:
            where, keys = (*path, name), (*spelled, str(key))
            if where in skip or extra[key] is None:
                continue
            if isinstance(kind, dict):
                if isinstance(extra[key], dict):
                    yield from toml_type_findings(extra[key], written.get(key), kind, skip, where, keys)
                    continue
                kind = "map"
            if problem := _toml_type_problem(kind, extra[key]):
                yield keys, f"containerd reads {keys[-1]} as {_TOML_KINDS[kind]}, {problem}"


def _toml_type_problem(kind: str, value: Any) -> str | None:
    """Why go-toml v1 refuses `value` for a field of `kind` (it converts no type), or None."""
    expected = {"int": int, "float": float, "str": str, "duration": str, "bool": bool, "strings": list,
                "map": dict}[kind]
    if not isinstance(value, expected) or (kind == "int" and isinstance(value, bool)):
        return f"not {yaml_text(value)}: it refuses to start (it converts no TOML type into another)"
    if kind == "strings" and (odd := next((item for item in value if not isinstance(item, str)), None)) is not None:
        return f"and item {value.index(odd)} is {yaml_text(odd)}: it refuses to start"
    if kind == "duration":
        try:
            negative = go_duration_ns(value) < 0
        except ValueError:
            return f"not {yaml_text(value)}: it refuses to start"
        if negative:  # a timeout that has passed before it starts, an interval that never waits
            return f"and {yaml_text(value)} is negative: a length of time here is 0 or more"
    return None
