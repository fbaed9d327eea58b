"""Who sends which release files to whom: the operator's machine to one host, then hosts to hosts.

A release is about 440 MB. Sent from the operator's machine to every host, it costs 44 GB for 100
hosts; passed on by the hosts that have it, it leaves the operator's machine once and the time grows
with the logarithm of the fleet (docs/fleet.md has the model). The unit is a file (a binary, the
runtime's tarball): hosts want different sets (a control-plane host the API server, a node the
kubelet), and a host serves whatever of its wanted files it holds. `distribute` is the schedule,
apart from how bytes move (`Link`: tar | ssh between two hosts). Every host that holds files serves
up to `fanout` hosts at once; a host that received files serves them from then on. The operator's
machine sends a file only while no live host holds it or has it on its way, so each file leaves it
once unless every holder is lost. A failed transfer sends its target back to the queue, to be
served by another host; a host that fails twice in a row as a source serves no more (it rebooted,
its network went); a target three sources failed is left to apply's upload, from the operator's
machine, as without relaying, and so is everything when the first host-to-host transfers all fail: relaying saves bytes, it never decides whether a host gets its files.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kubesmith import layout
from kubesmith.backends.runtime_bundle import REMOTE_TARBALL
from kubesmith.backends.tally import FLEET_HOSTS
from kubesmith.hostfile import AnyHostFile, HostFile, size_of
from kubesmith.modules.container_runtime import IMAGES_DIR
from kubesmith.node import receive as receiving
from kubesmith.node.receive import Expected, expected_document
from kubesmith.transport.ssh import SshTransport, TransportError, new_key_pair

OPERATOR = ""  # the source name of the operator's machine
# (source, target, files) -> the files the target placed; raises when the transfer failed
Transfer = Callable[[str, str, frozenset[str]], Awaitable[frozenset[str]]]
Progress = Callable[[str], None]
SOURCE_FAILURES = 2  # failed transfers in a row after which a host serves no more
TARGET_ATTEMPTS = 3  # failed transfers after which a target is left to apply's upload
# host-to-host transfers that fail before any succeeds: the hosts cannot reach each other (a firewall
# between them, sshd refusing the key), and relaying stops rather than cost each host its timeouts
UNREACHABLE_AFTER = 3
RELAY_DIR = "/run/kubesmith/relay"  # tmpfs: the relay key and what is expected, gone at the latest on reboot
KEY_MARK = "kubesmith-relay"  # the comment of the relay key's authorized_keys line: `kubesmith-relay:<id>`
AUTHORIZED_KEYS = "~/.ssh/authorized_keys"  # sshd's default AuthorizedKeysFile, of the SSH user
SEND_TIMEOUT = 3600.0  # seconds one host may take to pass files to another
CONNECT_TIMEOUT = 10  # seconds a relaying host's ssh gives the other host to answer
MIN_TARGETS = 2  # fewer hosts wanting a file than this: nothing to pass on, the upload sends it
PROGRESS_EVERY = 2.0  # seconds between summary lines
# zstd -1 shrinks the release to 0.35 of its size for ~3 CPU-s per GB compressing and ~1 decompressing, less
# than the receiver's own 4.3 per GB: never slower than raw, 1.9x faster at 1 Gbit/s (bench/zstd_bench.py,
# docs/fleet.md). All cores (-T0): about 1.6 CPU-s per release in all, spread.
ZSTD_SEND = ("-1", "-T0", "-q", "-c")
FAILURES_SHOWN = 5  # failed transfers named one by one in the progress lines
AUTO_FANOUT = 2  # spec.ssh.relayFanout unset, and more than FLEET_HOSTS hosts in the apply (docs/fleet.md)


def fanout_for(setting: int | None, hosts: int) -> int:
    """The fan-out of an apply of `hosts` hosts: spec.ssh.relayFanout, or, unset, AUTO_FANOUT for a fleet
    and 0 for a few hosts (their uplink sends little, and where the hosts share this machine's CPU, as a
    lab's do, relaying only costs time)."""
    if setting is not None:
        return setting
    return AUTO_FANOUT if hosts > FLEET_HOSTS else 0


@dataclass(slots=True)
class RelayReport:
    """What each target got from where, what failed, and what is left to the upload."""

    received: dict[str, dict[str, str]] = field(default_factory=dict)  # target -> file -> source
    failures: list[tuple[str, str, str]] = field(default_factory=list)  # (source, target, error)
    left: dict[str, frozenset[str]] = field(default_factory=dict)  # target -> files no host could send it

    @property
    def from_operator(self) -> int:
        """Files sent by the operator's machine, counted once per target."""
        return sum(1 for got in self.received.values() for source in got.values() if source == OPERATOR)


@dataclass(slots=True)
class _Schedule:
    fanout: int
    want: dict[str, frozenset[str]]  # target -> the files it lacks
    have: dict[str, set[str]]  # host -> the files it holds (wanted ones, of hosts that want any)
    busy: dict[str, int] = field(default_factory=dict)
    receiving: set[str] = field(default_factory=set)  # targets with a transfer on its way
    on_the_way: dict[str, int] = field(default_factory=dict)  # file -> transfers carrying it
    failures_in_a_row: dict[str, int] = field(default_factory=dict)  # as a source
    failed: dict[str, int] = field(default_factory=dict)  # target -> failed transfers
    between_hosts: list[int] = field(default_factory=lambda: [0, 0])  # host-to-host transfers: done, failed
    report: RelayReport = field(default_factory=RelayReport)

    def hosts_cut_off(self) -> bool:
        done, failed = self.between_hosts
        return not done and failed >= UNREACHABLE_AFTER

    def needs(self, target: str) -> set[str]:
        return set(self.want[target]) - self.have.get(target, set())

    def live(self) -> list[str]:
        return [host for host, held in self.have.items()
                if held and self.failures_in_a_row.get(host, 0) < SOURCE_FAILURES]

    def next_transfer(self) -> tuple[str, str, frozenset[str]] | None:
        """A free source and a target it can give files to: hosts first; the operator's machine only for
        files no live host holds and none is carrying."""
        if self.hosts_cut_off():
            return None
        live = self.live()
        held = {file for host in live for file in self.have[host]}
        for target in self.want:
            needs = self.needs(target)
            if not needs or target in self.receiving or self.failed.get(target, 0) >= TARGET_ATTEMPTS:
                continue
            for source in live:
                give = needs & self.have[source]
                if source != target and give and self.busy.get(source, 0) < self.fanout:
                    return source, target, frozenset(give)
            orphans = {file for file in needs if file not in held and not self.on_the_way.get(file)}
            if orphans:
                return OPERATOR, target, frozenset(orphans)
        return None

    def start(self, source: str, target: str, files: frozenset[str]) -> None:
        self.busy[source] = self.busy.get(source, 0) + 1
        self.receiving.add(target)
        for file in files:
            self.on_the_way[file] = self.on_the_way.get(file, 0) + 1

    def finished(self, source: str, target: str, files: frozenset[str], placed: frozenset[str] | None,
                 error: BaseException | None) -> None:
        self.busy[source] -= 1
        self.receiving.discard(target)
        for file in files:
            self.on_the_way[file] -= 1
        got = (placed or frozenset()) & files
        if got:
            self.have.setdefault(target, set()).update(got)
            self.report.received.setdefault(target, {}).update(dict.fromkeys(got, source))
        if source != OPERATOR:
            self.between_hosts[0 if error is None and got == files else 1] += 1
        if error is None and got == files:
            self.failures_in_a_row[source] = 0
            return
        why = str(error) if error is not None else f"placed {len(got)} of {len(files)} files"
        self.report.failures.append((source, target, why or type(error).__name__))
        self.failed[target] = self.failed.get(target, 0) + 1
        self.failures_in_a_row[source] = self.failures_in_a_row.get(source, 0) + 1


async def distribute(want: Mapping[str, frozenset[str]], have: Mapping[str, frozenset[str]], fanout: int,
                     transfer: Transfer, progress: Progress | None = None) -> RelayReport:
    """Give every target (`want`: the files it lacks) its files; `have`: what hosts hold already."""
    if fanout < 1:
        raise ValueError("fanout must be at least 1")
    schedule = _Schedule(fanout, {t: files for t, files in want.items() if files},
                         {host: set(files) for host, files in have.items()})
    running: dict[asyncio.Task[frozenset[str]], tuple[str, str, frozenset[str]]] = {}
    while True:
        while (chosen := schedule.next_transfer()) is not None:
            schedule.start(*chosen)
            running[asyncio.ensure_future(transfer(*chosen))] = chosen
        if not running:  # nothing on its way and nothing to start: what is still needed stays so
            break
        done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            error = task.exception()
            schedule.finished(*running.pop(task), None if error else task.result(), error)
        if progress is not None:
            complete = sum(1 for target in schedule.want if not schedule.needs(target))
            relaying = sum(1 for source, _, _ in running.values() if source != OPERATOR)
            progress(f"release relay {complete}/{len(schedule.want)} hosts, {relaying} relaying")
    schedule.report.left = {t: frozenset(schedule.needs(t)) for t in schedule.want if schedule.needs(t)}
    return schedule.report


class RelayError(TransportError):
    """A transfer between two hosts failed; the message names both and the receiver's verdict."""


@dataclass(frozen=True, slots=True)
class Link:
    """One apply's relay credentials: a key pair made for it, which lets its holder do nothing on a
    receiving host but hand the receiver (node/receive.py, copied there) a stream: a forced command,
    removed at the end. Hosts are named; `addresses` says how hosts reach each other."""

    transport: SshTransport
    addresses: Mapping[str, str]
    python: str = "python3"  # the receiving host's interpreter (a test's may differ)
    authorized_keys: str = AUTHORIZED_KEYS
    root: str = "/"  # where the receiver places paths (a test's directory)
    ssh_port: int = 22
    ssh_user: str = "root"
    apply_id: str = field(default_factory=lambda: secrets.token_hex(6))
    key_pair: tuple[bytes, str] = field(default_factory=new_key_pair, repr=False)
    zstd: str = "zstd"  # the compressor both hosts must have for a compressed stream (a test's may lack it)
    decompresses: dict[str, bool] = field(default_factory=dict, compare=False)  # target -> it has zstd
    streams: dict[tuple[str, str], str] = field(default_factory=dict, compare=False)  # (source, target) -> how

    @property
    def directory(self) -> str:
        return f"{RELAY_DIR}/{self.apply_id}"

    def authorized_line(self) -> str:
        command = shlex.join([self.python, "-I", f"{self.directory}/receive.py", "--expect",
                              f"{self.directory}/expected.json", "--root", self.root])
        return f'restrict,command="{command}" {self.key_pair[1]} {KEY_MARK}:{self.apply_id}'

    async def expect(self, target: str, files: Mapping[str, Expected]) -> None:
        """Tell `target`, over the operator's own session, what it may take, and let the key in."""
        address = self.addresses[target]
        receiver = Path(receiving.__file__).read_bytes()
        await self._checked(address, self._forget(stale=True))  # what an apply killed mid-relay left
        await self.transport.upload(address, [
            HostFile(f"{self.directory}/expected.json", 0o600, "root", "root", expected_document(files)),
            HostFile(f"{self.directory}/receive.py", 0o600, "root", "root", receiver)])
        line = shlex.quote(self.authorized_line() + "\n")
        await self._checked(address, f'umask 077; mkdir -p "$(dirname {self._keys()})" && '
                                     f'printf %s {line} >> {self._keys()}')
        probe = await self.transport.run(address, f"command -v {shlex.quote(self.zstd)}")
        self.decompresses[target] = probe.ok and bool(probe.stdout.strip())

    async def send(self, source: str, target: str, paths: frozenset[str]) -> frozenset[str]:
        """`source` streams `paths` (its own copies, installed after the same check) to `target`, which
        checks every byte; the paths it placed."""
        host_key = await self.transport.host_key(self.addresses[target])
        known = f"{self.directory}/known_hosts.{target}"
        await self.transport.upload(self.addresses[source], [
            HostFile(f"{self.directory}/key", 0o600, "root", "root", self.key_pair[0]),
            HostFile(known, 0o600, "root", "root", f"{KEY_MARK}.{target} {host_key}\n".encode())])
        ssh = ["ssh", "-F", "/dev/null", "-i", f"{self.directory}/key", "-o", f"UserKnownHostsFile={known}",
               "-o", "GlobalKnownHostsFile=/dev/null", "-o", f"HostKeyAlias={KEY_MARK}.{target}",
               "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
               "-o", f"ConnectTimeout={CONNECT_TIMEOUT}", "-p", str(self.ssh_port),
               f"{self.ssh_user}@{self.addresses[target]}"]
        tar = ["tar", "-C", self.root, "-cf", "-", "--", *(path.lstrip("/") for path in sorted(paths))]
        result = await self.transport.run(self.addresses[source], self._pipeline(tar, ssh, target),
                                          timeout=SEND_TIMEOUT)
        try:
            answer = json.loads(result.stdout)
            placed = frozenset(answer["placed"])
            self.streams[source, target] = str(answer.get("stream", "tar"))
        except (ValueError, KeyError, TypeError):
            placed = frozenset()
        if not result.ok:
            said = result.stderr.strip()[-600:]
            raise RelayError(f"{source} -> {target}: relay failed ({result.exit_status}): {said}")
        return placed

    def _pipeline(self, tar: list[str], ssh: list[str], target: str) -> str:
        """The relaying host's command: tar | ssh, with zstd between them when the target has zstd (asked
        in `expect`) and the relaying host has it too (asked by the command itself); plain otherwise."""
        plain = f"{shlex.join(tar)} | {shlex.join(ssh)}"
        if not self.decompresses.get(target):
            return plain
        zstd = shlex.quote(self.zstd)
        return (f"if command -v {zstd} >/dev/null 2>&1; then {shlex.join(tar)} | {shlex.join([self.zstd, *ZSTD_SEND])}"
                f" | {shlex.join(ssh)}; else {plain}; fi")

    async def close(self, hosts: Sequence[str]) -> dict[str, str]:
        """Take the key out of every host's authorized_keys and remove the relay's files on every host
        that answers; the others, with why. A host left out (it rebooted mid-relay, and its receiver went
        with /run) keeps the line until the next relay to it removes it: no reason to throw away what the
        relay placed on every other host, as raising here did."""
        outcomes = await asyncio.gather(*(self._checked(self.addresses[host], self._forget(stale=False))
                                          for host in hosts), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, TransportError):
                raise outcome  # a bug, not a host: as it is
        return {host: str(outcome) for host, outcome in zip(hosts, outcomes, strict=True)
                if isinstance(outcome, TransportError)}

    def _forget(self, stale: bool) -> str:
        """The shell command that removes this apply's relay key line and files, or (`stale`) those every
        earlier relay left: an apply killed before its end leaves both."""
        if stale:
            mark, files = f"/ {KEY_MARK}:[0-9a-f]*$/d", f"{RELAY_DIR}/*"
        else:
            mark, files = f"/ {KEY_MARK}:{self.apply_id}$/d", self.directory
        return (f"rm -rf -- {files}; if [ -f {self._keys()} ]; then sed -i {shlex.quote(mark)} {self._keys()}; fi")

    def _keys(self) -> str:
        """The authorized_keys path for a shell: `~/` as "$HOME"/, the rest quoted."""
        if self.authorized_keys.startswith("~/"):
            return '"$HOME"/' + shlex.quote(self.authorized_keys[2:])
        return shlex.quote(self.authorized_keys)

    async def _checked(self, address: str, command: str) -> None:
        result = await self.transport.run(address, command)
        if not result.ok:
            raise RelayError(f"{address}: `{command[:100]}` failed ({result.exit_status}): "
                             f"{result.stderr.strip()[-300:]}")


def relayable(path: str) -> bool:
    """The release's big files, which nothing on the host watches: its Kubernetes binaries (a new
    release's directory, which no unit runs from until the units change), the image archives a node
    imports when its image unit (re)starts, and kubesmith's runtime tarball (unpacked by its own step)."""
    return path.startswith((layout.RELEASES + "/", IMAGES_DIR + "/")) or path == REMOTE_TARBALL


async def relay_release(transport: SshTransport, wanted: Mapping[str, Sequence[AnyHostFile]],
                        held: Mapping[str, Sequence[AnyHostFile]], addresses: Mapping[str, str], fanout: int,
                        progress: Progress) -> dict[str, frozenset[str]]:
    """Pass release files from host to host before apply's upload: `wanted` per host name, the files it
    lacks; `held`, files hosts have already. The paths each host placed; what is not placed is left to
    the upload. A file wanted by fewer than MIN_TARGETS hosts, or not the same bytes everywhere, is not
    relayed."""
    files = _shared_files(wanted)
    want = {host: frozenset(f.path for f in host_files if f.path in files) for host, host_files in wanted.items()}
    want = {host: paths for host, paths in want.items() if paths}
    if fanout < 1 or not want:
        return {}
    have = {host: frozenset(f.path for f in host_files if f.path in files and f.sha256 == files[f.path].sha256)
            for host, host_files in held.items()}
    link = Link(transport, addresses, ssh_port=transport.options.port, ssh_user=transport.options.user)
    expected = {path: Expected(path, file.sha256, size_of(file), file.mode, file.owner, file.group)
                for path, file in files.items()}
    involved = sorted(set(want) | {host for host, paths in have.items() if paths})
    clock = asyncio.get_running_loop().time
    last = [clock()]

    def summary(line: str) -> None:
        if clock() - last[0] >= PROGRESS_EVERY:
            last[0] = clock()
            progress(line)

    async def transfer(source: str, target: str, paths: frozenset[str]) -> frozenset[str]:
        if source == OPERATOR:
            await transport.upload(addresses[target], [files[path] for path in sorted(paths)])
            return paths
        return await link.send(source, target, paths)

    sent = sum(size_of(files[path]) for path in {p for paths in want.values() for p in paths})
    progress(f"release relay: {len(want)} hosts want {len(files)} files ({sent / 1e6:.0f} MB), fan-out {fanout}")
    try:
        await asyncio.gather(*(link.expect(host, {p: expected[p] for p in paths}) for host, paths in want.items()))
        report = await distribute(want, have, fanout, transfer, summary)
    finally:
        unclosed = await link.close(involved)
    for source, target, why in report.failures[:FAILURES_SHOWN]:
        progress(f"release relay: {source or 'this machine'} -> {target} failed: {why}")
    if len(report.failures) > FAILURES_SHOWN:
        progress(f"release relay: {len(report.failures) - FAILURES_SHOWN} more transfers failed")
    for host, why in sorted(unclosed.items()):
        progress(f"release relay: {host}: the relay key stays until the next relay to it: {why}")
    relayed = sum(1 for got in report.received.values() for source in got.values() if source != OPERATOR)
    if link.streams:
        compressed = sum(1 for how in link.streams.values() if how == "zstd")
        progress(f"release relay: {compressed}/{len(link.streams)} host-to-host streams zstd-compressed")
    left = f"; {len(report.left)} left to the upload" if report.left else ""
    progress(f"release relay: {len(want) - len(report.left)}/{len(want)} hosts done, {relayed} files passed on by "
             f"hosts, {report.from_operator} sent from here{left}")
    return {host: frozenset(got) for host, got in report.received.items()}


def _shared_files(wanted: Mapping[str, Sequence[AnyHostFile]]) -> dict[str, AnyHostFile]:
    """Release files wanted by at least MIN_TARGETS hosts, the same bytes, mode and owner on each."""
    by_path: dict[str, list[AnyHostFile]] = {}
    for host_files in wanted.values():
        for file in host_files:
            if relayable(file.path):
                by_path.setdefault(file.path, []).append(file)
    return {path: copies[0] for path, copies in by_path.items()
            if len(copies) >= MIN_TARGETS and len({(f.sha256, f.mode, f.owner, f.group) for f in copies}) == 1}
