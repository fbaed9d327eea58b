"""Hostile values (issue 32, the values half): each cluster file below ends, quickly, in one located error
(the option path and file:line:col), exit code 1 and no traceback; the legitimate spellings next to them
are taken, and mean what their binary will read.

What is refused: a setting weakened through a spelling the checks did not read as the binary does (Go's
booleans, zero durations, list items carrying separators) or through another route to the same setting
(a flag, a kubelet or kube-proxy extraConfig field); flag values their binary cannot parse (the
registry knows each flag's type); addresses in any but one canonical form or unfit for their role;
NaN, infinities, integers beyond 64 bits, and extraConfig values JSON (TOML for containerd) cannot hold.

Every case runs in this process under a 2-second alarm, as in test_spec_hostile.py.
"""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, kubesmith
from hostile_support import BOUND_SECONDS, assert_one_located_error, bounded
from hostile_support import warm  # noqa: F401 (the module's autouse fixture)

V6_NETWORK = ("  network: {clusterCidr: 'fd01::/48', serviceCidr: 'fd02::/112'}\n"
              "  components: {podNetwork: {enabled: false}}\n")
HEAD = """\
apiVersion: kubesmith.io/v1alpha1
kind: Cluster
metadata:
  name: demo
spec:
  kubernetesVersion: "1.33.2"
"""
HOSTS = "  hosts:\n    - {name: h1, address: 10.0.0.11, roles: [control-plane, etcd, node]}\n"


def component(name: str, body: str) -> str:
    """`spec.components.<name>` holding the flow mapping `body`."""
    return f"  components:\n    {name}: {body}\n"


def kubelet_flag(flag: str, value: str) -> str:
    return component("kubelet", f"{{extraArgs: {{{flag}: {value}}}}}")


def kubelet_config(body: str) -> str:
    return component("kubelet", f"{{extraConfig: {body}}}")


def host(address: str, roles: str = "[node]", name: str = "w1") -> str:
    return HOSTS + f"    - {{name: {name}, address: '{address}', roles: {roles}}}\n"


KUBELET = "spec.components.kubelet"
APISERVER = "spec.components.apiserver"
CIS = "weakens a secure default: breaks CIS"

