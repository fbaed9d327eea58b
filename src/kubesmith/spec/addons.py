"""`spec.addons`: read the manifests the spec names and check that each document is a Kubernetes
object, when the spec is loaded, so a malformed manifest is a located error before anything connects.

Each problem names the `spec.addons[i]` entry (located in the cluster file) and the manifest's own
file and line. An object is labelled with its add-on's name (`kubesmith.io/addon`), and gets the mode
`Reconcile` unless its `addonmanager.kubernetes.io/mode` label says otherwise.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from pathlib import Path
from urllib.parse import urlsplit
from typing import Any

import yaml

from kubesmith import fsutil
from kubesmith.spec.checks import Finding
from kubesmith.spec.model import Cluster
from kubesmith.vocabulary.errors import Location, format_path, yaml_text
from kubesmith.vocabulary.types import label_key_problem, label_value_problem
from kubesmith.spec.values import json_findings
from kubesmith.spec.yamlsource import Loader, YamlDocument, nesting_problem, structure_problems, with_alias_name

MODE_LABEL = "addonmanager.kubernetes.io/mode"
ADDON_LABEL = "kubesmith.io/addon"
OWN_GROUP = "kubesmith.io"  # the cluster file's API group, which no API server serves
MODES = ("Reconcile", "EnsureExists")
SUFFIXES = (".yaml", ".yml", ".json")
MAX_BYTES = 4 << 20
NAME = re.compile(r"^[a-z0-9]([-a-z0-9.:]{0,251}[a-z0-9])?$")  # RBAC names may hold ':' (system:coredns)
NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

Addon = tuple[str, list[dict[str, Any]]]
MAX_LABEL_VALUE = 63  # a label value (the add-on's name is one: kubesmith.io/addon)

# Kinds whose objects have no namespace (a `namespace:` there is ignored); any other kind is namespaced,
# and an object without a namespace lands in `default`
CLUSTER_SCOPED = frozenset({
    "Namespace", "Node", "PersistentVolume", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
    "StorageClass", "PriorityClass", "RuntimeClass", "IngressClass", "CSIDriver", "CSINode", "VolumeAttachment",
    "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
    "APIService", "CertificateSigningRequest", "FlowSchema", "PriorityLevelConfiguration",
    "VolumeAttributesClass", "DeviceClass", "ServiceCIDR", "IPAddress", "ClusterTrustBundle", "ResourceSlice",
    "DeviceTaintRule", "StorageVersion", "StorageVersionMigration", "ComponentStatus",
})

_COREDNS = "set CoreDNS through spec.components.coreDns (upstream, stubDomains, extraServerBlocks, replicas, ...)"
_COREDNS_OFF = ("to run a DNS of your own, set spec.components.coreDns.enabled: false and give its objects "
                "other names")
# The objects kubesmith applies itself (modules/core_dns.py, modules/addons.py), and what to use instead;
# tests/test_hostile_round4_combos.py checks this table against the plan's add-on files
OWN_OBJECTS: dict[tuple[str, str, str], str] = {
    ("ConfigMap", "kube-system", "coredns"): _COREDNS,
    ("Deployment", "kube-system", "coredns"): _COREDNS,
    ("Service", "kube-system", "kube-dns"): "its address is spec.network.dnsServiceIp; " + _COREDNS_OFF,
    ("ServiceAccount", "kube-system", "coredns"): _COREDNS_OFF,
    ("PodDisruptionBudget", "kube-system", "coredns"): _COREDNS,
    ("ClusterRole", "", "system:coredns"): _COREDNS_OFF,
    ("ClusterRoleBinding", "", "system:coredns"): _COREDNS_OFF,
    ("ClusterRoleBinding", "", "kubesmith:cluster-admins"): ("it binds admin.conf's group to cluster-admin; bind "
                                                             "other subjects in a binding of another name"),
}


_RECONCILED = "Kubernetes rewrites it, and the two would overwrite each other without end"
_KUBERNETES_ENDPOINTS = ("the API server's endpoint reconciler keeps it: until it rewrites it, in-cluster clients "
                         "would send their ServiceAccount tokens to the addresses written here")
_MANDATORY_FLOW = ("a mandatory API Priority and Fairness object: the API server restores it at once; give your "
                   "FlowSchema or PriorityLevelConfiguration another name")
_SYSTEM_PRIORITY = "the API server creates it, and refuses a system- PriorityClass of another value"
_BOOTSTRAP_RBAC = ("bootstrap RBAC, which the API server reconciles at every start (admin.conf's group is bound to "
                   "cluster-admin); bind your subjects in a binding of another name")
# Objects no add-on may write: kubesmith's prune inventory (backends/addons.py reads it to decide what to
# delete), and objects the API server or kube-controller-manager writes itself. A ConfigMap
# `kube-root-ca.crt` is the controller manager's in every namespace (reserved_problem).
RESERVED_OBJECTS: dict[tuple[str, str, str], str] = {
    ("ConfigMap", "kube-system", "kubesmith-addons"): (
        "it is kubesmith's add-on inventory, the list apply prunes by: written by an add-on, apply would delete "
        "objects it lists, or the inventory itself once the add-on is gone"),
    ("Service", "default", "kubernetes"): "the API server keeps it (the address pods reach it by); " + _RECONCILED,
    ("Endpoints", "default", "kubernetes"): _KUBERNETES_ENDPOINTS,
    ("EndpointSlice", "default", "kubernetes"): _KUBERNETES_ENDPOINTS,
    ("ServiceCIDR", "", "kubernetes"): ("the API server makes it from spec.network.serviceCidr and keeps its ranges; "
                                        "add a ServiceCIDR of another name"),
    ("ConfigMap", "kube-system", "extension-apiserver-authentication"): (
        "it holds the client CAs the API server publishes for extension API servers; " + _RECONCILED),
    ("FlowSchema", "", "exempt"): _MANDATORY_FLOW,
    ("FlowSchema", "", "catch-all"): _MANDATORY_FLOW,
    ("PriorityLevelConfiguration", "", "exempt"): _MANDATORY_FLOW,
    ("PriorityLevelConfiguration", "", "catch-all"): _MANDATORY_FLOW,
    ("PriorityClass", "", "system-node-critical"): _SYSTEM_PRIORITY,
    ("PriorityClass", "", "system-cluster-critical"): _SYSTEM_PRIORITY,
    ("ClusterRole", "", "cluster-admin"): _BOOTSTRAP_RBAC,
    ("ClusterRoleBinding", "", "cluster-admin"): _BOOTSTRAP_RBAC,
}


def reserved_problem(key: tuple[str, str, str]) -> str | None:
    """Why no add-on may write the object `key` (kind, namespace, name), or None."""
    if key in RESERVED_OBJECTS:
        return RESERVED_OBJECTS[key]
    if key[0] == "ConfigMap" and key[2] == "kube-root-ca.crt":
        return "kube-controller-manager publishes the cluster's CA certificate in it in every namespace; " + _RECONCILED
    return None


# API versions of kinds the API server no longer serves ("no matches for kind"), with the release that
# removed them and what to write instead (kubernetes.io's Deprecated API Migration Guide)
_PSA = "pod-security.kubernetes.io labels on namespaces instead (Pod Security admission replaced it)"
_REMOVED = (
    ("1.16", "apps/v1", {"extensions/v1beta1": "DaemonSet Deployment ReplicaSet", "apps/v1beta1":
                         "Deployment StatefulSet ReplicaSet ControllerRevision", "apps/v1beta2":
                         "DaemonSet Deployment StatefulSet ReplicaSet ControllerRevision"}),
    ("1.16", "networking.k8s.io/v1", {"extensions/v1beta1": "NetworkPolicy"}),
    ("1.16", _PSA, {"extensions/v1beta1": "PodSecurityPolicy"}),
    ("1.22", "networking.k8s.io/v1", {"extensions/v1beta1": "Ingress", "networking.k8s.io/v1beta1":
                                      "Ingress IngressClass"}),
    ("1.22", "admissionregistration.k8s.io/v1", {"admissionregistration.k8s.io/v1beta1":
                                                 "MutatingWebhookConfiguration ValidatingWebhookConfiguration"}),
    ("1.22", "apiextensions.k8s.io/v1", {"apiextensions.k8s.io/v1beta1": "CustomResourceDefinition"}),
    ("1.22", "apiregistration.k8s.io/v1", {"apiregistration.k8s.io/v1beta1": "APIService"}),
    ("1.22", "certificates.k8s.io/v1", {"certificates.k8s.io/v1beta1": "CertificateSigningRequest"}),
    ("1.22", "coordination.k8s.io/v1", {"coordination.k8s.io/v1beta1": "Lease"}),
    ("1.22", "rbac.authorization.k8s.io/v1", {"rbac.authorization.k8s.io/v1beta1":
                                              "ClusterRole ClusterRoleBinding Role RoleBinding"}),
    ("1.22", "scheduling.k8s.io/v1", {"scheduling.k8s.io/v1beta1": "PriorityClass"}),
    ("1.22", "storage.k8s.io/v1", {"storage.k8s.io/v1beta1": "CSIDriver CSINode StorageClass VolumeAttachment"}),
    ("1.25", "batch/v1", {"batch/v1beta1": "CronJob"}),
    ("1.25", "discovery.k8s.io/v1", {"discovery.k8s.io/v1beta1": "EndpointSlice"}),
    ("1.25", "events.k8s.io/v1", {"events.k8s.io/v1beta1": "Event"}),
    ("1.25", "autoscaling/v2", {"autoscaling/v2beta1": "HorizontalPodAutoscaler"}),
    ("1.25", "policy/v1", {"policy/v1beta1": "PodDisruptionBudget"}),
    ("1.25", _PSA, {"policy/v1beta1": "PodSecurityPolicy"}),
    ("1.25", "node.k8s.io/v1", {"node.k8s.io/v1beta1": "RuntimeClass"}),
    ("1.26", "flowcontrol.apiserver.k8s.io/v1", {"flowcontrol.apiserver.k8s.io/v1beta1":
                                                 "FlowSchema PriorityLevelConfiguration"}),
    ("1.26", "autoscaling/v2", {"autoscaling/v2beta2": "HorizontalPodAutoscaler"}),
    ("1.27", "storage.k8s.io/v1", {"storage.k8s.io/v1beta1": "CSIStorageCapacity"}),
    ("1.29", "flowcontrol.apiserver.k8s.io/v1", {"flowcontrol.apiserver.k8s.io/v1beta2":
                                                 "FlowSchema PriorityLevelConfiguration"}),
    ("1.32", "flowcontrol.apiserver.k8s.io/v1", {"flowcontrol.apiserver.k8s.io/v1beta3":
                                                 "FlowSchema PriorityLevelConfiguration"}),
)
REMOVED_APIS: dict[tuple[str, str], tuple[str, str]] = {
    (api_version, kind): (release, instead) for release, instead, kinds in _REMOVED
    for api_version, names in kinds.items() for kind in names.split()}


def object_key(document: dict[str, Any]) -> tuple[str, str, str]:
    """(kind, namespace, name) as the API server stores the object: no namespace is `default` for a
    namespaced kind, and a cluster-scoped kind's namespace is ignored."""
    kind, metadata = document["kind"], document["metadata"]
    namespace = "" if kind in CLUSTER_SCOPED else (metadata.get("namespace") or "default")
    return kind, namespace, metadata["name"]


