"""Operator access: a personal, short-lived kubeconfig that can be taken back.

Each person gets a fresh key and a client certificate from kubernetes-ca (CN = their name, O =
their own group `kubesmith:user:<name>`), and one ClusterRoleBinding ties that group to the role
they were given. Never `system:masters`: its rights cannot be revoked before the certificate
expires, while deleting the binding refuses the next request at once. The API calls that manage
bindings authenticate with a certificate minted for that call alone (minutes of validity, never
written to disk) from the cluster's CA in the state directory, which holds every power anyway.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from kubesmith import fsutil
from kubesmith.apiclient import ApiError, Credentials, api_request
from kubesmith.modules import addons
from kubesmith.pki import documents, keys
from kubesmith.pki.issue import new_leaf
from kubesmith.pki.store import PkiError, PkiStore, check_owner, store_root, utc_now
from kubesmith.vocabulary.model import CertificateRequest, Plan
from kubesmith.urls import url_host

ROLES = ("view", "edit", "admin", "cluster-admin")
BINDING_PREFIX = "kubesmith:user:"
RBAC = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
MANAGER_VALIDITY = dt.timedelta(minutes=5)


class AccessError(ApiError):
    """Access cannot be granted or revoked; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Grant:
    user: str
    role: str
    not_after: dt.datetime
    server: str
    kubeconfig: dict[str, Any]


def group_of(user: str) -> str:
    return f"{BINDING_PREFIX}{user}"


def binding(user: str, role: str) -> dict[str, Any]:
    """The one ClusterRoleBinding of a person: their own group to the role they hold."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": group_of(user), "labels": {"app.kubernetes.io/managed-by": "kubesmith"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group_of(user)}]}


def _client_request(name: str, organizations: tuple[str, ...]) -> CertificateRequest:
    return CertificateRequest(name=name, ca="kubernetes-ca", common_name=name, organizations=organizations,
                              usages=("digital signature", "client auth"), dns_names=(), ip_addresses=(),
                              cert_path="", key_path="", owner="", group="")


class ClusterAccess:
    """Mints personal kubeconfigs and manages their bindings for one cluster's state directory."""

    def __init__(self, plan: Plan, state_dir: Path, server: str | None = None, timeout: float = 10.0) -> None:
        self.plan = plan
        self.root = store_root(state_dir)
        self.server = server or f"https://{plan.api_endpoint}"
        self.timeout = timeout

    def _authority(self) -> tuple[x509.Certificate, Any, bytes]:
        try:
            check_owner(self.root, self.plan.cluster)
        except PkiError as exc:
            raise AccessError(str(exc)) from None
        cert_path, key_path = PkiStore(self.root, self.plan.pki, self.plan.authorities).ca_paths("kubernetes-ca")
        if not (cert_path.exists() and key_path.exists()):
            raise AccessError(f"no kubernetes-ca in {self.root}: this is not the state directory of cluster "
                              f"{self.plan.cluster!r} after an apply, run or render (give --state-dir)")
        pem = cert_path.read_bytes()
        return x509.load_pem_x509_certificate(pem), keys.load(key_path.read_bytes(), str(key_path)), pem

    def _issue(self, name: str, organizations: tuple[str, ...], validity: dt.timedelta
               ) -> tuple[bytes, bytes, dt.datetime]:
        ca_cert, ca_key, _ = self._authority()
        key = keys.generate(self.plan.pki.key_algorithm)
        cert = new_leaf(_client_request(name, organizations), key.public_key(), ca_cert, ca_key,
                        validity / dt.timedelta(days=1), utc_now(), backdate=dt.timedelta(minutes=1))
        return cert.public_bytes(Encoding.PEM), keys.to_pem(key), cert.not_valid_after_utc

    def grant(self, user: str, role: str, validity: dt.timedelta) -> Grant:
        """Bind the person's group to `role` (replacing an earlier role), then mint their kubeconfig."""
        if role not in ROLES:
            raise AccessError(f"role {role!r} is not one of {', '.join(ROLES)}")
        path, wanted = f"{RBAC}/{group_of(user)}", binding(user, role)
        status, current = self._call("GET", path, None, allow_missing=True)
        if status != 404 and current.get("roleRef") != wanted["roleRef"]:  # roleRef cannot change in place
            self._call("DELETE", path, None, allow_missing=True)
        self._call("PUT", path, wanted)
        cert_pem, key_pem, not_after = self._issue(user, (group_of(user),), validity)
        _, _, ca_pem = self._authority()
        config = documents.kubeconfig(self.plan.cluster, self.server, user, ca_pem, cert_pem, key_pem)
        return Grant(user, role, not_after, self.server, config)

    def revoke(self, user: str) -> bool:
        """Delete the person's binding; True when there was one. Their certificate stays valid, and useless."""
        status, _ = self._call("DELETE", f"{RBAC}/{group_of(user)}", None, allow_missing=True)
        return status != 404

    def first_ready(self, servers: list[str]) -> str | None:
        """The first of `servers` whose API answers /readyz, None when none does."""
        for server in servers:
            try:
                asyncio.run(self._request(server, "GET", "/readyz", None, False))
            except AccessError:
                continue
            return server
        return None

    def _call(self, method: str, path: str, body: Any, allow_missing: bool = False) -> tuple[int, dict[str, Any]]:
        return asyncio.run(self._request(self.server, method, path, body, allow_missing))

    async def _request(self, server: str, method: str, path: str, body: Any, allow_missing: bool
                       ) -> tuple[int, dict[str, Any]]:
        """(status, JSON body or {}) of one API call as the access manager."""
        cert_pem, key_pem, _ = self._issue("kubesmith:access-manager", ("system:masters",), MANAGER_VALIDITY)
        _, _, ca_pem = self._authority()
        return await api_request(Credentials(server, ca_pem, cert_pem, key_pem), method, path, body, self.timeout,
                                 (404,) if allow_missing else ())