# name -> (what follows `spec.kubernetesVersion`, option path of the first error, message fragment)
CASES: dict[str, tuple[str, str, str]] = {
    # Go's boolean spellings turn kubelet anonymous access on as much as `true` does
    **{f"value-kubelet-anonymous-{label}": (HOSTS + kubelet_flag("anonymous-auth", spelling),
                                            f"{KUBELET}.extraArgs.anonymous-auth", f"{CIS} 4.2.1")
       for label, spelling in (("1", '"1"'), ("t", '"t"'), ("T", '"T"'), ("TRUE", '"TRUE"'), ("True", '"True"'),
                               ("int-1", "1"), ("yaml-true", "true"))},
    # ... and what Go does not read as a boolean is no boolean at all
    **{f"flag-kubelet-anonymous-{label}": (HOSTS + kubelet_flag("anonymous-auth", spelling),
                                           f"{KUBELET}.extraArgs.anonymous-auth", "reads --anonymous-auth as a boolean")
       for label, spelling in (("yes", '"yes"'), ("on", '"on"'), ("tRUE", '"tRUE"'), ("empty", '""'),
                               ("int-2", "2"))},
    **{f"value-kubelet-iptables-chains-{label}": (HOSTS + kubelet_flag("make-iptables-util-chains", spelling),
                                                  f"{KUBELET}.extraArgs.make-iptables-util-chains", f"{CIS} 4.2.6")
       for label, spelling in (("0", '"0"'), ("f", '"f"'), ("F", '"F"'), ("FALSE", '"FALSE"'), ("int-0", "0"))},
    "value-kubelet-seccomp-False": (HOSTS + kubelet_flag("seccomp-default", '"False"'),
                                    f"{KUBELET}.extraArgs.seccomp-default", f"{CIS} 4.2.14"),
    "value-kubelet-read-only-port-hex": (HOSTS + kubelet_flag("read-only-port", '"0x2817"'),
                                         f"{KUBELET}.extraArgs.read-only-port", f"{CIS} 4.2.4"),
    "value-kubelet-read-only-port-octal": (HOSTS + kubelet_flag("read-only-port", '"024027"'),
                                           f"{KUBELET}.extraArgs.read-only-port", f"{CIS} 4.2.4"),
    **{f"value-kubelet-idle-timeout-{label}": (HOSTS + kubelet_flag("streaming-connection-idle-timeout", spelling),
                                               f"{KUBELET}.extraArgs.streaming-connection-idle-timeout",
                                               f"{CIS} 4.2.5")
       for label, spelling in (("0h0m0s", "0h0m0s"), ("minus-0s", '"-0s"'), ("0.0s", '"0.0s"'), ("0ms", "0ms"))},
    # the kubelet's configuration file reaches the same settings
    "value-kubelet-config-authorization-mode": (HOSTS + kubelet_config("{authorization: {mode: AlwaysAllow}}"),
                                                f"{KUBELET}.extraConfig.authorization.mode", f"{CIS} 4.2.2"),
    "value-kubelet-config-read-only-port": (HOSTS + kubelet_config("{readOnlyPort: 10255}"),
                                            f"{KUBELET}.extraConfig.readOnlyPort", f"{CIS} 4.2.4"),
    "value-kubelet-config-iptables-chains": (HOSTS + kubelet_config("{makeIPTablesUtilChains: false}"),
                                             f"{KUBELET}.extraConfig.makeIPTablesUtilChains", f"{CIS} 4.2.6"),
    "value-kubelet-config-seccomp": (HOSTS + kubelet_config("{seccompDefault: false}"),
                                     f"{KUBELET}.extraConfig.seccompDefault", f"{CIS} 4.2.14"),
    "value-kubelet-config-idle-timeout": (HOSTS + kubelet_config("{streamingConnectionIdleTimeout: 0s}"),
                                          f"{KUBELET}.extraConfig.streamingConnectionIdleTimeout", f"{CIS} 4.2.5"),
    "value-kubelet-config-anonymous-string": (
        HOSTS + kubelet_config("{authentication: {anonymous: {enabled: 'true'}}}"),
        f"{KUBELET}.extraConfig.authentication.anonymous.enabled", "reads authentication.anonymous.enabled as a "
        "boolean"),
    "value-kubelet-config-anonymous-int": (
        HOSTS + kubelet_config("{authentication: {anonymous: {enabled: 1}}}"),
        f"{KUBELET}.extraConfig.authentication.anonymous.enabled", "as a boolean (true or false); got 1"),
    "value-kubelet-config-read-only-port-string": (HOSTS + kubelet_config("{readOnlyPort: '0'}"),
                                                   f"{KUBELET}.extraConfig.readOnlyPort", "as an integer; got '0'"),
    "value-kubelet-config-protect-kernel-string": (HOSTS + kubelet_config("{protectKernelDefaults: 'false'}"),
                                                   f"{KUBELET}.extraConfig.protectKernelDefaults", "as a boolean"),
    "value-kubelet-config-webhook-string": (
        HOSTS + kubelet_config("{authentication: {webhook: {enabled: 'no'}}}"),
        f"{KUBELET}.extraConfig.authentication.webhook.enabled", "extraConfig cannot replace it"),
    # one setting, one place: precedence decides nothing
    "value-kubelet-anonymous-flag-and-config": (
        HOSTS + component("kubelet", "{extraArgs: {anonymous-auth: 'false'}, "
                                     "extraConfig: {authentication: {anonymous: {enabled: true}}}}"),
        f"{KUBELET}.extraConfig.authentication.anonymous.enabled",
        "sets what spec.components.kubelet.extraArgs.anonymous-auth already sets"),
    "value-kubelet-seccomp-option-and-config": (
        HOSTS + component("kubelet", "{seccompDefault: true, extraConfig: {seccompDefault: false}}"),
        f"{KUBELET}.extraConfig.seccompDefault", "sets what spec.components.kubelet.seccompDefault already sets"),
    "value-kubelet-protect-kernel-option-and-flag": (
        HOSTS + component("kubelet", "{protectKernelDefaults: true, extraArgs: {protect-kernel-defaults: 'f'}}"),
        f"{KUBELET}.extraArgs.protect-kernel-defaults", "spec.components.kubelet.protectKernelDefaults already sets"),
    "value-kubelet-idle-timeout-option-and-flag": (
        HOSTS + component("kubelet", "{streamingConnectionIdleTimeout: 4h, "
                                     "extraArgs: {streaming-connection-idle-timeout: 1h}}"),
        f"{KUBELET}.extraArgs.streaming-connection-idle-timeout", "already sets"),
    "value-proxy-metrics-option-and-config": (
        HOSTS + component("proxy", "{metricsBindAddress: '127.0.0.1:10249', "
                                   "extraConfig: {metricsBindAddress: '0.0.0.0:10249'}}"),
        "spec.components.proxy.extraConfig.metricsBindAddress", "already sets"),
    "value-proxy-metrics-flag": (HOSTS + component("proxy", "{extraArgs: {metrics-bind-address: '0.0.0.0:10249'}}"),
                                 "spec.components.proxy.extraArgs.metrics-bind-address",
                                 "ignores --metrics-bind-address"),  # next to --config: extraConfig's is the one
    "value-proxy-metrics-config-v6": (HOSTS + component("proxy", "{extraConfig: {metricsBindAddress: '[::]:10249'}}"),
                                      "spec.components.proxy.extraConfig.metricsBindAddress", f"{CIS} 4.3.1"),
    # list items: one name each
    "value-authorization-comma": (HOSTS + component("apiserver", '{authorizationMode: [Node, "RBAC,AlwaysAllow"]}'),
                                  f"{APISERVER}.authorizationMode[1]", "holds ',' at position 5"),
    "value-authorization-webhook-comma": (
        HOSTS + component("apiserver", '{authorizationMode: [Node, RBAC, "Webhook,AlwaysAllow"]}'),
        f"{APISERVER}.authorizationMode[2]", "holds ','"),
    "value-authorization-quotes": (HOSTS + component("apiserver", """{authorizationMode: [Node, RBAC, '"Node"']}"""),
                                   f"{APISERVER}.authorizationMode[2]", "holds '\"'"),
    "value-authorization-single-quote": (
        HOSTS + component("apiserver", """{authorizationMode: [Node, RBAC, "'AlwaysAllow'"]}"""),
        f"{APISERVER}.authorizationMode[2]", "holds \"'\""),
    "value-authorization-space": (HOSTS + component("apiserver", '{authorizationMode: [Node, "RBAC AlwaysAllow"]}'),
                                  f"{APISERVER}.authorizationMode[1]", "holds ' '"),
    "value-authorization-equals": (HOSTS + component("apiserver", '{authorizationMode: [Node, "RBAC=1"]}'),
                                   f"{APISERVER}.authorizationMode[1]", "holds '='"),
    "value-authorization-tab-free-newline": (
        HOSTS + component("apiserver", '{authorizationMode: [Node, "RBAC\\u00a0"]}'),
        f"{APISERVER}.authorizationMode[1]", "holds '\\xa0'"),
    "value-feature-gate-injection": (HOSTS.replace("  hosts:", '  featureGates: {"AllAlpha=true,Foo": false}\n  hosts:'),
                                     "spec.featureGates.AllAlpha=true,Foo.[key]", "is not a feature gate name"),
    "value-component-gate-comma": (HOSTS + component("kubelet", '{featureGates: {"A,B": true}}'),
                                   f"{KUBELET}.featureGates.A,B.[key]", "is not a feature gate name"),
    "value-admission-comma": (HOSTS + component("apiserver",
                                                '{enableAdmissionPlugins: ["NodeRestriction,AlwaysAdmit"]}'),
                              f"{APISERVER}.enableAdmissionPlugins[0]", "holds ','"),
    "value-admission-empty": (HOSTS + component("apiserver", '{enableAdmissionPlugins: [NodeRestriction, ""]}'),
                              f"{APISERVER}.enableAdmissionPlugins[1]", "is empty"),
    "value-admission-always-admit": (HOSTS + component("apiserver", "{enableAdmissionPlugins: [NodeRestriction, "
                                                                    "AlwaysAdmit]}"),
                                     f"{APISERVER}.enableAdmissionPlugins[1]", "AlwaysAdmit admits every request"),
    "value-cipher-space": (HOSTS + component("apiserver", '{tlsCipherSuites: ["TLS_AES_128_GCM_SHA256 TLS_X"]}'),
                           f"{APISERVER}.tlsCipherSuites[0]", "holds ' '"),
    "value-address-types-comma": (HOSTS + component("apiserver", '{kubeletPreferredAddressTypes: ["InternalIP,'
                                                                 'Hostname"]}'),
                                  f"{APISERVER}.kubeletPreferredAddressTypes[0]", "holds ','"),
    "flag-disable-enabled-admission": (
        HOSTS + component("apiserver", "{extraArgs: {disable-admission-plugins: NodeRestriction}}"),
        f"{APISERVER}.extraArgs.disable-admission-plugins", "disables NodeRestriction, which "
        "spec.components.apiserver.enableAdmissionPlugins enables"),
    "flag-disable-required-admission": (
        HOSTS + component("apiserver",
                          "{extraArgs: {disable-admission-plugins: 'DefaultStorageClass,ServiceAccount'}}"),
        f"{APISERVER}.extraArgs.disable-admission-plugins", "disables ServiceAccount, which CIS 1.2.12 requires"),
    "flag-disable-admission-quoted": (
        HOSTS + component("apiserver", """{extraArgs: {disable-admission-plugins: '"NodeRestriction,X"'}}"""),
        f"{APISERVER}.extraArgs.disable-admission-plugins", "may not hold quotes or whitespace"),
    "flag-admission-control": (HOSTS + component("apiserver", "{extraArgs: {admission-control: AlwaysAdmit}}"),
                               f"{APISERVER}.extraArgs.admission-control",
                               "from spec.components.apiserver.enableAdmissionPlugins"),
    "flag-authorization-config": (HOSTS + component("apiserver", "{extraArgs: {authorization-config: /etc/a.yaml}}"),
                                  f"{APISERVER}.extraArgs.authorization-config",
                                  "from spec.components.apiserver.authorizationMode"),
    "flag-kubelet-client-ca": (HOSTS + kubelet_flag("client-ca-file", "/tmp/ca.crt"),
                               f"{KUBELET}.extraArgs.client-ca-file", "from kubesmith's PKI"),
    "flag-cors-space": (HOSTS + component("apiserver", "{extraArgs: {cors-allowed-origins: 'a.example, b.example'}}"),
                        f"{APISERVER}.extraArgs.cors-allowed-origins", "comma-separated list"),
    # durations as their binary reads them
    **{f"flag-duration-{label}": (HOSTS + component("apiserver", f"{{extraArgs: {{request-timeout: {value}}}}}"),
                                  f"{APISERVER}.extraArgs.request-timeout", fragment)
       for label, value, fragment in (
           ("days", "1d", "is not a Go duration"), ("words", "'5 minutes'", "is not a Go duration"),
           ("exponent", "1e3s", "is not a Go duration"), ("unitless", "5", "'5' is not a Go duration"),
           ("overflow", "300000000h", "longer than Go's longest duration"),
           ("overflow-ns", "9223372036854775808ns", "longer than Go's longest duration"))},
    "flag-duration-kubelet": (HOSTS + kubelet_flag("node-status-update-frequency", "'10'"),
                              f"{KUBELET}.extraArgs.node-status-update-frequency", "as a Go duration"),
    "flag-duration-etcd": (HOSTS + component("etcd", "{extraArgs: {experimental-corrupt-check-time: '1 hour'}}"),
                           "spec.components.etcd.extraArgs.experimental-corrupt-check-time", "as a Go duration"),
    "flag-duration-controller-manager": (
        HOSTS + component("controllerManager", "{extraArgs: {node-monitor-grace-period: forever}}"),
        "spec.components.controllerManager.extraArgs.node-monitor-grace-period", "as a Go duration"),
    "flag-duration-proxy": (HOSTS + component("proxy", "{extraArgs: {iptables-sync-period: 2562048h}}"),
                            "spec.components.proxy.extraArgs.iptables-sync-period", "ignores --iptables-sync-period"),
    "flag-bool-apiserver": (HOSTS + component("apiserver", "{extraArgs: {enable-priority-and-fairness: 'yes'}}"),
                            f"{APISERVER}.extraArgs.enable-priority-and-fairness", "as a boolean"),
    "flag-bool-etcd": (HOSTS + component("etcd", "{extraArgs: {enable-pprof: 'on'}}"),
                       "spec.components.etcd.extraArgs.enable-pprof", "as a boolean"),
    "flag-int-apiserver": (HOSTS + component("apiserver", "{extraArgs: {max-requests-inflight: many}}"),
                           f"{APISERVER}.extraArgs.max-requests-inflight", "as an integer"),
    "flag-int32-overflow": (HOSTS + kubelet_flag("event-burst", "4294967296"),
                            f"{KUBELET}.extraArgs.event-burst", "as an integer (int32"),
    "flag-int-octal-digit": (HOSTS + kubelet_flag("max-open-files", "'09'"),
                             f"{KUBELET}.extraArgs.max-open-files", "as an integer"),
    "flag-float-nan": (HOSTS + component("controllerManager", "{extraArgs: {kube-api-qps: NaN}}"),
                       "spec.components.controllerManager.extraArgs.kube-api-qps", "as a finite number"),
    "value-duration-event-ttl": (HOSTS + component("apiserver", "{eventTtl: 300000000h}"),
                                 f"{APISERVER}.eventTtl", "longer than Go's longest duration"),
    "value-duration-signing": (HOSTS + component("controllerManager", "{signingDuration: 9999999999h}"),
                               "spec.components.controllerManager.signingDuration", "longest duration"),
    "value-duration-idle-timeout": (HOSTS + component("kubelet", "{streamingConnectionIdleTimeout: 2562048h}"),
                                    f"{KUBELET}.streamingConnectionIdleTimeout", "longest duration"),
    # numbers
    "number-renew-fraction-nan": (HOSTS + "  pki: {renewFraction: .nan}\n", "spec.pki.renewFraction",
                                  "not a finite number"),
    "number-renew-fraction-inf": (HOSTS + "  pki: {renewFraction: .inf}\n", "spec.pki.renewFraction",
                                  "not a finite number"),
    "number-renew-fraction-zero": (HOSTS + "  pki: {renewFraction: 0}\n", "spec.pki.renewFraction",
                                   "greater than 0"),
    "number-connect-retry-minus-inf": (HOSTS + "  ssh: {connectRetrySeconds: -.inf}\n",
                                       "spec.ssh.connectRetrySeconds", "not a finite number"),
    "number-connect-retry-nan": (HOSTS + "  ssh: {connectRetrySeconds: .NaN}\n", "spec.ssh.connectRetrySeconds",
                                 "not a finite number"),
    "number-max-parallel-hosts-zero": (HOSTS + "  ssh: {maxParallelHosts: 0}\n", "spec.ssh.maxParallelHosts",
                                       "greater than or equal to 1"),
    "number-max-parallel-hosts-beyond": (HOSTS + "  ssh: {maxParallelHosts: 1001}\n", "spec.ssh.maxParallelHosts",
                                         "less than or equal to 1000"),
    "number-max-parallel-hosts-word": (HOSTS + "  ssh: {maxParallelHosts: many}\n", "spec.ssh.maxParallelHosts",
                                       "valid integer"),
    "number-max-parallel-hosts-fraction": (HOSTS + "  ssh: {maxParallelHosts: 2.5}\n", "spec.ssh.maxParallelHosts",
                                           "valid integer"),
    "number-validity-zero": (HOSTS + "  pki: {certificateValidityDays: 0}\n", "spec.pki.certificateValidityDays",
                             "greater than or equal to 1"),
    "number-ca-validity-beyond": (HOSTS + "  pki: {caValidityDays: 36501}\n", "spec.pki.caValidityDays",
                                  "less than or equal to 36500"),
    "number-agent-check-interval-zero": (HOSTS + component("agent", "{checkInterval: 0}"),
                                         "spec.components.agent.checkInterval", "greater than or equal to 1"),
    "number-agent-renew-fraction-nan": (HOSTS + component("agent", "{renewFraction: .nan}"),
                                        "spec.components.agent.renewFraction", "not a finite number"),
    "number-vip-advert-zero": (HOSTS + component("controlPlaneVip", "{advertInterval: 0}"),
                               "spec.components.controlPlaneVip.advertInterval", "greater than or equal to 1"),
    "number-image-deadline-inf": (HOSTS + component("containerRuntime", "{loadDeadline: .inf}"),
                                  "spec.components.containerRuntime.loadDeadline", "not a finite number"),
    "number-image-deadline-huge": (HOSTS + component("containerRuntime", "{loadDeadline: 1.0e+300}"),
                                   "spec.components.containerRuntime.loadDeadline", "less than or equal to 86400"),
    "number-snapshot-interval-zero": (HOSTS + component("etcd", "{snapshots: {interval: 0s}}"),
                                      "spec.components.etcd.snapshots.interval", "a duration must be positive"),
    "number-snapshot-interval-huge": (HOSTS + component("etcd", "{snapshots: {interval: 99999999999999d}}"),
                                      "spec.components.etcd.snapshots.interval", "is longer than 36500 days"),
    "number-ca-validity-zero": (HOSTS + component("caService", "{validity: 0m}"),
                                "spec.components.caService.validity", "a duration must be positive"),
    "number-token-ttl-zero": (HOSTS + component("caService", "{tokenTtl: 0.0h}"),
                              "spec.components.caService.tokenTtl", "a duration must be positive"),
    "number-config-nan": (HOSTS + kubelet_config("{eventRecordQPS: .nan}"), f"{KUBELET}.extraConfig.eventRecordQPS",
                          "not a finite number"),
    "number-config-inf-nested": (HOSTS + kubelet_config("{evictionHard: {x: [1, .inf]}}"),
                                 f"{KUBELET}.extraConfig.evictionHard.x[1]", "not a finite number"),
    "number-config-huge": (HOSTS + kubelet_config("{maxPods: 18446744073709551616}"),
                           f"{KUBELET}.extraConfig.maxPods", "does not fit in 64 bits"),
    "number-integer-5000-digits": (HOSTS + kubelet_config("{maxPods: " + "1" * 5000 + "}"),
                                   f"{KUBELET}.extraConfig.maxPods", "an integer of 5,000 digits"),
    "flag-int-5000-digits": (HOSTS + kubelet_flag("read-only-port", '"' + "1" * 5000 + '"'),
                             f"{KUBELET}.extraArgs.read-only-port", "reads --read-only-port as an integer"),
    "number-containerd-nan": (HOSTS + component("containerRuntime", "{extraConfig: {timeout: .nan}}"),
                              "spec.components.containerRuntime.extraConfig.timeout", "not a finite number"),
    "number-audit-huge": (HOSTS + component("apiserver", "{auditLog: {maxAge: 99999999999999999999}}"),
                          f"{APISERVER}.auditLog.maxAge", "does not fit in 64 bits"),
    # extraConfig fields of the wrong JSON type stop the binary at its start (issue 32, second round)
    "type-kubelet-ciphers-string": (HOSTS + kubelet_config("{tlsCipherSuites: TLS_AES_128_GCM_SHA256}"),
                                    f"{KUBELET}.extraConfig.tlsCipherSuites",
                                    "reads tlsCipherSuites as a list of strings (one item per line, or [A, B]); got "
                                    "'TLS_AES_128_GCM_SHA256'"),
    "type-kubelet-authentication-string": (HOSTS + kubelet_config("{authentication: x}"),
                                           f"{KUBELET}.extraConfig.authentication",
                                           "reads authentication as a mapping; got 'x'"),
    "type-kubelet-max-pods-string": (HOSTS + kubelet_config("{maxPods: '110'}"), f"{KUBELET}.extraConfig.maxPods",
                                     "as an integer; got '110'"),
    "type-kubelet-qps-float": (HOSTS + kubelet_config("{registryPullQPS: 5.5}"),
                               f"{KUBELET}.extraConfig.registryPullQPS", "as an integer; got 5.5"),
    "type-kubelet-fail-swap-string": (HOSTS + kubelet_config("{failSwapOn: 'false'}"),
                                      f"{KUBELET}.extraConfig.failSwapOn", "as a boolean (true or false)"),
    "type-kubelet-eviction-list": (HOSTS + kubelet_config("{evictionHard: ['memory.available<100Mi']}"),
                                   f"{KUBELET}.extraConfig.evictionHard", "as a mapping; got a list"),
    "type-kubelet-sysctls-item": (HOSTS + kubelet_config("{allowedUnsafeSysctls: ['net.core.somaxconn', 1]}"),
                                  f"{KUBELET}.extraConfig.allowedUnsafeSysctls", "item 1 is 1"),
    "type-proxy-mode-int": (HOSTS + component("proxy", "{extraConfig: {mode: 1}}"),
                            "spec.components.proxy.extraConfig.mode", "reads mode as a string; got 1"),
    "type-proxy-conntrack-string": (HOSTS + component("proxy", "{extraConfig: {conntrack: none}}"),
                                    "spec.components.proxy.extraConfig.conntrack", "as a mapping; got 'none'"),
    "type-scheduler-profiles-map": (HOSTS + component("scheduler", "{extraConfig: {profiles: {a: 1}}}"),
                                    "spec.components.scheduler.extraConfig.profiles", "as a list; got a mapping"),
    "number-scheduler-backoff": (HOSTS + component("scheduler", "{extraConfig: {podInitialBackoffSeconds: 2, "
                                                                "podMaxBackoffSeconds: 1}}"),
                                 "spec.components.scheduler.extraConfig.podMaxBackoffSeconds",
                                 "podMaxBackoffSeconds (1) is below podInitialBackoffSeconds (2)"),
    # extraConfig holds what its document's format can
    "value-config-date": (HOSTS + kubelet_config("{since: 2024-01-01}"), f"{KUBELET}.extraConfig.since",
                          "is a YAML timestamp, which JSON cannot hold"),
    "value-config-timestamp": (HOSTS + kubelet_config("{at: 2024-01-01 10:00:00}"), f"{KUBELET}.extraConfig.at",
                               "YAML timestamp"),
    "value-config-binary": (HOSTS + kubelet_config("{blob: !!binary aGVsbG8=}"), f"{KUBELET}.extraConfig.blob",
                            "!!binary"),
    "value-config-set": (HOSTS + kubelet_config("{modes: !!set {a, b}}"), f"{KUBELET}.extraConfig.modes", "!!set"),
    "value-config-int-key": (HOSTS + kubelet_config("{1: a}"), f"{KUBELET}.extraConfig.1",
                             "the key 1 is an integer; JSON keys are strings"),
    "value-config-bool-key": (HOSTS + kubelet_config("{x: {on: 1}}"), f"{KUBELET}.extraConfig.x.true",
                              "the key true is a boolean"),
    "value-containerd-null": (HOSTS + component("containerRuntime", "{extraConfig: {plugins: {x: null}}}"),
                              "spec.components.containerRuntime.extraConfig.plugins.x",
                              "null cannot be written to TOML"),
    "value-containerd-date": (HOSTS + component("containerRuntime", "{extraConfig: {d: 2020-02-02}}"),
                              "spec.components.containerRuntime.extraConfig.d", "which TOML cannot hold"),
    "value-proxy-config-set": (HOSTS + component("proxy", "{extraConfig: {s: !!set {a}}}"),
                               "spec.components.proxy.extraConfig.s", "!!set"),
    "value-scheduler-config-binary": (HOSTS + component("scheduler", "{extraConfig: {b: !!binary aGk=}}"),
                                      "spec.components.scheduler.extraConfig.b", "!!binary"),
    # addresses: one canonical form, fit for the role
    "addr-host-zone": (host("fe80::1%eth0"), "spec.hosts[1].address", "has a zone suffix"),
    "addr-host-mapped": (host("::ffff:10.0.0.12"), "spec.hosts[1].address", "IPv4-mapped IPv6 address: write "
                         "'10.0.0.12'"),
    "addr-host-mapped-duplicate": (host("::ffff:10.0.0.11"), "spec.hosts[1].address", "IPv4-mapped"),
    "addr-host-mapped-loopback": (host("::ffff:127.0.0.1"), "spec.hosts[1].address", "IPv4-mapped"),
    "addr-host-multicast": (host("224.0.0.5"), "spec.hosts[1].address", "is a multicast address"),
    "addr-host-multicast-v6": (host("ff02::1"), "spec.hosts[1].address", "is a multicast address"),
    "addr-host-broadcast": (host("255.255.255.255"), "spec.hosts[1].address", "is the broadcast address"),
    "addr-host-unspecified": (host("0.0.0.0"), "spec.hosts[1].address", "is the unspecified address"),
    "addr-host-unspecified-v6": (host("::"), "spec.hosts[1].address", "is the unspecified address"),
    "addr-host-loopback-node": (host("127.0.0.5"), "spec.hosts[1].address", "is a loopback address"),
    "addr-host-loopback-v6-etcd": (host("::1", "[etcd]"), "spec.hosts[1].address", "is a loopback address"),
    "addr-host-link-local": (host("169.254.10.1"), "spec.hosts[1].address", "is a link-local address"),
    "addr-host-link-local-v6": (host("fe80::5"), "spec.hosts[1].address", "is a link-local address"),
    "addr-control-plane-multicast": ("  hosts:\n    - {name: h1, address: 239.1.1.1, roles: [control-plane, etcd, "
                                     "node]}\n", "spec.hosts[0].address", "is a multicast address: a control-plane"),
    "addr-duplicate-v6-spelling": ("  hosts:\n    - {name: h1, address: 'fd00::1', roles: [control-plane, etcd, "
                                   "node]}\n    - {name: h2, address: 'fd00:0::1', roles: [node]}\n" + V6_NETWORK,
                                   "spec.hosts[1].address", "'fd00::1' is already used by spec.hosts[0]"),
    "addr-duplicate-v6-long": ("  hosts:\n    - {name: h1, address: 'fd00:0000:0000:0000:0000:0000:0000:0001', "
                               "roles: [control-plane, etcd, node]}\n    - {name: h2, address: 'fd00::1', "
                               "roles: [node]}\n" + V6_NETWORK,
                               "spec.hosts[1].address", "already used by spec.hosts[0]"),
    "addr-vip-outside-segment": (HOSTS + "  controlPlaneVIP: 10.0.1.10\n", "spec.controlPlaneVIP",
                                 "outside every control-plane host's network"),
    "addr-vip-v6-outside-segment": ("  hosts:\n    - {name: h1, address: 'fd00::11', roles: [control-plane, etcd, "
                                    "node]}\n" + V6_NETWORK + "  controlPlaneVIP: 'fd00:0:0:1::10'\n",
                                    "spec.controlPlaneVIP",
                                    "the /64 around each host's address"),
    "addr-vip-in-service-range": (HOSTS + "  controlPlaneVIP: 10.32.0.5\n", "spec.controlPlaneVIP",
                                  "lies inside serviceCidr 10.32.0.0/16"),
    "addr-vip-in-pod-range": (HOSTS + "  controlPlaneVIP: 10.200.3.3\n", "spec.controlPlaneVIP",
                              "lies inside clusterCidr 10.200.0.0/16"),
    "addr-vip-multicast": (HOSTS + "  controlPlaneVIP: 224.0.0.18\n", "spec.controlPlaneVIP", "multicast"),
    "addr-vip-zone": (HOSTS + "  controlPlaneVIP: 'fe80::10%eth0'\n", "spec.controlPlaneVIP", "zone suffix"),
    "addr-vip-mapped": (HOSTS + "  controlPlaneVIP: '::ffff:10.0.0.10'\n", "spec.controlPlaneVIP", "IPv4-mapped"),
    "addr-service-multicast": (HOSTS + "  network: {serviceCidr: 224.1.0.0/16}\n", "spec.network.serviceCidr",
                               "holds multicast addresses"),
    "addr-pods-loopback": (HOSTS + "  network: {clusterCidr: 127.0.0.0/8}\n", "spec.network.clusterCidr",
                           "holds loopback addresses"),
    "addr-pods-link-local": (HOSTS + "  network: {clusterCidr: 169.254.0.0/16}\n", "spec.network.clusterCidr",
                             "holds link-local addresses"),
    "addr-pods-unspecified": (HOSTS + "  network: {clusterCidr: 0.0.0.0/8}\n", "spec.network.clusterCidr",
                              "holds the unspecified address"),
    "addr-service-mapped": (HOSTS + "  network: {serviceCidr: '::ffff:10.32.0.0/112'}\n", "spec.network.serviceCidr",
                            "IPv4-mapped IPv6 range"),
    "addr-dns-ip-zone": (HOSTS + "  network: {dnsServiceIp: 'fd00::a%1'}\n", "spec.network.dnsServiceIp",
                         "zone suffix"),
    "addr-advertise-multicast": (HOSTS + component("apiserver", "{advertiseAddress: 224.0.0.1}"),
                                 f"{APISERVER}.advertiseAddress", "is a multicast address"),
    "addr-advertise-broadcast": (HOSTS + component("apiserver", "{advertiseAddress: 255.255.255.255}"),
                                 f"{APISERVER}.advertiseAddress", "is the broadcast address"),
    "addr-endpoint-zone": (HOSTS + "  controlPlaneEndpoint: '[fe80::1%eth0]:6443'\n", "spec.controlPlaneEndpoint",
                           "must be HOST:PORT"),
    "addr-extra-san-mapped": (HOSTS + component("apiserver", "{extraSans: ['::ffff:192.0.2.1']}"),
                              f"{APISERVER}.extraSans[0]", "IPv4-mapped"),
    "addr-extra-san-name": (HOSTS + component("apiserver", "{extraSans: ['api example']}"),
                            f"{APISERVER}.extraSans[0]", "must be an IP address or a DNS name"),
    # IPv6 spellings of an IPv4 address (issue 32, second round): no host holds one
    "addr-host-ipv4-compatible": (host("::10.0.0.12"), "spec.hosts[1].address",
                                  "IPv4-compatible IPv6 address (::/96, deprecated by RFC 4291), which stands for an "
                                  "IPv4 address no host holds as IPv6: write '10.0.0.12'"),
    "addr-host-siit": (host("::ffff:0:10.0.0.12"), "spec.hosts[1].address",
                       "IPv4-translated IPv6 address (::ffff:0:0:0/96, SIIT)"),
    "addr-host-nat64": (host("64:ff9b::10.0.0.12"), "spec.hosts[1].address",
                        "in NAT64's well-known prefix 64:ff9b::/96 (RFC 6052), standing for 10.0.0.12"),
    "addr-control-plane-nat64": ("  hosts:\n    - {name: h1, address: '64:ff9b::a00:b', roles: [control-plane, etcd, "
                                 "node]}\n" + V6_NETWORK, "spec.hosts[0].address", "NAT64's well-known prefix"),
    "addr-vip-nat64": ("  hosts:\n    - {name: h1, address: 'fd00::11', roles: [control-plane, etcd, node]}\n" +
                       V6_NETWORK + "  controlPlaneVIP: '64:ff9b::10.0.0.10'\n", "spec.controlPlaneVIP",
                       "NAT64's well-known prefix"),
    "addr-vip-ipv4-compatible": (HOSTS + "  controlPlaneVIP: '::10.0.0.10'\n", "spec.controlPlaneVIP",
                                 "IPv4-compatible"),
    "addr-advertise-siit": (HOSTS + component("apiserver", "{advertiseAddress: '::ffff:0:10.0.0.11'}"),
                            f"{APISERVER}.advertiseAddress", "IPv4-translated"),
    # a certificate names what clients dial
    "addr-extra-san-broadcast": (HOSTS + component("apiserver", "{extraSans: ['255.255.255.255']}"),
                                 f"{APISERVER}.extraSans[0]", "is the broadcast address, which no client dials"),
    "addr-extra-san-unspecified": (HOSTS + component("apiserver", "{extraSans: [api.example.com, '0.0.0.0']}"),
                                   f"{APISERVER}.extraSans[1]", "is the unspecified address"),
    "addr-extra-san-unspecified-v6": (HOSTS + component("apiserver", "{extraSans: ['::']}"),
                                      f"{APISERVER}.extraSans[0]", "is the unspecified address"),
    "addr-extra-san-multicast": (HOSTS + component("apiserver", "{extraSans: ['239.0.0.1']}"),
                                 f"{APISERVER}.extraSans[0]", "is a multicast address"),
    "addr-extra-san-multicast-v6": (HOSTS + component("apiserver", "{extraSans: ['ff02::1']}"),
                                    f"{APISERVER}.extraSans[0]", "is a multicast address"),
    "addr-extra-san-this-network": (HOSTS + component("apiserver", "{extraSans: ['0.0.0.5']}"),
                                    f"{APISERVER}.extraSans[0]", "0.0.0.0/8"),
    "addr-extra-san-zone": (HOSTS + component("apiserver", "{extraSans: ['fe80::1%eth0']}"),
                            f"{APISERVER}.extraSans[0]", "has a zone suffix"),
    # invisible format characters (Unicode Cf) read one way and reach argv or a file as another
    "char-flag-bidi-override": (HOSTS + component("apiserver", '{extraArgs: {cors-allowed-origins: "a\\u202eb"}}'),
                                f"{APISERVER}.extraArgs.cors-allowed-origins",
                                "contains an invisible format character (U+202E) at position 2"),
    "char-path-zero-width-space": (HOSTS + component("etcd", '{dataDir: "/var/lib/et\\u200bcd"}'),
                                   "spec.components.etcd.dataDir", "invisible format character (U+200B)"),
    "char-config-byte-order-mark": (HOSTS + kubelet_config('{providerID: "\\ufeffaws:///x"}'),
                                    f"{KUBELET}.extraConfig.providerID", "invisible format character (U+FEFF)"),
    "char-flag-name-zero-width-joiner": (HOSTS + kubelet_flag('"v\\u200d"', "2"), f"{KUBELET}.extraArgs['v\\u200d']",
                                         "invisible format character (U+200D)"),
    "char-host-label-lrm": (HOSTS.replace("node]}", 'node], labels: {zone: "a\\u200e"}}'),
                            "spec.hosts[0].labels.zone", "invisible format character (U+200E)"),
    # messages spell values as YAML does (null, true, a list), never as Python does
    "value-config-path-null": (HOSTS + kubelet_config("{staticPodPath: null}"), f"{KUBELET}.extraConfig.staticPodPath",
                               "null is no path: it must be an absolute path"),
    "value-config-path-list": (HOSTS + kubelet_config("{volumePluginDir: [/a]}"),
                               f"{KUBELET}.extraConfig.volumePluginDir", "a list is no path"),
    "value-flag-null": (HOSTS + kubelet_flag("v", "null"), f"{KUBELET}.extraArgs.v",
                        "a flag value must be a string, integer or boolean, got null"),
    "value-config-duration-bool": (HOSTS + kubelet_config("{syncFrequency: true}"),
                                   f"{KUBELET}.extraConfig.syncFrequency", "as a Go duration such as 90s; got true"),
    "value-option-bool-for-int": (HOSTS + component("kubelet", "{maxPods: true}"), f"{KUBELET}.maxPods",
                                  "got true (a boolean)"),
    "value-undefined-alias": (HOSTS + "  network: {dnsDomain: *domain}\n", "(document)",
                              "found undefined alias '*domain' (no anchor &domain before it)"),
    # durations: ASCII digits only (Python's \d takes any script's), no negative lengths, no zero periods,
    # extraConfig's duration fields read as their component reads them, and what two fields must agree on
    "dur-flag-arabic-indic-digit": (HOSTS + component("apiserver", "{extraArgs: {request-timeout: '\u0665m'}}"),
                                    f"{APISERVER}.extraArgs.request-timeout", "is not a Go duration"),
    "dur-event-ttl-arabic-indic-digit": (HOSTS + component("apiserver", "{eventTtl: '\u0661h'}"),
                                         f"{APISERVER}.eventTtl", "is not a Go duration"),
    "dur-event-ttl-negative": (HOSTS + component("apiserver", "{eventTtl: -1h}"), f"{APISERVER}.eventTtl",
                               "'-1h' is negative"),
    "dur-shutdown-grace-negative": (HOSTS + component("kubelet", "{shutdownGracePeriod: -30s}"),
                                    f"{KUBELET}.shutdownGracePeriod", "is negative"),
    "dur-signing-negative": (HOSTS + component("controllerManager", "{signingDuration: -1h}"),
                             "spec.components.controllerManager.signingDuration", "is negative"),
    "dur-signing-zero": (HOSTS + component("controllerManager", "{signingDuration: 0s}"),
                         "spec.components.controllerManager.signingDuration", "'0s' is zero"),
    "dur-flag-sync-frequency-negative": (HOSTS + kubelet_flag("sync-frequency", "'-1h'"),
                                         f"{KUBELET}.extraArgs.sync-frequency", "is negative"),
    "dur-flag-status-frequency-zero": (HOSTS + kubelet_flag("node-status-update-frequency", "0s"),
                                       f"{KUBELET}.extraArgs.node-status-update-frequency", "is zero"),
    # in the configuration file 0s means the kubelet's default (tests/test_hostile_components.py), not -10s
    "dur-config-status-frequency-negative": (HOSTS + kubelet_config("{nodeStatusUpdateFrequency: -10s}"),
                                             f"{KUBELET}.extraConfig.nodeStatusUpdateFrequency", "is negative"),
    # null in a non-pointer duration stops the kubelet ('time: invalid duration ""')
    "dur-config-sync-frequency-null": (HOSTS + kubelet_config("{syncFrequency: null}"),
                                       f"{KUBELET}.extraConfig.syncFrequency", "got null"),
    "dur-config-sync-frequency-words": (HOSTS + kubelet_config("{syncFrequency: 5 minutes}"),
                                        f"{KUBELET}.extraConfig.syncFrequency", "is not a Go duration"),
    "dur-config-image-gc-age-days": (HOSTS + kubelet_config("{imageMinimumGCAge: 1d}"),
                                     f"{KUBELET}.extraConfig.imageMinimumGCAge", "'1d' is not a Go duration"),
    "dur-config-webhook-cache-ttl": (HOSTS + kubelet_config("{authentication: {webhook: {cacheTTL: 1d}}}"),
                                     f"{KUBELET}.extraConfig.authentication.webhook.cacheTTL", "not a Go duration"),
    "dur-config-cache-ttl-number": (HOSTS + kubelet_config("{authorization: {webhook: {cacheAuthorizedTTL: 300}}}"),
                                    f"{KUBELET}.extraConfig.authorization.webhook.cacheAuthorizedTTL",
                                    "as a Go duration such as 90s; got 300"),
    "dur-proxy-sync-period": (HOSTS + component("proxy", "{extraConfig: {iptables: {syncPeriod: 1d}}}"),
                              "spec.components.proxy.extraConfig.iptables.syncPeriod", "not a Go duration"),
    "dur-scheduler-lease": (HOSTS + component("scheduler", "{extraConfig: {leaderElection: {leaseDuration: 1d}}}"),
                            "spec.components.scheduler.extraConfig.leaderElection.leaseDuration",
                            "not a Go duration"),
    "dur-etcd-heartbeat-election": (HOSTS + component("etcd", "{heartbeatInterval: 500, electionTimeout: 600}"),
                                    "spec.components.etcd.electionTimeout", "less than 5 times heartbeatInterval"),
    # an upper bound below its start (issue 32, second round)
    "number-ca-max-delay-below-initial": (HOSTS + component("caService", "{failedAuthDelay: 5, maxFailedAuthDelay: 1}"),
                                          "spec.components.caService.maxFailedAuthDelay",
                                          "1 s is below failedAuthDelay (5 s), where the delay starts"),
    "number-ca-delay-above-default-max": (HOSTS + component("caService", "{failedAuthDelay: 30}"),
                                          "spec.components.caService.failedAuthDelay",
                                          "above maxFailedAuthDelay (10 s, its default)"),
    "number-kubelet-gc-low-above-high": (HOSTS + kubelet_config("{imageGCLowThresholdPercent: 90}"),
                                         f"{KUBELET}.extraConfig.imageGCLowThresholdPercent",
                                         "low threshold (90%) is not below its high threshold (85%)"),
    "number-kubelet-gc-equal": (HOSTS + kubelet_config("{imageGCLowThresholdPercent: 70, "
                                                       "imageGCHighThresholdPercent: 70}"),
                                f"{KUBELET}.extraConfig.imageGCLowThresholdPercent", "the kubelet refuses to start"),
    "number-kubelet-gc-flag-high-below-low": (HOSTS + kubelet_flag("image-gc-high-threshold", "50"),
                                              f"{KUBELET}.extraArgs.image-gc-high-threshold",
                                              "low threshold (80%) is not below its high threshold (50%)"),
    "dur-kubelet-gc-max-age-below-min": (HOSTS + kubelet_config("{imageMinimumGCAge: 1h, imageMaximumGCAge: 30m}"),
                                         f"{KUBELET}.extraConfig.imageMaximumGCAge",
                                         "30m is not longer than imageMinimumGCAge (1h)"),
    "dur-critical-pods-beyond-grace": (
        HOSTS + component("kubelet", "{shutdownGracePeriod: 10s, shutdownGracePeriodCriticalPods: 20s}"),
        f"{KUBELET}.shutdownGracePeriodCriticalPods", "longer than shutdownGracePeriod (10s)"),
    "dur-etcd-retention-days": (HOSTS + component("etcd", "{autoCompactionRetention: '1d'}"),
                                "spec.components.etcd.autoCompactionRetention",
                                "a whole number (hours, or revisions in revision mode) or a Go duration"),
    # the retention is read as the mode says (issue 32, second round)
    "dur-etcd-retention-periodic-overflow": (HOSTS + component("etcd", "{autoCompactionRetention: '3000000'}"),
                                             "spec.components.etcd.autoCompactionRetention",
                                             "longer than Go's longest duration (2562047h)"),
    "dur-etcd-retention-revision-duration": (HOSTS + component("etcd", "{autoCompactionMode: revision, "
                                                                       "autoCompactionRetention: 30m}"),
                                             "spec.components.etcd.autoCompactionRetention",
                                             "in revision mode etcd keeps a number of revisions"),
    "dur-etcd-compaction-mode-unknown": (HOSTS + component("etcd", "{autoCompactionMode: hourly}"),
                                         "spec.components.etcd.autoCompactionMode", "'periodic' or 'revision'"),
    "flag-etcd-compaction-mode": (HOSTS + component("etcd", "{extraArgs: {auto-compaction-mode: revision}}"),
                                  "spec.components.etcd.extraArgs.auto-compaction-mode",
                                  "from spec.components.etcd.autoCompactionMode: set that option instead"),
    "dur-etcd-retention-arabic-indic": (HOSTS + component("etcd", "{autoCompactionRetention: '\u0668'}"),
                                        "spec.components.etcd.autoCompactionRetention", "not a Go duration"),
    # addresses fit for their role, wherever the file names one
    "addr-host-this-network": (host("0.1.2.3"), "spec.hosts[1].address", "0.0.0.0/8 (\"this network\""),
    "addr-host-reserved": (host("240.0.0.7"), "spec.hosts[1].address", "a reserved address (240.0.0.0/4)"),
    "addr-vip-broadcast": (HOSTS + "  controlPlaneVIP: 10.0.0.255\n", "spec.controlPlaneVIP",
                           "is the broadcast address of 10.0.0.0/24"),
    "addr-vip-network": (HOSTS + "  controlPlaneVIP: 10.0.0.0\n", "spec.controlPlaneVIP",
                         "is the network address of 10.0.0.0/24"),
    "addr-dns-ip-broadcast": (HOSTS + "  network: {dnsServiceIp: 10.32.255.255}\n", "spec.network.dnsServiceIp",
                              "broadcast address of serviceCidr 10.32.0.0/16"),
    "addr-service-reserved": (HOSTS + "  network: {serviceCidr: 240.0.0.0/4}\n", "spec.network.serviceCidr",
                              "holds reserved (240.0.0.0/4) addresses"),
    "addr-service-too-large": (HOSTS + "  network: {serviceCidr: 11.0.0.0/8}\n", "spec.network.serviceCidr",
                               "a prefix of /12 or longer"),
    "addr-service-v6-too-large": ("  hosts:\n    - {name: h1, address: 'fd00::11', roles: [control-plane, etcd, "
                                  "node]}\n  network: {clusterCidr: 'fd01::/48', serviceCidr: 'fd02::/64'}\n"
                                  "  components: {podNetwork: {enabled: false}}\n", "spec.network.serviceCidr",
                                  "a prefix of /108 or longer"),
    "addr-upstream-multicast": (HOSTS + component("coreDns", "{upstream: ['224.0.0.251']}"),
                                "spec.components.coreDns.upstream[0]", "multicast address, which a pod cannot use"),
    "addr-upstream-zone": (HOSTS + component("coreDns", "{upstream: ['fe80::1%eth0']}"),
                           "spec.components.coreDns.upstream[0]", "has a zone suffix"),
    "addr-upstream-unspecified": (HOSTS + component("coreDns", "{upstream: ['0.0.0.0:53']}"),
                                  "spec.components.coreDns.upstream[0]", "the unspecified address"),
    "addr-upstream-stub-resolver": (HOSTS + component("coreDns", "{upstream: ['127.0.0.53']}"),
                                    "spec.components.coreDns.upstream[0]", "systemd-resolved's stub resolver"),
    "addr-upstream-loopback-v6": (HOSTS + component("coreDns", "{upstream: ['[::1]:53']}"),
                                  "spec.components.coreDns.upstream[0]", "a loopback address"),
    "addr-stub-domain-mapped": (HOSTS + component("coreDns", "{stubDomains: {corp.example: ['::ffff:10.0.0.2']}}"),
                                "spec.components.coreDns.stubDomains.corp.example[0]", "IPv4-mapped"),
    "addr-cluster-dns-unspecified": (HOSTS + component("kubelet", "{clusterDns: ['0.0.0.0']}"),
                                     f"{KUBELET}.clusterDns[0]", "is the unspecified address"),
    "addr-endpoint-unspecified": (HOSTS + "  controlPlaneEndpoint: '0.0.0.0:6443'\n", "spec.controlPlaneEndpoint",
                                  "the host is the unspecified address"),
    "addr-endpoint-multicast": (HOSTS + "  controlPlaneEndpoint: '224.0.0.1:6443'\n", "spec.controlPlaneEndpoint",
                                "the host is a multicast address"),
    "addr-ca-url-unspecified": (HOSTS + component("agent", "{caUrls: ['https://0.0.0.0:8443']}"),
                                "spec.components.agent.caUrls[0]", "the unspecified address"),
    "addr-ca-url-multicast-v6": (HOSTS + component("agent", "{caUrls: ['https://[ff02::1]:8443']}"),
                                 "spec.components.agent.caUrls[0]", "a multicast address"),
    "addr-controller-manager-pods-loopback": (HOSTS + component("controllerManager", "{clusterCidr: 127.0.0.0/8}"),
                                              "spec.components.controllerManager.clusterCidr",
                                              "holds loopback addresses"),
    "addr-proxy-pods-multicast": (HOSTS + component("proxy", "{clusterCidr: 224.0.0.0/8}"),
                                  "spec.components.proxy.clusterCidr", "holds multicast addresses"),
    "addr-proxy-flag-pods-multicast": (HOSTS + component("proxy", "{extraArgs: {cluster-cidr: 224.0.0.0/4}}"),
                                       "spec.components.proxy.extraArgs.cluster-cidr", "ignores --cluster-cidr"),
    "label-node-role": (HOSTS.replace("node]}", "node], labels: {node-role.kubernetes.io/control-plane: ''}}"),
                        "spec.hosts[0].labels.node-role.kubernetes.io/control-plane",
                        "the kubelet refuses to start with the label"),
    "label-kubernetes-io": (HOSTS.replace("node]}", "node], labels: {kubernetes.io/role: x}}"),
                            "spec.hosts[0].labels.kubernetes.io/role", "refuses to start"),
    # authorization: what kubesmith sets, through any route, and what the benchmark forbids
    "auth-admission-empty": (HOSTS + component("apiserver", "{enableAdmissionPlugins: []}"),
                             f"{APISERVER}.enableAdmissionPlugins", "NodeRestriction is missing"),
    "auth-admission-without-node-restriction": (
        HOSTS + component("apiserver", "{enableAdmissionPlugins: [EventRateLimit]}"),
        f"{APISERVER}.enableAdmissionPlugins", "CIS 1.2.14"),
    "auth-kubelet-config-webhook-off": (
        HOSTS + kubelet_config("{authorization: {mode: Webhook}, authentication: {webhook: {enabled: false}}}"),
        f"{KUBELET}.extraConfig.authentication.webhook.enabled", "extraConfig cannot replace it"),
    "auth-kubelet-flag-webhook-off": (HOSTS + kubelet_flag("authentication-token-webhook", "'false'"),
                                      f"{KUBELET}.extraArgs.authentication-token-webhook", "extraArgs cannot replace"),
    "auth-kubelet-config-client-ca": (HOSTS + kubelet_config("{authentication: {x509: {clientCAFile: ''}}}"),
                                      f"{KUBELET}.extraConfig.authentication.x509.clientCAFile", "kubesmith's PKI"),
    "auth-kubelet-config-tls-cert": (HOSTS + kubelet_config("{serverTLSBootstrap: true, tlsCertFile: ''}"),
                                     f"{KUBELET}.extraConfig.tlsCertFile", "kubesmith's PKI"),
    "auth-kubelet-config-cluster-dns": (HOSTS + kubelet_config("{clusterDNS: ['0.0.0.0']}"),
                                        f"{KUBELET}.extraConfig.clusterDNS",
                                        "from spec.components.kubelet.clusterDns"),
    "auth-kubelet-config-weak-cipher": (HOSTS + kubelet_config("{tlsCipherSuites: [TLS_RSA_WITH_RC4_128_SHA]}"),
                                        f"{KUBELET}.extraConfig.tlsCipherSuites[0]", "Go's insecure cipher suites"),
    "auth-kubelet-flag-weak-cipher": (
        HOSTS + kubelet_flag("tls-cipher-suites", "'TLS_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA'"),
        f"{KUBELET}.extraArgs.tls-cipher-suites", "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA is one of Go's insecure"),
    "auth-apiserver-weak-cipher": (HOSTS + component("apiserver", "{tlsCipherSuites: [TLS_AES_128_GCM_SHA256, "
                                                                  "TLS_RSA_WITH_RC4_128_SHA]}"),
                                   f"{APISERVER}.tlsCipherSuites[1]", "Go's insecure cipher suites"),
    "auth-scheduler-kubeconfig": (
        HOSTS + component("scheduler", "{extraConfig: {clientConnection: {kubeconfig: "
                                       "/etc/kubernetes/super-admin.conf}}}"),
        "spec.components.scheduler.extraConfig.clientConnection.kubeconfig", "kubesmith's PKI"),
    "auth-proxy-kubeconfig": (
        HOSTS + component("proxy", "{extraConfig: {clientConnection: {kubeconfig: /etc/kubernetes/admin.conf}}}"),
        "spec.components.proxy.extraConfig.clientConnection.kubeconfig", "kubesmith's PKI"),
    # bind addresses and ports kubesmith's probes follow (issue 32, second round)
    "auth-kubelet-config-healthz-widened": (HOSTS + kubelet_config("{healthzBindAddress: 0.0.0.0}"),
                                            f"{KUBELET}.extraConfig.healthzBindAddress",
                                            "plain HTTP without authentication, so it stays on loopback"),
    "auth-kubelet-flag-healthz-widened": (HOSTS + kubelet_flag("healthz-bind-address", "'::'"),
                                          f"{KUBELET}.extraArgs.healthz-bind-address", "stays on loopback"),
    "auth-kubelet-config-healthz-port": (HOSTS + kubelet_config("{healthzPort: 10999}"),
                                         f"{KUBELET}.extraConfig.healthzPort",
                                         "from spec.components.kubelet.healthzPort: set that option instead"),
    "auth-kubelet-config-port": (HOSTS + kubelet_config("{port: 10999}"), f"{KUBELET}.extraConfig.port",
                                 "from spec.components.kubelet.port"),
    "auth-proxy-config-healthz": (HOSTS + component("proxy", "{extraConfig: {healthzBindAddress: '0.0.0.0:9999'}}"),
                                  "spec.components.proxy.extraConfig.healthzBindAddress",
                                  "from spec.components.proxy.healthzPort"),
    "auth-kubelet-config-kind": (HOSTS + kubelet_config("{kind: Pod}"), f"{KUBELET}.extraConfig.kind",
                                 "kubesmith sets kind itself"),
    "auth-proxy-config-api-version": (HOSTS + component("proxy", "{extraConfig: {apiVersion: v1}}"),
                                      "spec.components.proxy.extraConfig.apiVersion", "from spec.kubernetesVersion"),
    "auth-token-auth-file": (HOSTS + component("apiserver", "{extraArgs: {token-auth-file: /etc/kubernetes/t.csv}}"),
                             f"{APISERVER}.extraArgs.token-auth-file", f"{CIS} 1.2.2"),
    "auth-scheduler-always-allow": (HOSTS + component("scheduler", "{extraArgs: {authorization-always-allow-paths: "
                                                                   "'/*'}}"),
                                    "spec.components.scheduler.extraArgs.authorization-always-allow-paths",
                                    "'/*' would be served to anyone without authorization"),
    "auth-controller-manager-always-allow": (
        HOSTS + component("controllerManager", "{extraArgs: {authorization-always-allow-paths: '/healthz,/'}}"),
        "spec.components.controllerManager.extraArgs.authorization-always-allow-paths", "'/' would be served"),
    # no opt-in exists for this (allowInsecure takes CIS ids, and no CIS check names the flag): the message
    # says how to scrape metrics with a token instead
    "auth-scheduler-always-allow-metrics": (
        HOSTS + component("scheduler", "{extraArgs: {authorization-always-allow-paths: '/healthz,/metrics'}}"),
        "spec.components.scheduler.extraArgs.authorization-always-allow-paths",
        "'/metrics' would be served to anyone without authorization; only the health endpoints (/healthz, /readyz, "
        "/livez) may skip it; to scrape metrics, give the scraper a token: a ServiceAccount bound to a ClusterRole "
        "allowing get on the non-resource URL /metrics"),
    "auth-controller-manager-always-allow-metrics-opt-in": (
        HOSTS + '  security: {allowInsecure: ["1.3.7"]}\n' +
        component("controllerManager", "{extraArgs: {authorization-always-allow-paths: '/metrics'}}"),
        "spec.components.controllerManager.extraArgs.authorization-always-allow-paths", "to scrape metrics"),
    "auth-mode-zero-width-space": (HOSTS + component("apiserver", "{authorizationMode: [Node, RBAC, 'Node\u200bRBAC']}"),
                                   f"{APISERVER}.authorizationMode[2]",
                                   "contains an invisible format character (U+200B) at position 5"),
    "auth-admission-cyrillic": (HOSTS + component("apiserver", "{enableAdmissionPlugins: ['NodeRestri\u0441tion']}"),
                                f"{APISERVER}.enableAdmissionPlugins[0]", "holds U+0441"),
    "addr-cluster-dns-mapped": (HOSTS + component("kubelet", "{clusterDns: ['::ffff:10.32.0.10']}"),
                                f"{KUBELET}.clusterDns[0]", "IPv4-mapped"),
}


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) + len(ACCEPTED) >= 75


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_value_gets_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = CASES[name]
    (tmp_path / f"{name}.yaml").write_text(HEAD + text)
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", f"{name}.yaml", cwd=tmp_path)
    assert_one_located_error(result, f"{name}.yaml", path, fragment)
    assert re.search(rf"^error: {re.escape(path)}: ", result.stderr, re.M), result.stderr