def read_addons(entries: list[str], base: Path, cluster_file: Path | None = None, cluster: Cluster | None = None
                ) -> tuple[tuple[Addon, ...], list[Finding]]:
    """The add-ons named by `entries` (paths relative to `base`), and every problem found in them;
    `cluster_file`, the spec's own file, is no add-on, and neither is the directory holding it. With
    `cluster`, objects are also checked against its release and address ranges."""
    addons: list[Addon] = []
    findings: list[Finding] = []
    seen: dict[tuple[str, str, str], str] = {}
    names: set[str] = set()
    entries_seen: dict[Path, int] = {}
    for index, entry in enumerate(entries):
        loc = ("spec", "addons", index)
        if (refused := _entry_problem(entry, base, cluster_file)) is not None:
            findings.append((loc, refused, "error"))
            continue
        first = entries_seen.setdefault((base / entry).resolve(), index)
        if first != index:  # read once: its objects would all be given twice
            findings.append((loc, f"{entry!r} names the same manifests as spec.addons[{first}]; list it once",
                             "error"))
            continue
        objects, problems = _read_entry(base / entry)
        findings += [(loc, message, "error") for message in problems]
        name = _addon_name(Path(entry), names)
        if len(name) > MAX_LABEL_VALUE:
            findings.append((loc, f"the add-on's name, {name[:24]}... ({len(name)} characters, from the file "
                             f"name), is the {ADDON_LABEL} label of each object, and a label value "
                             f"holds at most {MAX_LABEL_VALUE}: the API server would refuse every object; name the "
                             f"file (or directory) with at most {MAX_LABEL_VALUE - len('spec-')} characters before "
                             "its suffix", "error"))
            continue
        for where, document in objects:
            key = object_key(document)
            if key in OWN_OBJECTS:
                findings.append((loc, f"{where}: {_describe(document)} in {key[1] or 'the cluster'} is one of "
                                 f"kubesmith's own objects, which it keeps applied: the two would overwrite each "
                                 f"other without end; {OWN_OBJECTS[key]}", "error"))
                continue
            if (problem := api_server_problem(document, key, cluster)) is not None:
                findings.append((loc, f"{where}: {_describe(document)}: {problem}", "error"))
                continue
            if key in seen:
                findings.append((loc, f"{where}: {_describe(document)} is also in {seen[key]}", "error"))
            seen[key] = where
            labels = document["metadata"].setdefault("labels", {})
            labels[ADDON_LABEL] = name
            labels.setdefault(MODE_LABEL, "Reconcile")
        addons.append((name, [document for _, document in objects]))
    return tuple(addons), findings


