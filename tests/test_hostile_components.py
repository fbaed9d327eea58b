"""Hostile component values (issue 32, audit round 3): values a binary refuses at its start, or that weaken
what kubesmith sets (TLS below 1.2, static pods from a URL, a plaintext etcd), and configuration fields
kubesmith derives from other options. Each ends in one located error, exit 1; the legitimate neighbours
stay valid.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import kubesmith
from hostile_support import assert_refused, assert_valid
from hostile_support import warm  # noqa: F401 (the module's autouse fixture)
from test_hostile_values import HEAD, HOSTS, component, kubelet_config, kubelet_flag

KUBELET = "spec.components.kubelet"
APISERVER = "spec.components.apiserver"
PROXY = "spec.components.proxy"
RUNTIME = "spec.components.containerRuntime"


def kubelet_on_own_runtime(body: str) -> str:
    """The kubelet's `body` on hosts that bring their own container runtime."""
    return f"  components:\n    containerRuntime: {{enabled: false}}\n    kubelet: {body}\n"


def apiserver(body: str) -> str:
    return component("apiserver", body)


def apiserver_flag(flag: str, value: str) -> str:
    return apiserver(f"{{extraArgs: {{{flag}: {value}}}}}")


# name -> (what follows spec.kubernetesVersion, option path of the error, message fragment)
CASES: dict[str, tuple[str, str, str]] = {
    # 1. security weakenings
    "kubelet-static-pod-url": (HOSTS + kubelet_config("{staticPodURL: 'http://10.9.9.9/pods'}"),
                               f"{KUBELET}.extraConfig.staticPodURL", "no static pods from a URL"),
    "kubelet-manifest-url-flag": (HOSTS + kubelet_flag("manifest-url", "'http://10.9.9.9/pods'"),
                                  f"{KUBELET}.extraArgs.manifest-url", "no static pods from a URL"),
    **{f"kubelet-tls-min-{v}": (HOSTS + kubelet_config(f"{{tlsMinVersion: {v}}}"),
                                f"{KUBELET}.extraConfig.tlsMinVersion", "below TLS 1.2")
       for v in ("VersionTLS10", "VersionTLS11")},
    "kubelet-tls-min-unknown": (HOSTS + kubelet_config("{tlsMinVersion: TLS12}"),
                                f"{KUBELET}.extraConfig.tlsMinVersion", "VersionTLS12 or VersionTLS13"),
    "kubelet-tls-min-flag": (HOSTS + kubelet_flag("tls-min-version", "VersionTLS10"),
                             f"{KUBELET}.extraArgs.tls-min-version", "below TLS 1.2"),
    "scheduler-tls-min-flag": (HOSTS + component("scheduler", "{extraArgs: {tls-min-version: VersionTLS11}}"),
                               "spec.components.scheduler.extraArgs.tls-min-version", "below TLS 1.2"),
    "apiserver-tls-min-flag": (HOSTS + apiserver_flag("tls-min-version", "VersionTLS11"),
                               f"{APISERVER}.extraArgs.tls-min-version", "below TLS 1.2"),
    "apiserver-etcd-override-http": (HOSTS + apiserver_flag("etcd-servers-overrides", "'/events#http://10.0.0.9:2379'"),
                                     f"{APISERVER}.extraArgs.etcd-servers-overrides", "no https:// URL"),
    "apiserver-cipher-unknown": (HOSTS + apiserver("{tlsCipherSuites: [TLS_FOO]}"),
                                 f"{APISERVER}.tlsCipherSuites[0]", "Go knows no cipher suite 'TLS_FOO'"),
    "kubelet-config-cipher-unknown": (HOSTS + kubelet_config("{tlsCipherSuites: [TLS_FOO]}"),
                                      f"{KUBELET}.extraConfig.tlsCipherSuites[0]", "no cipher suite"),
    "kubelet-flag-cipher-unknown": (HOSTS + kubelet_flag("tls-cipher-suites", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA25"),
                                    f"{KUBELET}.extraArgs.tls-cipher-suites", "did you mean"),
    # 2. typed options repeated in extraConfig
    "kubelet-config-pids-negative": (HOSTS + kubelet_config("{podPidsLimit: -5}"),
                                     f"{KUBELET}.extraConfig.podPidsLimit", "-1 (no limit) or more"),
    "kubelet-config-max-pods-negative": (HOSTS + kubelet_config("{maxPods: -1}"),
                                         f"{KUBELET}.extraConfig.maxPods", "1 or more"),
    "kubelet-config-port": (HOSTS + kubelet_config("{port: 10251}"), f"{KUBELET}.extraConfig.port",
                            "set that option instead"),
    "kubelet-config-cgroup-driver": (HOSTS + kubelet_config("{cgroupDriver: cgroupfs}"),
                                     f"{KUBELET}.extraConfig.cgroupDriver", "spec.components.kubelet.cgroupDriver"),
    "kubelet-flag-cgroup-driver": (HOSTS + kubelet_flag("cgroup-driver", "cgroupfs"),
                                   f"{KUBELET}.extraArgs.cgroup-driver", "spec.components.kubelet.cgroupDriver"),
    "proxy-config-mode-unknown": (HOSTS + component("proxy", "{extraConfig: {mode: userspace}}"),
                                  f"{PROXY}.extraConfig.mode", "no mode 'userspace'"),
    "proxy-config-healthz": (HOSTS + component("proxy", "{extraConfig: {healthzBindAddress: '0.0.0.0:10256'}}"),
                             f"{PROXY}.extraConfig.healthzBindAddress", "healthzPort"),
    "proxy-config-cluster-cidr": (HOSTS + component("proxy", "{extraConfig: {clusterCIDR: 224.0.0.0/4}}"),
                                  f"{PROXY}.extraConfig.clusterCIDR", "spec.components.proxy.clusterCidr"),
    # 3. derived from spec.network and containerd
    "kubelet-config-cluster-domain": (HOSTS + kubelet_config("{clusterDomain: other.local}"),
                                      f"{KUBELET}.extraConfig.clusterDomain", "spec.network.dnsDomain"),
    "kubelet-flag-cluster-domain": (HOSTS + kubelet_flag("cluster-domain", "other.local"),
                                    f"{KUBELET}.extraArgs.cluster-domain", "spec.network.dnsDomain"),
    "kubelet-cluster-domain-option": (HOSTS + component("kubelet", "{clusterDomain: other.local}"),
                                      f"{KUBELET}.clusterDomain", "set spec.network.dnsDomain instead"),
    "kubelet-config-runtime-endpoint": (HOSTS + kubelet_config("{containerRuntimeEndpoint: 'unix:///run/x.sock'}"),
                                        f"{KUBELET}.extraConfig.containerRuntimeEndpoint", "containerRuntimeEndpoint"),
    # 4. containerd
    "containerd-version-3": (HOSTS + component("containerRuntime", "{extraConfig: {version: 3}}"),
                             f"{RUNTIME}.extraConfig.version", "version 2"),
    "containerd-default-runtime-empty": (
        HOSTS + component("containerRuntime", "{extraConfig: {plugins: {io.containerd.grpc.v1.cri: "
                                              "{containerd: {default_runtime_name: ''}}}}}"),
        f"{RUNTIME}.extraConfig.plugins.io.containerd.grpc.v1.cri.containerd.default_runtime_name", "runc"),
    "containerd-socket": (HOSTS + component("containerRuntime", "{extraConfig: {grpc: {address: /run/x.sock}}}"),
                          f"{RUNTIME}.extraConfig.grpc.address", "spec.components.containerRuntime.socket"),
    # 5. values the API server (or kubelet) refuses at start
    "apiserver-admission-unknown": (HOSTS + apiserver("{enableAdmissionPlugins: [NodeRestriction, NoSuchPlugin]}"),
                                    f"{APISERVER}.enableAdmissionPlugins[1]", "no admission plugin 'NoSuchPlugin'"),
    "apiserver-admission-initializers": (HOSTS + apiserver("{enableAdmissionPlugins: [NodeRestriction, Initializers]}"),
                                         f"{APISERVER}.enableAdmissionPlugins[1]", "removed in Kubernetes 1.14"),
    "apiserver-disable-admission-unknown": (HOSTS + apiserver_flag("disable-admission-plugins", "NoSuchPlugin"),
                                            f"{APISERVER}.extraArgs.disable-admission-plugins", "no admission plugin"),
    "apiserver-authz-webhook-no-config": (HOSTS + apiserver("{authorizationMode: [Node, RBAC, Webhook]}"),
                                          f"{APISERVER}.authorizationMode[2]", "authorization-webhook-config-file"),
    "apiserver-authz-abac-no-policy": (HOSTS + apiserver("{authorizationMode: [Node, RBAC, ABAC]}"),
                                       f"{APISERVER}.authorizationMode[2]", "authorization-policy-file"),
    "apiserver-authz-unknown": (HOSTS + apiserver("{authorizationMode: [Node, RBAC, Magic]}"),
                                f"{APISERVER}.authorizationMode[2]", "no authorization mode 'Magic'"),
    "apiserver-address-type-unknown": (HOSTS + apiserver("{kubeletPreferredAddressTypes: [Foo]}"),
                                       f"{APISERVER}.kubeletPreferredAddressTypes[0]", "no node address type"),
    "apiserver-storage-etcd2": (HOSTS + apiserver_flag("storage-backend", "etcd2"),
                                f"{APISERVER}.extraArgs.storage-backend", "as 'etcd3', not 'etcd2'"),
    **{f"apiserver-{flag}-negative": (HOSTS + apiserver_flag(flag, "'-1'"), f"{APISERVER}.extraArgs.{flag}",
                                      "refuses a negative")
       for flag in ("max-requests-inflight", "max-mutating-requests-inflight")},
    "kubelet-cloud-provider-aws": (HOSTS + kubelet_flag("cloud-provider", "aws"),
                                   f"{KUBELET}.extraArgs.cloud-provider", "only as external or empty"),
    # a locked gate stops the binary ("cannot set feature gate NodeSwap to false, feature is locked to true");
    # an unknown one v1.36.2 only warns about (test_hostile_round4_consumers)
    "kubelet-config-gate-locked": (HOSTS + kubelet_config("{featureGates: {NodeSwap: false}}"),
                                   f"{KUBELET}.extraConfig.featureGates.NodeSwap", "locked to true"),
    "proxy-config-gate-locked": (HOSTS + component("proxy", "{extraConfig: {featureGates: "
                                                            "{NFTablesProxyMode: false}}}"),
                                 f"{PROXY}.extraConfig.featureGates.NFTablesProxyMode", "locked to true"),
    # 6. values the kubelet's, kube-proxy's and kube-scheduler's own validation refuses
    "kubelet-config-hairpin": (HOSTS + kubelet_config("{hairpinMode: bogus}"), f"{KUBELET}.extraConfig.hairpinMode",
                               "one of promiscuous-bridge"),
    "kubelet-config-eviction-percent": (HOSTS + kubelet_config("{evictionHard: {memory.available: '200%'}}"),
                                        f"{KUBELET}.extraConfig.evictionHard.memory.available", "[0%, 100%]"),
    "kubelet-config-cpu-static-unreserved": (HOSTS + kubelet_config("{cpuManagerPolicy: static}"),
                                             f"{KUBELET}.extraConfig.cpuManagerPolicy", "needs CPUs reserved"),
    "kubelet-config-topology-policy": (HOSTS + kubelet_config("{topologyManagerPolicy: bogus}"),
                                       f"{KUBELET}.extraConfig.topologyManagerPolicy", "single-numa-node"),
    "kubelet-config-reserved-cpu": (HOSTS + kubelet_config("{systemReserved: {cpu: abc}}"),
                                    f"{KUBELET}.extraConfig.systemReserved.cpu", "no resource quantity"),
    "kubelet-config-max-images": (HOSTS + kubelet_config("{nodeStatusMaxImages: -2}"),
                                  f"{KUBELET}.extraConfig.nodeStatusMaxImages", "-1 or more"),
    "kubelet-config-log-files": (HOSTS + kubelet_config("{containerLogMaxFiles: 1}"),
                                 f"{KUBELET}.extraConfig.containerLogMaxFiles", "2 or more"),
    "kubelet-config-log-size": (HOSTS + kubelet_config("{containerLogMaxSize: abc}"),
                                f"{KUBELET}.extraConfig.containerLogMaxSize", "no resource quantity"),
    "kubelet-config-oom": (HOSTS + kubelet_config("{oomScoreAdj: -2000}"), f"{KUBELET}.extraConfig.oomScoreAdj",
                           "-1000 to 1000"),
    "kubelet-config-no-qos-cgroups": (HOSTS + kubelet_config("{cgroupsPerQOS: false}"),
                                      f"{KUBELET}.extraConfig.cgroupsPerQOS", "enforceNodeAllocatable: []"),
    "kubelet-config-parallel-pulls": (HOSTS + kubelet_config("{serializeImagePulls: false, maxParallelImagePulls: 0}"),
                                      f"{KUBELET}.extraConfig.maxParallelImagePulls", "1 or more"),
    "proxy-config-conntrack": (HOSTS + component("proxy", "{extraConfig: {conntrack: {maxPerCore: -1}}}"),
                               f"{PROXY}.extraConfig.conntrack.maxPerCore", "0 or more"),
    "scheduler-config-percentage": (HOSTS + component("scheduler", "{extraConfig: {percentageOfNodesToScore: 101}}"),
                                    "spec.components.scheduler.extraConfig.percentageOfNodesToScore", "0 to 100"),
    "scheduler-config-parallelism": (HOSTS + component("scheduler", "{extraConfig: {parallelism: 0}}"),
                                     "spec.components.scheduler.extraConfig.parallelism", "1 or more"),
    "scheduler-config-duplicate-profile": (
        HOSTS + component("scheduler", "{extraConfig: {profiles: [{schedulerName: a}, {schedulerName: a}]}}"),
        "spec.components.scheduler.extraConfig.profiles[1].schedulerName", "duplicate scheduler names"),
    # kube-scheduler decodes strictly: an unknown field stops it
    "scheduler-config-unknown-field": (HOSTS + component("scheduler", "{extraConfig: {a: [b]}}"),
                                       "spec.components.scheduler.extraConfig.a", "no field 'a'"),
    "scheduler-config-typo": (HOSTS + component("scheduler", "{extraConfig: {paralelism: 8}}"),
                              "spec.components.scheduler.extraConfig.paralelism", "did you mean parallelism?"),
    # the kubelet's CRI socket: containerd's own while kubesmith runs it, else a unix socket path
    "kubelet-endpoint-other-socket": (HOSTS + component("kubelet", "{containerRuntimeEndpoint: "
                                                                   "'unix:///run/other.sock'}"),
                                      f"{KUBELET}.containerRuntimeEndpoint", "where the containerd kubesmith runs"),
    "kubelet-endpoint-tcp": (HOSTS + kubelet_on_own_runtime("{containerRuntimeEndpoint: 'tcp://10.0.0.9:5'}"),
                             f"{KUBELET}.containerRuntimeEndpoint", "unix:///PATH of a CRI socket"),
    "kubelet-endpoint-long": (HOSTS + kubelet_on_own_runtime("{containerRuntimeEndpoint: "
                                                                 f"'unix:///{'s' * 120}.sock'}}"),
                              f"{KUBELET}.containerRuntimeEndpoint", "at most 107 bytes"),
    # more pods than a node's pod range has addresses
    "kubelet-max-pods-config": (HOSTS + kubelet_config("{maxPods: 100000}"), f"{KUBELET}.extraConfig.maxPods",
                                "holds 253 pod addresses"),
    "kubelet-max-pods-option": (HOSTS + component("kubelet", "{maxPods: 254}"), f"{KUBELET}.maxPods",
                                "holds 253 pod addresses"),
}

# legitimate neighbours: valid as written
LEGITIMATE: dict[str, str] = {
    "kubelet-tls-13": kubelet_config("{tlsMinVersion: VersionTLS13}"),
    "kubelet-tls-12": kubelet_config("{tlsMinVersion: VersionTLS12}"),
    "kubelet-tls-13-flag": kubelet_flag("tls-min-version", "VersionTLS13"),
    # raising the minimum (or restating kubesmith's VersionTLS12) is no weakening, on every component
    **{f"{name}-tls-{version[-2:]}-flag": component(name, f"{{extraArgs: {{tls-min-version: {version}}}}}")
       for name in ("apiserver", "controllerManager", "scheduler") for version in ("VersionTLS12", "VersionTLS13")},
    "apiserver-cipher-secure": apiserver("{tlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, "
                                         "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305]}"),
    "kubelet-config-cipher-secure": kubelet_config("{tlsCipherSuites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]}"),
    "apiserver-authz-node-rbac": apiserver("{authorizationMode: [Node, RBAC]}"),
    "apiserver-authz-webhook-with-config": apiserver("{authorizationMode: [Node, RBAC, Webhook], extraArgs: "
                                                     "{authorization-webhook-config-file: /etc/kubernetes/webhook.yaml}}"),
    "apiserver-admission-pod-security": apiserver("{enableAdmissionPlugins: [NodeRestriction, PodSecurity]}"),
    "apiserver-disable-admission-known": apiserver_flag("disable-admission-plugins", "DefaultStorageClass"),
    "apiserver-address-types": apiserver("{kubeletPreferredAddressTypes: [InternalIP, InternalDNS, Hostname]}"),
    "apiserver-etcd-override-https": apiserver_flag("etcd-servers-overrides",
                                                    "'/events#https://10.0.0.11:2379'"),
    "apiserver-storage-etcd3": apiserver_flag("storage-backend", "etcd3"),
    "apiserver-inflight-zero": apiserver_flag("max-requests-inflight", "'0'"),
    "kubelet-cloud-provider-external": kubelet_flag("cloud-provider", "external"),
    "kubelet-config-gate-known": kubelet_config("{featureGates: {GracefulNodeShutdown: true}}"),
    "kubelet-config-pids-unlimited": kubelet_config("{podPidsLimit: -1, maxPods: 200}"),
    "kubelet-config-same-domain": kubelet_config("{clusterDomain: cluster.local}"),
    "kubelet-domain-option-same": "  network: {dnsDomain: corp.local}\n" + component("kubelet",
                                                                                      "{clusterDomain: corp.local}"),
    "kubelet-config-same-endpoint": kubelet_config("{containerRuntimeEndpoint: "
                                                   "'unix:///run/containerd/containerd.sock'}"),
    "kubelet-config-same-port": kubelet_config("{port: 10250}"),
    "proxy-config-mode-ipvs": component("proxy", "{extraConfig: {mode: ipvs}}"),
    "kubelet-config-hairpin-veth": kubelet_config("{hairpinMode: hairpin-veth}"),
    "kubelet-config-eviction-ok": kubelet_config("{evictionHard: {memory.available: '5%', nodefs.available: 1Gi}}"),
    "kubelet-config-cpu-static-reserved": kubelet_config("{cpuManagerPolicy: static, kubeReserved: {cpu: 500m}}"),
    "kubelet-config-cpu-static-reserved-cpus": kubelet_config("{cpuManagerPolicy: static, reservedSystemCPUs: '0'}"),
    # quoted: systemReserved is a map of strings, and the v1.36.2 kubelet refuses a number there ("cannot
    # unmarshal number into Go struct field KubeletConfiguration.systemReserved of type string")
    "kubelet-config-reserved-quantities": kubelet_config("{systemReserved: {cpu: '0.5', memory: 512Mi}, "
                                                         "containerLogMaxSize: 50Mi, containerLogMaxFiles: 3}"),
    "kubelet-config-no-qos-cgroups-ok": kubelet_config("{cgroupsPerQOS: false, enforceNodeAllocatable: []}"),
    "kubelet-config-oom-ok": kubelet_config("{oomScoreAdj: -999, nodeStatusMaxImages: -1}"),
    "scheduler-config-ok": component("scheduler", "{extraConfig: {percentageOfNodesToScore: 0, parallelism: 16, "
                                                  "profiles: [{schedulerName: a}, {schedulerName: b}]}}"),
    "containerd-same-sandbox-image": component("containerRuntime", "{extraConfig: {plugins: {io.containerd.grpc.v1.cri: "
                                                                   "{sandbox_image: 'kubesmith.local/pause:1'}}}}"),
    "containerd-version-2": component("containerRuntime", "{extraConfig: {version: 2}}"),
    "kubelet-endpoint-own-runtime": kubelet_on_own_runtime("{containerRuntimeEndpoint: 'unix:///run/crio/crio.sock'}"),
    "kubelet-max-pods-fill-the-range": component("kubelet", "{maxPods: 253}"),
    "kubelet-max-pods-own-cni": ("  components:\n    podNetwork: {enabled: false}\n"
                                 "    kubelet: {maxPods: 500}\n"),
    "kubelet-config-no-qos-cgroups-none": kubelet_config("{cgroupsPerQOS: false, enforceNodeAllocatable: [none]}"),
    "agent-ca-url-upper-case-host": component("agent", "{caUrls: ['https://CA.Example.com:8443']}"),
    "kubelet-max-pods-larger-ranges": ("  components:\n    podNetwork: {nodeCidrMaskSize: 22}\n"
                                       "    kubelet: {maxPods: 500}\n"),
    # kubeadm's generated files: a zero period (null for a pointer) is the component's default, and an
    # empty metricsBindAddress is kube-proxy's 127.0.0.1:10249 (checked with the v1.36.2 binaries)
    "kubelet-config-kubeadm-zero-periods": kubelet_config(
        "{syncFrequency: 0s, nodeStatusUpdateFrequency: 0s, runtimeRequestTimeout: 0s, cpuManagerReconcilePeriod: "
        "0s, fileCheckFrequency: 0s, httpCheckFrequency: 0s, nodeStatusReportFrequency: 0s}"),
    "proxy-config-kubeadm-defaults": component("proxy", "{extraConfig: {metricsBindAddress: '', iptables: "
                                                        "{syncPeriod: 0s, minSyncPeriod: 0s}, ipvs: {syncPeriod: 0s}, "
                                                        "conntrack: {tcpEstablishedTimeout: null, "
                                                        "tcpCloseWaitTimeout: null}}}"),
    "scheduler-config-zero-lease": component("scheduler", "{extraConfig: {leaderElection: {leaseDuration: 0s, "
                                                          "renewDeadline: 0s, retryPeriod: 0s}}}"),
    # a short grace period alone: the critical pods' default share (15s) is clamped to it
    "kubelet-shutdown-grace-only-short": component("kubelet", "{shutdownGracePeriod: 10s}"),
    "containerd-other-plugin-key": component("containerRuntime", "{extraConfig: {plugins: {io.containerd.grpc.v1.cri: "
                                                                 "{max_container_log_line_size: 32768}}}}"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_component_value_gets_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = CASES[name]
    head = HEAD.replace('"1.33.2"', '"1.36.2"') if "gate" in name else HEAD  # a release whose gates are known
    assert_refused(tmp_path, name, head + text, path, fragment)


@pytest.mark.parametrize("name", sorted(LEGITIMATE))
def test_legitimate_neighbour_stays_valid(name: str, tmp_path: Path) -> None:
    assert_valid(tmp_path, name, HEAD + HOSTS + LEGITIMATE[name], bound=False)


def test_the_kubelet_of_1_28_keeps_its_in_tree_cloud_providers(tmp_path: Path) -> None:
    """DisableCloudProviders is on by default from 1.29 only: 1.28's kubelet still takes --cloud-provider=gce."""
    (tmp_path / "c.yaml").write_text(HEAD.replace('"1.33.2"', '"1.28.15"') + HOSTS +
                                     kubelet_flag("cloud-provider", "gce"))
    result = kubesmith("validate", "c.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("release", ["current", "older"])
def test_every_admission_plugin_the_real_api_server_lists_is_known(release: str) -> None:
    """The list refuses names kube-apiserver refuses; a plugin its --help lists must never be refused."""
    import re
    import subprocess

    from k8s_support import older_binaries, real_binaries
    from kubesmith.spec.effective import ADMISSION_PLUGINS

    binaries = real_binaries() if release == "current" else older_binaries()
    usage = subprocess.run([str(binaries / "kube-apiserver"), "--help"], capture_output=True, text=True,
                           timeout=60).stdout
    line = next(text for text in usage.splitlines() if "--enable-admission-plugins strings" in text)
    listed = set(re.findall(r"\b[A-Z][A-Za-z0-9]+\b", line.split("admission plugins that should be enabled", 1)[1]))
    listed -= {"Comma", "The"}
    assert len(listed) > 20, line
    assert listed <= ADMISSION_PLUGINS, sorted(listed - ADMISSION_PLUGINS)
