"""Hostile input, round 5 (paths and flags): each refusal an exit-1 located error at validate, next to the legitimate
neighbour that stays valid.

extraArgs values of every flag type (spec.flagtypes: one parser per type the binary's --help names), the
values the binaries' option validation refuses (effective.FLAG_CHOICES, FLAG_BOUNDS, emulated versions,
runtime-config keys), and the kubelet's flags read as the configuration fields they set. Each checked
against the v1.36.2 binaries: `BIN --flag=VALUE --version` for the flag types, and for the API server's
validation a run that cannot start (--secure-port=0 is itself refused, so every error is listed).

Paths a system service runs, loads or keeps its state in, inside a tree other users write to or a boot
empties (systemdirs.UNSAFE_TREES). containerd's `config dump` of an `imports: ['/tmp/*.toml']` holding
`[grpc] tcp_address` showed the planted file taking effect (audit round 5, CR26).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostile_support import assert_refused, assert_valid
from hostile_support import warm  # noqa: F401 (the module's autouse fixture)
from test_hostile_values import HEAD, HOSTS, component

RUNTIME = "spec.components.containerRuntime"
KUBELET = "spec.components.kubelet"
APISERVER = "spec.components.apiserver"
HEAD36 = HEAD.replace("1.33.2", "1.36.2")
CRI = "plugins: {'io.containerd.grpc.v1.cri': "
TMP = "lies inside /tmp, which every user may write to"

# name -> (what follows `spec.kubernetesVersion`, option path of the error, message fragment)
UNSAFE_PATHS: dict[str, tuple[str, str, str]] = {
    "containerd-imports": (HOSTS + component("containerRuntime", "{extraConfig: {imports: ['/tmp/*.toml']}}"),
                           f"{RUNTIME}.extraConfig.imports[0]", TMP),
    "containerd-runc-binary": (HOSTS + component("containerRuntime", "{extraConfig: {" + CRI + "{containerd: "
                                                 "{runtimes: {runc: {options: {BinaryName: /tmp/runc}}}}}}}}"),
                               f"{RUNTIME}.extraConfig.plugins.io.containerd.grpc.v1.cri.containerd.runtimes.runc."
                               "options.BinaryName", TMP),
    "containerd-plugin-dir": (HOSTS + component("containerRuntime", "{extraConfig: {plugin_dir: /tmp/plugins}}"),
                              f"{RUNTIME}.extraConfig.plugin_dir", TMP),
    "containerd-proxy-plugin": (HOSTS + component("containerRuntime", "{extraConfig: {proxy_plugins: {x: {type: "
                                                  "snapshot, address: /tmp/x.sock}}}}"),
                                f"{RUNTIME}.extraConfig.proxy_plugins.x.address", TMP),
    "containerd-stream-processor": (HOSTS + component("containerRuntime", "{extraConfig: {stream_processors: "
                                                      "{x: {path: /dev/shm/proc}}}}"),
                                    f"{RUNTIME}.extraConfig.stream_processors.x.path", "lies inside /dev/shm"),
    "containerd-registry-config-path": (HOSTS + component("containerRuntime", "{extraConfig: {" + CRI +
                                                          "{registry: {config_path: /var/tmp/certs.d}}}}}"),
                                        f"{RUNTIME}.extraConfig.plugins.io.containerd.grpc.v1.cri.registry."
                                        "config_path", "lies inside /var/tmp"),
    "containerd-conf-template": (HOSTS + component("containerRuntime", "{extraConfig: {" + CRI +
                                                   "{cni: {conf_template: /tmp/tpl}}}}}"),
                                 f"{RUNTIME}.extraConfig.plugins.io.containerd.grpc.v1.cri.cni.conf_template", TMP),
    "containerd-opt-path": (HOSTS + component("containerRuntime", "{extraConfig: {plugins: "
                                              "{'io.containerd.internal.v1.opt': {path: /run/user/1000/opt}}}}"),
                            f"{RUNTIME}.extraConfig.plugins.io.containerd.internal.v1.opt.path",
                            "lies inside /run/user"),
    "containerd-binary": (HOSTS + component("containerRuntime", "{binary: /tmp/containerd}"),
                          f"{RUNTIME}.binary", TMP),
    "haproxy-binary": (HOSTS + component("apiLoadBalancer", "{binary: /tmp/haproxy}"),
                       "spec.components.apiLoadBalancer.binary", TMP),
    "keepalived-binary": (HOSTS + component("controlPlaneVip", "{binary: /var/tmp/keepalived}"),
                          "spec.components.controlPlaneVip.binary", "lies inside /var/tmp"),
    "cni-bin-dir": (HOSTS + component("containerRuntime", "{cniBinDir: /tmp/cni}"), f"{RUNTIME}.cniBinDir", TMP),
    "cni-conf-dir": (HOSTS + component("containerRuntime", "{cniConfDir: /tmp/net.d}"), f"{RUNTIME}.cniConfDir", TMP),
    "kubelet-credential-provider-flag": (HOSTS + component("kubelet", "{extraArgs: {image-credential-provider-bin-dir:"
                                                           " /tmp/cp}}"),
                                         f"{KUBELET}.extraArgs.image-credential-provider-bin-dir", TMP),
    "kubelet-config-dir": (HOSTS + component("kubelet", "{extraArgs: {config-dir: /tmp/kdrop}}"),
                           f"{KUBELET}.extraArgs.config-dir", TMP),
    "kubelet-static-pod-path": (HOSTS + component("kubelet", "{extraConfig: {staticPodPath: /tmp/manifests}}"),
                                f"{KUBELET}.extraConfig.staticPodPath", TMP),
    "kubelet-static-pod-flag": (HOSTS + component("kubelet", "{extraArgs: {pod-manifest-path: /tmp/manifests}}"),
                                f"{KUBELET}.extraArgs.pod-manifest-path", TMP),
    "kubelet-cert-dir": (HOSTS + component("kubelet", "{extraArgs: {cert-dir: /tmp/kc}}"),
                         f"{KUBELET}.extraArgs.cert-dir", TMP),
    "kubelet-image-service-socket": (HOSTS + component("kubelet", "{extraArgs: {image-service-endpoint: "
                                                       "'unix:///tmp/img.sock'}}"),
                                     f"{KUBELET}.extraArgs.image-service-endpoint", TMP),
    "kubelet-root-dir-home": (HOSTS + component("kubelet", "{rootDir: /home/alice/kubelet}"),
                              f"{KUBELET}.rootDir", "lies inside /home"),
    "etcd-data-dir": (HOSTS + component("etcd", "{dataDir: /tmp/etcd}"), "spec.components.etcd.dataDir", TMP),
    "etcd-data-dir-spelled": (HOSTS + component("etcd", "{dataDir: /var/lock/etcd}"), "spec.components.etcd.dataDir",
                              "/var/lock/etcd (that is /run/lock/etcd) lies inside /run/lock"),
    "etcd-wal-dir": (HOSTS + component("etcd", "{extraArgs: {wal-dir: /var/tmp/wal}}"),
                     "spec.components.etcd.extraArgs.wal-dir", "lies inside /var/tmp"),
    "apiserver-sni-key": (HOSTS + component("apiserver", "{extraArgs: {tls-sni-cert-key: "
                                                         "'/etc/k/a.crt,/tmp/a.key:a.example.com'}}"),
                          "spec.components.apiserver.extraArgs.tls-sni-cert-key", "/tmp/a.key lies inside /tmp"),
    "scheduler-extender-ca": (HOSTS + component("scheduler", "{extraConfig: {extenders: [{urlPrefix: "
                                                             "'https://x.example', tlsConfig: {caFile: /tmp/ca.crt}}]}}"),
                              "spec.components.scheduler.extraConfig.extenders[0].tlsConfig.caFile", TMP),
}
SAFE_PATHS: dict[str, str] = {
    "usual-places": HOSTS + component("containerRuntime", "{binary: /usr/local/bin/containerd, cniBinDir: /opt/cni/bin, "
                                                          "cniConfDir: /etc/cni/net.d, extraConfig: {imports: "
                                                          "['/etc/containerd/conf.d/*.toml'], plugin_dir: "
                                                          "/usr/local/lib/containerd/plugins}}"),
    "etcd-data": HOSTS + component("etcd", "{dataDir: /var/lib/etcd, extraArgs: {wal-dir: /mnt/etcd-wal}}"),
    "kubelet-flags": HOSTS + component("kubelet", "{extraArgs: {config-dir: /etc/kubernetes/kubelet.conf.d, "
                                                  "image-credential-provider-bin-dir: /usr/libexec/kubernetes/cp, "
                                                  "cert-dir: /var/lib/kubelet/pki}}"),
    # cgroup names are no files; a value that is not a path is no path (/tmp in a label's text)
    "kubelet-cgroups": HOSTS + component("kubelet", "{extraConfig: {kubeletCgroups: /tmp.slice, "
                                                    "systemReservedCgroup: /tmp}}"),
    "balancer-binaries": HOSTS + component("apiLoadBalancer", "{binary: /usr/sbin/haproxy}"),
    "tmp-lookalikes": HOSTS + component("etcd", "{dataDir: /tmpdata/etcd, snapshots: {directory: /var/tmpx/snap}}"),
}




# A path option of the wrong TOML type is the type check's one error, not a path error as well
MISTYPED_PATHS: dict[str, tuple[str, str, str]] = {
    "containerd-imports-string": (HOSTS + component("containerRuntime", "{extraConfig: {imports: /tmp/x.toml}}"),
                                  f"{RUNTIME}.extraConfig.imports", "as a list of strings"),
    "containerd-plugin-dir-list": (HOSTS + component("containerRuntime", "{extraConfig: {plugin_dir: [/tmp/p]}}"),
                                   f"{RUNTIME}.extraConfig.plugin_dir", "as a string, not a list"),
    "kubelet-static-pod-path-list": (HOSTS + component("kubelet", "{extraConfig: {staticPodPath: [/tmp/m]}}"),
                                     f"{KUBELET}.extraConfig.staticPodPath", ""),
}


def flag(component: str, name: str, value: str) -> str:
    return HOSTS + component_args(component, f"{{{name}: {value}}}")


def component_args(component: str, args: str) -> str:
    return f"  components:\n    {component}: {{extraArgs: {args}}}\n"


def kubelet(name: str, value: str) -> str:
    return flag("kubelet", name, value)


def apiserver(name: str, value: str) -> str:
    return flag("apiserver", name, value)


# the pair every oidc-* flag needs next to it (kube-apiserver refuses OIDC without both)
OIDC = "oidc-issuer-url: 'https://issuer.example', oidc-client-id: kubernetes"


FLAG_VALUES: dict[str, tuple[str, str, str]] = {
    # flag types ("invalid argument ... for --flag")
    "curve-not-a-number": (apiserver("tls-curve-preferences", "abc"), f"{APISERVER}.extraArgs.tls-curve-preferences",
                           "'abc' is no 32-bit integer"),
    "curve-out-of-range": (apiserver("tls-curve-preferences", "'23,99999999999'"),
                           f"{APISERVER}.extraArgs.tls-curve-preferences", "no 32-bit integer"),
    "eviction-not-langle": (kubelet("eviction-hard", "'memory.available=100Mi'"), f"{KUBELET}.extraArgs.eviction-hard",
                            "signal<threshold"),
    "buffer-not-quantity": (apiserver("log-json-info-buffer-size", "abc"),
                            f"{APISERVER}.extraArgs.log-json-info-buffer-size", "resource quantity"),
    "sni-one-file": (apiserver("tls-sni-cert-key", "/etc/k/a.crt"), f"{APISERVER}.extraArgs.tls-sni-cert-key",
                     "certificate and a key file"),
    "sni-empty-names": (apiserver("tls-sni-cert-key", "'/etc/k/a.crt,/etc/k/a.key:'"),
                        f"{APISERVER}.extraArgs.tls-sni-cert-key", "names after ':' are empty"),
    "claim-no-pair": (HOSTS + component_args("apiserver", "{oidc-required-claim: x, " + OIDC + "}"),
                      f"{APISERVER}.extraArgs.oidc-required-claim",
                      "one key=value pair"),
    "vmodule-no-level": (flag("scheduler", "vmodule", "abc"), "spec.components.scheduler.extraArgs.vmodule",
                         "'abc' is not pattern=N"),
    "vmodule-negative": (flag("scheduler", "vmodule", "'a=-1'"), "spec.components.scheduler.extraArgs.vmodule",
                         "is not pattern=N"),
    "metric-labels-no-pair": (flag("controllerManager", "allow-metric-labels", "abc"),
                              "spec.components.controllerManager.extraArgs.allow-metric-labels", "key=value"),
    "reserved-no-pair": (kubelet("kube-reserved", "'cpu=100m,memory'"), f"{KUBELET}.extraArgs.kube-reserved",
                         "'memory' is no key=value pair"),
    "kubelet-address": (kubelet("address", "' 10.0.0.11'"), f"{KUBELET}.extraArgs.address", "an IP address"),
    # kube-proxy reads its settings from kubesmith's --config alone (v1.36.2 starts with --proxy-mode=bogus)
    "proxy-flag-ignored": (flag("proxy", "proxy-mode", "ipvs"), "spec.components.proxy.extraArgs.proxy-mode",
                           "ignores --proxy-mode next to the configuration file"),
    "proxy-master": (flag("proxy", "master", "'http://10.0.0.9:8080'"), "spec.components.proxy.extraArgs.master",
                     "kubesmith sets --master itself"),
    "proxy-cleanup": (flag("proxy", "cleanup", "'true'"), "spec.components.proxy.extraArgs.cleanup", "and exit"),
    "scheduler-flag-ignored": (flag("scheduler", "kube-api-qps", "'100'"),
                               "spec.components.scheduler.extraArgs.kube-api-qps", "ignores --kube-api-qps"),
    "proxy-detect-local-interface": (HOSTS + component("proxy", "{extraConfig: {detectLocalMode: BridgeInterface}}"),
                                     "spec.components.proxy.extraConfig.detectLocalMode",
                                     "needs detectLocal.bridgeInterface"),
    "proxy-detect-local-unknown": (HOSTS + component("proxy", "{extraConfig: {detectLocalMode: bogus}}"),
                                   "spec.components.proxy.extraConfig.detectLocalMode", "not 'bogus'"),
    "proxy-min-sync": (HOSTS + component("proxy", "{extraConfig: {iptables: {minSyncPeriod: 10m, syncPeriod: 1m}}}"),
                       "spec.components.proxy.extraConfig.iptables.minSyncPeriod", "longer than iptables.syncPeriod"),
    "proxy-bind-address": (HOSTS + component("proxy", "{extraConfig: {bindAddress: abc}}"),
                           "spec.components.proxy.extraConfig.bindAddress", "no IP address"),
    # values the binaries' validation refuses
    "reserved-quantity": (kubelet("system-reserved", "'cpu=abc'"), f"{KUBELET}.extraArgs.system-reserved",
                          "systemReserved.cpu: 'abc' is no resource quantity"),
    "storage-media-type": (apiserver("storage-media-type", "application/xml"),
                           f"{APISERVER}.extraArgs.storage-media-type", "not 'application/xml'"),
    "audit-log-mode": (apiserver("audit-log-mode", "bogus"), f"{APISERVER}.extraArgs.audit-log-mode",
                       "'batch' or 'blocking' or 'blocking-strict'"),
    "audit-log-version": (apiserver("audit-log-version", "audit.k8s.io/v1beta1"),
                          f"{APISERVER}.extraArgs.audit-log-version", "as 'audit.k8s.io/v1'"),
    "goaway-chance": (apiserver("goaway-chance", "'0.5'"), f"{APISERVER}.extraArgs.goaway-chance", "from 0 to 0.02"),
    "min-request-timeout": (apiserver("min-request-timeout", "-5"), f"{APISERVER}.extraArgs.min-request-timeout",
                            "1 or more, not -5"),
    "watch-cache-sizes": (apiserver("watch-cache-sizes", "'pods#-1'"), f"{APISERVER}.extraArgs.watch-cache-sizes",
                          "resource[.group]#size"),
    "runtime-config-key": (apiserver("runtime-config", "apps=true"), f"{APISERVER}.extraArgs.runtime-config",
                           "no API 'apps'"),
    "runtime-config-all-off": (apiserver("runtime-config", "'api/all=false'"), f"{APISERVER}.extraArgs.runtime-config",
                               "api/all=false alone"),
    "lock-endpoints": (flag("controllerManager", "leader-elect-resource-lock", "endpoints"),
                       "spec.components.controllerManager.extraArgs.leader-elect-resource-lock", "as 'leases'"),
    "logging-format": (apiserver("logging-format", "xml"), f"{APISERVER}.extraArgs.logging-format",
                       "'text' or 'json'"),
    "logging-format-kubelet": (kubelet("logging-format", "xml"), f"{KUBELET}.extraArgs.logging-format",
                               "'text' or 'json'"),
    "endpoint-reconciler": (apiserver("endpoint-reconciler-type", "bogus"),
                            f"{APISERVER}.extraArgs.endpoint-reconciler-type", "not 'bogus'"),
    "endpoint-reconciler-none": (apiserver("endpoint-reconciler-type", "none"),
                                 f"{APISERVER}.extraArgs.endpoint-reconciler-type", "nothing keeps"),
    "emulated-too-old": (apiserver("emulated-version", "'1.30'"), f"{APISERVER}.extraArgs.emulated-version",
                         "not between 1.33 and 1.36"),
    "emulated-too-new": (flag("controllerManager", "emulated-version", "'kube=1.37'"),
                         "spec.components.controllerManager.extraArgs.emulated-version", "not between 1.33 and 1.36"),
    "emulated-patch": (apiserver("emulated-version", "'1.36.1'"), f"{APISERVER}.extraArgs.emulated-version",
                       "major.minor"),
    "emulated-component": (apiserver("emulated-version", "'wardle=1.2'"), f"{APISERVER}.extraArgs.emulated-version",
                           "no component 'wardle'"),
    "compatibility-too-new": (apiserver("min-compatibility-version", "'1.37'"),
                              f"{APISERVER}.extraArgs.min-compatibility-version", "not between 1.33 and 1.36"),
    "always-deny": (HOSTS + component("apiserver", "{enableAdmissionPlugins: [NodeRestriction, AlwaysDeny]}"),
                    f"{APISERVER}.enableAdmissionPlugins[1]", "AlwaysDeny refuses every request"),
    # the kubelet's flags are its configuration's fields (round 4 checked those in extraConfig only)
    "hairpin-mode": (kubelet("hairpin-mode", "bogus"), f"{KUBELET}.extraArgs.hairpin-mode",
                     "--hairpin-mode sets the kubelet's hairpinMode"),
    "oom-score-adj": (kubelet("oom-score-adj", "-2000"), f"{KUBELET}.extraArgs.oom-score-adj", "-1000 to 1000"),
    "pods-per-core": (kubelet("pods-per-core", "-1"), f"{KUBELET}.extraArgs.pods-per-core", "podsPerCore: -1"),
    "log-max-files": (kubelet("container-log-max-files", "1"), f"{KUBELET}.extraArgs.container-log-max-files",
                      "2 or more"),
    "registry-qps": (kubelet("registry-qps", "-1"), f"{KUBELET}.extraArgs.registry-qps", "registryPullQPS: -1"),
    "kube-api-qps": (kubelet("kube-api-qps", "-1"), f"{KUBELET}.extraArgs.kube-api-qps", "kubeAPIQPS: -1"),
    "cpu-manager": (kubelet("cpu-manager-policy", "bogus"), f"{KUBELET}.extraArgs.cpu-manager-policy",
                    "one of none, static"),
    "soft-eviction-no-grace": (kubelet("eviction-soft", "'memory.available<100Mi'"),
                               f"{KUBELET}.extraArgs.eviction-soft", "no evictionSoftGracePeriod"),
    "no-qos-cgroups": (kubelet("cgroups-per-qos", "false"), f"{KUBELET}.extraArgs.cgroups-per-qos",
                       "without cgroupsPerQOS"),
    "lease-zero": (HOSTS + component("kubelet", "{extraConfig: {nodeLeaseDurationSeconds: 0}}"),
                   f"{KUBELET}.extraConfig.nodeLeaseDurationSeconds", "1 or more"),
    "api-burst": (HOSTS + component("kubelet", "{extraConfig: {kubeAPIBurst: -1}}"),
                  f"{KUBELET}.extraConfig.kubeAPIBurst", "0 or more"),
    "config-logging-format": (HOSTS + component("proxy", "{extraConfig: {logging: {format: xml}}}"),
                              "spec.components.proxy.extraConfig.logging.format", "one of text, json"),
}
# settings valid alone that the kubelet (or the cluster) refuses next to another, kubesmith's defaults included
COMBINATIONS: dict[str, tuple[str, str, str]] = {
    "shutdown-gate-off": (HOSTS + "  featureGates: {GracefulNodeShutdown: false}\n",
                          "spec.featureGates.GracefulNodeShutdown", "shutdownGracePeriod is 30s (kubesmith default)"),
    "shutdown-gate-off-kubelet": (HOSTS + component("kubelet", "{featureGates: {GracefulNodeShutdown: false}}"),
                                  f"{KUBELET}.featureGates.GracefulNodeShutdown", "shutdownGracePeriod: 0s as well"),
    "shutdown-gate-off-config": (HOSTS + component("kubelet", "{shutdownGracePeriod: 1m, extraConfig: {featureGates: "
                                                              "{GracefulNodeShutdown: false}}}"),
                                 f"{KUBELET}.extraConfig.featureGates.GracefulNodeShutdown",
                                 "shutdownGracePeriod is 1m:"),
    "shutdown-by-priority": (HOSTS + component("kubelet", "{extraConfig: {shutdownGracePeriodByPodPriority: "
                                                          "[{priority: 0, shutdownGracePeriodSeconds: 30}]}}"),
                             f"{KUBELET}.extraConfig.shutdownGracePeriodByPodPriority", "refuses both at once"),
    "parallel-pulls": (HOSTS + component("kubelet", "{extraConfig: {maxParallelImagePulls: 5}}"),
                       f"{KUBELET}.extraConfig.maxParallelImagePulls", "needs serializeImagePulls off"),
    "parallel-pulls-flag": (HOSTS + component("kubelet", "{extraArgs: {serialize-image-pulls: 'true'}, extraConfig: "
                                                         "{maxParallelImagePulls: 5, serializeImagePulls: false}}"),
                            f"{KUBELET}.extraConfig.maxParallelImagePulls", "--serialize-image-pulls"),
    "enforce-system-reserved": (HOSTS + component("kubelet", "{extraConfig: {enforceNodeAllocatable: "
                                                             "[pods, system-reserved]}}"),
                                f"{KUBELET}.extraConfig.enforceNodeAllocatable[1]", "set systemReservedCgroup"),
    "enforce-unknown": (HOSTS + component("kubelet", "{extraConfig: {enforceNodeAllocatable: [bogus]}}"),
                        f"{KUBELET}.extraConfig.enforceNodeAllocatable[0]", "not 'bogus'"),
    "enforce-none-and-pods": (HOSTS + component("kubelet", "{extraConfig: {enforceNodeAllocatable: [pods, none]}}"),
                              f"{KUBELET}.extraConfig.enforceNodeAllocatable[1]", "none stands alone"),
    "log-monitor-interval": (HOSTS + component("kubelet", "{extraConfig: {containerLogMonitorInterval: 1ms}}"),
                             f"{KUBELET}.extraConfig.containerLogMonitorInterval", "3s or more"),
    "swap-behavior": (HOSTS + component("kubelet", "{extraConfig: {memorySwap: {swapBehavior: bogus}}}"),
                      f"{KUBELET}.extraConfig.memorySwap.swapBehavior", "not 'bogus'"),
    "lease-beyond-grace": (HOSTS + component("kubelet", "{extraConfig: {nodeLeaseDurationSeconds: 600}}"),
                           f"{KUBELET}.extraConfig.nodeLeaseDurationSeconds", "flap NotReady"),
    "scheduler-empty-name": (HOSTS + component("scheduler", "{extraConfig: {profiles: [{schedulerName: ''}]}}"),
                             "spec.components.scheduler.extraConfig.profiles[0].schedulerName", "empty one"),
    "scheduler-extender-insecure": (HOSTS + component("scheduler", "{extraConfig: {extenders: [{urlPrefix: "
                                                                   "'https://x.example', tlsConfig: {insecure: "
                                                                   "true}}]}}"),
                                    "spec.components.scheduler.extraConfig.extenders[0].tlsConfig.insecure",
                                    "would not check the extender's certificate"),
    "grace-below-renewal": (HOSTS + component_args("controllerManager", "{node-monitor-grace-period: 5s}"),
                            "spec.components.controllerManager.extraArgs.node-monitor-grace-period",
                            "not longer than the 10s"),
}
COMBINATIONS_LEGITIMATE: dict[str, str] = {
    "shutdown-off": HOSTS + "  featureGates: {GracefulNodeShutdown: false}\n" +
                    component("kubelet", "{shutdownGracePeriod: 0s}"),
    "shutdown-by-priority": HOSTS + component("kubelet", "{shutdownGracePeriod: 0s, extraConfig: "
                                                         "{shutdownGracePeriodByPodPriority: [{priority: 0, "
                                                         "shutdownGracePeriodSeconds: 30}]}}"),
    "parallel-pulls": HOSTS + component("kubelet", "{extraConfig: {maxParallelImagePulls: 5, serializeImagePulls: "
                                                   "false, containerLogMonitorInterval: 10s, memorySwap: "
                                                   "{swapBehavior: LimitedSwap}}}"),
    "enforce-with-cgroups": HOSTS + component("kubelet", "{extraConfig: {enforceNodeAllocatable: [pods, "
                                                         "system-reserved, kube-reserved], systemReservedCgroup: "
                                                         "/system.slice, kubeReservedCgroup: /kubelet.slice}}"),
    "scheduler-extender-ca": HOSTS + component("scheduler", "{extraConfig: {extenders: [{urlPrefix: "
                                                            "'https://x.example', tlsConfig: {insecure: false, "
                                                            "caFile: /etc/kubernetes/extender-ca.crt}}]}}"),
    "lease-and-grace": HOSTS + "  components:\n    kubelet: {extraConfig: {nodeLeaseDurationSeconds: 120}}\n"
                               "    controllerManager: {extraArgs: {node-monitor-grace-period: 40s}}\n",
}
FLAG_VALUES_LEGITIMATE: dict[str, str] = {
    "flag-types": HOSTS + "  components:\n"
                          "    apiserver: {extraArgs: {tls-curve-preferences: '23,29', log-json-info-buffer-size: 1Mi, "
                          "tls-sni-cert-key: '/etc/k/a.crt,/etc/k/a.key:a.example.com', oidc-required-claim: 'x=y,z', "
                          f"{OIDC}, "
                          "vmodule: 'a=2,b=0,', allow-metric-labels: 'a,b=c'}}\n"
                          "    kubelet: {extraArgs: {eviction-hard: 'memory.available<100Mi,nodefs.available<10%', "
                          "kube-reserved: 'cpu=100m,memory=1Gi', address: 01.2.3.4, pods-per-core: 10, "
                          "hairpin-mode: hairpin-veth, oom-score-adj: -999, container-log-max-files: 2}}\n"
                          "    proxy: {extraArgs: {vmodule: 'proxier=4', logging-format: json}, extraConfig: "
                          "{detectLocalMode: BridgeInterface, detectLocal: {bridgeInterface: cbr0}, bindAddress: "
                          "0.0.0.0, iptables: {syncPeriod: 0s, minSyncPeriod: 10s}}}\n"
                          "    scheduler: {extraArgs: {leader-elect-lease-duration: 20s}}\n",
    "api-values": HOSTS + component_args("apiserver", "{storage-media-type: application/json, audit-log-mode: batch, "
                                         "audit-log-version: audit.k8s.io/v1, goaway-chance: '0.001', "
                                         "min-request-timeout: 1800, watch-cache-sizes: 'pods#0,apps.deployments#10', "
                                         "runtime-config: 'api/beta=true,v1=true,apps/v1/deployments=true', "
                                         "logging-format: json, endpoint-reconciler-type: lease, "
                                         "emulated-version: 'kube=1.33', min-compatibility-version: 'v1.33'}"),
    "leases": HOSTS + component_args("controllerManager", "{leader-elect-resource-lock: leases, emulated-version: "
                                                          "'1.36'}"),
    "soft-eviction-with-grace": kubelet("eviction-soft", "'memory.available<100Mi'").replace(
        "}}\n", ", eviction-soft-grace-period: 'memory.available=1m30s'}}\n"),
    "lease-long": HOSTS + component("kubelet", "{extraConfig: {nodeLeaseDurationSeconds: 40, kubeAPIBurst: 0}}"),
}


@pytest.mark.parametrize("name", sorted(UNSAFE_PATHS))
def test_a_service_path_another_user_writes_is_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = UNSAFE_PATHS[name]
    result = assert_refused(tmp_path, name, HEAD + text, path, fragment)
    assert result.stderr.count("error: ") == 1, result.stderr


@pytest.mark.parametrize("name", sorted(MISTYPED_PATHS))
def test_a_path_option_of_the_wrong_type_is_one_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = MISTYPED_PATHS[name]
    result = assert_refused(tmp_path, name, HEAD + text, path, fragment)
    assert result.stderr.count("error: ") == 1, result.stderr


@pytest.mark.parametrize("name", sorted(SAFE_PATHS))
def test_a_root_owned_service_path_stays_valid(name: str, tmp_path: Path) -> None:
    assert_valid(tmp_path, name, HEAD + SAFE_PATHS[name])


@pytest.mark.parametrize("name", sorted(FLAG_VALUES))
def test_a_flag_value_the_binary_refuses_is_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = FLAG_VALUES[name]
    result = assert_refused(tmp_path, name, HEAD36 + text, path, fragment)
    assert result.stderr.count("error: ") == 1, result.stderr


@pytest.mark.parametrize("name", sorted(FLAG_VALUES_LEGITIMATE))
def test_a_flag_value_the_binary_takes_stays_valid(name: str, tmp_path: Path) -> None:
    assert_valid(tmp_path, name, HEAD36 + FLAG_VALUES_LEGITIMATE[name], bound=False)


@pytest.mark.parametrize("name", sorted(COMBINATIONS))
def test_a_combination_the_kubelet_refuses_is_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = COMBINATIONS[name]
    result = assert_refused(tmp_path, name, HEAD36 + text, path, fragment)
    assert result.stderr.count("error: ") == 1, result.stderr


@pytest.mark.parametrize("name", sorted(COMBINATIONS_LEGITIMATE))
def test_a_combination_the_kubelet_takes_stays_valid(name: str, tmp_path: Path) -> None:
    assert_valid(tmp_path, name, HEAD36 + COMBINATIONS_LEGITIMATE[name], bound=False)