def _entry_problem(entry: str, base: Path, cluster_file: Path | None) -> str | None:
    """Why `entry` names no add-on: an empty path (the cluster file's directory), the cluster file itself,
    or a directory holding it (its `kind: Cluster` would be sent to the API server)."""
    if not entry.strip():
        return f"{entry!r} is an empty path: name a manifest file, or a directory of manifests"
    if cluster_file is None:
        return None
    path, own = (base / entry).resolve(), cluster_file.resolve()
    if path == own:
        return f"{entry!r} is the cluster file itself, not an add-on manifest"
    if path == own.parent:
        return (f"{entry!r} is the directory of the cluster file, which holds the cluster file itself: keep "
                "add-on manifests in a directory of their own")
    return None


def _addon_name(entry: Path, taken: set[str]) -> str:
    """A file name for the add-on: its entry's name, made unique and kept apart from kubesmith's own."""
    stem = re.sub(r"[^a-z0-9-]+", "-", entry.stem.lower()).strip("-") or "addon"
    name, number = f"spec-{stem}", 2
    while name in taken:
        name, number = f"spec-{stem}-{number}", number + 1
    taken.add(name)
    return name


def _read_entry(path: Path) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and (p.is_file() or p.is_fifo()))
        if not files:
            return [], [f"{path}: no *.yaml, *.yml or *.json files in the directory"]
    elif path.exists():
        files = [path]  # a FIFO or device is refused by the reader, naming what it is
    else:
        return [], [f"{path}: no such file or directory"]
    objects: list[tuple[str, dict[str, Any]]] = []
    problems: list[str] = []
    for file in files:
        found, bad = _read_file(file)
        objects += found
        problems += bad
    return objects, problems


