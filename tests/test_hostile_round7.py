"""Hostile input, round 7 (issue 32, "hostile input, second round"): values each binary starts with, or
refuses, that `validate` used to pass. What decides is what the binary does: kube-apiserver v1.35.6 and
v1.36.2 started with each flag (they start with --lease-reuse-duration-seconds 0 or -5 and
--default-watch-cache-size -1, a deprecated no-op), kube-scheduler v1.36.2 started on a profile with each
weight (it refuses -1 with "total score of Score plugins could overflow" unless the plugin comes last, and
2147483648 in its decoder; 101 and 1000000 start), etcd 3.5.1's --help, and the sources of kube-apiserver
(filters.WithRequestDeadline, request.GetTimeoutForWatch, the etcd3 lease manager), the kubelet
(parseResourceList, cm.ParseCgroupfsToCgroupName) and containerd 1.6.20 (server_linux.go only logs a failed
SetOOMScore; server.go passes a gRPC message size on only when above 0). Each refusal is an exit-1 located
error, the only one of its file; its legitimate neighbour stays valid.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from test_hostile_round4_consumers import HEAD_136, RUNTIME, runtime
from test_hostile_round6_values import ETCD, KUBELET, PROXY, SCHEDULER, etcd, kubelet, proxy
from test_hostile_values import HOSTS, component
from hostile_support import assert_refused_alone, assert_valid
from hostile_support import warm  # noqa: F401 (the module's autouse fixture)

APISERVER = "spec.components.apiserver"


def apiserver_flag(flag: str, value: str) -> str:
    return HOSTS + component("apiserver", f"{{extraArgs: {{{flag}: {value}}}}}")


def weight(point: str, plugin: str, value: str) -> str:
    """A scheduler profile enabling `plugin` at extension point `point` with score weight `value`."""
    enabled = f"{{enabled: [{{name: {plugin}, weight: {value}}}]}}"
    return HOSTS + component("scheduler", f"{{extraConfig: {{profiles: [{{schedulerName: default-scheduler, "
                                          f"plugins: {{{point}: {enabled}}}}}]}}}}")


def _weight_path(point: str) -> str:
    return f"{SCHEDULER}.extraConfig.profiles[0].plugins.{point}.enabled[0].weight"


# name -> (what follows `spec.kubernetesVersion: "1.36.2"`, option path of the one error, message fragment)
CASES: dict[str, tuple[str, str, str]] = {
    # kube-apiserver: the request deadline is its start plus --request-timeout, so at 0 every request times out
    "apiserver-request-timeout-zero": (apiserver_flag("request-timeout", "0s"),
                                       f"{APISERVER}.extraArgs.request-timeout", "each one times out as it arrives"),
    "apiserver-request-timeout-bare-zero": (apiserver_flag("request-timeout", "'0'"),
                                            f"{APISERVER}.extraArgs.request-timeout", "'0' is zero"),
    "apiserver-request-timeout-negative": (apiserver_flag("request-timeout", "-1m"),
                                           f"{APISERVER}.extraArgs.request-timeout", "is negative"),
    "apiserver-request-timeout-1ns": (apiserver_flag("request-timeout", "1ns"),
                                      f"{APISERVER}.extraArgs.request-timeout", "'1ns' is shorter than 1s"),
    "apiserver-request-timeout-under-a-second": (apiserver_flag("request-timeout", "999ms"),
                                                 f"{APISERVER}.extraArgs.request-timeout", "large lists would"),
    # GetTimeoutForWatch: "--min-request-timeout has a value of zero and hence, the watch request will timeout
    # immediately"; a negative one: "--min-request-timeout can not be negative value"
    "apiserver-min-request-timeout-zero": (apiserver_flag("min-request-timeout", "0"),
                                           f"{APISERVER}.extraArgs.min-request-timeout", "1 or more, not 0"),
    "apiserver-min-request-timeout-negative": (apiserver_flag("min-request-timeout", "'-1'"),
                                               f"{APISERVER}.extraArgs.min-request-timeout", "refuses a negative one"),
    # the lease manager: 0 grants a lease per Event, below 0 shortens their TTL
    "apiserver-lease-reuse-zero": (apiserver_flag("lease-reuse-duration-seconds", "0"),
                                   f"{APISERVER}.extraArgs.lease-reuse-duration-seconds", "new lease on every Event"),
    "apiserver-lease-reuse-negative": (apiserver_flag("lease-reuse-duration-seconds", "-60"),
                                       f"{APISERVER}.extraArgs.lease-reuse-duration-seconds", "before their TTL"),
    "apiserver-default-watch-cache-negative": (apiserver_flag("default-watch-cache-size", "-1"),
                                               f"{APISERVER}.extraArgs.default-watch-cache-size",
                                               "0 or more, not -1"),
    # kube-scheduler score weights: an int32 of 0 or more
    "scheduler-score-weight-negative": (weight("score", "ImageLocality", "-1"), _weight_path("score"),
                                        "not -1 for ImageLocality"),
    "scheduler-multipoint-weight-negative": (weight("multiPoint", "NodeResourcesBalancedAllocation", "-5"),
                                             _weight_path("multiPoint"), "score backwards"),
    "scheduler-score-weight-over-int32": (weight("score", "TaintToleration", "2147483648"), _weight_path("score"),
                                          "as a 32-bit integer"),
    # kubelet reservations: what parseResourceList takes, and no more than a node can have
    "kubelet-reserved-flag-overflow": (kubelet("{extraArgs: {kube-reserved: 'cpu=1e400'}}"),
                                       f"{KUBELET}.extraArgs.kube-reserved", "more than any node has"),
    "kubelet-reserved-config-overflow": (kubelet("{extraConfig: {systemReserved: {memory: '1e400'}}}"),
                                         f"{KUBELET}.extraConfig.systemReserved.memory", "more than any node has"),
    "kubelet-reserved-exa-overflow": (kubelet("{extraConfig: {kubeReserved: {ephemeral-storage: '10000Ei'}}}"),
                                      f"{KUBELET}.extraConfig.kubeReserved.ephemeral-storage",
                                      "'invalid Node Allocatable configuration'"),
    "kubelet-reserved-exponent-beyond-int32": (kubelet("{extraConfig: {kubeReserved: {cpu: '1e2147483648'}}}"),
                                               f"{KUBELET}.extraConfig.kubeReserved.cpu", "no resource quantity"),
    "kubelet-reserved-flag-not-a-quantity": (kubelet("{extraArgs: {system-reserved: 'memory=1Gb'}}"),
                                             f"{KUBELET}.extraArgs.system-reserved", "no resource quantity"),
    "kubelet-reserved-config-null": (kubelet("{extraConfig: {kubeReserved: {memory: null}}}"),
                                     f"{KUBELET}.extraConfig.kubeReserved.memory", "null is no resource quantity"),
    "kubelet-reserved-unknown-resource": (kubelet("{extraConfig: {kubeReserved: {nvidia.com/gpu: '1'}}}"),
                                          f"{KUBELET}.extraConfig.kubeReserved.nvidia.com/gpu",
                                          "not 'nvidia.com/gpu'"),
    "kubelet-reserved-flag-unknown-resource": (kubelet("{extraArgs: {system-reserved: 'cpu=1,storage=1Gi'}}"),
                                               f"{KUBELET}.extraArgs.system-reserved", "not 'storage'"),
    # the kubelet reads a cgroup from the hierarchy's root: one cgroup, one spelling
    "kubelet-cgroup-root-flag-relative": (kubelet("{extraArgs: {cgroup-root: kubepods}}"),
                                          f"{KUBELET}.extraArgs.cgroup-root", "write '/kubepods'"),
    "kubelet-cgroup-root-config-relative": (kubelet("{extraConfig: {cgroupRoot: 'custom/pods'}}"),
                                            f"{KUBELET}.extraConfig.cgroupRoot", "no absolute cgroup path"),
    "kubelet-reserved-cgroup-relative": (kubelet("{extraConfig: {systemReservedCgroup: system.slice}}"),
                                         f"{KUBELET}.extraConfig.systemReservedCgroup", "write '/system.slice'"),
    # containerd: an OOM score it only logs a failure to set, message sizes it hands gRPC only above 0
    "ctd-oom-score-over": (runtime("{oom_score: 1001}"), f"{RUNTIME}.oom_score", "-1000 to 1000, not 1001"),
    "ctd-oom-score-under": (runtime("{oom_score: -1001}"), f"{RUNTIME}.oom_score", "failed to change OOM score"),
    "ctd-oom-score-upper-case-key": (runtime("{OOM_SCORE: 5000}"), f"{RUNTIME}.OOM_SCORE", "not 5000"),
    "ctd-grpc-recv-zero": (runtime("{grpc: {max_recv_message_size: 0}}"), f"{RUNTIME}.grpc.max_recv_message_size",
                           "gRPC's own limit of 4 MiB"),
    "ctd-grpc-send-negative": (runtime("{grpc: {max_send_message_size: -1}}"),
                               f"{RUNTIME}.grpc.max_send_message_size", "1 or more, not -1"),
    # kube-proxy reads --nodeport-addresses from kubesmith's configuration file only; its field takes CIDRs or
    # 'primary' alone, one item each
    "proxy-nodeport-flag-word": (proxy("{extraArgs: {nodeport-addresses: bogus}}"),
                                 f"{PROXY}.extraArgs.nodeport-addresses", "ignores --nodeport-addresses"),
    "proxy-nodeport-flag-spaced-list": (proxy("{extraArgs: {nodeport-addresses: '10.0.0.0/8, 192.168.0.0/16'}}"),
                                        f"{PROXY}.extraArgs.nodeport-addresses", "set the field in"),
    "proxy-nodeport-field-trailing-space": (proxy("{extraConfig: {nodePortAddresses: ['10.0.0.0/8 ']}}"),
                                            f"{PROXY}.extraConfig.nodePortAddresses[0]", "is no CIDR"),
    "proxy-nodeport-field-empty-item": (proxy("{extraConfig: {nodePortAddresses: [10.0.0.0/8, '']}}"),
                                        f"{PROXY}.extraConfig.nodePortAddresses[1]", "'' is no CIDR"),
    "proxy-nodeport-field-two-in-one": (proxy("{extraConfig: {nodePortAddresses: ['10.0.0.0/8,192.168.0.0/16']}}"),
                                        f"{PROXY}.extraConfig.nodePortAddresses[0]", "is no CIDR"),
    "proxy-nodeport-field-word": (proxy("{extraConfig: {nodePortAddresses: [Primary]}}"),
                                  f"{PROXY}.extraConfig.nodePortAddresses[0]", "or 'primary'"),
    "proxy-nodeport-field-primary-and-cidr": (proxy("{extraConfig: {nodePortAddresses: [10.0.0.0/8, primary]}}"),
                                              f"{PROXY}.extraConfig.nodePortAddresses[1]", "'primary' stands alone"),
    "proxy-nodeport-field-address": (proxy("{extraConfig: {nodePortAddresses: [10.0.0.1]}}"),
                                     f"{PROXY}.extraConfig.nodePortAddresses[0]", "is no CIDR"),
    # etcd's v2 API through the v3 store: refused as --enable-v2 is
    "etcd-v2v3-prefix": (etcd("{extraArgs: {experimental-enable-v2v3: /v2}}"),
                         f"{ETCD}.extraArgs.experimental-enable-v2v3", "v2 API"),
    "etcd-v2v3-blank": (etcd("{extraArgs: {experimental-enable-v2v3: ' '}}"),
                        f"{ETCD}.extraArgs.experimental-enable-v2v3", "etcd 3.6 removed the flag"),
    "etcd-v2v3-number": (etcd("{extraArgs: {experimental-enable-v2v3: 0}}"),
                         f"{ETCD}.extraArgs.experimental-enable-v2v3", "v2 API"),
    # null sets nothing: the type error alone, not also "etcd would serve its v2 API"
    "etcd-v2-null": (etcd("{extraArgs: {enable-v2: null}}"), f"{ETCD}.extraArgs.enable-v2",
                     "a flag value must be a string, integer or boolean, got null"),
}

# name -> a neighbouring value the binary takes and honours
LEGITIMATE: dict[str, str] = {
    "apiserver-request-timeout-default": apiserver_flag("request-timeout", "1m0s"),
    "apiserver-request-timeout-one-second": apiserver_flag("request-timeout", "1s"),
    "apiserver-min-request-timeout-one": apiserver_flag("min-request-timeout", "1"),
    "apiserver-lease-reuse-one": apiserver_flag("lease-reuse-duration-seconds", "1"),
    "apiserver-default-watch-cache-zero": apiserver_flag("default-watch-cache-size", "0"),
    # no upper bound below int32: v1.36.2 starts with 101
    "scheduler-score-weight-101": weight("score", "ImageLocality", "101"),
    "scheduler-score-weight-zero": weight("score", "ImageLocality", "0"),
    "scheduler-multipoint-weight-int32-max": weight("multiPoint", "TaintToleration", "2147483647"),
    # a weight counts at score and multiPoint only
    "scheduler-filter-weight-ignored": weight("filter", "NodeName", "-1"),
    "kubelet-reserved-every-resource": kubelet("{extraArgs: {kube-reserved: 'cpu=500m,memory=1Gi,"
                                               "ephemeral-storage=1Gi,pid=1000'}}"),
    "kubelet-reserved-config-largest": kubelet("{extraConfig: {systemReserved: {cpu: '9223372036854775', "
                                               "memory: '8Pi'}}}"),
    "kubelet-reserved-exponent": kubelet("{extraConfig: {kubeReserved: {memory: '1e9'}}}"),
    "kubelet-cgroup-root-absolute": kubelet("{extraArgs: {cgroup-root: /kubepods}}"),
    "kubelet-cgroup-root-config-root": kubelet("{extraConfig: {cgroupRoot: /, kubeReservedCgroup: /kube.slice}}"),
    "ctd-oom-score-bounds": runtime("{oom_score: -999}"),
    "ctd-oom-score-lowest": runtime("{oom_score: -1000}"),
    "ctd-grpc-sizes": runtime("{grpc: {max_recv_message_size: 33554432, max_send_message_size: 1}}"),
    # go-toml v1 reads oom_score, OOM_SCORE, oomScore... but not the Go field's name: containerd ignores this
    "ctd-oom-score-field-name": runtime("{OOMScore: 5000}"),
    "proxy-nodeport-cidrs": proxy("{extraConfig: {nodePortAddresses: [10.0.0.0/8, 'fd00::/64']}}"),
    "proxy-nodeport-primary": proxy("{extraConfig: {nodePortAddresses: [primary]}}"),
    "etcd-v2v3-off": etcd("{extraArgs: {experimental-enable-v2v3: ''}}"),
    "etcd-v2-off-and-v2v3-off": etcd("{extraArgs: {enable-v2: 'false', experimental-enable-v2v3: ''}}"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_value_the_binary_refuses_or_does_not_honour_is_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = CASES[name]
    assert_refused_alone(tmp_path, name, HEAD_136 + text, path, fragment)


@pytest.mark.parametrize("name", sorted(LEGITIMATE))
def test_its_legitimate_neighbour_stays_valid(name: str, tmp_path: Path) -> None:
    result = assert_valid(tmp_path, name, HEAD_136 + LEGITIMATE[name])
    assert "warning" not in result.stderr, result.stderr


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) >= 30 and len(LEGITIMATE) >= 15
