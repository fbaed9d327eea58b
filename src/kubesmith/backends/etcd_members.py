"""etcd membership over SSH: the record of how members first started, and a member joining.

A member added to a running cluster joins it the way etcd's runtime-reconfiguration guide
recommends: `member add --learner` through a running member (a learner does not vote, so the
quorum is untouched while it catches up), then its first start with `initial-cluster-state:
existing`, then `member promote` once it is in sync with the leader. Each step looks at the
member list first, so an apply interrupted anywhere in it simply does the rest next time.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tenacity import AsyncRetrying, retry_if_exception, retry_if_exception_type, stop_after_delay, wait_fixed

from kubesmith import fsutil
from kubesmith.backends.systemd import UnitOptions
from kubesmith.documents import damaged, read_json_file
from kubesmith.modules.etcd import local_etcdctl
from kubesmith.vocabulary.membership import Bootstrap
from kubesmith.vocabulary.model import HostPlan, Plan
from kubesmith.spec.model import Cluster
from kubesmith.transport.ssh import SshTransport

RECORD_FILE = "etcd-members.json"  # in the cluster's state directory, beside the PKI
Progress = Callable[[str], None]


class MembershipError(Exception):
    """A membership step failed on a host; the message names the host, the step and etcd's words."""


def load_record(state_dir: Path) -> dict[str, Bootstrap]:
    """How the cluster's members first started; empty for a cluster not applied yet."""
    path = state_dir / RECORD_FILE
    try:
        data = read_json_file(path, "kubesmith's record of the etcd members")
        return {str(name): Bootstrap(entry["state"], entry["initialCluster"])
                for name, entry in data["members"].items()}
    except FileNotFoundError:
        return {}
    except (KeyError, TypeError, AttributeError) as exc:
        raise damaged(path, "kubesmith's record of the etcd members", exc) from None


def save_record(state_dir: Path, record: Mapping[str, Bootstrap]) -> None:
    data = {"members": {name: bootstrap.as_dict() for name, bootstrap in record.items()}}
    fsutil.atomic_write(state_dir / RECORD_FILE, (json.dumps(data, indent=1) + "\n").encode(), 0o600)


def forget(state_dir: Path, names: list[str]) -> None:
    """Hosts reset or removed are no members any more: the next apply joins (or founds) them anew."""
    record = load_record(state_dir)
    if any(name in record for name in names):
        save_record(state_dir, {name: entry for name, entry in record.items() if name not in names})


def members_of(plan: Plan) -> list[HostPlan]:
    return [host for host in plan.hosts if any(s.name == "etcd" for s in host.services)]


def bootstrap_of(host: HostPlan) -> Bootstrap:
    flags = host.service("etcd").flags
    return Bootstrap(flags["initial-cluster-state"], flags["initial-cluster"])  # type: ignore[arg-type]


def etcdctl(host: HostPlan, bin_dir: str = UnitOptions().bin_dir) -> str:
    """etcdctl on the member itself, against its loopback listener, with its health-check client."""
    port = int(host.service("etcd").flags["advertise-client-urls"].rsplit(":", 1)[1])
    return shlex.join([*local_etcdctl(bin_dir, port), "--command-timeout=60s"])


async def _etcdctl(transport: SshTransport, via: HostPlan, step: str, arguments: str) -> str:
    result = await transport.run(via.address, f"{etcdctl(via)} {arguments}", timeout=120)
    if not result.ok:
        raise MembershipError(f"{via.name}: {step} failed ({result.exit_status}): "
                              f"{(result.stderr or result.stdout).strip()[-400:]}")
    return result.stdout


async def member_list(transport: SshTransport, via: HostPlan) -> list[dict[str, Any]]:
    out = await _etcdctl(transport, via, "etcdctl member list", "member list -w json")
    return list(json.loads(out).get("members", []))


async def all_healthy(transport: SshTransport, via: HostPlan, deadline: float = 120.0) -> int:
    """Every member of the cluster answers healthy, asked from `via` (a roll-out restarts the next
    member only then: one down at a time never costs the quorum); the number of members."""
    found: list[dict[str, Any]] = []
    async for attempt in AsyncRetrying(stop=stop_after_delay(deadline), wait=wait_fixed(2), reraise=True,
                                       retry=retry_if_exception_type(MembershipError)):
        with attempt:
            result = await transport.run(via.address, f"{etcdctl(via)} endpoint health --cluster -w json",
                                         timeout=120)
            try:
                found = json.loads(result.stdout or "[]")
            except ValueError:
                found = []
            sick = [entry.get("endpoint", "?") for entry in found if not entry.get("health")]
            if not result.ok or not found or sick:
                raise MembershipError(f"{via.name}: etcd members not healthy: {', '.join(sick) or 'no answer'} "
                                      f"({(result.stderr or '').strip()[-300:]})")
    return len(found)


