"""`kubesmith join`: a new node obtains its certificates with a join token and lays down its part.

Order, and why:
1. Pin the CA: fetch `/api/v1/cfssl/info`, accept the CA certificate only if its public-key hash
   equals `--ca-hash` (`ca_client.pinned_ca`). No trust on first use: without the hash nothing
   else happens, and every later request verifies the server against the pinned CA.
2. Generate every private key here; only CSRs travel. Keys never leave the node. A key an earlier
   join left at its path is reused, never replaced: a re-run obtains new certificates for the
   same keys, so no certificate on disk ever meets a key it was not made for.
3. Ask the CA service to check every request against the token's scope (authcheck), then obtain
   each certificate via cfssl authsign with the token's HMAC key; verify each answer. A request
   the token does not cover is refused before any certificate is signed.
4. Write atomically under `--root` (default `/`): all new keys first (0600), then certificates, the
   CA certificate, kubeconfigs and the other files of the node's plan. A crash leaves either
   nothing or keys without certificates, which a re-run then uses.
5. With the cluster file (`join FILE`): the node's units through the systemd backend, then wait for
   `node-online.target`. Waiting is skipped with `--no-wait`, when `--root` is not `/`, or when
   systemd is not running (`/run/systemd/system` missing: containers, CI); the result says so.

Which certificates: with the cluster file, those of the node's host plan (it must be a node-only host:
control-plane and etcd hosts need CA material a join token must never reach; use `apply`).
Without it, the node's standard set (`certlist.NODE_SCOPED`) at the standard paths, and no
units.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from kubesmith import fsutil, layout
from kubesmith.backends import systemd
from kubesmith.backends.render import own_bytes, target_path
from kubesmith.ca import client as ca_client
from kubesmith.ca.tokens import auth_key, parse_token
from kubesmith.formats import yaml_bytes
from kubesmith.images import ImageError, image_cache_dir, pause_archive
from kubesmith.pki import documents, keys
from kubesmith.pki.certlist import NODE_SCOPED, Sans, authority, certificate
from kubesmith.vocabulary.model import CertificateRequest, File, HostPlan


class JoinError(Exception):
    """The join cannot go on; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class JoinOptions:
    server: str
    token: str
    ca_hash: str
    node: str
    addresses: tuple[str, ...] = ()
    root: Path = Path("/")
    host_plan: HostPlan | None = None
    cluster: str = "kubernetes"
    key_algorithm: str = "ecdsa-p256"
    wait: bool = True
    deadline: float = 600.0


@dataclass(frozen=True, slots=True)
class JoinResult:
    node: str
    certificates: tuple[str, ...]
    files_written: int
    units_written: int
    waited: bool
    note: str


def standard_requests(node: str, addresses: tuple[str, ...]) -> tuple[CertificateRequest, ...]:
    """The node's certificates when no cluster file is given: certlist entries of the node scope."""
    requests = []
    for name in NODE_SCOPED:
        spec = certificate(name)
        # the node SAN policy (Sans.NODE): the node's name and its addresses
        dns, ips = ((node,), tuple(addresses)) if spec.sans is Sans.NODE else ((), ())
        requests.append(CertificateRequest(name, spec.ca, spec.common_name.format(host=node), spec.organizations,
                                           spec.usages, dns, tuple(dict.fromkeys(ips)),
                                           layout.pki_path(f"{spec.file}.crt"), layout.pki_path(f"{spec.file}.key"),
                                           spec.owner, spec.owner))
    return tuple(requests)


def node_requests(options: JoinOptions) -> tuple[CertificateRequest, ...]:
    if options.host_plan is None:
        return standard_requests(options.node, options.addresses)
    plan = options.host_plan
    if set(plan.roles) != {"node"}:
        raise JoinError(f"host {plan.name} has roles {', '.join(plan.roles)}: join is for node-only hosts "
                        "(control-plane and etcd hosts get CA material; use `kubesmith apply`)")
    outside = sorted(r.name for r in plan.certificates if r.name not in NODE_SCOPED)
    if outside:
        raise JoinError(f"host {plan.name} needs certificates a join token cannot obtain: {', '.join(outside)}")
    return plan.certificates


