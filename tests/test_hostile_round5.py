"""Hostile input, round 5: each refusal an exit-1 located error at validate, next to the legitimate
neighbour that stays valid.

Paths a system service runs, loads or keeps its state in, inside a tree other users write to or a boot
empties (spec.paths.UNSAFE_TREES). containerd's `config dump` of an `imports: ['/tmp/*.toml']` holding
`[grpc] tcp_address` showed the planted file taking effect (audit round 5, CR26).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT, kubesmith
from test_hostile_values import HEAD, HOSTS, component
from test_spec_hostile import BOUND_SECONDS, assert_one_located_error, bounded

RUNTIME = "spec.components.containerRuntime"
KUBELET = "spec.components.kubelet"
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


@pytest.fixture(scope="module", autouse=True)
def warm() -> None:
    """Imports and the release registry load once, outside the bounded runs."""
    assert kubesmith("validate", str(ROOT / "examples" / "single-node.yaml")).returncode == 0


def _validate(tmp_path: Path, name: str, text: str):  # type: ignore[no-untyped-def]
    (tmp_path / f"{name}.yaml").write_text(HEAD + text)
    with bounded(BOUND_SECONDS):
        return kubesmith("validate", f"{name}.yaml", cwd=tmp_path)


@pytest.mark.parametrize("name", sorted(UNSAFE_PATHS))
def test_a_service_path_another_user_writes_is_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = UNSAFE_PATHS[name]
    result = _validate(tmp_path, name, text)
    assert_one_located_error(result, f"{name}.yaml", path, fragment)
    assert result.stderr.count("error: ") == 1, result.stderr


@pytest.mark.parametrize("name", sorted(SAFE_PATHS))
def test_a_root_owned_service_path_stays_valid(name: str, tmp_path: Path) -> None:
    result = _validate(tmp_path, name, SAFE_PATHS[name])
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr, result.stderr