def _read_file(path: Path) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """(where, object) of every document of one manifest file (a `List`'s items one by one). The file is
    anyone's: it is read bounded, and nesting, aliases and values JSON cannot carry are refused before
    anything is built from it (the plan writes every object as JSON)."""
    try:
        text = fsutil.read_regular(path, MAX_BYTES, "a YAML or JSON manifest").decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [], [f"{path}: cannot read it: {getattr(exc, 'strerror', None) or exc}"]
    objects: list[tuple[str, dict[str, Any]]] = []
    problems: list[str] = []
    loader = None
    try:
        if (deep := nesting_problem(text, str(path), "a manifest")) is not None:
            return [], [f"{_at(deep.location, path)}: {deep.message}"]
        loader = Loader(text)
        while loader.check_node():
            node = loader.get_node()
            duplicates, refused = structure_problems(node, str(path))
            if refused is not None:
                return objects, problems + [f"{_at(refused.location, path)}: {refused.path}: {refused.message}"]
            document = loader.construct_document(node)
            if duplicates:  # kubectl refuses them; which value would count is no question to leave open
                problems += [f"{_at(duplicate.location, path)}: {duplicate.path}: {duplicate.message}"
                             for duplicate in duplicates]
                continue
            if document is None:
                continue
            if (bad := _unrepresentable(document, node, path)) is not None:
                problems.append(bad)
                continue
            document = keys_as_kubectl_writes_them(document)
            where = f"{path}:{node.start_mark.line + 1}"
            items = document.get("items") if isinstance(document, dict) and document.get("kind") == "List" else None
            for item in items if isinstance(items, list) else [document]:
                problem = object_problem(item)
                if problem:
                    problems.append(f"{where}: {problem}")
                else:
                    objects.append((where, item))
    except yaml.reader.ReaderError as exc:  # a NUL or control byte: the reader refuses the whole text
        before = text[:exc.position]
        at = f"{path}:{before.count(chr(10)) + 1}:{exc.position - before.rfind(chr(10))}"
        problems.append(f"{at}: not valid YAML: control character U+{exc.character:04X} is not allowed"
                        if isinstance(exc.character, int) else f"{at}: not valid YAML: {exc.reason}")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problems.append(f"{at}: not valid YAML: {with_alias_name(getattr(exc, 'problem', None), mark, text) or exc}")
    except ValueError as exc:  # an integer of more than 4,300 digits
        problems.append(f"{path}: not valid YAML: {exc}")
    finally:
        if loader is not None:
            loader.dispose()
    return objects, problems


