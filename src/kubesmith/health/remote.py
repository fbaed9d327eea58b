"""Probing from a host over SSH: one `kubesmith probe --batch` per host, answers replayed to status.

Components bound to 127.0.0.1 (controller-manager, scheduler, kubelet healthz) and lab
networks are reachable only from the host itself; one batch keeps it to one round trip.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import Sequence
from dataclasses import asdict

from kubesmith import layout
from kubesmith.health.status import AgentReport, HostView, runs_agent, status_operations
from kubesmith.health.wait import ProbeFailure, ProbeOperation, RecordedProbeRunner
from kubesmith.vocabulary.model import HostPlan
from kubesmith.transport.ssh import SshTransport, TransportError

REMOTE_KUBESMITH = "/usr/local/bin/kubesmith"


async def remote_runner(transport: SshTransport, address: str, operations: Sequence[ProbeOperation],
                        timeout: float) -> RecordedProbeRunner:
    """Run every operation on the host; a failure to run at all becomes the answer to each of them."""
    batch = json.dumps([asdict(op) for op in operations])
    try:
        result = await transport.run(address, f"{REMOTE_KUBESMITH} probe --timeout {timeout:g}", input=batch,
                                     timeout=timeout * 3 + 30)
        if not result.ok:
            raise TransportError(f"{address}: kubesmith probe failed: {result.stderr.strip()[-300:]}")
        answers = json.loads(result.stdout)
    except (TransportError, ValueError) as exc:
        answers = [ProbeFailure(str(exc))] * len(operations)
    return RecordedProbeRunner.of(operations, answers)


async def ssh_view(transport: SshTransport, host: HostPlan, timeout: float) -> HostView:
    """How status sees a host it reaches over SSH: systemd says what runs, probes run on the host.
    The three reads are independent: they share the host's connection and run at once. A host that
    cannot be reached is said once, as the host's problem, and each probe's answer just points to it."""
    operations = status_operations(host, layout.PKI)
    try:
        await transport.run(host.address, "true", timeout=timeout * 3 + 30)
    except TransportError as exc:
        return HostView(RecordedProbeRunner.of(operations, [ProbeFailure("host not reached")] * len(operations)),
                        layout.PKI, problem=str(exc))
    running, runner, agent = await asyncio.gather(
        running_services(transport, host),
        remote_runner(transport, host.address, operations, timeout),
        remote_agent_report(transport, host))
    return HostView(runner, layout.PKI, running, agent=agent)


async def running_services(transport: SshTransport, host: HostPlan) -> dict[str, bool] | None:
    """Service name -> active, as systemd says; None when the host cannot tell (or SSH fails)."""
    try:
        active = await active_units(transport, host.address, [f"{service.name}.service" for service in host.services])
    except TransportError:
        return None
    return {name.removesuffix(".service"): up for name, up in active.items()} if active else None


async def remote_agent_report(transport: SshTransport, host: HostPlan) -> AgentReport | None:
    """The agent's state file on the host; None where it has not written one (or SSH fails)."""
    if not runs_agent(host):
        return None
    try:
        result = await transport.run(host.address, ["cat", "--", layout.AGENT_STATE_FILE])
    except TransportError:
        return None
    return AgentReport.parse(result.stdout) if result.ok else None


async def active_units(transport: SshTransport, address: str, units: list[str]) -> dict[str, bool]:
    """systemd's view: which of `units` are active on the host."""
    if not units:
        return {}
    result = await transport.run(address, "systemctl is-active " + " ".join(shlex.quote(u) for u in units))
    states = result.stdout.split()
    return {unit: state == "active" for unit, state in zip(units, states)}
