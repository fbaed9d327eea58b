"""Hosts that left the spec: checked, then taken out of the running cluster before apply goes on.

What was applied last is kept in the cluster's state directory (the spec, `applied-spec.json`),
so a host missing from the spec is seen and planned from that spec. A removal that would leave
no control-plane host, or etcd with fewer members than a quorum of those it has, is refused before
anything changes. Otherwise, one host at a time: a node is cordoned and drained through the API
(evictions honour PodDisruptionBudgets), an etcd member is removed from the cluster while it still
runs, then the host is reset (its units, files and data, as `kubesmith reset`) and its Node deleted.

A removed host's keys are remembered (`removed-keys.json`, by public-key hash) and its leaves leave
the PKI state directory: the CA services refuse to renew any certificate of those keys (renewal
keeps the key, so that covers what they renewed online too), and a host added again under the same
name gets new keys, which they renew as any other.
"""

from __future__ import annotations

import json
import shlex
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from kubesmith import fsutil, layout
from kubesmith.backends import etcd_members
from kubesmith.backends.day2 import Day2Error, manifest_of, reset_host
from kubesmith.backends.runtime_bundle import WRAPPER_PATH
from kubesmith.documents import damaged, read_json_file
from kubesmith.pki import keys
from kubesmith.pki.store import store_root
from kubesmith.plan.evaluate import evaluate
from kubesmith.vocabulary.history import History
from kubesmith.vocabulary.membership import Bootstrap
from kubesmith.vocabulary.model import HostPlan, Plan
from kubesmith.spec.model import Cluster
from kubesmith.transport.ssh import SshTransport
from kubesmith.versions.registry import VersionRegistry

APPLIED_SPEC = "applied-spec.json"
REMOVED_KEYS = "removed-keys.json"
DRAIN_TIMEOUT = 120.0
Progress = Callable[[str], None]


class RemovalRefused(Exception):
    """The spec takes away too much at once; nothing was changed."""


class RemovalError(Exception):
    """A removal step failed on a host; the message names the host and the step."""


def load_applied(state_dir: Path) -> Cluster | None:
    path = state_dir / APPLIED_SPEC
    try:
        return Cluster.model_validate(read_json_file(path, "the spec apply last applied"))
    except FileNotFoundError:
        return None
    except ValueError as exc:  # pydantic's ValidationError: hand-edited
        raise damaged(path, "the spec apply last applied", exc) from None


def save_applied(state_dir: Path, cluster: Cluster) -> None:
    data = cluster.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    fsutil.atomic_write(state_dir / APPLIED_SPEC, (json.dumps(data, indent=1) + "\n").encode(), 0o600)


def forget_hosts(state_dir: Path, names: list[str]) -> None:
    """Hosts reset by hand are out of the cluster already: no apply has to remove them any more."""
    applied = load_applied(state_dir)
    if applied is None:
        return
    hosts = [host for host in applied.spec.hosts if host.name not in names]
    if not hosts:
        (state_dir / APPLIED_SPEC).unlink(missing_ok=True)
    elif len(hosts) < len(applied.spec.hosts):
        save_applied(state_dir, applied.model_copy(update={"spec": applied.spec.model_copy(update={"hosts": hosts})}))


def load_removed_keys(state_dir: Path) -> dict[str, str]:
    """`sha256:<hex>` of each removed host's keys -> that host."""
    path = state_dir / REMOVED_KEYS
    try:
        return {str(key): str(host) for key, host in read_json_file(path, "the keys of removed hosts")["keys"].items()}
    except FileNotFoundError:
        return {}
    except (KeyError, TypeError, AttributeError) as exc:
        raise damaged(path, "the keys of removed hosts", exc) from None


def keys_of(state_dir: Path, hosts: list[str]) -> dict[str, str]:
    """The public keys of the hosts' leaves in the PKI state directory, by hash."""
    found: dict[str, str] = {}
    for host in hosts:
        for path in sorted((store_root(state_dir) / "hosts" / host).glob("*.crt")):
            certificate = x509.load_pem_x509_certificate(path.read_bytes())
            found[keys.spki_hash(certificate.public_key())] = host
    return found


def forget_host_keys(state_dir: Path, host: str) -> None:
    """Remember a removed host's keys (first, durably), then take its leaves out of the PKI state."""
    removed = {**load_removed_keys(state_dir), **keys_of(state_dir, [host])}
    document = {"keys": dict(sorted(removed.items()))}
    fsutil.atomic_write(state_dir / REMOVED_KEYS, (json.dumps(document, indent=1) + "\n").encode(), 0o600)
    shutil.rmtree(store_root(state_dir) / "hosts" / host, ignore_errors=True)


def history_of(state_dir: Path, etcd: Mapping[str, Bootstrap], gone: Removal | None = None) -> History:
    """What the plan needs of the state directory; the keys of hosts being removed count as removed."""
    removed = load_removed_keys(state_dir)
    if gone is not None:
        removed.update(keys_of(state_dir, gone.names))
    return History(etcd, removed)


