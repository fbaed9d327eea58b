"""Upgrades: what each host runs now (asked from the host), the skew verdict, and the gate before a change.

An upgrade is an apply whose spec names another `kubernetesVersion`. What runs is asked of the hosts,
not of local state (which may be another machine's, or older than a halted apply): one command per
host asks each component's running process (`/proc/PID/exe --version`, so a binary replaced on disk
but not restarted yet still counts as the old release), or, when the service is stopped, the binary its
unit names (in its release's directory, `layout.release_dir`). The verdict (`kubesmith.skew`) and, for a change of release, the cluster's health are checked
before anything changes; a refusal is `UpgradeRefused` (exit 6, nothing changed).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kubesmith import layout
from kubesmith.backends import etcd_members, removal, rollout
from kubesmith.backends.phases import StepError
from kubesmith.health.status import ClusterStatus
from kubesmith.vocabulary.model import HostPlan, Plan
from kubesmith.skew import Verdict, judge, running_from
from kubesmith.transport.ssh import SshTransport, TransportError
from kubesmith.versions.registry import VersionRegistry

ASKED = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "etcd")
_ANSWER = re.compile(r"^(\S+) (running|stopped) (.*)$")
_KUBERNETES = re.compile(r"Kubernetes v(\d+\.\d+\.\d+\S*)")
_ETCD = re.compile(r"etcd Version: (\d+\.\d+\.\d+\S*)")
VERSIONS_COMMAND = (  # each component at once; a line is one short write, so answers do not interleave
    "for c in " + " ".join(ASKED) + "; do ( "
    "pid=$(systemctl show -p MainPID --value \"$c.service\" 2>/dev/null); "
    "if [ -n \"$pid\" ] && [ \"$pid\" != 0 ]; then exe=/proc/$pid/exe; state=running; "
    f"elif exe=$(sed -n 's/^ExecStart=\\([^ ]*\\).*/\\1/p' {layout.UNIT_DIR}/$c.service 2>/dev/null) "
    "&& [ -x \"$exe\" ]; then state=stopped; "  # the binary its unit names (the release's directory)
    f"elif [ -x {layout.BIN}/$c ]; then exe={layout.BIN}/$c; state=stopped; else exit 0; fi; "
    # A Go binary's --version costs 0.1-0.2 CPU-s (kube-apiserver's init), asked at every apply: the
    # answer is kept by the binary's device, inode, size, mtime and ctime, on a tmpfs that a reboot
    # clears. Only an answer that names a release is kept; one that cannot be kept is asked each time.
    "key=$(stat -L -c '%d.%i.%s.%Y.%Z' \"$exe\" 2>/dev/null) || key=; "
    f"kept={layout.VERSIONS_CACHE}/$c.$key; "
    "if [ -n \"$key\" ] && [ -f \"$kept\" ]; then said=$(cat \"$kept\"); "
    "else said=$(\"$exe\" --version 2>&1 | tr '\\n' ' ' | cut -c1-200); "
    "case \"$said\" in *'Kubernetes v'*|*'etcd Version: '*) [ -n \"$key\" ] "
    f"&& mkdir -p {layout.VERSIONS_CACHE} 2>/dev/null && printf '%s\\n' \"$said\" > \"$kept.$$\" 2>/dev/null "
    "&& mv -f \"$kept.$$\" \"$kept\" 2>/dev/null; rm -f \"$kept.$$\" 2>/dev/null;; esac; fi; "
    "echo \"$c $state $said\" ) & done; wait")


SNAPSHOT_DIRECTORY = "/var/backups/kubesmith/etcd"  # spec.components.etcd.snapshots.directory's default
DRAIN_TIMEOUT = 120.0
Progress = Callable[[str], None]


class UpgradeError(StepError):
    """A step of an upgrade failed (the snapshot before it, a drain): the message names host and cause."""


class UpgradeRefused(Exception):
    """The change of release breaks the skew policy or the cluster is not healthy; nothing was changed."""

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__("; ".join(lines))
        self.lines = tuple(lines)


@dataclass(frozen=True, slots=True)
class Installed:
    """One component's release on a host: what its process (or, stopped, its binary) reports."""

    release: str | None  # None: the binary named no release
    running: bool


