"""Hostile input, round 4 (consumers): what the real consumer does with each value decides. Checked against the
binaries here: kube-apiserver, kube-scheduler, kube-proxy and kubelet v1.36.2 (and v1.35.6 for gates and
scheduler plugins), etcd 3.5.1, containerd 1.6.20 (`containerd --config FILE config dump`). What one refuses
at its start, or what leaves the cluster without a working function or weakens it, is an exit-1 located error;
its legitimate neighbour stays valid, and so do spellings the consumer ignores.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import kubesmith
from test_hostile_round4_combos import HA
from test_hostile_values import HEAD, HOSTS, component
from hostile_support import BOUND_SECONDS, assert_refused_alone, assert_valid, bounded
from hostile_support import warm  # noqa: F401 (the module's autouse fixture)

HEAD_136 = HEAD.replace('"1.33.2"', '"1.36.2"')
APISERVER, ETCD, KUBELET = "spec.components.apiserver", "spec.components.etcd", "spec.components.kubelet"
SCHEDULER, RUNTIME = "spec.components.scheduler.extraConfig", "spec.components.containerRuntime.extraConfig"
STUB = "/run/systemd/resolve/stub-resolv.conf"
SOCKET = "/run/containerd/containerd.sock"
RUNC_OPTIONS = "{plugins: {'io.containerd.grpc.v1.cri': {containerd: {runtimes: {runc: {options: %s}}}}}}"


def runtime(body: str) -> str:
    return HOSTS + component("containerRuntime", f"{{extraConfig: {body}}}")


# name -> (what follows `spec.kubernetesVersion: "1.36.2"`, option path of the one error, message fragment)
CASES: dict[str, tuple[str, str, str]] = {
    # kube-apiserver: 'jwt[0].issuer.url: Invalid value: "http://evil": URL scheme must be https'
    "oidc-issuer-http": (HOSTS + component("apiserver", "{extraArgs: {oidc-issuer-url: 'http://evil', "
                                                        "oidc-client-id: kubernetes}}"),
                         f"{APISERVER}.extraArgs.oidc-issuer-url", "no https:// URL"),
    "oidc-issuer-http-alone": (HOSTS + component("apiserver", "{extraArgs: {oidc-issuer-url: 'http://evil'}}"),
                               f"{APISERVER}.extraArgs.oidc-issuer-url", "no https:// URL"),
    # 'oidc-issuer-url and oidc-client-id must be specified together when any oidc-* flags are set'
    "oidc-no-client-id": (HOSTS + component("apiserver", "{extraArgs: {oidc-issuer-url: 'https://issuer.example'}}"),
                          f"{APISERVER}.extraArgs.oidc-issuer-url", "need oidc-client-id as well"),
    "oidc-no-issuer": (HOSTS + component("apiserver", "{extraArgs: {oidc-username-claim: email}}"),
                       f"{APISERVER}.extraArgs.oidc-username-claim", "oidc-issuer-url and oidc-client-id"),
    # etcd 3.5.1 with --quota-backend-bytes=1: 'etcdserver: mvcc: database space exceeded' on the first put
    "etcd-quota-tiny": (HOSTS + component("etcd", "{quotaBackendBytes: 1}"), f"{ETCD}.quotaBackendBytes",
                        "67108864"),
    "etcd-peer-san-skip": (HOSTS + component("etcd", "{extraArgs: {experimental-peer-skip-client-san-verification: "
                                                     "true}}"),
                           f"{ETCD}.extraArgs.experimental-peer-skip-client-san-verification", "impersonate a member"),
    "etcd-peer-san-skip-go-true": (HOSTS + component("etcd", "{extraArgs: {peer-skip-client-san-verification: 't'}}"),
                                   f"{ETCD}.extraArgs.peer-skip-client-san-verification", "impersonate a member"),
    # several control-plane hosts, every scheduler or controller manager active at once
    "scheduler-no-election-ha": (HA + component("scheduler", "{extraConfig: {leaderElection: {leaderElect: false}}}"),
                                 f"{SCHEDULER}.leaderElection.leaderElect", "overcommitting nodes"),
    "scheduler-typed-no-election-ha": (HA + component("scheduler", "{leaderElect: false}"),
                                       "spec.components.scheduler.leaderElect", "all 3 would act at once"),
    "controller-manager-no-election-ha": (HA + component("controllerManager", "{leaderElect: false}"),
                                          "spec.components.controllerManager.leaderElect",
                                          "controllers creating and deleting the same objects"),
    # kube-scheduler v1.36.2: 'ScorePlugin "NoSuchPlugin" does not exist'
    "scheduler-unknown-plugin": (HOSTS + component("scheduler", "{extraConfig: {profiles: [{schedulerName: "
                                                                "default-scheduler, plugins: {score: {enabled: "
                                                                "[{name: NoSuchPlugin}]}}}]}}"),
                                 f"{SCHEDULER}.profiles[0].plugins.score.enabled[0].name", "has no plugin"),
    "scheduler-plugin-typo": (HOSTS + component("scheduler", "{extraConfig: {profiles: [{plugins: {filter: {enabled: "
                                                             "[{name: TaintTolerations}]}}}]}}"),
                              f"{SCHEDULER}.profiles[0].plugins.filter.enabled[0].name",
                              "did you mean 'TaintToleration'"),
    "scheduler-extender-http": (HOSTS + component("scheduler", "{extraConfig: {extenders: [{urlPrefix: 'http://evil', "
                                                               "filterVerb: filter, enableHTTPS: false}]}}"),
                                f"{SCHEDULER}.extenders[0].urlPrefix", "without TLS"),
    # kube-scheduler v1.36.2 decodes strictly, and exactly: 'unknown field "leaderElection.LeaderElect"'
    "scheduler-nested-case-variant": (HOSTS + component("scheduler", "{extraConfig: {leaderElection: "
                                                                     "{LeaderElect: false}}}"),
                                      f"{SCHEDULER}.leaderElection.LeaderElect", "did you mean leaderElect?"),
    "scheduler-extender-unknown-field": (HOSTS + component("scheduler", "{extraConfig: {extenders: [{urlPrefix: "
                                                                        "'https://e.example', Bogus: 1}]}}"),
                                         f"{SCHEDULER}.extenders[0].Bogus", "refuses to start on an unknown field"),
    # kube-proxy v1.36.2 passes any ipvs.scheduler on; the kernel refuses an unknown one for every Service
    "proxy-ipvs-scheduler": (HOSTS + component("proxy", "{mode: ipvs, extraConfig: {ipvs: {scheduler: bogus}}}"),
                             "spec.components.proxy.extraConfig.ipvs.scheduler", "no IPVS scheduler 'bogus'"),
    # the kubelet: a node that never registers, serves nothing, or only on loopback
    "kubelet-no-server": (HOSTS + component("kubelet", "{extraConfig: {enableServer: false}}"),
                          f"{KUBELET}.extraConfig.enableServer", "serve no API"),
    "kubelet-no-server-flag": (HOSTS + component("kubelet", "{extraArgs: {enable-server: 'false'}}"),
                               f"{KUBELET}.extraArgs.enable-server", "serve no API"),
    "kubelet-no-register": (HOSTS + component("kubelet", "{extraConfig: {registerNode: false}}"),
                            f"{KUBELET}.extraConfig.registerNode", "never register"),
    "kubelet-no-register-flag": (HOSTS + component("kubelet", "{extraArgs: {register-node: '0'}}"),
                                 f"{KUBELET}.extraArgs.register-node", "never register"),
    "kubelet-address-loopback6": (HOSTS + component("kubelet", "{extraConfig: {address: '::1'}}"),
                                  f"{KUBELET}.extraConfig.address", "loopback"),
    "kubelet-address-loopback-flag": (HOSTS + component("kubelet", "{extraArgs: {address: 127.0.0.1}}"),
                                      f"{KUBELET}.extraArgs.address", "loopback"),
    "kubelet-stub-resolv": (HOSTS + component("kubelet", f"{{extraConfig: {{resolvConf: {STUB}}}}}"),
                            f"{KUBELET}.extraConfig.resolvConf", "127.0.0.53"),
    "kubelet-stub-resolv-flag": (HOSTS + component("kubelet", f"{{extraArgs: {{resolv-conf: {STUB}}}}}"),
                                 f"{KUBELET}.extraArgs.resolv-conf", "127.0.0.53"),
    # containerd 1.6.20 reads a field from its tag, lower case, UPPER case or first letter lowered
    "containerd-cri-disabled": (runtime("{disabled_plugins: ['io.containerd.grpc.v1.cri']}"),
                                f"{RUNTIME}.disabled_plugins[0]", "no pod would start"),
    "containerd-cri-disabled-upper": (runtime("{DISABLED_PLUGINS: [io.containerd.snapshotter.v1.btrfs, "
                                              "'io.containerd.grpc.v1.cri']}"),
                                      f"{RUNTIME}.DISABLED_PLUGINS[1]", "no pod would start"),
    "containerd-ttrpc-on-socket": (runtime(f"{{ttrpc: {{address: {SOCKET}}}}}"), f"{RUNTIME}.ttrpc.address",
                                   "gRPC socket"),
    "containerd-ttrpc-upper": (runtime(f"{{TTRPC: {{ADDRESS: {SOCKET}}}}}"), f"{RUNTIME}.TTRPC.ADDRESS",
                               "gRPC socket"),
    "containerd-tcp-upper": (runtime("{grpc: {TCP_ADDRESS: '0.0.0.0:2376'}}"), f"{RUNTIME}.grpc.TCP_ADDRESS",
                             "over TCP it has no authentication"),
    "containerd-gid-upper": (runtime("{grpc: {GID: 100}}"), f"{RUNTIME}.grpc.GID", "local root"),
    "containerd-systemd-cgroup": (runtime(RUNC_OPTIONS % "{SystemdCgroup: false}"),
                                  f"{RUNTIME}.plugins.io.containerd.grpc.v1.cri.containerd.runtimes.runc.options."
                                  "SystemdCgroup", "spec.components.kubelet.cgroupDriver"),
}

# name -> what follows `spec.kubernetesVersion: "1.36.2"`: valid, and without a warning about it
LEGITIMATE: dict[str, str] = {
    "oidc-https": HOSTS + component("apiserver", "{extraArgs: {oidc-issuer-url: 'https://issuer.example', "
                                                 "oidc-client-id: kubernetes, oidc-username-claim: email}}"),
    "etcd-quota-64mi": HOSTS + component("etcd", "{quotaBackendBytes: 67108864}"),
    "etcd-peer-san-checked": HOSTS + component("etcd", "{extraArgs: {experimental-peer-skip-client-san-verification: "
                                                       "'false'}}"),
    "scheduler-no-election-one-host": HOSTS + component("scheduler", "{extraConfig: {leaderElection: "
                                                                     "{leaderElect: false}}}"),
    "scheduler-election-ha": HA + component("scheduler", "{leaderElect: false, extraConfig: {leaderElection: "
                                                         "{leaderElect: true}}}"),
    "scheduler-known-plugins": HOSTS + component("scheduler", "{extraConfig: {profiles: [{plugins: {score: {enabled: "
                                                              "[{name: ImageLocality, weight: 2}, {name: "
                                                              "PodGroupPodsCount}], disabled: [{name: '*'}]}}}]}}"),
    "scheduler-extender-https": HOSTS + component("scheduler", "{extraConfig: {extenders: [{urlPrefix: "
                                                               "'https://extender.example', filterVerb: filter, "
                                                               "enableHTTPS: true}]}}"),
    # every field of these objects, as kube-scheduler v1.36.2 decodes them strictly
    "scheduler-nested-fields": HOSTS + component("scheduler", "{extraConfig: {clientConnection: {acceptContentTypes: "
                                                              "'', contentType: application/json, qps: 50, burst: "
                                                              "100}, leaderElection: {leaderElect: true, "
                                                              "leaseDuration: 15s, renewDeadline: 10s, retryPeriod: "
                                                              "2s, resourceLock: leases, resourceName: "
                                                              "kube-scheduler, resourceNamespace: kube-system}, "
                                                              "extenders: [{urlPrefix: 'https://e.example', "
                                                              "filterVerb: f, preemptVerb: p, prioritizeVerb: r, "
                                                              "weight: 1, bindVerb: '', enableHTTPS: true, "
                                                              "tlsConfig: {insecure: false}, httpTimeout: 5s, "
                                                              "nodeCacheCapable: false, managedResources: [], "
                                                              "ignorable: true}], profiles: [{schedulerName: x, "
                                                              "percentageOfNodesToScore: 50, pluginConfig: [], "
                                                              "plugins: {}}]}}"),
    "proxy-ipvs-maglev": HOSTS + component("proxy", "{mode: ipvs, extraConfig: {ipvs: {scheduler: mh}}}"),
    "proxy-ipvs-default": HOSTS + component("proxy", "{mode: ipvs, extraConfig: {ipvs: {scheduler: ''}}}"),
    "kubelet-server-register-on": HOSTS + component("kubelet", "{extraConfig: {enableServer: true, registerNode: "
                                                               "true}, extraArgs: {register-node: 'true'}}"),
    "kubelet-address-node": HOSTS + component("kubelet", "{extraConfig: {address: 10.0.0.11}}"),
    "kubelet-address-any6": HOSTS + component("kubelet", "{extraConfig: {address: '::'}}"),
    "kubelet-upstream-resolv": HOSTS + component("kubelet", "{extraConfig: {resolvConf: "
                                                            "/run/systemd/resolve/resolv.conf}}"),
    # the kubelet v1.36.2 starts with TLS 1.3 and TLS 1.3 suite names (Go ignores the list under TLS 1.3)
    "kubelet-tls13-suites": HOSTS + component("kubelet", "{extraConfig: {tlsMinVersion: VersionTLS13, "
                                                         "tlsCipherSuites: [TLS_AES_128_GCM_SHA256]}}"),
    # the kubelet and kube-proxy v1.36.2 decode case-sensitively: these are unknown fields they ignore
    # ("Using lenient decoding as strict decoding failed"), not the fields they resemble
    "kubelet-case-variants": HOSTS + component("kubelet", "{extraConfig: {MaxPods: 100000, STATICPODURL: "
                                                          "'http://10.9.9.9/', readonlyport: 10255, Authentication: "
                                                          "{Anonymous: {Enabled: true}}, ClusterDNS: ['0.0.0.0']}}"),
    "proxy-case-variant": HOSTS + component("proxy", "{extraConfig: {MetricsBindAddress: '0.0.0.0:10249'}}"),
    # containerd ignores these spellings, or reads kubesmith's own table first (grpc before GRPC)
    "containerd-ignored-spellings": runtime("{Version: 3, grpc: {Address: /run/other.sock, Tcp_Address: "
                                            "'0.0.0.0:2376', Uid: 5}, GRPC: {address: /run/other.sock, "
                                            "tcp_address: '0.0.0.0:2376'}}"),
    "containerd-upper-shadowed": runtime("{grpc: {ADDRESS: /run/other.sock}, metrics: {ADDRESS: '0.0.0.0:1338'}}"),
    "containerd-other-plugin-disabled": runtime("{disabled_plugins: [io.containerd.snapshotter.v1.btrfs]}"),
    "containerd-ttrpc-own-path": runtime(f"{{ttrpc: {{address: {SOCKET}.ttrpc}}}}"),
    "containerd-systemd-cgroup-typed": HOSTS + "  components:\n    kubelet: {cgroupDriver: cgroupfs}\n"
                                       "    containerRuntime: {extraConfig: " + RUNC_OPTIONS % "{SystemdCgroup: false}"
                                       + "}\n",
}

# name -> (kubernetesVersion, what follows it, the warning's option path): valid, with a located warning
WARNED: dict[str, tuple[str, str, str]] = {
    # v1.35.6 and v1.36.2 binaries: 'W... feature_gate.go] unrecognized feature gate: NoSuchGate', then go on
    "gate-unknown-136": ("1.36.2", HOSTS + "  featureGates: {NoSuchGate: true}\n", "spec.featureGates.NoSuchGate"),
    "gate-unknown-136-kubelet-config": ("1.36.2", HOSTS + component("kubelet", "{extraConfig: {featureGates: "
                                                                               "{NoSuchGate: true}}}"),
                                        f"{KUBELET}.extraConfig.featureGates.NoSuchGate"),
    # releases whose gate lists kubesmith lacks: the gates go unchecked, and the file says so
    "gate-unknown-133": ("1.33.4", HOSTS + "  featureGates: {NoSuchGate: true}\n", "spec.kubernetesVersion"),
    "gate-unknown-137": ("1.37.0", HOSTS + "  featureGates: {NoSuchGate: true}\n", "spec.kubernetesVersion"),
    "gate-unknown-128-kubelet-config": ("1.28.0", HOSTS + component("kubelet", "{extraConfig: {featureGates: "
                                                                               "{NoSuchGate: true}}}"),
                                        "spec.kubernetesVersion"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_what_the_consumer_refuses_or_breaks_on_is_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = CASES[name]
    assert_refused_alone(tmp_path, name, HEAD_136 + text, path, fragment)


@pytest.mark.parametrize("name", sorted(LEGITIMATE))
def test_the_legitimate_neighbour_stays_valid(name: str, tmp_path: Path) -> None:
    result = assert_valid(tmp_path, name, HEAD_136 + LEGITIMATE[name])
    assert "error" not in result.stderr and "warning" not in result.stderr, result.stderr


@pytest.mark.parametrize("name", sorted(WARNED))
def test_what_the_binary_only_warns_about_is_a_located_warning(name: str, tmp_path: Path) -> None:
    version, text, path = WARNED[name]
    (tmp_path / f"{name}.yaml").write_text(HEAD.replace("1.33.2", version) + text)
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", f"{name}.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr, result.stderr
    assert f"warning: {path}: " in result.stderr and f"({name}.yaml:" in result.stderr, result.stderr


@pytest.mark.parametrize("name", ["etcd-quota-tiny", "scheduler-unknown-plugin", "containerd-tcp-upper"])
def test_plan_offline_refuses_them_too(name: str, tmp_path: Path) -> None:
    text, path, _ = CASES[name]
    (tmp_path / f"{name}.yaml").write_text(HEAD_136 + text)
    result = kubesmith("plan", f"{name}.yaml", "--offline", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert f"error: {path}: " in result.stderr and "Traceback" not in result.stderr, result.stderr