def kept_keys(options: JoinOptions, requests: tuple[CertificateRequest, ...]) -> dict[str, keys.PrivateKey]:
    """The keys an earlier join (or an operator) left at the requests' paths, by request name."""
    kept = {}
    for request in requests:
        path = _under(options.root, request.key_path)
        if path.is_file():
            kept[request.name] = keys.load(path.read_bytes(), str(path))
    return kept


async def obtain(options: JoinOptions, requests: tuple[CertificateRequest, ...], kept: dict[str, keys.PrivateKey]
                 ) -> tuple[bytes, dict[str, tuple[bytes, bytes]]]:
    """(CA PEM, {request name: (key PEM, certificate PEM)}); keys are `kept` or generated here."""
    key = auth_key(options.token)
    issued: dict[str, tuple[bytes, bytes]] = {}
    async with aiohttp.ClientSession(trust_env=False) as session:
        ca_pem = await ca_client.pinned_ca(session, options.server, options.ca_hash)
        prepared = []
        for request in requests:
            private = kept.get(request.name) or keys.generate(options.key_algorithm)
            subject = ca_client.Subject(request.common_name, request.organizations, request.dns_names,
                                        request.ip_addresses)
            prepared.append((request.name, private, subject, ca_client.sign_request_for(private, subject, request.name)))
        # every request checked before the first is signed: one outside the token's scope wastes no issuance
        await ca_client.authcheck(session, options.server, key, [body for *_, body in prepared], ca_pem)
        for name, private, subject, body in prepared:
            cert = await ca_client.authsign_request(session, options.server, key, body, private, subject, ca_pem)
            issued[name] = (keys.to_pem(private), cert)
    return ca_pem, issued


ARCHIVES_OF_THE_OPERATOR = ("image-archive", "coredns-image")  # built or read where apply runs, not on a node


def own_files(options: JoinOptions) -> tuple[dict[str, bytes], tuple[str, ...]]:
    """The plan's files that need no certificate (documents, the sandbox image), made before any is
    asked for, so that a node that cannot make one wastes no issuance; and the image archives of the
    operator's machine, which a node cannot have (they come with `kubesmith images import`)."""
    made: dict[str, bytes] = {}
    skipped: list[str] = []
    for file in options.host_plan.files if options.host_plan is not None else ():
        if file.source is None:
            made[file.path] = own_bytes(file, options.node)
        elif file.source.kind == "sandbox-image":
            try:
                made[file.path] = pause_archive(image_cache_dir())
            except ImageError as exc:
                raise JoinError(f"{file.path}: {exc}") from None
        elif file.source.kind in ARCHIVES_OF_THE_OPERATOR:
            skipped.append(file.source.name)
    return made, tuple(skipped)


def files_to_write(options: JoinOptions, requests: tuple[CertificateRequest, ...], ca_pem: bytes,
                   issued: dict[str, tuple[bytes, bytes]], kept: frozenset[str], made: dict[str, bytes]
                   ) -> list[fsutil.Pending]:
    """New keys first (`kept` ones stay as they are), then certificates, the CA certificate and
    (with a plan) every other file (`made`: those `own_files` made already)."""
    root = options.root
    pending = [fsutil.Pending(_under(root, r.key_path), issued[r.name][0], 0o600) for r in requests
               if r.name not in kept]
    pending += [fsutil.Pending(_under(root, r.cert_path), issued[r.name][1], 0o644) for r in requests]
    ca_path = layout.pki_path(authority("kubernetes-ca").cert_file)
    pending.append(fsutil.Pending(_under(root, ca_path), ca_pem, 0o644))
    written = {ca_path} | {r.key_path for r in requests} | {r.cert_path for r in requests}
    if options.host_plan is not None:
        for file in options.host_plan.files:
            if file.path in made:
                pending.append(fsutil.Pending(_under(root, file.path), made[file.path], file.mode))
            elif file.path not in written and not (file.source and file.source.kind in ARCHIVES_OF_THE_OPERATOR):
                pending.append(fsutil.Pending(_under(root, file.path), _content(options, file, ca_pem, issued),
                                              file.mode))
    return pending


