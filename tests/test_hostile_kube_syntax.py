"""Hostile input (issue 32), Kubernetes' own syntax: values kubesmith passes on that a Kubernetes component
or the API server would refuse (so a Node never registers, no pod sandbox starts, an add-on is never
applied) end, quickly, in one located error (the option path and file:line:col), exit code 1 and no
traceback; the legitimate neighbours stay valid and reach the plan as written.

What is refused: taints the API server does not validate (typed or through the kubelet's extraConfig);
host names that are no DNS label (the node name, `token create --node`); node labels that override those
the kubelet sets itself; image references outside the distribution grammar; the cluster file, its
directory or an empty path as an add-on; blank free strings and free strings with leading or trailing
whitespace.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kubesmith.cli.validate_commands  # noqa: F401 (imported here, not under the cases' alarm)
from conftest import kubesmith
from hostile_support import BOUND_SECONDS, assert_one_located_error, assert_refused_alone, assert_valid, bounded

HEAD = """\
apiVersion: kubesmith.io/v1alpha1
kind: Cluster
metadata:
  name: demo
spec:
  kubernetesVersion: "1.33.2"
"""
HOSTS = "  hosts:\n    - {name: h1, address: 10.0.0.11, roles: [control-plane, etcd, node]}\n"
KUBELET = "spec.components.kubelet"
DIGEST = "0123456789abcdef" * 4


def component(name: str, body: str) -> str:
    return HOSTS + f"  components:\n    {name}: {body}\n"


def taints(*items: str) -> str:
    return component("kubelet", f"{{registerWithTaints: [{', '.join(items)}]}}")


def labelled(labels: str) -> str:
    return f"  hosts:\n    - {{name: h1, address: 10.0.0.11, roles: [control-plane, etcd, node], labels: {labels}}}\n"


def named(name: str) -> str:
    return f"  hosts:\n    - {{name: {name}, address: 10.0.0.11, roles: [control-plane, etcd, node]}}\n"


IMAGE = "spec.components.containerRuntime.sandboxImage"
COREDNS = "spec.components.coreDns.image"
NOT_IMAGE = "is not an image reference"
EFFECT = "is none of NoSchedule, PreferNoSchedule, NoExecute"
BLANK = "is blank"
PADDED = "begins or ends with whitespace"

# name -> (what follows `spec.kubernetesVersion`, option path of the first error, message fragment)
CASES: dict[str, tuple[str, str, str]] = {
    # registerWithTaints: the API server's Node validation, else the kubelet never registers
    "taint-effect-unknown": (taints("'a:Foo'"), f"{KUBELET}.registerWithTaints[0]", f"'Foo' {EFFECT}"),
    "taint-effect-lower-case": (taints("'a=b:noschedule'"), f"{KUBELET}.registerWithTaints[0]",
                                f"'noschedule' {EFFECT} (case matters)"),
    "taint-effect-two-colons": (taints("'a=b:NoSchedule:x'"), f"{KUBELET}.registerWithTaints[0]",
                                f"'NoSchedule:x' {EFFECT}"),
    "taint-effect-empty": (taints("'a=b:'"), f"{KUBELET}.registerWithTaints[0]", f"'' {EFFECT}"),
    "taint-key-space": (taints("'a b:NoSchedule'"), f"{KUBELET}.registerWithTaints[0]",
                        "taint key: 'a b' is not a valid label key"),
    "taint-key-64": (taints(f"'{'k' * 64}:NoSchedule'"), f"{KUBELET}.registerWithTaints[0]",
                     "is not a valid label key"),
    "taint-key-prefix-upper": (taints("'Example.com/key:NoSchedule'"), f"{KUBELET}.registerWithTaints[0]",
                               "is not a valid label key"),
    "taint-key-empty": (taints("':NoSchedule'"), f"{KUBELET}.registerWithTaints[0]",
                        "taint key: '' is not a valid label key"),
    "taint-empty": (taints("''"), f"{KUBELET}.registerWithTaints[0]", "taint key: '' is not a valid label key"),
    "taint-blank": (taints("' '"), f"{KUBELET}.registerWithTaints[0]", "taint key: ' ' is not a valid label key"),
    "taint-value-64": (taints(f"'a={'v' * 64}:NoSchedule'"), f"{KUBELET}.registerWithTaints[0]",
                       "is not a valid label value"),
    "taint-value-newline": (taints('"a=\\nb:NoSchedule"'), f"{KUBELET}.registerWithTaints[0]",
                            "control character (U+000A)"),
    "taint-value-backslash": (taints("'a=\\nb:NoSchedule'"), f"{KUBELET}.registerWithTaints[0]",
                              "is not a valid label value"),
    "taint-value-equals": (taints("'k=v=w:NoSchedule'"), f"{KUBELET}.registerWithTaints[0]",
                           "taint value: 'v=w' is not a valid label value"),
    "taint-value-dash-end": (taints("'k=v-:NoSchedule'"), f"{KUBELET}.registerWithTaints[0]",
                             "taint value: 'v-' is not a valid label value"),
    "taint-duplicate": (taints("'a:NoSchedule'", "'a=other:NoSchedule'"), f"{KUBELET}.registerWithTaints[1]",
                        "the taint a:NoSchedule repeats registerWithTaints[0]"),
    "taint-duplicate-default-effect": (taints("'a'", "'a:NoSchedule'"), f"{KUBELET}.registerWithTaints[1]",
                                       "repeats registerWithTaints[0]"),
    "taint-config-effect": (component("kubelet", "{extraConfig: {registerWithTaints: [{key: a, effect: Foo}]}}"),
                            f"{KUBELET}.extraConfig.registerWithTaints[0]", f"'Foo' {EFFECT}"),
    "taint-config-no-effect": (component("kubelet", "{extraConfig: {registerWithTaints: [{key: a}]}}"),
                               f"{KUBELET}.extraConfig.registerWithTaints[0]", f"null {EFFECT}"),
    "taint-config-key": (component("kubelet", "{extraConfig: {registerWithTaints: [{key: 'a b', effect: NoSchedule}]}}"),
                         f"{KUBELET}.extraConfig.registerWithTaints[0]", "is not a valid label key"),
    "taint-config-value": (
        component("kubelet", "{extraConfig: {registerWithTaints: [{key: a, value: ' x', effect: NoSchedule}]}}"),
        f"{KUBELET}.extraConfig.registerWithTaints[0]", "is not a valid label value"),
    "taint-config-not-mapping": (component("kubelet", "{extraConfig: {registerWithTaints: ['a:NoSchedule']}}"),
                                 f"{KUBELET}.extraConfig.registerWithTaints[0]", "a taint is a mapping"),
    "taint-config-duplicate": (
        component("kubelet", "{extraConfig: {registerWithTaints: [{key: a, effect: NoExecute}, "
                             "{key: a, value: b, effect: NoExecute}]}}"),
        f"{KUBELET}.extraConfig.registerWithTaints[1]", "repeats extraConfig.registerWithTaints[0]"),
    "taint-flag-effect": (component("kubelet", "{extraArgs: {register-with-taints: 'a=b:NoSchedule,c:Foo'}}"),
                          f"{KUBELET}.extraArgs.register-with-taints", f"'c:Foo': taint effect 'Foo' {EFFECT}"),
    "taint-option-and-config": (
        component("kubelet", "{registerWithTaints: [a], extraConfig: {registerWithTaints: [{key: b, effect: NoSchedule}]}}"),
        f"{KUBELET}.extraConfig.registerWithTaints", f"sets what {KUBELET}.registerWithTaints already sets"),
    "taint-config-not-list": (component("kubelet", "{extraConfig: {registerWithTaints: 'a:NoSchedule'}}"),
                              f"{KUBELET}.extraConfig.registerWithTaints", "reads registerWithTaints as a list"),
    # host names: the node name, a DNS label, as `token create --node` and metadata.name have it
    "host-name-64": (named("a" * 64), "spec.hosts[0].name", "must be a DNS label"),
    "host-name-dotted": (named("node1.example.com"), "spec.hosts[0].name", "must be a DNS label"),
    "host-name-upper": (named("Node1"), "spec.hosts[0].name", "must be a DNS label"),
    # node labels the kubelet sets itself
    **{f"label-own-{key.replace('/', '-')}": (labelled(f"{{'{key}': {value}}}"), f"spec.hosts[0].labels.{key}",
                                              f"the kubelet sets {key} itself")
       for key, value in (("kubernetes.io/os", "windows"), ("kubernetes.io/arch", "arm64"),
                          ("beta.kubernetes.io/arch", "arm64"), ("beta.kubernetes.io/os", "linux"),
                          ("kubernetes.io/hostname", "other"))},
    # image references: the distribution grammar, else no sandbox starts (or the API server refuses the pod)
    "image-sandbox-empty": (component("containerRuntime", "{sandboxImage: ''}"), IMAGE, f"'' {NOT_IMAGE}"),
    "image-sandbox-blank": (component("containerRuntime", "{sandboxImage: '   '}"), IMAGE, NOT_IMAGE),
    "image-sandbox-huge": (component("containerRuntime", f"{{sandboxImage: '{'a' * 100000}'}}"), IMAGE,
                           "(100000 characters)' is not an image reference"),
    "image-sandbox-name-256": (component("containerRuntime", f"{{sandboxImage: '{'a' * 256}:1'}}"), IMAGE,
                               "the image name is 256 characters long: at most 255"),
    "image-sandbox-space": (component("containerRuntime", "{sandboxImage: 'a b'}"), IMAGE, NOT_IMAGE),
    "image-sandbox-upper": (component("containerRuntime", "{sandboxImage: 'Registry/Pause:3'}"), IMAGE, NOT_IMAGE),
    "image-sandbox-digest": (component("containerRuntime", "{sandboxImage: 'x@sha256:zz'}"), IMAGE, NOT_IMAGE),
    "image-sandbox-digest-short": (component("containerRuntime", f"{{sandboxImage: 'x@sha256:{DIGEST[:63]}'}}"),
                                   IMAGE, NOT_IMAGE),
    "image-sandbox-tag-long": (component("containerRuntime", f"{{sandboxImage: 'pause:{'t' * 129}'}}"), IMAGE,
                               NOT_IMAGE),
    "image-sandbox-tag-dot": (component("containerRuntime", "{sandboxImage: 'pause:.1'}"), IMAGE, NOT_IMAGE),
    "image-coredns-blank": (component("coreDns", "{image: '   '}"), COREDNS, NOT_IMAGE),
    "image-coredns-tag-only": (component("coreDns", "{image: ':tag'}"), COREDNS, f"':tag' {NOT_IMAGE}"),
    "image-coredns-leading-space": (component("coreDns", "{image: ' coredns:1'}"), COREDNS, NOT_IMAGE),
    "image-coredns-double-slash": (component("coreDns", "{image: 'registry.local//coredns'}"), COREDNS, NOT_IMAGE),
    # careless whitespace in free strings
    "text-ssh-user-blank": (HOSTS + "  ssh: {user: '   '}\n", "spec.ssh.user", BLANK),
    "text-ssh-user-empty": (HOSTS + "  ssh: {user: ''}\n", "spec.ssh.user", BLANK),
    "text-ssh-user-padded": (HOSTS + "  ssh: {user: 'root '}\n", "spec.ssh.user", f"{PADDED}: write 'root'"),
    "text-ssh-identity-padded": (HOSTS + "  ssh: {identityFile: ' id_ed25519'}\n", "spec.ssh.identityFile", PADDED),
    "text-ssh-known-hosts-empty": (HOSTS + "  ssh: {knownHostsFile: ''}\n", "spec.ssh.knownHostsFile", BLANK),
    "text-issuer-blank": (component("apiserver", "{serviceAccountIssuer: '   '}"),
                          "spec.components.apiserver.serviceAccountIssuer", BLANK),
    "text-issuer-padded": (component("apiserver", "{serviceAccountIssuer: 'https://issuer.example '}"),
                           "spec.components.apiserver.serviceAccountIssuer", PADDED),
    "text-kubelet-cluster-domain-blank": (component("kubelet", "{clusterDomain: '   '}"),
                                          f"{KUBELET}.clusterDomain", BLANK),
    "text-ca-url-port": (component("agent", "{caUrls: ['https://10.0.0.11:99999']}"),
                         "spec.components.agent.caUrls[0]", "is not a URL"),
    "text-kubelet-runtime-endpoint-blank": (component("kubelet", "{containerRuntimeEndpoint: '   '}"),
                                            f"{KUBELET}.containerRuntimeEndpoint", BLANK),
}

# name -> (what follows `spec.kubernetesVersion`, text the offline JSON plan holds)
ACCEPTED: dict[str, tuple[str, str]] = {
    "taint-key-value-effect": (taints("'dedicated=gpu:NoSchedule'"),
                               '{"effect": "NoSchedule", "key": "dedicated", "value": "gpu"}'),
    "taint-prefixed-key": (taints("'example.com/key:NoExecute'"), '{"effect": "NoExecute", "key": "example.com/key"}'),
    "taint-no-effect": (taints("'a'"), '{"effect": "NoSchedule", "key": "a"}'),
    "taint-same-key-other-effect": (taints("'a:NoSchedule'", "'a:NoExecute'", "'b=x.y_z-1:PreferNoSchedule'"),
                                    '{"effect": "PreferNoSchedule", "key": "b", "value": "x.y_z-1"}'),
    "taint-config": (component("kubelet", "{extraConfig: {registerWithTaints: [{key: a, value: b, effect: NoExecute}]}}"),
                     '{"effect": "NoExecute", "key": "a", "value": "b"}'),
    "host-name-63": (named("a" * 63), f'"name": "{"a" * 63}"'),
    "label-topology": (labelled("{topology.kubernetes.io/zone: a, node.kubernetes.io/pool: x, example.com/os: y}"),
                       "topology.kubernetes.io/zone=a"),
    "image-registry-port": (component("containerRuntime", "{sandboxImage: 'registry.local:5000/pause:3.10'}"),
                            '"sandbox_image": "registry.local:5000/pause:3.10"'),
    "image-digest": (component("containerRuntime", f"{{sandboxImage: 'pause@sha256:{DIGEST}'}}"),
                     f"pause@sha256:{DIGEST}"),
    "image-tag-and-digest": (component("containerRuntime", f"{{sandboxImage: 'k8s.gcr.io/pause:3.9@sha256:{DIGEST}'}}"),
                             f"k8s.gcr.io/pause:3.9@sha256:{DIGEST}"),
    "image-localhost": (component("containerRuntime", "{sandboxImage: 'localhost/my_pause__x-y:V1.0_a'}"),
                        "localhost/my_pause__x-y:V1.0_a"),
    "image-coredns-nested": (component("coreDns", "{image: 'registry.k8s.io/coredns/coredns:v1.11.3'}"),
                             "registry.k8s.io/coredns/coredns:v1.11.3"),
    "text-ca-urls": (component("agent", "{caUrls: ['https://10.0.0.11:8443', 'https://[fd00::11]:8443', "
                                        "'https://ca.example']}"), "https://ca.example"),
    "text-ssh-user": (HOSTS + "  ssh: {user: admin}\n", "h1"),
    "text-issuer": (component("apiserver", "{serviceAccountIssuer: 'https://issuer.example'}"),
                    "--service-account-issuer=https://issuer.example"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_kube_syntax_gets_one_located_error(name: str, tmp_path: Path) -> None:
    text, path, fragment = CASES[name]
    assert_refused_alone(tmp_path, name, HEAD + text, path, fragment)


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_legitimate_neighbour_stays_valid(name: str, tmp_path: Path) -> None:
    text, expected = ACCEPTED[name]
    assert_valid(tmp_path, name, HEAD + text)
    plan = kubesmith("plan", f"{name}.yaml", "--offline", "-o", "json", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert expected in json.dumps(json.loads(plan.stdout), sort_keys=True), expected


def test_node_names_follow_one_rule() -> None:
    """`token create --node` takes exactly the names a cluster file's hosts may have."""
    from kubesmith.ca.policy import PolicyError, check_node_name
    from kubesmith.spec.model import Host

    for name in ("a" * 64, "node1.example.com", "Node1", "-a", ""):
        with pytest.raises(PolicyError):
            check_node_name(name)
        with pytest.raises(ValueError):
            Host.model_validate({"name": name, "address": "10.0.0.1", "roles": ["node"]})
    for name in ("a" * 63, "w-1", "0"):
        check_node_name(name)
        Host.model_validate({"name": name, "address": "10.0.0.1", "roles": ["node"]})