def _find(members: list[dict[str, Any]], peer_url: str) -> dict[str, Any] | None:
    return next((m for m in members if peer_url in m.get("peerURLs", [])), None)


# etcd refuses a membership change for a while after the last one (strict reconfiguration check:
# the member asked must have been connected to every voting member for five seconds) and a
# promotion until the learner is in sync: both are asked again, until the deadline.
NOT_YET = ("unhealthy cluster", "not enough started members", "in sync with leader", "too many learner members")
CHANGE_DEADLINE = 120.0


async def _change(transport: SshTransport, via: HostPlan, step: str, arguments: str,
                  deadline: float = CHANGE_DEADLINE) -> None:
    async for attempt in AsyncRetrying(stop=stop_after_delay(deadline), wait=wait_fixed(1), reraise=True,
                                       retry=retry_if_exception(lambda exc: any(m in str(exc) for m in NOT_YET))):
        with attempt:
            await _etcdctl(transport, via, step, arguments)


async def has_data(transport: SshTransport, address: str, data_dir: str) -> bool:
    """Whether a member's data directory holds a member (etcd writes `member/` on its first start)."""
    return (await transport.run(address, f"test -d {shlex.quote(data_dir.rstrip('/') + '/member')}")).ok


async def wiped(transport: SshTransport, cluster: Cluster, record: Mapping[str, Bootstrap]) -> list[str]:
    """Recorded members of the spec whose data is gone (a disk replaced or wiped) while others keep
    theirs: each leaves etcd and joins again as a new member (its old identity is not safe to reuse)."""
    data_dir = cluster.spec.components.etcd.data_dir
    members = [host for host in cluster.etcd_hosts if host.name in record]
    present = await asyncio.gather(*(has_data(transport, host.address, data_dir) for host in members))
    if not any(present):
        return []  # no member has data: not for a membership change to decide
    return [host.name for host, here in zip(members, present) if not here]


async def join(transport: SshTransport, via: HostPlan, joiner: HostPlan, start: Callable[[], Any],
               progress: Progress) -> None:
    """Add `joiner` as a learner through `via`, start it (`start`), promote it once in sync."""
    peer_url = joiner.service("etcd").flags["initial-advertise-peer-urls"]
    found = _find(await member_list(transport, via), peer_url)
    if found is not None and found.get("name") and not await has_data(transport, joiner.address,
                                                                       joiner.service("etcd").flags["data-dir"]):
        progress(f"{joiner.name}: its old member (started once, its data now gone) leaves etcd first")
        await _remove_member(transport, via, joiner.name, found)
        found = None
    if found is None:
        progress(f"{joiner.name}: adding it to etcd as a learner (through {via.name})")
        await _change(transport, via, f"etcdctl member add {joiner.name}",
                      f"member add {shlex.quote(joiner.name)} --peer-urls={shlex.quote(peer_url)} --learner")
    progress(f"{joiner.name}: starting etcd; it catches up as a learner")
    await start()
    member = _find(await member_list(transport, via), peer_url)
    if member is None:
        raise MembershipError(f"{joiner.name}: is no longer in etcd's member list after its start")
    if member.get("isLearner"):
        progress(f"{joiner.name}: promoting it to a voting member once it is in sync")
        await _change(transport, via, f"etcdctl member promote ({joiner.name})", f"member promote {member['ID']:x}")


async def remove(transport: SshTransport, via: HostPlan, leaving: HostPlan) -> None:
    """`member remove` through `via`, while the leaving member still runs (etcd's guide); done if gone."""
    peer_url = leaving.service("etcd").flags["initial-advertise-peer-urls"]
    member = _find(await member_list(transport, via), peer_url)
    if member is not None:
        await _remove_member(transport, via, leaving.name, member)


async def _remove_member(transport: SshTransport, via: HostPlan, name: str, member: dict[str, Any]) -> None:
    await _change(transport, via, f"etcdctl member remove {name}", f"member remove {member['ID']:x}")


class Membership:
    """One apply's view of etcd membership: which members join a running cluster, and the record
    (saved as soon as members run, so an interrupted apply knows who is in)."""

    def __init__(self, state_dir: Path, record: Mapping[str, Bootstrap], plan: Plan) -> None:
        self.state_dir = state_dir
        self.record = dict(record)
        self.members = members_of(plan)

    def joins(self, host: HostPlan) -> bool:
        """A member the cluster does not have yet, joining a running one."""
        return host.name not in self.record and bootstrap_of(host).state == "existing"

    def via(self) -> HostPlan:
        """A running member to change the membership through (the first recorded one in the spec)."""
        return next(host for host in self.members if host.name in self.record)

    def keep(self, hosts: list[HostPlan]) -> None:
        if any(self.record.get(host.name) != bootstrap_of(host) for host in hosts):
            self.record.update({host.name: bootstrap_of(host) for host in hosts})
            save_record(self.state_dir, self.record)