def parse_versions(text: str) -> dict[str, Installed]:
    """The answer of VERSIONS_COMMAND by component (a component the host lacks is absent)."""
    found: dict[str, Installed] = {}
    for line in text.splitlines():
        match = _ANSWER.match(line.strip())
        if not match or match.group(1) not in ASKED:
            continue
        component, state, said = match.groups()
        release = (_ETCD if component == "etcd" else _KUBERNETES).search(said)
        found[component] = Installed(release.group(1) if release else None, state == "running")
    return found


async def host_versions(transport: SshTransport, addresses: Mapping[str, str],
                        required: Iterable[str] | None = None) -> dict[str, dict[str, Installed]]:
    """Every host's components and their releases, asked of all hosts at once (one command each).
    A host outside `required` (None: all) that cannot be reached counts as running nothing: an apply
    to other hosts (`--hosts`) does not wait for it."""
    needed = frozenset(addresses if required is None else required)

    async def ask(name: str) -> tuple[str, dict[str, Installed]]:
        try:
            result = await transport.run(addresses[name], VERSIONS_COMMAND, timeout=60)
        except TransportError:
            if name in needed:
                raise
            return name, {}
        return name, parse_versions(result.stdout)

    return dict(await asyncio.gather(*(ask(name) for name in addresses)))


def verdict_of(versions: Mapping[str, Mapping[str, Installed]], target: str, changing: Iterable[str]) -> Verdict:
    releases = {host: {component: found.release for component, found in components.items()}
                for host, components in versions.items()}
    return judge(running_from(releases), target, changing)


def unhealthy(status: ClusterStatus) -> list[str]:
    """What keeps a cluster from being upgraded: a component not ready, etcd without a leader or in
    error, a Node not Ready, a configuration still on trial (its verdict is the next change's base)."""
    found: list[str] = []
    for host in status.hosts:
        if host.problem:
            found.append(f"{host.host}: not reached ({host.problem})")
            continue
        found += [f"{host.host}: {c.service} is not ready ({c.reason})" for c in host.components if not c.ready]
        if host.etcd_error:
            found.append(f"{host.host}: etcd: {host.etcd_error}")
        if host.node is not None and not host.node.ready:
            found.append(f"{host.host}: its Node is not Ready ({host.node.reason})")
        configs = host.agent.configs if host.agent else ()
        found += [f"{host.host}: {c.component}'s configuration is still on trial" for c in configs
                  if c.phase in ("trial", "rolling-back")]
    return found


def refusal_lines(verdict: Verdict, sick: Sequence[str]) -> list[str]:
    """Every reason not to start, each with what to do; empty when the change may start."""
    lines = list(verdict.refusals)
    if sick:
        lines += [f"{line}: the cluster must be healthy before its release changes; fix it (`kubesmith status`) "
                  "and apply again" for line in sick]
    return lines


def host_order(plan: Plan, max_unavailable: int) -> list[list[str]]:
    """The order an upgrade takes the hosts in: the roll-out's waves (control plane one at a time first)."""
    return [[host.name for host in wave] for wave in rollout.waves(list(plan.hosts), max_unavailable)]


@dataclass(frozen=True, slots=True)
class FlagDifference:
    binary: str
    flag: str
    change: str  # "removed", "added"
    note: str | None = None


def registry_differences(registry: VersionRegistry, old_minor: str, new_minor: str) -> list[FlagDifference]:
    """Flags that disappear or appear between two releases, per Kubernetes binary (from the registry);
    a removed flag's message says what replaces it."""
    if not (registry.supports(old_minor) and registry.supports(new_minor)) or old_minor == new_minor:
        return []
    found: list[FlagDifference] = []
    for binary in registry.binaries:
        if binary == "etcd":  # versioned on its own
            continue
        before, after = registry.flags(binary, old_minor), registry.flags(binary, new_minor)
        found += [FlagDifference(binary, flag, "removed", registry.check_flag(binary, flag, new_minor))
                  for flag in sorted(before - after)]
        found += [FlagDifference(binary, flag, "added") for flag in sorted(after - before)]
    return found