def _content(options: JoinOptions, file: File, ca_pem: bytes, issued: dict[str, tuple[bytes, bytes]]) -> bytes:
    source = file.source
    assert source is not None  # the plan's own files are made by own_files
    settings = dict(source.options)
    if source.kind == "ca-certificate" and source.name == "kubernetes-ca":
        return ca_pem
    if source.kind == "kubeconfig" and settings.get("certificate") in issued:
        key_pem, cert_pem = issued[settings["certificate"]]
        user = options.host_plan.certificate(settings["certificate"]).common_name  # type: ignore[union-attr]
        return yaml_bytes(documents.kubeconfig(settings.get("cluster", options.cluster), settings["server"], user,
                                               ca_pem, cert_pem, key_pem))
    raise JoinError(f"{file.path}: a joining node cannot produce {source.kind} {source.name!r}")


def _under(root: Path, path: str) -> Path:
    return target_path(root, path)


def check_inside_root(root: Path, paths: list[Path]) -> None:
    """Under a --root other than /, no symbolic link may lead a read or a write out of the root:
    an image's absolute link (`etc/kubernetes -> /etc/kubernetes`, or a key file linked to this
    machine's key) would otherwise reach this machine's files."""
    if root == Path("/"):
        return
    real_root = _resolved(root)
    for path in sorted(set(paths)):
        reached = _resolved(path)  # the file too, if it exists (a link to a key); else its directory
        if not reached.is_relative_to(real_root):
            raise JoinError(f"{path} leads out of --root {root} (through a symbolic link, to {reached}); "
                            "nothing written: make the link relative or drop it")


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:  # a link loop (RuntimeError before Python 3.13)
        raise JoinError(f"{path}: {exc}; nothing written") from None


def systemd_running(root: Path) -> bool:
    return root == Path("/") and Path("/run/systemd/system").is_dir() and shutil.which("systemctl") is not None


def start_and_wait(plan: HostPlan, deadline: float) -> bool:
    """Enable the node's units, start kubernetes.target, wait for node-online.target."""
    units = [f"{s.name}.service" for s in plan.services] + [f"{t.name}.target" for t in plan.targets]
    for command in (["systemd-sysusers"], ["systemd-tmpfiles", "--create"], ["systemctl", "daemon-reload"],
                    ["systemctl", "enable", *units], ["systemctl", "start", "--no-block", "kubernetes.target"]):
        completed = _run(command, 120)
        if completed.returncode != 0:
            raise JoinError(f"{' '.join(command)}: {completed.stderr.strip() or completed.returncode}")
    stop = time.monotonic() + deadline
    while time.monotonic() < stop:
        if _run(["systemctl", "is-active", "node-online.target"], 10).stdout.strip() == "active":
            return True
        time.sleep(2)
    raise JoinError(f"node-online.target not active after {deadline:g}s; see `systemctl list-jobs` and "
                    "`journalctl -u kubelet -u kube-proxy`")


def _run(command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise JoinError(f"{' '.join(command)}: no answer in {timeout:g}s; is systemd busy? "
                        "see `systemctl list-jobs`") from None


def join(options: JoinOptions) -> JoinResult:
    parse_token(options.token)
    ca_client.parse_pin(options.ca_hash)
    requests = node_requests(options)
    check_inside_root(options.root, [_under(options.root, r.key_path) for r in requests])  # before reading keys
    kept = kept_keys(options, requests)
    made, skipped = own_files(options)
    ca_pem, issued = asyncio.run(obtain(options, requests, kept))
    pending = files_to_write(options, requests, ca_pem, issued, frozenset(kept), made)
    unit_files = systemd.unit_files(options.host_plan) if options.host_plan is not None else {}
    check_inside_root(options.root, [item.path for item in pending] + [options.root / name for name in unit_files])
    fsutil.write_many(pending)
    units = systemd.write_units(options.root, unit_files) if unit_files else 0
    waited, note = False, ""
    if options.host_plan is None:
        note = "no cluster file given: certificates written, units not laid down"
    elif not options.wait:
        note = "not waiting (--no-wait)"
    elif not systemd_running(options.root):
        note = "not waiting: systemd is not running here (or --root is not /); start kubernetes.target yourself"
    else:
        waited = start_and_wait(options.host_plan, options.deadline)
    if skipped:
        note = "; ".join(filter(None, (note, f"image archives of the spec not laid down here ({', '.join(skipped)}): "
                                              "import them with `kubesmith images import`")))
    return JoinResult(options.node, tuple(r.name for r in requests), len(pending), units, waited, note)
