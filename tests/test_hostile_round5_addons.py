"""Hostile add-on manifests, audit round 5: APIs the cluster's release no longer serves, webhooks reached
without TLS, names and data the API server's validation refuses, a ServiceCIDR over the pods' or hosts'
addresses, kubesmith's own prune inventory, objects Kubernetes writes itself (the `kubernetes` Service,
Endpoints and EndpointSlice, kube-root-ca.crt, mandatory flow schemas, ...), and cluster-scoped kinds written
under two namespaces. Each hostile file ends in one located error (`spec.addons[0]`, exit 1) naming the
manifest's line; the legitimate neighbours stay valid.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import kubesmith
from test_hostile_values import HEAD, HOSTS
from test_spec_hostile import BOUND_SECONDS, assert_one_located_error, bounded


def obj(api: str, kind: str, meta: str, body: str = "") -> str:
    return f"apiVersion: {api}\nkind: {kind}\nmetadata: {{{meta}}}\n{body}"


def webhook(url: str) -> str:
    return obj("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "name: w",
               f"webhooks: [{{name: a.example.com, clientConfig: {{url: '{url}'}}, admissionReviewVersions: [v1], "
               "sideEffects: None}]\n")


def service_cidr(cidr: str, name: str = "extra") -> str:
    return obj("networking.k8s.io/v1", "ServiceCIDR", f"name: {name}", f"spec: {{cidrs: ['{cidr}']}}\n")


CONFIGMAP = "v1", "ConfigMap"
# name -> (manifest, message fragment)
CASES: dict[str, tuple[str, str]] = {
    # APIs removed before 1.33 ("no matches for kind" at apply)
    "psp": (obj("policy/v1beta1", "PodSecurityPolicy", "name: p", "spec: {}\n"), "removed in Kubernetes 1.25"),
    "cronjob-v1beta1": (obj("batch/v1beta1", "CronJob", "name: c", "spec: {}\n"), "write batch/v1"),
    "ingress-extensions": (obj("extensions/v1beta1", "Ingress", "name: i", "spec: {}\n"), "removed in Kubernetes 1.22"),
    "flowschema-v1beta2": (obj("flowcontrol.apiserver.k8s.io/v1beta2", "FlowSchema", "name: f", "spec: {}\n"),
                           "removed in Kubernetes 1.29"),
    "flowschema-v1beta3": (obj("flowcontrol.apiserver.k8s.io/v1beta3", "FlowSchema", "name: f", "spec: {}\n"),
                           "removed in Kubernetes 1.32"),
    "csistoragecapacity-v1beta1": (obj("storage.k8s.io/v1beta1", "CSIStorageCapacity", "name: c",
                                       "storageClassName: s\n"), "removed in Kubernetes 1.27"),
    "hpa-v2beta2": (obj("autoscaling/v2beta2", "HorizontalPodAutoscaler", "name: h", "spec: {}\n"), "write autoscaling/v2"),
    # webhooks: "'https' is the only allowed URL scheme"
    "webhook-http": (webhook("http://10.0.0.9/x"), "the API server takes only https://"),
    "webhook-query": (webhook("https://10.0.0.9/x?debug=1"), "no user information, query or fragment"),
    "crd-conversion-http": (obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "name: things.example.com",
                                "spec: {conversion: {strategy: Webhook, webhook: {clientConfig: {url: "
                                "'http://10.0.0.9/convert'}, conversionReviewVersions: [v1]}}}\n"),
                            "spec.conversion.webhook.clientConfig.url"),
    # names and data the API server's validation refuses
    "configmap-name-double-dot": (obj(*CONFIGMAP, "name: 'a..b'"), "is not a DNS-1123 subdomain"),
    "service-name-dotted": (obj("v1", "Service", "name: s.x", "spec: {ports: [{port: 80}]}\n"), "DNS-1035 label"),
    "service-name-digit-first": (obj("v1", "Service", "name: 1s", "spec: {ports: [{port: 80}]}\n"), "DNS-1035 label"),
    "namespace-dotted": (obj("v1", "Namespace", "name: a.b"), "DNS-1123 label"),
    "configmap-number": (obj(*CONFIGMAP, "name: x", "data: {a: 1}\n"), "data.a: 1 is not a string"),
    "configmap-bad-key": (obj(*CONFIGMAP, "name: x", "data: {'a/b': x}\n"), "key 'a/b' is none the API server takes"),
    "secret-not-base64": (obj("v1", "Secret", "name: x", "data: {a: 'not base64!'}\n"), "is not base64"),
    "annotation-number": (obj(*CONFIGMAP, "name: x, annotations: {a: 1}"), "metadata.annotations.a: 1 is not a string"),
    "priority-too-high": (obj("scheduling.k8s.io/v1", "PriorityClass", "name: x", "value: 2000000000\n"),
                          "at most 1,000,000,000"),
    "priority-system-name": (obj("scheduling.k8s.io/v1", "PriorityClass", "name: system-mine", "value: 5\n"),
                             "system- are the API server's own"),
    "deployment-selector": (obj("apps/v1", "Deployment", "name: d", "spec: {selector: {matchLabels: {a: b}}, "
                                "template: {metadata: {labels: {a: c}}, spec: {containers: [{name: c, image: x}]}}}\n"),
                            "selector does not match template labels"),
    # a ServiceCIDR takes the rules of spec.network.serviceCidr
    "servicecidr-pod-range": (service_cidr("10.200.0.0/16"), "overlaps clusterCidr 10.200.0.0/16"),
    "servicecidr-hosts": (service_cidr("10.0.0.0/24"), "holds h1's address 10.0.0.11"),
    "servicecidr-not-a-cidr": (service_cidr("10.0.0.300/24"), "is no CIDR"),
    # kubesmith's inventory and objects Kubernetes writes itself
    "inventory": (obj(*CONFIGMAP, "name: kubesmith-addons, namespace: kube-system",
                      "data: {objects: '[\"v1|Namespace||prod\"]'}\n"), "kubesmith's add-on inventory"),
    "kubernetes-endpoints": (obj("v1", "Endpoints", "name: kubernetes, namespace: default",
                                 "subsets: [{addresses: [{ip: 10.9.9.9}], ports: [{port: 6443}]}]\n"),
                             "ServiceAccount tokens"),
    "kubernetes-endpointslice": (obj("discovery.k8s.io/v1", "EndpointSlice", "name: kubernetes",
                                     "addressType: IPv4\nendpoints: [{addresses: [10.9.9.9]}]\n"),
                                 "ServiceAccount tokens"),
    "kubernetes-service": (obj("v1", "Service", "name: kubernetes, namespace: default",
                               "spec: {ports: [{port: 443}]}\n"), "default/kubernetes is not an add-on's to write"),
    "kubernetes-servicecidr": (service_cidr("10.99.0.0/16", "kubernetes"), "add a ServiceCIDR of another name"),
    "root-ca-anywhere": (obj(*CONFIGMAP, "name: kube-root-ca.crt, namespace: apps", "data: {a: b}\n"),
                         "publishes the cluster's CA certificate"),
    "apiserver-authentication": (obj(*CONFIGMAP, "name: extension-apiserver-authentication, namespace: kube-system"),
                                 "extension API servers"),
    "flowschema-exempt": (obj("flowcontrol.apiserver.k8s.io/v1", "FlowSchema", "name: exempt",
                              "spec: {priorityLevelConfiguration: {name: exempt}, matchingPrecedence: 1}\n"),
                          "mandatory API Priority and Fairness object"),
    "cluster-admin-role": (obj("rbac.authorization.k8s.io/v1", "ClusterRole", "name: cluster-admin", "rules: []\n"),
                           "bootstrap RBAC"),
    "system-node-critical": (obj("scheduling.k8s.io/v1", "PriorityClass", "name: system-node-critical", "value: 5\n"),
                             "refuses a system- PriorityClass"),
    # cluster-scoped kinds kubesmith's table lacked: a namespace there is ignored, so these are one object
    "servicecidr-twice": (service_cidr("10.33.0.0/16", "x").replace("name: x", "name: x, namespace: a") + "---\n" +
                          service_cidr("10.34.0.0/16", "x"), "is also in"),
    "resourceslice-twice": (obj("resource.k8s.io/v1", "ResourceSlice", "name: x, namespace: a", "spec: {}\n") +
                            "---\n" + obj("resource.k8s.io/v1", "ResourceSlice", "name: x, namespace: b", "spec: {}\n"),
                            "is also in"),
}

ACCEPTED: dict[str, str] = {
    "served-apis": obj("policy/v1", "PodDisruptionBudget", "name: p", "spec: {maxUnavailable: 1}\n") + "---\n" +
    obj("flowcontrol.apiserver.k8s.io/v1", "FlowSchema", "name: mine", "spec: {}\n") + "---\n" +
    obj("storage.k8s.io/v1beta1", "VolumeAttributesClass", "name: fast", "driverName: x\n"),
    "webhook-https-and-service": webhook("https://hooks.example.com:8443/validate") + "---\n" +
    obj("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "name: m",
        "webhooks: [{name: m.example.com, clientConfig: {service: {name: hook, namespace: hooks}}, "
        "admissionReviewVersions: [v1], sideEffects: None}]\n"),
    "names": obj(*CONFIGMAP, "name: a.b-c") + "---\n" + obj("v1", "Service", "name: web-1", "spec: {}\n") + "---\n" +
    obj("rbac.authorization.k8s.io/v1", "ClusterRole", "name: 'system:metrics-server'", "rules: []\n") + "---\n" +
    obj("v1", "Namespace", "name: apps"),
    "data": obj(*CONFIGMAP, "name: x, annotations: {a: '1'}", "data: {a.b_c-d: '1'}\nbinaryData: {b: YQ==}\n") +
    "---\n" + obj("v1", "Secret", "name: s", "data: {a: YQ==}\nstringData: {b: 'not base64!'}\n"),
    "priorities": obj("scheduling.k8s.io/v1", "PriorityClass", "name: high", "value: 1000000000\n") + "---\n" +
    obj("scheduling.k8s.io/v1", "PriorityClass", "name: low", "value: -5\n"),
    "deployment-selector": obj("apps/v1", "Deployment", "name: d", "spec: {selector: {matchLabels: {a: b}}, "
                               "template: {metadata: {labels: {a: b, tier: web}}, spec: {containers: "
                               "[{name: c, image: x}]}}}\n"),
    "servicecidr-elsewhere": service_cidr("10.96.0.0/16"),
    "kubernetes-names-elsewhere": obj(*CONFIGMAP, "name: kubesmith-addons, namespace: apps") + "---\n" +
    obj("v1", "Service", "name: kubernetes, namespace: apps", "spec: {}\n") + "---\n" +
    obj("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "name: 'system:node'",
        "roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: 'system:node'}\nsubjects: []\n"),
}


def _write(tmp_path: Path, name: str, manifest: str, version: str = "1.33.2") -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.yaml").write_text(manifest)
    (tmp_path / f"{name}.yaml").write_text(HEAD.replace("1.33.2", version) + HOSTS + "  addons: [m/a.yaml]\n")


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_object_the_api_server_refuses_or_owns_is_one_located_error(name: str, tmp_path: Path) -> None:
    manifest, fragment = CASES[name]
    _write(tmp_path, name, manifest)
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", f"{name}.yaml", cwd=tmp_path)
    assert_one_located_error(result, f"{name}.yaml", "spec.addons[0]: m/a.yaml:", fragment)


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_the_legitimate_neighbour_stays_valid(name: str, tmp_path: Path) -> None:
    _write(tmp_path, name, ACCEPTED[name])
    with bounded(BOUND_SECONDS):
        result = kubesmith("validate", f"{name}.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr, result.stderr


def test_an_api_is_refused_from_the_release_that_removed_it(tmp_path: Path) -> None:
    """flowcontrol v1beta3 is served up to 1.31 and gone in 1.32."""
    _write(tmp_path, "c", CASES["flowschema-v1beta3"][0], version="1.31.4")
    assert kubesmith("validate", "c.yaml", cwd=tmp_path).returncode == 0
    (tmp_path / "c.yaml").write_text((tmp_path / "c.yaml").read_text().replace("1.31.4", "1.32.3"))
    result = kubesmith("validate", "c.yaml", cwd=tmp_path)
    assert_one_located_error(result, "c.yaml", "spec.addons[0]", "removed in Kubernetes 1.32")
