"""Where each host is in an `apply`, so a failure says which host, in which phase, and what happened.

An apply moves every host through the same phases (inspect, users, upload, unpack, enable,
start and wait per target, record). `Phases` remembers the phase each host is in, turns a
failure into `HostFailed` ("h2: connection lost while unpacking the runtime; the host may have
rebooted") and, when a phase fails, summarises every host's state for the user.

`PausePoint` is a test-only hook: fault-injection tests set KUBESMITH_TEST_PAUSE_AT to hit a
phase deterministically instead of sleeping (see its docstring). Users never set it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from kubesmith.transport.ssh import HostLost, HostUnreachable, TransportError

T = TypeVar("T")
I = TypeVar("I")

PAUSE_AT = "KUBESMITH_TEST_PAUSE_AT"  # test only: <phase>[:<host>], e.g. "unpack:h2" or "wait-etcd-online"
PAUSE_FILE = "KUBESMITH_TEST_PAUSE_FILE"  # test only: the marker apply writes, then waits until it is gone
PAUSE_POLL = 0.05

# What each phase does, as the error message says it ("connection lost while ...").
DOING = {"inspect": "inspecting the host", "users": "creating users", "upload": "uploading files",
         "unpack": "unpacking the runtime", "cleanup": "removing leftovers of an interrupted apply",
         "enable": "reloading systemd and enabling units", "restart": "restarting changed services",
         "record": "recording the applied manifest", "join-etcd": "joining the running etcd cluster",
         "remove": "removing the host from the cluster", "clock": "reading the host's clock",
         "trial": "running its new configuration on trial",
         "etcd-health": "checking that every etcd member is healthy"}


def doing(phase: str) -> str:
    """start-etcd-online -> "starting etcd-online.target"; wait-... -> "waiting for ...target"."""
    verb, _, target = phase.partition("-")
    if verb == "start" and target:
        return f"starting {target}.target"
    if verb == "wait" and target:
        return f"waiting for {target}.target"
    return DOING.get(phase, phase)


class HostFailed(Exception):
    """One host failed in one phase; the message is the one line the user reads."""

    def __init__(self, host: str, phase: str, cause: Exception) -> None:
        self.host, self.phase, self.cause = host, phase, cause
        super().__init__(_explain(host, phase, cause))


class ApplyFailed(Exception):
    """A phase failed on at least one host: the first failure, then where every host stopped."""

    def __init__(self, failures: list[HostFailed], summary: list[str]) -> None:
        self.failures, self.summary = failures, summary
        super().__init__("\n".join([str(failures[0])] + [str(f) for f in failures[1:]]
                                   + ["hosts:"] + [f"  {line}" for line in summary]))


def _explain(host: str, phase: str, cause: Exception) -> str:
    detail = str(cause).removeprefix(f"{host}: ")
    if isinstance(cause, HostLost):
        return (f"{host}: connection lost while {doing(phase)}; the host may have rebooted or its sshd stopped "
                f"({detail})")
    if isinstance(cause, HostUnreachable):
        return f"{host}: host not reachable while {doing(phase)}; it may be rebooting or down ({detail})"
    return f"{host}: {doing(phase)} failed: {detail}"


@dataclass(frozen=True, slots=True)
class PausePoint:
    """TEST ONLY. KUBESMITH_TEST_PAUSE_AT=<phase>[:<host>] with KUBESMITH_TEST_PAUSE_FILE=<path>: when
    apply reaches that phase (on that host, or on any), it writes "<phase> <host>" to the path and
    waits until the file is removed, once. A test then injects its fault (reboot a host, SIGKILL
    apply, stop sshd) at exactly that point and removes the file to let apply go on."""

    phase: str
    host: str | None
    marker: Path
    passed: set[str] = field(default_factory=set)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> PausePoint | None:
        spec, marker = environ.get(PAUSE_AT), environ.get(PAUSE_FILE)
        if not spec or not marker:
            return None
        phase, _, host = spec.partition(":")
        return cls(phase, host or None, Path(marker))

    async def reached(self, phase: str, host: str) -> None:
        if phase != self.phase or (self.host is not None and host != self.host) or self.passed:
            return
        self.marker.write_text(f"{phase} {host}\n")
        while self.marker.exists():
            await asyncio.sleep(PAUSE_POLL)
        self.passed.add(host)


@dataclass(slots=True)
class Phases:
    """The phase each host is in (or stopped at) during one apply; `done` once its manifest is recorded."""

    hosts: tuple[str, ...]
    pause: PausePoint | None = None
    reached: dict[str, str] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)

    async def run(self, host: str, phase: str, work: Awaitable[T], pause: bool = True) -> T:
        """Run one host's step of `phase`; a transport or command failure becomes HostFailed.
        With `pause`, a test's pause point is at the phase's start (else the step has its own)."""
        self.reached[host] = phase
        try:
            if pause and self.pause is not None:
                await self.pause.reached(phase, host)
            return await work
        except HostFailed:
            raise
        except (TransportError, StepError) as exc:
            raise HostFailed(host, phase, exc) from None

    async def pause_at(self, host: str, phase: str) -> None:
        """A pause point inside a step (between its halves), for tests."""
        if self.pause is not None:
            await self.pause.reached(phase, host)

    def summary(self, failed: Mapping[str, str]) -> list[str]:
        """Each host's state in one line: done, failed or stopped at a phase, or untouched."""
        lines = []
        for host in self.hosts:
            if host in failed:
                lines.append(f"{host}: failed while {doing(failed[host])}")
            elif host in self.done:
                lines.append(f"{host}: done")
            elif host in self.reached and self.reached[host] != "inspect":
                lines.append(f"{host}: stopped after {doing(self.reached[host])} (consistent; apply again)")
            else:
                lines.append(f"{host}: untouched")
        return lines


class StepError(Exception):
    """A command of a step failed on a host (not the connection): the message says which and why."""


async def settled(phases: Phases, items: Sequence[I], work: Callable[[I], Awaitable[T]],
                  parallel: bool = True) -> list[T]:
    """Every host finishes the phase it is in before a failure is raised: no host is left half-way
    through a phase, and no later phase (a start) begins anywhere when one host failed.
    One after another (`parallel=False`, the benchmark's baseline) stops at the first failure."""
    results: list[T | BaseException] = []
    if parallel:
        results = list(await asyncio.gather(*(work(item) for item in items), return_exceptions=True))
    else:
        for item in items:
            try:
                results.append(await work(item))
            except HostFailed as exc:
                results.append(exc)
                break
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, HostFailed):
            raise result
    failures = [r for r in results if isinstance(r, HostFailed)]
    if failures:
        raise ApplyFailed(failures, phases.summary({f.host: f.phase for f in failures}))
    return results  # type: ignore[return-value]
