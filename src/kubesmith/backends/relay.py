"""Who sends the release to whom: the operator's machine to one host, then hosts to hosts.

A release is about 440 MB. Sent from the operator's machine to every host, it costs 44 GB for 100
hosts; passed on by the hosts that have it, it leaves the operator's machine once and the time grows
with the logarithm of the fleet (docs/fleet.md has the model). `distribute` is the schedule, apart
from how bytes move (`transfer`, one SSH pipeline per pair of hosts): every host that has the release
serves up to `fanout` others at once; a host that received it serves from then on. A failed transfer
sends its target back to the queue, to be served by another host; a host that fails twice in a row
as a source serves no more (it rebooted, its network went). A target that no host could serve is left to
apply's upload, from the operator's machine, as without relaying: relaying saves bytes, it never
decides whether a host gets its files.
"""

from __future__ import annotations

import asyncio
import secrets
import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kubesmith.hostfile import HostFile
from kubesmith.node.receive import Expected, expected_document
from kubesmith.transport.ssh import SshTransport, TransportError, new_key_pair

OPERATOR = ""  # the source name of the operator's machine
Transfer = Callable[[str, str], Awaitable[None]]  # (source, target): raises on failure
Progress = Callable[[str], None]
SOURCE_FAILURES = 2  # failed transfers after which a host serves no more
TARGET_ATTEMPTS = 3  # sources a target tries before it is left to apply's upload
RELAY_DIR = "/run/kubesmith/relay"  # tmpfs: the relay key and what is expected, gone at the latest on reboot
KEY_MARK = "kubesmith-relay"  # the comment of the relay key's authorized_keys line: `kubesmith-relay:<id>`
AUTHORIZED_KEYS = "~/.ssh/authorized_keys"  # sshd's default AuthorizedKeysFile, of the SSH user
SEND_TIMEOUT = 3600.0  # seconds one host may take to pass the release to another


@dataclass(slots=True)
class RelayReport:
    """Where each target got the release from, what failed, and what is left to the upload."""

    sources: dict[str, str] = field(default_factory=dict)  # target -> source (OPERATOR: this machine)
    failures: list[tuple[str, str, str]] = field(default_factory=list)  # (source, target, error)
    left: list[str] = field(default_factory=list)  # targets no host could serve

    @property
    def from_operator(self) -> int:
        return sum(1 for source in self.sources.values() if source == OPERATOR)


@dataclass(slots=True)
class _Schedule:
    fanout: int
    holders: list[str]
    pending: list[str]
    busy: dict[str, int] = field(default_factory=dict)
    failures_in_a_row: dict[str, int] = field(default_factory=dict)  # as a source
    tried: dict[str, set[str]] = field(default_factory=dict)  # target -> sources that failed it
    report: RelayReport = field(default_factory=RelayReport)

    def live(self) -> list[str]:
        return [s for s in self.holders if self.failures_in_a_row.get(s, 0) < SOURCE_FAILURES]

    def next_pair(self, in_flight: int) -> tuple[str, str] | None:
        """A free source and a target it has not failed: hosts first; this machine only when no live host
        holds the release and nothing is on its way (the seed, and a new one after every holder failed)."""
        live = self.live()
        for target in self.pending:
            tried = self.tried.get(target, set())
            if len(tried) >= TARGET_ATTEMPTS:
                continue
            sources = live if live or in_flight else [OPERATOR]
            for source in sources:
                if source not in tried and self.busy.get(source, 0) < self.fanout:
                    return source, target
        return None

    def finished(self, source: str, target: str, error: BaseException | None) -> None:
        self.busy[source] -= 1
        if error is None:
            self.report.sources[target] = source
            self.holders.append(target)
            self.failures_in_a_row[source] = 0
            return
        self.report.failures.append((source, target, str(error) or type(error).__name__))
        self.tried.setdefault(target, set()).add(source)
        self.failures_in_a_row[source] = self.failures_in_a_row.get(source, 0) + 1
        self.pending.append(target)


async def distribute(targets: Sequence[str], holders: Sequence[str], fanout: int, transfer: Transfer,
                     progress: Progress | None = None) -> RelayReport:
    """Send the release to every target, each once; `holders` have it already and serve from the start."""
    if fanout < 1:
        raise ValueError("fanout must be at least 1")
    schedule = _Schedule(fanout, list(holders), [t for t in targets if t not in holders])
    running: dict[asyncio.Task[None], tuple[str, str]] = {}
    total = len(schedule.pending)
    while True:
        while (pair := schedule.next_pair(len(running))) is not None:
            source, target = pair
            schedule.pending.remove(target)
            schedule.busy[source] = schedule.busy.get(source, 0) + 1
            running[asyncio.ensure_future(transfer(source, target))] = pair
        if not running:  # nothing on its way and no pair to start: what is pending stays so
            break
        done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            schedule.finished(*running.pop(task), task.exception())
        if progress is not None:
            relaying = sum(1 for source, _ in running.values() if source != OPERATOR)
            progress(f"relay {len(schedule.report.sources)}/{total} hosts, {relaying} relaying")
    schedule.report.left.extend(schedule.pending)
    return schedule.report


