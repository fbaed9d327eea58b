"""`spec.addons`: read the manifests the spec names and check that each document is a Kubernetes
object, when the spec is loaded, so a malformed manifest is a located error before anything connects.

Each problem names the `spec.addons[i]` entry (located in the cluster file) and the manifest's own
file and line. An object is labelled with its add-on's name (`kubesmith.io/addon`), and gets the mode
`Reconcile` unless its `addonmanager.kubernetes.io/mode` label says otherwise.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from kubesmith import fsutil
from kubesmith.spec.checks import Finding
from kubesmith.spec.errors import Location, format_path, yaml_text
from kubesmith.spec.types import label_key_problem, label_value_problem
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
    "VolumeAttributesClass", "DeviceClass",
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


def object_key(document: dict[str, Any]) -> tuple[str, str, str]:
    """(kind, namespace, name) as the API server stores the object: no namespace is `default` for a
    namespaced kind, and a cluster-scoped kind's namespace is ignored."""
    kind, metadata = document["kind"], document["metadata"]
    namespace = "" if kind in CLUSTER_SCOPED else (metadata.get("namespace") or "default")
    return kind, namespace, metadata["name"]


def read_addons(entries: list[str], base: Path, cluster_file: Path | None = None
                ) -> tuple[tuple[Addon, ...], list[Finding]]:
    """The add-ons named by `entries` (paths relative to `base`), and every problem found in them;
    `cluster_file`, the spec's own file, is no add-on, and neither is the directory holding it."""
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


def _describe(document: dict[str, Any]) -> str:
    metadata = document.get("metadata") if isinstance(document.get("metadata"), dict) else {}
    return f"{document.get('kind')} {metadata.get('name', '(no name)')!r}"