def _unrepresentable(document: Any, node: yaml.Node, path: Path) -> str | None:
    """The first value of a document that JSON cannot carry (a timestamp, !!binary, !!set, a key that is
    no string, integer or boolean, NaN, an infinity, an integer beyond 64 bits), located in the manifest;
    None when there is none."""
    located = YamlDocument(str(path), document, node)
    found = [(located.locate(loc), loc, message) for loc, message, _ in json_findings(document)]
    if not found:
        return None
    where, loc, message = min(found, key=lambda item: (item[0].line, item[0].column) if item[0] else (0, 0))
    return f"{_at(where, path)}: {format_path(loc) if loc else '(document)'}: {message}"


def keys_as_kubectl_writes_them(document: Any) -> Any:
    """`document` with integer and boolean mapping keys as strings, as kubectl turns YAML into JSON
    (sigs.k8s.io/yaml): ingress-nginx's documented `tcp-services` ConfigMap has `data: {9000: ...}`."""
    if isinstance(document, dict):
        return {_key_text(key): keys_as_kubectl_writes_them(value) for key, value in document.items()}
    if isinstance(document, list):
        return [keys_as_kubectl_writes_them(item) for item in document]
    return document


def _key_text(key: Any) -> Any:
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key) if isinstance(key, int) else key


def _at(location: Location | None, path: Path) -> str:
    return str(location) if location is not None else str(path)