@dataclass(frozen=True, slots=True)
class Removal:
    """The hosts leaving, planned as they were applied."""

    hosts: tuple[HostPlan, ...]

    @property
    def names(self) -> list[str]:
        return [host.name for host in self.hosts]


def removal(previous: Cluster | None, current: Cluster, registry: VersionRegistry,
            record: Mapping[str, Bootstrap]) -> Removal:
    """The hosts the last applied spec had and this one has not (RemovalRefused when too many)."""
    if previous is None:
        return Removal(())
    names = {host.name for host in current.spec.hosts}
    leaving = [host.name for host in previous.spec.hosts if host.name not in names]
    if not leaving:
        return Removal(())
    problems = refusals(previous, current, record)
    if problems:
        raise RemovalRefused("; ".join(problems) + "; nothing was changed")
    plan = evaluate(previous, registry, None, History(record))
    return Removal(tuple(plan.host(name) for name in leaving))


def refusals(previous: Cluster, current: Cluster, record: Mapping[str, Bootstrap]) -> list[str]:
    """Why removing the hosts the current spec lacks is refused (empty: it is not)."""
    names = {host.name for host in current.spec.hosts}
    problems = []
    control_planes = [host.name for host in previous.control_plane_hosts]
    if control_planes and not any(name in names for name in control_planes):
        problems.append(f"removing {', '.join(control_planes)} would leave no control-plane host of the running "
                        "cluster: keep one, or add the new ones in an apply before removing the old")
    members = list(record) or [host.name for host in previous.etcd_hosts]
    staying = [host.name for host in current.etcd_hosts if host.name in members]
    leaving = [name for name in members if name not in staying]
    joining = [host.name for host in current.etcd_hosts if host.name not in members]
    quorum = len(members) // 2 + 1
    if leaving and len(staying) < quorum:
        problems.append(f"removing {', '.join(leaving)} would leave {len(staying)} of etcd's {len(members)} members, "
                        f"fewer than its quorum ({quorum}): etcd could not commit the change if a member failed; "
                        "remove one member at a time, and grow a two-member cluster before shrinking it")
    elif leaving and joining:
        problems.append(f"etcd members join ({', '.join(joining)}) and leave ({', '.join(leaving)}) in one spec: "
                        "change etcd's membership one way per apply")
    return problems


async def remove_hosts(transport: SshTransport, plan: Plan, gone: Removal, state_dir: Path,
                       progress: Progress) -> None:
    """Take each leaving host out, one at a time, through the hosts that stay (`plan`)."""
    control_plane = next((host for host in plan.hosts if "control-plane" in host.roles), None)
    members = etcd_members.members_of(plan)
    for host in gone.hosts:
        manifest = await _step(host, "reading its manifest", manifest_of(transport, host, plan.cluster))
        if "node" in host.roles and control_plane is not None:
            progress(f"{host.name}: draining the node (through {control_plane.name})")
            await on_control_plane(transport, control_plane, f"draining {host.name}",
                      f"node drain {shlex.quote(host.name)} --timeout {DRAIN_TIMEOUT:.0f}")
        if any(service.name == "etcd" for service in host.services) and members:
            progress(f"{host.name}: removing its etcd member (through {members[0].name})")
            await _step(host, "removing its etcd member", etcd_members.remove(transport, members[0], host))
            etcd_members.forget(state_dir, [host.name])
        await _step(host, "resetting it", reset_host(transport, host, manifest, progress))
        forget_host_keys(state_dir, host.name)
        if "node" in host.roles and control_plane is not None:
            await on_control_plane(transport, control_plane, f"deleting the Node {host.name}",
                      f"node delete {shlex.quote(host.name)}")
        progress(f"{host.name}: removed from the cluster")


async def _step(host: HostPlan, step: str, work):  # type: ignore[no-untyped-def]
    try:
        return await work
    except (Day2Error, etcd_members.MembershipError) as exc:
        raise RemovalError(f"{host.name}: {step} failed: {exc}") from None


async def on_control_plane(transport: SshTransport, via: HostPlan, step: str, arguments: str) -> None:
    """A `kubesmith node ...` step on a control-plane host that stays, with its super-admin.conf, asking
    its own API server (the endpoint may be a virtual IP the leaving host holds)."""
    kubeconfig = layout.kubeconfig_path("super-admin")
    port = via.service("kube-apiserver").flags["secure-port"]
    result = await transport.run(via.address, f"{WRAPPER_PATH} {arguments} --kubeconfig {kubeconfig} "
                                              f"--server https://127.0.0.1:{port}", timeout=DRAIN_TIMEOUT + 60)
    if not result.ok:
        raise RemovalError(f"{via.name}: {step} failed ({result.exit_status}): "
                           f"{(result.stderr or result.stdout).strip()[-400:]}")
