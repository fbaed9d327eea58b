"""Secrets reach unprivileged components as credentials, so every key on disk stays root:root 0600.

kubesmith runs etcd, the API server, the controller-manager and the scheduler as their own users,
and the CIS benchmark (1.1.14-1.1.19) wants their keys and kubeconfigs owned by root. systemd's
`LoadCredential=` gives both: at each start it copies a root-only file into
`/run/credentials/<unit>/`, readable by the service's user alone, and the component is pointed
there. `kubesmith run` makes the same copies under its root.

Modules say who reads a secret by owning it (`File.owner` = the component's user, mode 0600); this
pass, run once per host after the modules, turns that into root-owned files plus credentials, and
rewrites the argv and the component's configuration documents to the credential paths.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any

from kubesmith import layout
from kubesmith.formats import argument_value, map_argument, map_strings, strings_in
from kubesmith.vocabulary.model import File, Service

ROOT = "root"


def is_handed_over(file: File) -> bool:
    """A secret (no access beyond its owner) that a component user owns."""
    return file.owner != ROOT and file.mode & 0o077 == 0


def credential_name(path: str) -> str:
    """A unique file name for `path` in the unit's credential directory: pki/etcd/server.key -> pki_etcd_server.key."""
    return path.removeprefix(layout.ETC + "/").lstrip("/").replace("/", "_")


def hand_over(services: Iterable[Service], files: Iterable[File],
              memo: dict[Any, Any] | None = None) -> tuple[list[Service], list[File]]:
    """Services reading their secrets as credentials; every secret a component user owned, owned by root.
    `memo` (the evaluation's) keeps the strings of documents hosts share: walking the same kubelet
    configuration once per host was a third of planning 10,000 hosts."""
    files = list(files)
    memo = {} if memo is None else memo
    secrets = {file.path: file for file in files if is_handed_over(file)}
    rewritten: dict[str, File] = {}
    services_out = []
    for service in services:
        documents = [file for file in files if file.path in service.needs_files and file.data is not None]
        named = {path for argument in service.argv for path in argument_value(argument).split(",")}
        for file in documents:
            named |= _strings_of(file.data, memo)
        own = {path: layout.credential_path(service.name, credential_name(path))
               for path, file in secrets.items() if file.owner == service.user and path in named}
        if not own:
            services_out.append(service)
            continue
        moved = partial(_moved, own)
        services_out.append(replace(service, argv=tuple(
            map_argument(argument, lambda value: ",".join(map(moved, value.split(",")))) for argument in service.argv),
            credentials=tuple((credential_name(path), path) for path in sorted(own))))
        for file in documents:  # its configuration documents point at the credentials too
            if file.path not in secrets:
                current = rewritten.get(file.path, file)
                rewritten[file.path] = replace(current, data=map_strings(current.data, moved))
    files_out = [replace(file, owner=ROOT, group=ROOT) if file.path in secrets else rewritten.get(file.path, file)
                 for file in files]
    return services_out, files_out


STRINGS_KEPT = 1024  # documents whose strings are kept; those hosts share recur on every host


def _strings_of(document: Any, memo: dict[Any, Any]) -> frozenset[str]:
    kept: dict[int, tuple[Any, frozenset[str]]] = memo.setdefault("strings-in", {})
    cached = kept.get(id(document))
    if cached is None or cached[0] is not document:  # the document itself is kept: its id stays its own
        if len(kept) >= STRINGS_KEPT:  # most are one host's own (its agent settings): planned hosts let go
            kept.clear()
        cached = kept[id(document)] = (document, frozenset(strings_in(document)))
    return cached[1]


def _moved(own: Mapping[str, str], text: str) -> str:
    return own.get(text, text)


def disk_path(path: str, service: Service) -> str:
    """The file on disk behind a path the service's argv names (its credential's source, or itself)."""
    by_credential = {layout.credential_path(service.name, name): source for name, source in service.credentials}
    return by_credential.get(path, path)