class RelayError(TransportError):
    """A transfer between two hosts failed; the message names both and the receiver's verdict."""


@dataclass(frozen=True, slots=True)
class Link:
    """One apply's relay credentials: a key pair made for it, which lets its holder do nothing on a
    receiving host but hand `kubesmith relay receive` a stream (forced command), removed at the end.

    `receive` is the receiving command as the host runs it (the runtime's wrapper, or a test's)."""

    transport: SshTransport
    addresses: Mapping[str, str]  # host name -> address, as hosts reach each other
    receive: str = "/usr/local/bin/kubesmith relay receive"
    authorized_keys: str = AUTHORIZED_KEYS
    ssh_port: int = 22
    ssh_user: str = "root"
    apply_id: str = field(default_factory=lambda: secrets.token_hex(6))
    key_pair: tuple[bytes, str] = field(default_factory=new_key_pair, repr=False)

    @property
    def directory(self) -> str:
        return f"{RELAY_DIR}/{self.apply_id}"

    def authorized_line(self) -> str:
        command = f"{self.receive} --expect {self.directory}/expected.json".replace('"', '\\"')
        return f'restrict,command="{command}" {self.key_pair[1]} {KEY_MARK}:{self.apply_id}'

    async def expect(self, target: str, files: Mapping[str, Expected]) -> None:
        """Tell `target`, over the operator's own session, what it may take and let the key in."""
        address = self.addresses[target]
        await self.transport.upload(address, [HostFile(f"{self.directory}/expected.json", 0o600, "root", "root",
                                                       expected_document(files))])
        line = shlex.quote(self.authorized_line() + "\n")
        keys = self.authorized_keys.replace("~/", "$HOME/")
        await self._checked(address, f'umask 077; mkdir -p "$(dirname "{keys}")" && printf %s {line} >> "{keys}"')

    async def arm(self, source: str, target: str) -> None:
        """Give `source` the key and `target`'s host key, as this machine checked it."""
        host_key = await self.transport.host_key(self.addresses[target])
        known = f"[{self.addresses[target]}]:{self.ssh_port} {host_key}\n".encode()
        await self.transport.upload(self.addresses[source], [
            HostFile(f"{self.directory}/key", 0o600, "root", "root", self.key_pair[0]),
            HostFile(f"{self.directory}/known_hosts.{target}", 0o600, "root", "root", known)])

    async def send(self, source: str, target: str, paths: Sequence[str]) -> None:
        """`source` streams `paths` (its own, installed copies) to `target`, which checks every byte."""
        await self.arm(source, target)
        ssh = ["ssh", "-F", "/dev/null", "-i", f"{self.directory}/key", "-o", f"UserKnownHostsFile={self.directory}/known_hosts.{target}",
               "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
               "-o", "GlobalKnownHostsFile=/dev/null", "-p", str(self.ssh_port),
               f"{self.ssh_user}@{self.addresses[target]}", "relay"]
        tar = ["tar", "-C", "/", "-cf", "-", "--", *(path.lstrip("/") for path in paths)]
        result = await self.transport.run(self.addresses[source], f"{shlex.join(tar)} | {shlex.join(ssh)}",
                                          timeout=SEND_TIMEOUT)
        if not result.ok:
            said = (result.stderr.strip() or result.stdout.strip())[-600:]
            raise RelayError(f"{source} -> {target}: relay failed ({result.exit_status}): {said}")

    async def close(self, hosts: Sequence[str]) -> None:
        """Take the key out of every host's authorized_keys and remove the relay's files."""
        keys = self.authorized_keys.replace("~/", "$HOME/")
        mark = f" {KEY_MARK}:{self.apply_id}$"
        await asyncio.gather(*(self._checked(self.addresses[host], f'rm -rf -- {self.directory}; '
                                             f'if [ -f "{keys}" ]; then sed -i "/{mark}/d" "{keys}"; fi')
                               for host in hosts))

    async def _checked(self, address: str, command: str) -> None:
        result = await self.transport.run(address, command)
        if not result.ok:
            raise RelayError(f"{address}: `{command[:100]}` failed ({result.exit_status}): {result.stderr.strip()[-300:]}")