# name -> (what follows `spec.kubernetesVersion`, what the plan's text must then hold)
ACCEPTED: dict[str, tuple[str, str]] = {
    "value-kubelet-anonymous-F": (HOSTS + kubelet_flag("anonymous-auth", '"F"'), "--anonymous-auth=F"),
    "value-kubelet-anonymous-0": (HOSTS + kubelet_flag("anonymous-auth", "0"), "--anonymous-auth=0"),
    "value-kubelet-read-only-port-hex-zero": (HOSTS + kubelet_flag("read-only-port", '"0x0"'), "--read-only-port=0x0"),
    "value-kubelet-iptables-chains-T": (HOSTS + kubelet_flag("make-iptables-util-chains", "T"),
                                        "--make-iptables-util-chains=T"),
    "flag-duration-fraction": (HOSTS + component("apiserver", "{extraArgs: {request-timeout: 1.5m}}"),
                               "--request-timeout=1.5m"),
    "flag-duration-longest": (HOSTS + component("apiserver", "{extraArgs: {request-timeout: "
                                                             "2562047h47m16.854775807s}}"),
                              "--request-timeout=2562047h47m16.854775807s"),
    "flag-disable-other-admission": (HOSTS + component("apiserver", "{extraArgs: {disable-admission-plugins: "
                                                                    "DefaultStorageClass}}"),
                                     "--disable-admission-plugins=DefaultStorageClass"),
    "addr-vip-same-segment": ("  hosts:\n    - {name: h1, address: 10.0.0.11, roles: [control-plane, etcd, node]}\n"
                              "    - {name: h2, address: 10.0.0.12, roles: [control-plane, etcd, node]}\n"
                              "    - {name: h3, address: 10.0.0.13, roles: [control-plane, etcd, node]}\n"
                              "  controlPlaneVIP: 10.0.0.200\n", "virtual_ipaddress"),
    "auth-admission-node-restriction-only": (HOSTS + component("apiserver", "{enableAdmissionPlugins: "
                                                                        "[NodeRestriction]}"),
                                             "--enable-admission-plugins=NodeRestriction"),
    "auth-strong-ciphers": (HOSTS + component("apiserver", "{tlsCipherSuites: [TLS_AES_128_GCM_SHA256, "
                                                           "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]}") ,
                            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
    "auth-kubelet-config-strong-cipher": (HOSTS + kubelet_config("{tlsCipherSuites: "
                                                                 "[TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384]}"),
                                          "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"),
    "auth-scheduler-health-paths": (HOSTS + component("scheduler", "{extraArgs: {authorization-always-allow-paths: "
                                                                   "'/healthz,/readyz,/livez'}}"),
                                    "--authorization-always-allow-paths=/healthz,/readyz,/livez"),
    "auth-token-auth-file-allowed": (HOSTS + '  security: {allowInsecure: ["1.2.2"]}\n' +
                                     component("apiserver", "{extraArgs: {token-auth-file: /etc/kubernetes/t.csv}}"),
                                     "--token-auth-file=/etc/kubernetes/t.csv"),
    "dur-etcd-retention-hours": (HOSTS + component("etcd", "{autoCompactionRetention: '12'}"),
                                 "--auto-compaction-retention=12"),
    "dur-etcd-retention-go": (HOSTS + component("etcd", "{autoCompactionRetention: 30m}"),
                              "--auto-compaction-retention=30m"),
    "dur-etcd-retention-revisions": (HOSTS + component("etcd", "{autoCompactionMode: revision, "
                                                               "autoCompactionRetention: '1000000'}"),
                                     "--auto-compaction-mode=revision"),
    "dur-etcd-retention-long-periodic": (HOSTS + component("etcd", "{autoCompactionRetention: '8760'}"),
                                         "--auto-compaction-retention=8760"),
    "dur-shutdown-off": (HOSTS + component("kubelet", "{shutdownGracePeriod: 0s, "
                                                      "shutdownGracePeriodCriticalPods: 0s}"), "kubelet.yaml"),
    "dur-config-durations": (HOSTS + kubelet_config("{syncFrequency: 1m30s, imageMinimumGCAge: 0s, "
                                                    "authentication: {webhook: {cacheTTL: 30s}}}"), "1m30s"),
    "dur-proxy-config-sync-period": (HOSTS + component("proxy", "{extraConfig: {iptables: {syncPeriod: 45s}}}"),
                                     "45s"),
    "dur-flag-sync-frequency": (HOSTS + kubelet_flag("sync-frequency", "2m"), "--sync-frequency=2m"),
    "addr-upstream-resolvers": (HOSTS + component("coreDns", "{upstream: ['10.0.0.2:53', '[fd00::53]:53', "
                                                          "'169.254.169.253']}"), "169.254.169.253"),
    "addr-cluster-dns-node-local": (HOSTS + component("kubelet", "{clusterDns: ['169.254.20.10']}"),
                                    "169.254.20.10"),  # NodeLocal DNSCache's link-local address
    # an IPv6-only cluster reaches an IPv4 resolver through NAT64: a destination, not a host's own address
    "addr-upstream-nat64": (HOSTS + component("coreDns", "{upstream: ['[64:ff9b::808:808]:53']}"),
                            "64:ff9b::808:808"),
    # a client on the host itself, a point-to-point link: addresses clients do dial
    "addr-extra-san-loopback-link-local": (HOSTS + component("apiserver", "{extraSans: ['127.0.0.1', '::1', "
                                                                          "'169.254.0.5', '*.api.example.com']}"),
                                           "169.254.0.5"),
    "addr-host-v6-ordinary": ("  hosts:\n    - {name: h1, address: 'fd00::11', roles: [control-plane, etcd, node]}\n"
                              "    - {name: w1, address: '2001:db8::a00:c', roles: [node]}\n" + V6_NETWORK,
                              "2001:db8::a00:c"),
    "addr-vip-ordinary": (HOSTS + "  controlPlaneVIP: 10.0.0.254\n", "virtual_ipaddress"),
    "addr-dns-ip-last-but-one": (HOSTS + "  network: {dnsServiceIp: 10.32.255.254}\n", "10.32.255.254"),
    "addr-service-largest": (HOSTS + "  network: {serviceCidr: 10.96.0.0/12}\n", "10.96.0.0/12"),
    "addr-endpoint-name": (HOSTS + "  controlPlaneEndpoint: 'api.example.com:6443'\n", "api.example.com:6443"),
    "addr-proxy-pods": (HOSTS + component("proxy", "{clusterCidr: 10.200.0.0/16}"), "10.200.0.0/16"),
    "label-allowed-namespaces": (HOSTS.replace("node]}", "node], labels: {node.kubernetes.io/pool: a, "
                                                        "topology.kubernetes.io/zone: z, example.com/x: y}}"),
                                 "node.kubernetes.io/pool=a"),
    "value-config-quoted-date": (HOSTS + kubelet_config("{maxPods: 120, note: '2024-01-01'}"), "kubelet.yaml"),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_legitimate_spelling_is_taken_as_written(name: str, tmp_path: Path) -> None:
    text, expected = ACCEPTED[name]
    (tmp_path / f"{name}.yaml").write_text(HEAD + text)
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", f"{name}.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr, result.stderr
    plan = kubesmith("plan", f"{name}.yaml", "--offline", "-o", "json", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert expected in plan.stdout


V6 = """\
  hosts:
    - {name: cp1, address: 'fd00:0:0:0::11', roles: [control-plane, etcd, node]}
    - {name: cp2, address: 'FD00::12', roles: [control-plane, etcd, node]}
    - {name: cp3, address: 'fd00::0:13', roles: [control-plane, etcd, node]}
    - {name: w1, address: 'fd00:0:0::21', roles: [node]}
  network: {clusterCidr: 'fd01:0::/48', serviceCidr: 'fd02::0/112'}
  controlPlaneVIP: 'fd00:0::100'
  components:
    podNetwork: {enabled: false}
    apiserver: {extraSans: ['FD00::0:200']}
"""


def test_addresses_reach_argv_certificates_and_configuration_files_in_canonical_form(tmp_path: Path) -> None:
    (tmp_path / "v6.yaml").write_text(HEAD + V6)
    result = kubesmith("plan", "v6.yaml", "--offline", "-o", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    words: list[str] = []
    for host_plan in plan["hosts"]:
        for service in host_plan["services"]:
            words += service["argv"]
        for file in host_plan["files"]:
            words += re.findall(r"[0-9A-Fa-f:]*::[0-9A-Fa-f:]*|[0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{0,4}){2,7}",
                                file.get("content") or json.dumps(file.get("data")))
        for request in host_plan["certificates"]:
            words += request["ip_addresses"]
    addresses = [word for text in words for word in re.findall(r"(?<![\w:])[0-9a-fA-F:]{2,}(?![\w:])", text)
                 if "::" in word]
    assert addresses, "the plan shows no IPv6 address"
    for text in addresses:
        assert text == str(ipaddress.ip_address(text)), text
    joined = result.stdout
    for spelled in ("fd00:0:0:0::11", "FD00::12", "fd00::0:13", "fd00:0::100", "FD00::0:200"):
        assert spelled not in joined
    configs = {file["path"]: file.get("content") or "" for host_plan in plan["hosts"] for file in host_plan["files"]}
    assert any("fd00::100" in text for path, text in configs.items() if path.endswith("keepalived.conf"))
    assert any("[fd00::12]:6443" in text for path, text in configs.items() if path.endswith("haproxy.cfg"))
    apiserver = next(request for request in plan["hosts"][0]["certificates"] if request["name"] == "apiserver")
    assert {"fd00::100", "fd00::200", "fd00::11"} <= set(apiserver["ip_addresses"])


def test_an_endpoint_is_kept_in_canonical_form(tmp_path: Path) -> None:
    (tmp_path / "ep.yaml").write_text(HEAD + HOSTS.replace("10.0.0.11", "'fd00::11'") +
                                      V6_NETWORK + "  controlPlaneEndpoint: '[fd00:0::10]:06443'\n")
    result = kubesmith("plan", "ep.yaml", "--offline", "-o", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["api_endpoint"] == "[fd00::10]:6443"


BIG_PLAN = """\
import resource, sys
sys.path.insert(0, sys.argv[1])
from plan_bench import spec_yaml
from kubesmith.spec.load import load_spec_text
from kubesmith.plan.evaluate import evaluate
from kubesmith.plan.jsonout import write_plan_json
from kubesmith.versions.registry import load_registry
registry = load_registry()
plan = evaluate(load_spec_text(spec_yaml(10_000), "big.yaml", registry).cluster, registry)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with open("/dev/null", "w") as out:
    write_plan_json(plan, out)
print(before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@pytest.mark.slow
def test_the_json_plan_of_ten_thousand_hosts_is_written_in_bounded_memory() -> None:
    """About 300 MB of JSON: writing it used to hold it all, twice (2.1 GB peak); streamed, writing adds
    little to the plan itself. Memory, not time, decides (the machine is shared)."""
    result = subprocess.run([sys.executable, "-c", BIG_PLAN, str(ROOT / "bench")], capture_output=True, text=True,
                            timeout=600, check=True)
    before, after = (int(word) for word in result.stdout.split())  # KiB
    assert after < 600 * 1024, (before, after)
    assert after - before < 100 * 1024, (before, after)


# ---- add-on manifests (spec.addons): what JSON cannot carry, and YAML that would expand without bound ------

CONFIG_MAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\n"
LAUGHS = CONFIG_MAP + "x:\n  l0: &l0 [x, x]\n" + "".join(
    f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 10))

# name -> (the manifest's bytes, message fragment); each is refused by validate, so `plan -o json` never
# meets a value json.dumps refuses (or writes as a bare NaN)
ADDONS: dict[str, tuple[bytes, str]] = {
    "addon-date": ((CONFIG_MAP + "data: {since: 2024-01-01}\n").encode(), "m.yaml:4:8: data.since: 2024-01-01 is a "
                                                                         "YAML timestamp, which JSON cannot hold"),
    "addon-binary": ((CONFIG_MAP + "binaryData: {k: !!binary aGVsbG8=}\n").encode(),
                     "binaryData.k: a !!binary value cannot be written to JSON"),
    "addon-set": ((CONFIG_MAP + "data: !!set {a, b}\n").encode(), "data: a !!set cannot be written to JSON"),
    "addon-int-and-null-keys": ((CONFIG_MAP + "data: {1: a, ~: b}\n").encode(), "JSON keys are strings"),
    "addon-nan": ((CONFIG_MAP + "data: {x: .nan}\n").encode(), "data.x: .nan is not a finite number"),
    "addon-infinity": ((CONFIG_MAP + "spec: {replicas: .inf}\n").encode(), ".inf is not a finite number"),
    # messages read as the YAML written: a mapping key is no list position, NaN is .nan, a list is no text
    "addon-int-key-nan": ((CONFIG_MAP + "data: {9000: .nan}\n").encode(), "m.yaml:4:8: data.9000: .nan is not a "
                                                                         "finite number"),
    "addon-list-document": (b"[1, 2]\n", "a manifest document must be a mapping (a Kubernetes object), got a list"),
    "addon-undefined-alias": ((CONFIG_MAP + "data: {a: *missing}\n").encode(),
                              "m.yaml:4:11: not valid YAML: found undefined alias '*missing' (no anchor &missing"),
    # duplicate keys, as in the cluster file itself (kubectl refuses them too)
    "addon-duplicate-key": ((CONFIG_MAP + "data:\n  a: x\n  b: y\n  a: z\n").encode(),
                            "m.yaml:7:3: data.a: duplicate key (first defined at line 5)"),
    "addon-duplicate-metadata-name": ((CONFIG_MAP + "metadata: {name: n}\n").encode(),
                                      "m.yaml:4:1: metadata: duplicate key (first defined at line 3)"),
    "addon-duplicate-under-anchor": ((CONFIG_MAP + "x: &b {p: 1, p: 2}\ny: *b\n").encode(),
                                     "m.yaml:4:14: x.p: duplicate key"),
    "addon-recursive-alias": ((CONFIG_MAP + "spec: &s [*s]\n").encode(), "spec[0]: an alias refers to a node that "
                                                                         "contains it (a recursive alias)"),
    "addon-billion-laughs": (LAUGHS.encode(), "aliases expand to more than 100,000 nodes"),
    "addon-deep-flow": ((CONFIG_MAP + "data: " + "[" * 50_000 + "\n").encode(),
                        "m.yaml:4:70: nested too deeply (more than 64 levels)"),
    "addon-escape-byte": ((CONFIG_MAP + 'data: {a: "\x1b[31m"}\n').encode(),
                          "m.yaml:4:12: not valid YAML: control character U+001B is not allowed"),
    "addon-nul-byte": (CONFIG_MAP.encode() + b"data: {a: b\x00}\n", "control character U+0000 is not allowed"),
}


@pytest.mark.parametrize("name", sorted(ADDONS))
def test_an_addon_manifest_json_cannot_carry_is_a_located_error(name: str, tmp_path: Path) -> None:
    manifest, fragment = ADDONS[name]
    (tmp_path / "m.yaml").write_bytes(manifest)
    (tmp_path / f"{name}.yaml").write_text(HEAD + HOSTS + "  addons: [m.yaml]\n")
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", f"{name}.yaml", cwd=tmp_path)
    assert_one_located_error(result, f"{name}.yaml", "spec.addons[0]", fragment)


def test_an_addon_with_anchors_within_the_budget_reaches_the_json_plan(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(CONFIG_MAP.replace("{name: m}", "{name: m, labels: &l {app: m}}") +
                                     "data: {when: '2024-01-01'}\nspec: {selector: *l}\n")
    (tmp_path / "ok.yaml").write_text(HEAD + HOSTS + "  addons: [m.yaml]\n")
    plan = kubesmith("plan", "ok.yaml", "--offline", "-o", "json", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert '"2024-01-01"' in plan.stdout and "NaN" not in plan.stdout


def test_more_than_nine_etcd_members_are_refused_before_any_plan(tmp_path: Path) -> None:
    """10,000 members used to pass validate and hang `plan -o json` (every member lists every other)."""
    hosts = "".join(f"    - {{name: n{i}, address: 10.0.0.{i + 10}, roles: [control-plane, etcd, node]}}\n"
                    for i in range(11))
    (tmp_path / "etcd.yaml").write_text(HEAD + "  hosts:\n" + hosts + "  controlPlaneEndpoint: '10.0.0.10:6443'\n")
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", "etcd.yaml", cwd=tmp_path)
    assert_one_located_error(result, "etcd.yaml", "spec.hosts[9].roles", "11 hosts have the etcd role, more "
                             "than 9: etcd recommends 3, 5 or 7 members")


def test_user_text_reaches_the_terminal_escaped(tmp_path: Path) -> None:
    """A flag value with a bidi override (U+202E turns the rest of the line around) is refused, and the
    message shows it escaped; a state directory with an escape sequence reaches `render`'s notice escaped,
    through the one stream filter every command writes through."""
    (tmp_path / "bidi.yaml").write_text(HEAD + HOSTS + component("apiserver", '{extraArgs: {cors-allowed-origins: '
                                                                              '"a\\u202eb"}}')
                                        + "    coreDns: {enabled: false}\n")
    refused = kubesmith("plan", "bidi.yaml", "--offline", cwd=tmp_path)
    assert refused.returncode == 1 and "U+202E" in refused.stderr and "\u202e" not in refused.stderr
    (tmp_path / "bidi.yaml").write_text(HEAD + HOSTS + component("coreDns", "{enabled: false}"))
    state = tmp_path / "st\x1b[31m"
    rendered = kubesmith("render", "bidi.yaml", "--out-dir", str(tmp_path / "out"), "--state-dir", str(state / "x"),
                         cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    assert "st\\x1b[31m" in rendered.stderr and "\x1b" not in rendered.stderr + rendered.stdout


@pytest.mark.parametrize(("version", "says"), [
    ("1.36.02", "numbers without leading zeros"), ("1.36.99999999999999999999999", "at most 9 digits"),
    ("01.36.2", "without leading zeros"), ("1.\u0663\u0666.2", "must be a release version"),
])
def test_a_release_version_is_written_as_kubernetes_writes_it(version: str, says: str, tmp_path: Path) -> None:
    (tmp_path / "v.yaml").write_text(HEAD.replace('"1.33.2"', f'"{version}"') + HOSTS)
    result = kubesmith("validate", "v.yaml", cwd=tmp_path)
    assert_one_located_error(result, "v.yaml", "spec.kubernetesVersion", says)


# ---- legitimate inputs a review found refused: they stay accepted --------------------------------------

REVIEWED_LEGITIMATE = {
    # a pasted kubelet configuration repeating what kubesmith writes (its apiVersion, kind, CIS webhook value)
    "kubelet-config-pasted": component("kubelet", "{extraConfig: {apiVersion: kubelet.config.k8s.io/v1beta1, "
                                                  "kind: KubeletConfiguration, authentication: {webhook: "
                                                  "{enabled: true}}, maxPods: 200}}"),
    "proxy-config-pasted": component("proxy", "{extraConfig: {apiVersion: kubeproxy.config.k8s.io/v1alpha1, "
                                              "kind: KubeProxyConfiguration}}"),
    # bounds that meet their start, or lie above it
    "ca-delay-constant": component("caService", "{failedAuthDelay: 2, maxFailedAuthDelay: 2}"),
    "ca-delay-off": component("caService", "{failedAuthDelay: 0, maxFailedAuthDelay: 0}"),
    "kubelet-gc-thresholds": component("kubelet", "{extraConfig: {imageGCLowThresholdPercent: 60, "
                                                  "imageGCHighThresholdPercent: 70, imageMinimumGCAge: 1h, "
                                                  "imageMaximumGCAge: 0s}}"),
    "kubelet-gc-max-age": component("kubelet", "{extraConfig: {imageMaximumGCAge: 168h}}"),
    # non-ASCII text that is visible as what it is stays
    "flag-non-ascii-origin": component("apiserver", '{extraArgs: {cors-allowed-origins: "https://b\u00fccher.example"}}'),
    # kubesmith's own bind addresses repeated, the authenticated APIs narrowed to the host's address
    "kubelet-bind-addresses": component("kubelet", "{extraConfig: {address: 10.0.0.11, healthzBindAddress: "
                                                   "127.0.0.1}}"),
    "kubelet-address-unspecified": component("kubelet", "{extraConfig: {address: 0.0.0.0}}"),
    "proxy-bind-address": component("proxy", "{extraConfig: {bindAddress: 10.0.0.11}}"),
    # well-typed configuration fields, null (unset), and fields kubesmith does not know, as before
    "kubelet-typed-fields": component("kubelet", "{extraConfig: {tlsCipherSuites: [TLS_AES_128_GCM_SHA256], "
                                                 "maxPods: 200, failSwapOn: false, evictionHard: "
                                                 "{memory.available: 100Mi}, systemReserved: {cpu: 500m}, "
                                                 "registerWithTaints: [{key: a, effect: NoSchedule}], "
                                                 "containerLogMaxSize: 50Mi, providerID: null, someFutureField: x}}"),
    "proxy-typed-fields": component("proxy", "{extraConfig: {mode: ipvs, ipvs: {scheduler: rr}, "
                                             "nodePortAddresses: [primary]}}"),
    "scheduler-typed-fields": component("scheduler", "{extraConfig: {percentageOfNodesToScore: 50, "
                                                     "podInitialBackoffSeconds: 2, podMaxBackoffSeconds: 20, "
                                                     "profiles: [{schedulerName: default-scheduler}]}}"),
    # graceful node shutdown off: the critical pods' default share goes with it
    "shutdown-off": component("kubelet", "{shutdownGracePeriod: 0s}"),
}


@pytest.mark.parametrize("name", sorted(REVIEWED_LEGITIMATE))
def test_reviewed_legitimate_inputs_stay_valid(name: str, tmp_path: Path) -> None:
    (tmp_path / f"{name}.yaml").write_text(HEAD + HOSTS + REVIEWED_LEGITIMATE[name])
    result = kubesmith("validate", f"{name}.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def test_an_addon_with_integer_keys_is_written_as_kubectl_writes_it(tmp_path: Path) -> None:
    """ingress-nginx's documented tcp-services ConfigMap: `data: {9000: ...}`; kubectl sends the key as "9000"."""
    (tmp_path / "m.yaml").write_text(CONFIG_MAP + 'data: {9000: "default/example-go:8080", true: "on"}\n')
    (tmp_path / "ok.yaml").write_text(HEAD + HOSTS + "  addons: [m.yaml]\n")
    plan = kubesmith("plan", "ok.yaml", "--offline", "-o", "json", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert '"9000": "default/example-go:8080"' in plan.stdout and '"true": "on"' in plan.stdout


def test_a_kubelet_configuration_that_differs_from_kubesmiths_is_still_refused(tmp_path: Path) -> None:
    (tmp_path / "k.yaml").write_text(HEAD + HOSTS + component("kubelet", "{extraConfig: {kind: Other}}"))
    result = kubesmith("validate", "k.yaml", cwd=tmp_path)
    assert_one_located_error(result, "k.yaml", "spec.components.kubelet.extraConfig.kind", "kubesmith sets kind itself")


@pytest.mark.parametrize(("options", "share"), [
    ({"shutdownGracePeriod": "10s"}, "10s"),  # kubesmith's 15s default clamped to the whole
    ({"shutdownGracePeriod": "0s"}, "0s"),
    ({"shutdownGracePeriod": "1m"}, "15s"),
    ({"shutdownGracePeriod": "1m", "shutdownGracePeriodCriticalPods": "20s"}, "20s"),
])
def test_the_critical_pods_default_share_fits_the_grace_period(options: dict[str, str], share: str) -> None:
    from kubesmith.modules.kubelet import KubeletOptions, critical_pods_grace
    assert critical_pods_grace(KubeletOptions.model_validate(options)) == share