def config_api_differences(registry: VersionRegistry, old_minor: str, new_minor: str) -> list[str]:
    """Configuration documents whose API version changes between the two releases."""
    return [f"{kind}: {before} -> {after}" for kind, before, after in registry.config_api_changes(old_minor, new_minor)]


def snapshot_name(now: dt.datetime, old: str, new: str) -> str:
    """Named for the two releases, with the periodic snapshots' prefix and suffix: the agent keeps and
    prunes it with them (`agent.snapshots`), and `kubesmith etcd restore` takes it like any other."""
    return f"snapshot-{now.strftime('%Y%m%dT%H%M%SZ')}-upgrade-{old}-to-{new}.db"


def snapshot_directory(host: HostPlan) -> str:
    settings = rollout.agent_config(host)
    found = settings.etcd_snapshots if settings is not None else None
    return str(found["directory"]) if isinstance(found, dict) and found.get("directory") else SNAPSHOT_DIRECTORY


async def snapshot_before(transport: SshTransport, plan: Plan, old: str, new: str, progress: Progress) -> str | None:
    """Before the first host changes: a checked snapshot on the first healthy etcd member, in its own
    snapshot directory (None: the cluster has no etcd member to take one from). UpgradeError when none
    can be taken: an upgrade does not start without a way back."""
    problems = []
    for host in etcd_members.members_of(plan):
        etcdctl = etcd_members.etcdctl(host, layout.BIN)
        directory = snapshot_directory(host)
        path = f"{directory}/{snapshot_name(dt.datetime.now(dt.timezone.utc), old, new)}"
        command = (f"install -d -m 0700 {shlex.quote(directory)} && {etcdctl} snapshot save {shlex.quote(path)} "
                   f">/dev/null && chmod 0600 {shlex.quote(path)} && {layout.BIN}/etcdutl snapshot status "
                   f"{shlex.quote(path)} -w json || {{ rm -f {shlex.quote(path)} {shlex.quote(path)}.part; exit 1; }}")
        result = await transport.run(host.address, command, timeout=300)
        if result.ok:
            revision = json.loads(result.stdout or "{}").get("revision", "?")
            progress(f"{host.name}: etcd snapshot {path} (revision {revision}) before the upgrade")
            return path
        problems.append(f"{host.name}: {(result.stderr or result.stdout).strip()[-200:]}")
    if problems:
        raise UpgradeError("no etcd snapshot could be taken before the upgrade, so nothing was changed: "
                           + "; ".join(problems))
    return None


def drain_via(plan: Plan, wave: Sequence[str]) -> HostPlan | None:
    """The control-plane host to drain a wave's nodes through: one outside the wave, whose API server
    keeps serving while the wave's hosts change (else the wave's own, still running at drain time)."""
    control = [host for host in plan.hosts if "control-plane" in host.roles]
    return next((host for host in control if host.name not in wave), control[0] if control else None)


async def drain_node(transport: SshTransport, via: HostPlan, node: str) -> None:
    """Cordon and drain (PodDisruptionBudgets honoured); UpgradeError names the pods that block it."""
    await _node_step(transport, via, f"draining {node}",
                     f"node drain {shlex.quote(node)} --timeout {DRAIN_TIMEOUT:.0f}")


async def uncordon_node(transport: SshTransport, via: HostPlan, node: str) -> None:
    await _node_step(transport, via, f"uncordoning {node}", f"node uncordon {shlex.quote(node)}")


async def _node_step(transport: SshTransport, via: HostPlan, step: str, arguments: str) -> None:
    try:
        await removal.on_control_plane(transport, via, step, arguments)
    except removal.RemovalError as exc:
        raise UpgradeError(f"{exc}; the roll-out stopped before this host changed") from None