def object_problem(document: Any) -> str | None:
    """Why `document` is not a Kubernetes object kubesmith can apply, or None."""
    if not isinstance(document, dict):
        return f"a manifest document must be a mapping (a Kubernetes object), got {yaml_text(document)}"
    for field in ("apiVersion", "kind"):
        if not isinstance(document.get(field), str) or not document[field]:
            return f"{field} is missing (every object names its apiVersion and kind)"
    if document["apiVersion"].partition("/")[0] == OWN_GROUP:
        return (f"{document['kind']} of {document['apiVersion']} is a kubesmith document, not a Kubernetes "
                "object: the API server has no such kind (is this a cluster file?)")
    metadata = document.get("metadata")
    if not isinstance(metadata, dict):
        return f"{_describe(document)}: metadata is missing"
    name = metadata.get("name")
    if name is None:
        return f"{_describe(document)}: metadata.name is missing"
    if not isinstance(name, str) or not NAME.match(name):
        return f"{_describe(document)}: metadata.name {name!r} is not a valid object name"
    if "generateName" in metadata:
        return f"{_describe(document)}: metadata.generateName cannot be kept applied; give a name"
    namespace = metadata.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not NAMESPACE.match(namespace)):
        return f"{_describe(document)}: metadata.namespace {namespace!r} is not a valid namespace name"
    labels = metadata.get("labels", {})
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        return f"{_describe(document)}: metadata.labels must map strings to strings"
    for key, value in labels.items():  # the API server refuses the object otherwise, at every apply
        if problem := label_key_problem(key) or label_value_problem(value):
            return f"{_describe(document)}: metadata.labels: {problem}"
    mode = labels.get(MODE_LABEL, "Reconcile")
    if mode not in MODES:
        return f"{_describe(document)}: label {MODE_LABEL}={mode!r}: expected Reconcile or EnsureExists"
    return None