def cluster_admins_binding() -> dict[str, Any]:
    """admin.conf's group to cluster-admin: the add-on step's own object (`modules.addons`)."""
    return addons.cluster_admins_binding()


def bind_cluster_admins(kubeconfig: Path, timeout: float = 10.0) -> bool:
    """Create the cluster-admins binding as the kubeconfig's user (super-admin.conf) unless it exists;
    an existing one is left as the operator keeps it. True when it was created."""
    status, _ = asyncio.run(api_request(Credentials.of_kubeconfig(kubeconfig), "POST", RBAC, cluster_admins_binding(),
                                        timeout, accept=(409,)))  # 409: it exists already
    return status != 409


KUBECONFIG_BYTES = 16 << 20  # a kubeconfig of hundreds of clusters is a few hundred KB


class BadKubeconfig(ValueError):
    """The kubeconfig to merge into cannot be read or is no kubeconfig: the message names the file."""


def existing_kubeconfig(path: Path) -> dict[str, Any] | None:
    """The kubeconfig at `path` that `merge_into` adds to (None: missing or empty), read and checked
    before anything is granted: a regular file of bounded size (a FIFO would block the read, /dev/zero
    never end), UTF-8 YAML with aliases and nesting bounded as in a cluster file, a mapping whose
    clusters, users and contexts are lists of mappings. BadKubeconfig says why not."""
    from kubesmith.spec.yamlsource import parse_yaml

    if (problem := fsutil.out_file_problem(path)) is not None:
        raise BadKubeconfig(problem)
    try:
        data = fsutil.read_regular(path, KUBECONFIG_BYTES, "a kubeconfig file")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BadKubeconfig(f"{path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadKubeconfig(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not text.strip():
        return None
    document, problems = parse_yaml(text, str(path))
    if document is None and problems and "the file is empty" in str(problems[0]):
        return None  # comments alone
    errors = [problem for problem in problems if problem.severity == "error"]
    if document is None or errors:
        raise BadKubeconfig(f"{path}: not a kubeconfig to merge into: {(errors or problems)[0]}")
    config = document.data
    if config is None:
        return None
    if not isinstance(config, dict):
        raise BadKubeconfig(f"{path}: a kubeconfig is a mapping (apiVersion, clusters, users, contexts), this "
                            f"file holds a {type(config).__name__}")
    for section in ("clusters", "users", "contexts"):
        entries = config.get(section)
        if entries is not None and not (isinstance(entries, list) and all(isinstance(e, dict) for e in entries)):
            raise BadKubeconfig(f"{path}: {section} is not a list of named entries, as in a kubeconfig")
    return config


def merge_into(path: Path, config: dict[str, Any], existing: dict[str, Any] | None = None) -> None:
    """Add or replace this config's cluster, user and context in the kubeconfig at `path`, and make its
    context current; every other entry is kept as it was, in its place (as `kubectl config` would).
    `existing` is the file's document as `existing_kubeconfig` read it (read here when None)."""
    existing = (existing if existing is not None else existing_kubeconfig(path)) or \
        {"apiVersion": "v1", "kind": "Config", "preferences": {}}
    for section in ("clusters", "users", "contexts"):
        entries = existing.get(section) or []
        for entry in config[section]:
            names = [item.get("name") for item in entries]
            if entry["name"] in names:
                entries[names.index(entry["name"])] = entry
            else:
                entries.append(entry)
        existing[section] = entries
    existing["current-context"] = config["current-context"]
    write_kubeconfig(path, existing)


def write_kubeconfig(path: Path, config: dict[str, Any], as_json: bool = False) -> None:
    """Written whole (0600) or not at all; JSON when asked (`-o json`): kubectl reads either."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    text = json.dumps(config, indent=2) + "\n" if as_json else yaml.safe_dump(config, sort_keys=False)
    fsutil.atomic_write(path, text.encode(), 0o600)


def server_url(address: str, port: int) -> str:
    return f"https://{url_host(address)}:{port}"
