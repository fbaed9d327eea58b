"""Hostile input, round 6 (issue 32), component values and addresses/numbers: what each component does with a
value decides. Checked against the binaries here: kubelet, kube-proxy and kube-scheduler v1.36.2 started on a
configuration with the value (the kubelet past its cgroup v1 refusal), etcd 3.5.1 (a put and a txn against a
server started with the flag), Debian's containerd 1.6.20 (started on a scratch root: `ctr plugins ls`,
required_plugins, a stream_server_port) and their sources. A value the binary refuses at its start, or that
leaves the cluster without a working function (every write refused, every pod of a runtime failing, a loop
without pause), is an exit-1 located error, and the only error of its file; its legitimate neighbour stays valid.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import kubesmith
from test_hostile_round4_consumers import HEAD_136, RUNTIME, runtime
from test_hostile_values import HOSTS, component
from hostile_support import assert_refused_alone, assert_valid, validate_text
from hostile_support import warm  # noqa: F401 (the module's autouse fixture)

KUBELET, PROXY = "spec.components.kubelet", "spec.components.proxy"
SCHEDULER, MANAGER = "spec.components.scheduler", "spec.components.controllerManager"
ETCD = "spec.components.etcd"
CRI = "{plugins: {'io.containerd.grpc.v1.cri': %s}}"
CRI_PATH = f"{RUNTIME}.plugins.io.containerd.grpc.v1.cri"
RUNTIMES = f"{CRI_PATH}.containerd.runtimes"
ALLOCATING = HOSTS + "  components:\n    podNetwork: {enabled: false}\n    controllerManager: %s\n"
THREE_ETCD = "".join(f"    - {{name: h{i}, address: 10.0.0.1{i}, roles: [control-plane, etcd, node]}}\n"
                     for i in (1, 2, 3))


def cri(body: str) -> str:
    return runtime(CRI % body)


def runc(name: str, body: str) -> str:
    return cri(f"{{containerd: {{runtimes: {{{name}: {body}}}}}}}")


def kubelet(body: str) -> str:
    return HOSTS + component("kubelet", body)


def proxy(body: str) -> str:
    return HOSTS + component("proxy", body)


def scheduler(body: str) -> str:
    return HOSTS + component("scheduler", body)


def manager(body: str) -> str:
    return HOSTS + component("controllerManager", body)


def etcd(body: str) -> str:
    return HOSTS + component("etcd", body)


# name -> (what follows `spec.kubernetesVersion: "1.36.2"`, option path of the one error, message fragment)
CASES: dict[str, tuple[str, str, str]] = {
    # containerd: a runtime_type its shim manager cannot resolve ('invalid runtime name bogus, correct runtime name
    # should be either format like `io.containerd.runc.v1` or a full path to the binary'): every pod of it fails
    "ctd-runtime-type-no-dot": (runc("runc", "{runtime_type: bogus}"), f"{RUNTIMES}.runc.runtime_type",
                                "names no shim"),
    "ctd-runtime-type-relative-path": (runc("gvisor", "{runtime_type: bin/shim}"), f"{RUNTIMES}.gvisor.runtime_type",
                                       "or an absolute path"),
    "ctd-runtime-type-empty-part": (runc("kata", "{runtime_type: 'io.containerd.'}"),
                                    f"{RUNTIMES}.kata.runtime_type", "names no shim"),
    # kubesmith's default runtime (every pod) keeps a runc shim: its options are runc's
    "ctd-runtime-type-default-not-runc": (runc("runc", "{runtime_type: io.containerd.runsc.v1}"),
                                          f"{RUNTIMES}.runc.runtime_type", "is no runc shim"),
    # 'containerd: required plugin [io.containerd.bogus.v1.x] not included' (containerd 1.6.20 exits)
    "ctd-required-unknown": (runtime("{required_plugins: [io.containerd.bogus.v1.x]}"),
                             f"{RUNTIME}.required_plugins[0]", "has no plugin 'io.containerd.bogus.v1.x'"),
    "ctd-required-typo": (runtime("{required_plugins: [io.containerd.grpc.v1.cri, io.containerd.grpc.v1.crii]}"),
                          f"{RUNTIME}.required_plugins[1]", "did you mean 'io.containerd.grpc.v1.cri'"),
    "ctd-required-and-disabled": (runtime("{required_plugins: [io.containerd.grpc.v1.tasks], disabled_plugins: "
                                          "[io.containerd.grpc.v1.tasks]}"),
                                  f"{RUNTIME}.required_plugins[0]", "required and disabled"),
    # runc's options are decoded for every sandbox ("failed to generate runtime options")
    "ctd-runc-binaryname-int": (runc("runc", "{options: {BinaryName: 5}}"), f"{RUNTIMES}.runc.options.BinaryName",
                                "as a string, not 5"),
    "ctd-runc-binaryname-lower-list": (runc("runc", "{options: {binaryname: [a]}}"),
                                       f"{RUNTIMES}.runc.options.binaryname", "as a string"),
    "ctd-runc-iouid-negative": (runc("runc", "{options: {IoUid: -1}}"), f"{RUNTIMES}.runc.options.IoUid",
                                "0 to 4294967295, not -1"),
    "ctd-runc-iogid-over-uint32": (runc("runc", "{options: {IoGid: 4294967296}}"), f"{RUNTIMES}.runc.options.IoGid",
                                   "not 4294967296"),
    "ctd-runc-nopivot-string": (runc("runc", "{options: {NoPivotRoot: 'yes'}}"),
                                f"{RUNTIMES}.runc.options.NoPivotRoot", "as a boolean"),
    "ctd-other-runc-runtime-options": (runc("crun", "{runtime_type: io.containerd.runc.v2, options: "
                                                    "{BinaryName: 7}}"),
                                       f"{RUNTIMES}.crun.options.BinaryName", "every pod of runtime crun"),
    # negative durations: a timeout passed before it starts
    "ctd-timeout-negative": (runtime("{timeouts: {'io.containerd.timeout.shim.cleanup': '-5s'}}"),
                             f"{RUNTIME}.timeouts.io.containerd.timeout.shim.cleanup", "is negative"),
    "ctd-stream-idle-negative": (cri("{stream_idle_timeout: '-1m'}"), f"{CRI_PATH}.stream_idle_timeout",
                                 "is negative"),
    # 'Failed to run CRI service" error="stream server error: listen tcp: address 99999: invalid port' (fatal)
    "ctd-stream-port-over": (cri("{stream_server_port: '99999'}"), f"{CRI_PATH}.stream_server_port",
                             "no port from 0 to 65535"),
    "ctd-stream-port-negative": (cri("{stream_server_port: '-1'}"), f"{CRI_PATH}.stream_server_port",
                                 "containerd exits"),
    # a null key: one error, not pydantic's as well
    "ctd-null-key": (runtime("{null: x}"), f"{RUNTIME}.null", "TOML keys are strings"),
    "kubelet-null-key": (kubelet("{extraConfig: {null: x}}"), f"{KUBELET}.extraConfig.null", "JSON keys are strings"),
    # addresses: one canonical text
    "proxy-bind-ipv4-mapped": (proxy("{extraConfig: {bindAddress: '::ffff:10.0.0.11'}}"),
                               f"{PROXY}.extraConfig.bindAddress", "write '10.0.0.11'"),
    "kubelet-address-zone": (kubelet("{extraConfig: {address: 'fe80::1%eth0'}}"), f"{KUBELET}.extraConfig.address",
                             "zone suffix"),
    "kubelet-address-ipv4-mapped": (kubelet("{extraConfig: {address: '::ffff:10.0.0.11'}}"),
                                    f"{KUBELET}.extraConfig.address", "IPv4-mapped"),
    "kubelet-flag-address-ipv4-mapped": (kubelet("{extraArgs: {address: '::ffff:0.0.0.0'}}"),
                                         f"{KUBELET}.extraArgs.address", "write '0.0.0.0'"),
    "kubelet-flag-address-zone": (kubelet("{extraArgs: {address: 'fe80::1%eth0'}}"), f"{KUBELET}.extraArgs.address",
                                  "not an IP address"),
    # the kubelet listens on net.JoinHostPort(address, port): '[[::1]]:10250' (it exits)
    "kubelet-address-bracketed": (kubelet("{extraConfig: {address: '[::1]'}}"), f"{KUBELET}.extraConfig.address",
                                  "no IP address"),
    # kube-proxy's metrics endpoint: one error each (not also CIS 4.3.1 for an address it would not bind)
    "proxy-metrics-no-host": (proxy("{metricsBindAddress: ':10249'}"), f"{PROXY}.metricsBindAddress",
                              "is not HOST:PORT"),
    "proxy-metrics-ipv4-mapped-loopback": (proxy("{extraConfig: {metricsBindAddress: '[::ffff:127.0.0.1]:10249'}}"),
                                           f"{PROXY}.extraConfig.metricsBindAddress", "write '127.0.0.1'"),
    "proxy-metrics-zone": (proxy("{metricsBindAddress: 'fe80::1%eth0:10249'}"), f"{PROXY}.metricsBindAddress",
                           "zone suffix"),
    # a CIS-guarded boolean the binary cannot read: one error, the type's (not also the CIS finding)
    "kubelet-anonymous-string": (kubelet("{extraConfig: {authentication: {anonymous: {enabled: 'true'}}}}"),
                                 f"{KUBELET}.extraConfig.authentication.anonymous.enabled", "as a boolean"),
    "kubelet-seccomp-number": (kubelet("{extraConfig: {seccompDefault: 0}}"), f"{KUBELET}.extraConfig.seccompDefault",
                               "as a boolean"),
    "kubelet-flag-anonymous-quoted": (kubelet("{extraArgs: {anonymous-auth: '\"false\"'}}"),
                                      f"{KUBELET}.extraArgs.anonymous-auth", "not '\"false\"'"),
    # a mode spelled in lower case: the unknown mode, not also "Node is missing" (CIS 1.2.7)
    "apiserver-mode-lower-case": (HOSTS + component("apiserver", "{authorizationMode: [node, RBAC]}"),
                                  "spec.components.apiserver.authorizationMode[0]", "no authorization mode 'node'"),
    # component-base: "burst: Invalid value: -1: must be non-negative"
    "proxy-burst-negative": (proxy("{extraConfig: {clientConnection: {burst: -1}}}"),
                             f"{PROXY}.extraConfig.clientConnection.burst", "0 or more"),
    "scheduler-burst-negative": (scheduler("{extraConfig: {clientConnection: {burst: -1}}}"),
                                 f"{SCHEDULER}.extraConfig.clientConnection.burst", "0 or more"),
    # 'json: cannot unmarshal string into Go struct field KubeletConfiguration.featureGates of type bool'
    "kubelet-gate-string": (kubelet("{extraConfig: {featureGates: {AllAlpha: 'true'}}}"),
                            f"{KUBELET}.extraConfig.featureGates.AllAlpha", "as a boolean"),
    "kubelet-gate-number": (kubelet("{extraConfig: {featureGates: {AllAlpha: 1}}}"),
                            f"{KUBELET}.extraConfig.featureGates.AllAlpha", "not 1"),
    "proxy-gate-go-spelling": (proxy("{extraConfig: {featureGates: {AllBeta: 'T'}}}"),
                               f"{PROXY}.extraConfig.featureGates.AllBeta", "not 'T'"),
    # "eviction threshold memory.available must be positive: -1Mi"
    "kubelet-flag-eviction-negative": (kubelet("{extraArgs: {eviction-hard: 'memory.available<-1Mi'}}"),
                                       f"{KUBELET}.extraArgs.eviction-hard", "above zero"),
    "kubelet-eviction-zero": (kubelet("{extraConfig: {evictionHard: {memory.available: '0'}}}"),
                              f"{KUBELET}.extraConfig.evictionHard.memory.available", "above zero"),
    "kubelet-eviction-soft-zero-unit": (kubelet("{extraConfig: {evictionSoft: {nodefs.available: 0Mi}, "
                                                "evictionSoftGracePeriod: {nodefs.available: 1m}}}"),
                                        f"{KUBELET}.extraConfig.evictionSoft.nodefs.available", "above zero"),
    # "resource quantity for "memory" cannot be negative"
    "kubelet-system-reserved-negative": (kubelet("{extraConfig: {systemReserved: {memory: '-1Gi'}}}"),
                                         f"{KUBELET}.extraConfig.systemReserved.memory", "not negative"),
    "kubelet-kube-reserved-negative-quoted": (kubelet("{extraConfig: {kubeReserved: {cpu: '-1'}}}"),
                                              f"{KUBELET}.extraConfig.kubeReserved.cpu", "not negative"),
    # map[string]string: "cannot unmarshal number into Go struct field KubeletConfiguration.kubeReserved of type
    # string" (checked with the v1.36.2 kubelet, kubeReserved: {memory: 0})
    "kubelet-kube-reserved-number": (kubelet("{extraConfig: {kubeReserved: {memory: 0}}}"),
                                     f"{KUBELET}.extraConfig.kubeReserved", "kubeReserved.memory is 0"),
    "kubelet-eviction-number": (kubelet("{extraConfig: {evictionHard: {memory.available: 100}}}"),
                                f"{KUBELET}.extraConfig.evictionHard", "a mapping of strings"),
    # 'json: cannot unmarshal string into Go struct field KubeSchedulerConfiguration.extenders of type v1.Extender'
    "scheduler-extender-not-object": (scheduler("{extraConfig: {extenders: [x]}}"),
                                      f"{SCHEDULER}.extraConfig.extenders", "extenders[0] is 'x'"),
    "kubelet-flag-system-reserved-negative": (kubelet("{extraArgs: {system-reserved: 'memory=-1Gi'}}"),
                                              f"{KUBELET}.extraArgs.system-reserved", "not negative"),
    # "cannot unmarshal number -1 into Go struct field LoggingConfiguration.logging.verbosity of type
    # v1.VerbosityLevel"
    "kubelet-logging-verbosity-negative": (kubelet("{extraConfig: {logging: {verbosity: -1}}}"),
                                           f"{KUBELET}.extraConfig.logging.verbosity", "not -1"),
    "proxy-logging-verbosity-fraction": (proxy("{extraConfig: {logging: {verbosity: 2.5}}}"),
                                         f"{PROXY}.extraConfig.logging.verbosity", "not 2.5"),
    # "sysctl ... must have at most 253 characters and match regex"
    "kubelet-sysctl-with-value": (kubelet("{extraConfig: {allowedUnsafeSysctls: ['net.core.somaxconn=1']}}"),
                                  f"{KUBELET}.extraConfig.allowedUnsafeSysctls[0]", "no sysctl name"),
    "kubelet-sysctl-upper-case": (kubelet("{extraConfig: {allowedUnsafeSysctls: [net.ipv4.*, NET.core.x]}}"),
                                  f"{KUBELET}.extraConfig.allowedUnsafeSysctls[1]", "no sysctl name"),
    # cpuset.Parse
    "kubelet-flag-reserved-cpus-letter": (kubelet("{extraArgs: {reserved-cpus: '0-a'}}"),
                                          f"{KUBELET}.extraArgs.reserved-cpus", "no CPU list"),
    "kubelet-reserved-cpus-reversed": (kubelet("{extraConfig: {reservedSystemCPUs: '3-1'}}"),
                                       f"{KUBELET}.extraConfig.reservedSystemCPUs", "low to high"),
    # a period under 1s spins as zero does; 0 is the field's default in a configuration file
    "kubelet-config-status-1ns": (kubelet("{extraConfig: {nodeStatusUpdateFrequency: 1ns}}"),
                                  f"{KUBELET}.extraConfig.nodeStatusUpdateFrequency", "shorter than 1s"),
    "kubelet-config-sync-999ms": (kubelet("{extraConfig: {syncFrequency: 999ms}}"),
                                  f"{KUBELET}.extraConfig.syncFrequency", "shorter than 1s"),
    "kubelet-config-runtime-timeout-1us": (kubelet("{extraConfig: {runtimeRequestTimeout: 1us}}"),
                                           f"{KUBELET}.extraConfig.runtimeRequestTimeout", "shorter than 1s"),
    "proxy-config-ipvs-sync-1ns": (proxy("{mode: ipvs, extraConfig: {ipvs: {syncPeriod: 1ns}}}"),
                                   f"{PROXY}.extraConfig.ipvs.syncPeriod", "shorter than 1s"),
    "proxy-config-iptables-sync-100ms": (proxy("{extraConfig: {iptables: {syncPeriod: 100ms, minSyncPeriod: 0s}}}"),
                                         f"{PROXY}.extraConfig.iptables.syncPeriod", "shorter than 1s"),
    # a negative period: one error (not also "minSyncPeriod is longer")
    "proxy-config-sync-negative": (proxy("{extraConfig: {iptables: {syncPeriod: -1s}}}"),
                                   f"{PROXY}.extraConfig.iptables.syncPeriod", "is negative"),
    # an unreadable idle timeout: one error (not also CIS 4.2.5)
    "kubelet-flag-idle-timeout-missing-unit": (kubelet("{extraArgs: {streaming-connection-idle-timeout: '1h1'}}"),
                                               f"{KUBELET}.extraArgs.streaming-connection-idle-timeout",
                                               "not a Go duration"),
    # "extenders[0].weight: Invalid value: 0: must have a positive weight applied to it"
    "scheduler-extender-weight-zero": (scheduler("{extraConfig: {extenders: [{urlPrefix: 'https://x.example', "
                                                 "weight: 0, prioritizeVerb: prioritize}]}}"),
                                       f"{SCHEDULER}.extraConfig.extenders[0].weight", "weight of 1 or more"),
    "scheduler-extender-weight-unset": (scheduler("{extraConfig: {extenders: [{urlPrefix: 'https://x.example', "
                                                  "prioritizeVerb: prioritize}]}}"),
                                        f"{SCHEDULER}.extraConfig.extenders[0].prioritizeVerb", "weight is unset"),
    # "MasqueradeBit: Invalid value: 33: must be within the range [0, 31]"
    "proxy-masquerade-bit-33": (proxy("{extraConfig: {iptables: {masqueradeBit: 33}}}"),
                                f"{PROXY}.extraConfig.iptables.masqueradeBit", "0 to 31"),
    "proxy-masquerade-bit-negative": (proxy("{extraConfig: {iptables: {masqueradeBit: -1}}}"),
                                      f"{PROXY}.extraConfig.iptables.masqueradeBit", "0 to 31"),
    # "Invalid --cluster-cidr, mask size of cluster CIDR must be less than or equal to --node-cidr-mask-size"
    "manager-mask-above-cluster": (ALLOCATING % "{nodeCidrMaskSize: 8}", f"{MANAGER}.nodeCidrMaskSize",
                                   "larger than the pod range 10.200.0.0/16"),
    "manager-mask-above-own-cidr": (ALLOCATING % "{nodeCidrMaskSize: 16, clusterCidr: 10.200.0.0/20}",
                                    f"{MANAGER}.nodeCidrMaskSize", "give /20 or longer"),
    # client-go: "leaseDuration must be greater than renewDeadline", "renewDeadline must be greater than
    # retryPeriod*JitterFactor"
    "manager-lease-below-renew": (manager("{extraArgs: {leader-elect-lease-duration: 15s, "
                                          "leader-elect-renew-deadline: 20s}}"),
                                  f"{MANAGER}.extraArgs.leader-elect-renew-deadline", "must be longer"),
    "manager-retry-too-long": (manager("{extraArgs: {leader-elect-retry-period: 9s}}"),
                               f"{MANAGER}.extraArgs.leader-elect-retry-period", "1.2 x"),
    # a loop period of 0 (a ticker panics, wait.Until spins) or 1ns
    "manager-hpa-sync-zero": (manager("{extraArgs: {horizontal-pod-autoscaler-sync-period: 0s}}"),
                              f"{MANAGER}.extraArgs.horizontal-pod-autoscaler-sync-period", "is zero"),
    "manager-node-monitor-period-1ns": (manager("{extraArgs: {node-monitor-period: 1ns}}"),
                                        f"{MANAGER}.extraArgs.node-monitor-period", "shorter than 1s"),
    # etcd 3.5.1: "etcdserver: too many operations in txn request", "etcdserver: request is too large"
    "etcd-max-txn-ops-zero": (etcd("{extraArgs: {max-txn-ops: '0'}}"), f"{ETCD}.extraArgs.max-txn-ops",
                              "too many operations"),
    "etcd-max-txn-ops-hex-zero": (etcd("{extraArgs: {max-txn-ops: '0x0'}}"), f"{ETCD}.extraArgs.max-txn-ops",
                                  "no object could be created"),
    "etcd-max-request-bytes-zero": (etcd("{extraArgs: {max-request-bytes: 0}}"),
                                    f"{ETCD}.extraArgs.max-request-bytes", "too large"),
    # every member defragmenting at once: no quorum while they do
    "defrag-all-members-at-once": ("  hosts:\n" + THREE_ETCD + component("etcdDefrag", "{enable: true, "
                                                                           "memberSpacing: 0}"),
                                   "spec.components.etcdDefrag.memberSpacing", "no quorum"),
    # already refused, new spellings: one located error each
    "scheduler-bind-zone": (scheduler("{bindAddress: '0.0.0.0%eth0'}"), f"{SCHEDULER}.bindAddress", "zone suffix"),
    "coredns-upstream-ipv4-mapped": (HOSTS + component("coreDns", "{upstream: ['::ffff:8.8.8.8']}"),
                                     "spec.components.coreDns.upstream[0]", "write '8.8.8.8'"),
    "vip-in-service-range": (HOSTS + "  controlPlaneVIP: 10.32.0.50\n", "spec.controlPlaneVIP",
                             "inside serviceCidr"),
    "vip-outside-every-subnet": (HOSTS + "  controlPlaneVIP: 192.168.99.9\n", "spec.controlPlaneVIP",
                                 "outside every control-plane host's network"),
    "kubelet-flag-sync-arabic-digit": (kubelet("{extraArgs: {sync-frequency: '\u0661s'}}"),
                                       f"{KUBELET}.extraArgs.sync-frequency", "not a Go duration"),
    "kubelet-flag-status-trailing-space": (kubelet("{extraArgs: {node-status-update-frequency: '10s '}}"),
                                           f"{KUBELET}.extraArgs.node-status-update-frequency", "not a Go duration"),
    "apiserver-request-timeout-nan": (HOSTS + component("apiserver", "{extraArgs: {request-timeout: NaNs}}"),
                                      "spec.components.apiserver.extraArgs.request-timeout", "not a Go duration"),
    "apiserver-token-expiration-overflow": (HOSTS + component("apiserver", "{extraArgs: {"
                                                              "service-account-max-token-expiration: 9223372037s}}"),
                                            "spec.components.apiserver.extraArgs.service-account-max-token-expiration",
                                            "longest"),
    "apiserver-goaway-infinity": (HOSTS + component("apiserver", "{extraArgs: {goaway-chance: '+Inf'}}"),
                                  "spec.components.apiserver.extraArgs.goaway-chance", "finite number"),
    "proxy-ipvs-scheduler-trailing-space": (proxy("{mode: ipvs, extraConfig: {ipvs: {scheduler: 'rr '}}}"),
                                            f"{PROXY}.extraConfig.ipvs.scheduler", "no IPVS scheduler 'rr '"),
    "kubelet-topology-policy-trailing-space": (kubelet("{extraConfig: {topologyManagerPolicy: 'best-effort '}}"),
                                               f"{KUBELET}.extraConfig.topologyManagerPolicy", "not 'best-effort '"),
    "kubelet-sync-date": (kubelet("{extraConfig: {syncFrequency: 2020-01-01}}"),
                          f"{KUBELET}.extraConfig.syncFrequency", "YAML timestamp"),
    "proxy-node-ports-binary": (proxy("{extraConfig: {nodePortAddresses: !!binary aGVsbG8=}}"),
                                f"{PROXY}.extraConfig.nodePortAddresses", "!!binary"),
    "ctd-runtime-date": (cri("{sandbox_image_pull_at: 2020-01-01}"), f"{CRI_PATH}.sandbox_image_pull_at",
                         "YAML timestamp"),
}

# name -> what follows `spec.kubernetesVersion: "1.36.2"`: valid, and without a warning about it
LEGITIMATE: dict[str, str] = {
    "ctd-runtimes-as-containerd-takes-them": cri(
        "{containerd: {runtimes: {runc: {runtime_type: io.containerd.runc.v2, options: {BinaryName: /usr/sbin/runc, "
        "IoUid: 0, IoGid: 0, NoPivotRoot: false, Root: /run/containerd/runc}}, gvisor: {runtime_type: "
        "io.containerd.runsc.v1, options: {TypeUrl: 5}}, shim: {runtime_type: /usr/bin/containerd-shim-runc-v2}}}, "
        "stream_server_port: '10010', stream_idle_timeout: 0s}"),
    # containerd reads kubesmith's runtime_type, not RUNTIME_TYPE, as it reads the first spelling a table holds
    "ctd-shadowed-runtime-type": runc("runc", "{RUNTIME_TYPE: bogus}"),
    "ctd-required-plugins": runtime("{required_plugins: [io.containerd.grpc.v1.cri, "
                                    "io.containerd.snapshotter.v1.overlayfs], timeouts: "
                                    "{'io.containerd.timeout.shim.cleanup': 5s}}"),
    "proxy-bind-and-burst": proxy("{extraConfig: {bindAddress: '::', clientConnection: {burst: 0}, iptables: "
                                  "{masqueradeBit: 14, syncPeriod: 0s}, logging: {verbosity: 4}}}"),
    "kubelet-address-and-gates": kubelet("{extraConfig: {address: 0.0.0.0, featureGates: {AllAlpha: false}}}"),
    "kubelet-eviction-and-reserved": kubelet("{extraConfig: {evictionHard: {memory.available: 100Mi, "
                                             "nodefs.available: '10%'}, evictionMinimumReclaim: {memory.available: "
                                             "'0'}, kubeReserved: {cpu: 100m, memory: '0'}}}"),
    "kubelet-sysctls-and-cpus": kubelet("{extraConfig: {allowedUnsafeSysctls: [net.core.somaxconn, net.ipv4.*, "
                                        "kernel.shm_rmid_forced], reservedSystemCPUs: '0-1,4'}}"),
    "kubelet-periods": kubelet("{extraConfig: {syncFrequency: 0s, nodeStatusUpdateFrequency: 1s, "
                               "fileCheckFrequency: 20s}, extraArgs: {streaming-connection-idle-timeout: 5m}}"),
    "scheduler-extenders": scheduler("{extraConfig: {clientConnection: {burst: 0}, extenders: [{urlPrefix: "
                                     "'https://x.example', weight: 1, prioritizeVerb: prioritize}, {urlPrefix: "
                                     "'https://y.example', filterVerb: filter}]}}"),
    "manager-mask-and-lease": ALLOCATING % "{nodeCidrMaskSize: 24, extraArgs: {leader-elect-lease-duration: 60s, "
                                           "leader-elect-renew-deadline: 40s, leader-elect-retry-period: 5s, "
                                           "horizontal-pod-autoscaler-sync-period: 30s}}",
    # with kubesmith's pod network, the controller manager allocates no ranges: its mask is unused
    "manager-mask-unused": manager("{nodeCidrMaskSize: 8}"),
    "manager-lease-without-election": manager("{leaderElect: false, extraArgs: {leader-elect-lease-duration: 5s}}"),
    # kube-proxy appends its port to an address alone (proxyutil.AppendPortIfNeeded), ::1 too
    "proxy-metrics-forms": proxy("{metricsBindAddress: '::1', extraConfig: {bindAddress: 0.0.0.0}}"),
    "etcd-limits": etcd("{extraArgs: {max-txn-ops: 256, max-request-bytes: '3145728'}}"),
    # one member, or the timer off: nothing to take turns with
    "defrag-one-member-at-once": HOSTS + component("etcdDefrag", "{enable: true, memberSpacing: 0}"),
    "defrag-off": "  hosts:\n" + THREE_ETCD + component("etcdDefrag", "{enable: false, memberSpacing: 0}"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_hostile_value_is_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = CASES[name]
    assert_refused_alone(tmp_path, name, HEAD_136 + text, path, fragment)


@pytest.mark.parametrize("name", sorted(LEGITIMATE))
def test_the_legitimate_neighbour_stays_valid(name: str, tmp_path: Path) -> None:
    result = assert_valid(tmp_path, name, HEAD_136 + LEGITIMATE[name])
    assert "warning" not in result.stderr, result.stderr


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) >= 60


@pytest.mark.parametrize("name", ["ctd-runc-binaryname-int", "kubelet-eviction-zero", "etcd-max-txn-ops-zero",
                                  "manager-mask-above-cluster"])
def test_plan_offline_refuses_them_too(name: str, tmp_path: Path) -> None:
    text, path, _ = CASES[name]
    (tmp_path / f"{name}.yaml").write_text(HEAD_136 + text)
    for extra in ((), ("-o", "json")):
        result = kubesmith("plan", f"{name}.yaml", "--offline", *extra, cwd=tmp_path)
        assert result.returncode == 1, result.stderr
        assert f"error: {path}: " in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_a_legitimate_neighbour_plans(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(HEAD_136 + LEGITIMATE["ctd-runtimes-as-containerd-takes-them"])
    result = kubesmith("plan", "cluster.yaml", "--offline", "-o", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "io.containerd.runsc.v1" in result.stdout


# add-on manifests: the labels of a template (a pod's, a CronJob's Job's) are labels the API server validates
TEMPLATES: dict[str, tuple[str, str]] = {
    "deployment-pod-template": ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: default}\n"
                                "spec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: "
                                "{app: web, 'bad key!': x}}\n    spec: {containers: [{name: c, image: nginx}]}\n",
                                "spec.template.metadata.labels: 'bad key!' is not a valid label key"),
    "cronjob-job-template": ("apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: cj, namespace: default}\nspec:\n"
                             "  schedule: '* * * * *'\n  jobTemplate:\n    metadata: {labels: {'a/b/c': x}}\n"
                             "    spec:\n      template:\n        spec: {restartPolicy: Never, containers: "
                             "[{name: c, image: busybox}]}\n",
                             "spec.jobTemplate.metadata.labels: 'a/b/c'"),
    "cronjob-pod-template-value": ("apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: cj, namespace: default}\n"
                                   "spec:\n  schedule: '* * * * *'\n  jobTemplate:\n    spec:\n      template:\n"
                                   "        metadata: {labels: {tier: '-bad-'}}\n        spec: {restartPolicy: "
                                   "Never, containers: [{name: c, image: busybox}]}\n",
                                   "spec.jobTemplate.spec.template.metadata.labels"),
    "daemonset-template-number": ("apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: ds, namespace: default}\n"
                                  "spec:\n  selector: {matchLabels: {app: ds}}\n  template:\n    metadata: {labels: "
                                  "{app: ds, version: 2}}\n    spec: {containers: [{name: c, image: nginx}]}\n",
                                  "must map strings to strings"),
}


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_a_template_label_the_api_server_refuses_is_one_located_error(name: str, tmp_path: Path) -> None:
    manifest, fragment = TEMPLATES[name]
    (tmp_path / "addon.yaml").write_text(manifest)
    assert_refused_alone(tmp_path, name, HEAD_136 + HOSTS + "  addons: [addon.yaml]\n", "spec.addons[0]",
                         fragment)


def test_template_labels_the_api_server_takes_stay_valid(tmp_path: Path) -> None:
    (tmp_path / "addon.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: default}\nspec:\n  selector: "
        "{matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web, app.kubernetes.io/name: web, "
        "empty: ''}}\n    spec: {containers: [{name: c, image: nginx}]}\n")
    result = validate_text(tmp_path, "cluster", HEAD_136 + HOSTS + "  addons: [addon.yaml]\n")
    assert result.returncode == 0, result.stderr