# Object names as the API server validates them: a DNS-1123 subdomain for most kinds and for custom
# resources; a Service's is a DNS-1035 label (it becomes a DNS name of its own), a Namespace's a DNS-1123
# label; RBAC objects take path segments (system:coredns), kept to NAME
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_RULES: dict[str, tuple[re.Pattern[str], int, str]] = {
    "Service": (re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$"), 63, "a DNS-1035 label (a letter first, then "
                "lower-case letters, digits and '-', at most 63; no '.')"),
    "Namespace": (NAMESPACE, 63, "a DNS-1123 label (lower-case letters, digits and '-', at most 63; no '.')"),
}
RBAC_KINDS = frozenset({"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"})
_WEBHOOK_KINDS = frozenset({"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"})
_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def api_server_problem(document: dict[str, Any], key: tuple[str, str, str], cluster: Cluster | None) -> str | None:
    """Why the API server refuses this object, or why an add-on must not write it, or None: an object
    Kubernetes or kubesmith keeps itself, an API the cluster's release no longer serves, a name or data
    its validation refuses, a webhook reached without TLS, a ServiceCIDR over the pods' or hosts' addresses."""
    if (reserved := reserved_problem(key)) is not None:
        return f"{key[1] + '/' if key[1] else ''}{key[2]} is not an add-on's to write: {reserved}"
    removed = REMOVED_APIS.get((document["apiVersion"], document["kind"]))
    if removed is not None and (cluster is None or _minor(removed[0]) <= _minor(cluster.minor)):
        return (f"{document['apiVersion']} no longer serves {document['kind']} (removed in Kubernetes {removed[0]}): "
                f"the API server would answer \"no matches for kind\"; write {removed[1]}")
    return _name_problem(document) or _data_problem(document) or _webhook_problem(document) or \
        _priority_problem(document) or _template_label_problem(document) or _selector_problem(document) or \
        (_service_cidr_problem(document, cluster) if cluster is not None else None)


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def _name_problem(document: dict[str, Any]) -> str | None:
    kind, name = document["kind"], document["metadata"]["name"]
    if kind in RBAC_KINDS:
        return None  # NAME, checked in object_problem
    pattern, longest, rule = _NAME_RULES.get(kind, (_SUBDOMAIN, 253, "a DNS-1123 subdomain (lower-case letters, "
                                                                       "digits and '-', labels joined by '.', at most 253)"))
    if len(name) > longest or not pattern.match(name):
        return f"metadata.name {name[:80]!r} is not {rule}: the API server refuses it"
    return None


def _data_problem(document: dict[str, Any]) -> str | None:
    """A ConfigMap's or Secret's data, and any object's annotations, are maps of strings (a number stops
    the decoding: "cannot unmarshal number"); a Secret's `data` and a ConfigMap's `binaryData` are base64."""
    maps = [("metadata.annotations", document["metadata"].get("annotations"), False)]
    if document["kind"] in ("ConfigMap", "Secret") and document["apiVersion"] == "v1":
        secret = document["kind"] == "Secret"
        maps += [("data", document.get("data"), secret), ("binaryData", document.get("binaryData"), not secret),
                 ("stringData", document.get("stringData"), False)]
    for field, values, encoded in maps:
        if values is None:
            continue
        if not isinstance(values, dict):
            return f"{field} must map strings to strings"
        for name, value in values.items():
            if not isinstance(value, str):
                return f"{field}.{name}: {yaml_text(value)} is not a string: quote it (the API server refuses the object)"
            if field != "metadata.annotations" and not _CONFIGMAP_KEY.match(name):
                return f"{field}: key {name[:80]!r} is none the API server takes (letters, digits, '-', '_', '.')"
            if encoded:
                try:
                    base64.b64decode(value, validate=True)
                except (binascii.Error, ValueError):
                    return (f"{field}.{name} is not base64 (the API server refuses it: illegal base64 data); "
                            "put plain text under stringData")
    return None


def _webhook_problem(document: dict[str, Any]) -> str | None:
    """The API server takes a webhook URL only as https://HOST[/PATH] (ValidateWebhookURL, forceHttps):
    an admission or conversion webhook reached in plain text would also hand every request to anyone
    on the path."""
    configs: list[tuple[str, Any]] = []
    if document["kind"] in _WEBHOOK_KINDS and isinstance(document.get("webhooks"), list):
        configs = [(f"webhooks[{index}].clientConfig", webhook.get("clientConfig"))
                   for index, webhook in enumerate(document["webhooks"]) if isinstance(webhook, dict)]
    elif document["kind"] == "CustomResourceDefinition":
        webhook = ((document.get("spec") or {}).get("conversion") or {}).get("webhook") \
            if isinstance(document.get("spec"), dict) else None
        configs = [("spec.conversion.webhook.clientConfig", webhook.get("clientConfig"))] \
            if isinstance(webhook, dict) else []
    for where, config in configs:
        url = config.get("url") if isinstance(config, dict) else None
        if url is None:
            continue
        parts = urlsplit(str(url)) if isinstance(url, str) else None
        if parts is None or parts.scheme != "https" or not parts.netloc:
            return (f"{where}.url {str(url)[:80]!r}: the API server takes only https://HOST[/PATH] (\"'https' is the "
                    "only allowed URL scheme\"): a webhook in plain text would hand every request to anyone on the path")
        if "@" in parts.netloc or parts.query or parts.fragment:
            return f"{where}.url {url[:80]!r}: no user information, query or fragment (the API server refuses them)"
    return None


# A user's PriorityClass is worth at most this much; system- names are the API server's own
HIGHEST_USER_PRIORITY = 1_000_000_000


def _priority_problem(document: dict[str, Any]) -> str | None:
    """The API server refuses a PriorityClass above HIGHEST_USER_PRIORITY or under a system- name
    (scheduling's ValidatePriorityClass): it keeps those for the cluster's own critical pods."""
    if document["kind"] != "PriorityClass":
        return None
    if document["metadata"]["name"].startswith("system-"):
        return "names beginning with system- are the API server's own (it refuses them): choose another name"
    value = document.get("value", 0)
    if not isinstance(value, int) or isinstance(value, bool) or not -2**31 <= value <= HIGHEST_USER_PRIORITY:
        return (f"value {yaml_text(value)} is no integer of at most {HIGHEST_USER_PRIORITY:,} (an int32; the API server "
                "refuses a higher one: above are system-cluster-critical and system-node-critical)")
    return None


_WORKLOADS = frozenset({"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"})
# where an object holds the metadata of the objects it makes (pod templates, a CronJob's Job template): the API
# server validates their labels as an object's own ("spec.template.metadata.labels: Invalid value")
_TEMPLATES = (("spec", "template"), ("template",), ("spec", "jobTemplate"), ("spec", "jobTemplate", "spec",
                                                                               "template"))


def _template_label_problem(document: dict[str, Any]) -> str | None:
    """A template's labels are label keys and values the API server takes: it refuses the object otherwise."""
    for path in _TEMPLATES:
        template: Any = document
        for part in path:
            template = template.get(part) if isinstance(template, dict) else None
        metadata = template.get("metadata") if isinstance(template, dict) else None
        labels = metadata.get("labels") if isinstance(metadata, dict) else None
        if labels is None:
            continue
        where = ".".join((*path, "metadata", "labels"))
        if not isinstance(labels, dict) or \
                not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            return f"{where} must map strings to strings (quote a number or a boolean): the API server refuses it"
        for key, value in labels.items():
            if problem := label_key_problem(key) or label_value_problem(value):
                return f"{where}: {problem}: the API server refuses the object"
    return None


def _selector_problem(document: dict[str, Any]) -> str | None:
    """apps/v1 refuses a workload whose selector does not select its own pod template ("selector does
    not match template labels"): each matchLabels pair must be among the template's labels."""
    spec = document.get("spec")
    if document["kind"] not in _WORKLOADS or document["apiVersion"] != "apps/v1" or not isinstance(spec, dict):
        return None
    selector, template = spec.get("selector"), spec.get("template")
    wanted = selector.get("matchLabels") if isinstance(selector, dict) else None
    labels = (template.get("metadata") or {}).get("labels") if isinstance(template, dict) else None
    if not isinstance(wanted, dict) or not isinstance(labels, dict):
        return None
    missing = next((key for key, value in wanted.items() if labels.get(key) != value), None)
    if missing is not None:
        return (f"spec.selector.matchLabels {missing}={yaml_text(wanted[missing])} is not among "
                "spec.template.metadata.labels: the API server refuses it (selector does not match template labels)")
    return None


def _service_cidr_problem(document: dict[str, Any], cluster: Cluster) -> str | None:
    """A ServiceCIDR adds a service range: spec.network.serviceCidr's rules hold for it too, or a Service
    would get an address of a pod or a host."""
    if document["kind"] != "ServiceCIDR" or not isinstance(document.get("spec"), dict):
        return None
    pods = ipaddress.ip_network(cluster.spec.network.cluster_cidr)
    for index, text in enumerate(document["spec"].get("cidrs") or []):
        try:
            cidr = ipaddress.ip_network(str(text), strict=False)
        except ValueError as exc:
            return f"spec.cidrs[{index}]: {str(text)[:80]!r} is no CIDR ({exc}): the API server refuses it"
        if cidr.version == pods.version and cidr.overlaps(pods):
            return (f"spec.cidrs[{index}]: {cidr} overlaps clusterCidr {pods}: Services would get pods' addresses; "
                    "pods and services need separate ranges")
        if (host := next((h for h in cluster.spec.hosts if ipaddress.ip_address(h.address) in cidr), None)) is not None:
            return (f"spec.cidrs[{index}]: {cidr} holds {host.name}'s address {host.address}: a Service could take "
                    "a host's address")
    return None


def _describe(document: dict[str, Any]) -> str:
    metadata = document.get("metadata") if isinstance(document.get("metadata"), dict) else {}
    return f"{document.get('kind')} {metadata.get('name', '(no name)')!r}"