CONFIG_MAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: m, namespace: default}\n"

# name -> (the addons list, files beside the cluster file, message fragment)
ADDONS: dict[str, tuple[str, dict[str, str], str]] = {
    "addon-cluster-file": ("[addon-cluster-file.yaml]", {}, "'addon-cluster-file.yaml' is the cluster file itself"),
    "addon-cluster-file-dotted": ("[./sub/../addon-cluster-file-dotted.yaml]", {"sub/x.txt": ""},
                                  "is the cluster file itself"),
    "addon-own-directory": ("['.']", {"m.yaml": CONFIG_MAP}, "'.' is the directory of the cluster file"),
    "addon-own-directory-slash": ("['./']", {}, "is the directory of the cluster file"),
    "addon-empty": ("['']", {"p.json": "{}"}, "'' is an empty path"),
    "addon-blank": ("['  ']", {}, "'  ' is an empty path"),
    "addon-another-cluster-file": ("[other/c.yaml]", {"other/c.yaml": HEAD + HOSTS},
                                   "Cluster of kubesmith.io/v1alpha1 is a kubesmith document, not a Kubernetes object"),
}


@pytest.mark.parametrize("name", sorted(ADDONS))
def test_the_cluster_file_is_no_addon(name: str, tmp_path: Path) -> None:
    entries, files, fragment = ADDONS[name]
    for relative, content in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(content)
    (tmp_path / f"{name}.yaml").write_text(HEAD + HOSTS + f"  addons: {entries}\n")
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", f"{name}.yaml", cwd=tmp_path)
    assert_one_located_error(result, f"{name}.yaml", "spec.addons[0]", fragment)
    assert result.stderr.splitlines()[-1] == "1 error found", result.stderr


def test_addons_beside_the_cluster_file_stay_valid(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(CONFIG_MAP)
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "n.yaml").write_text(CONFIG_MAP.replace("name: m", "name: n"))
    (tmp_path / "manifests" / "crd.yaml").write_text(
        "apiVersion: addons.kubesmith.io/v1\nkind: Thing\nmetadata: {name: t, namespace: default}\n")
    (tmp_path / "c.yaml").write_text(HEAD + HOSTS + "  addons: [m.yaml, manifests, ./manifests/../m2.yaml]\n")
    (tmp_path / "m2.yaml").write_text(CONFIG_MAP.replace("name: m", "name: m2"))
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", "c.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("c.yaml: valid"), result.stdout
