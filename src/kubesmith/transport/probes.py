"""Probes that must run on a host (loopback-bound components, lab networks): `kubesmith probe` over SSH.

`SshProbeRunner` is a `ProbeRunner` like the local one, so `status` does not care where a
probe runs; it also reads which units systemd has active on the host.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from kubesmith.runtime.probespec import ProbeSpec, format_probe
from kubesmith.runtime.wait import Answer, ProbeResult
from kubesmith.transport.ssh import SshTransport, TransportError

REMOTE_KUBESMITH = "/usr/local/bin/kubesmith"


class RemoteProbeError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class SshProbeRunner:
    transport: SshTransport
    address: str

    async def check(self, spec: ProbeSpec, timeout: float) -> ProbeResult:
        try:
            data = await self._probe(spec, ["--mode", "check"], timeout)
        except (TransportError, RemoteProbeError) as exc:
            return ProbeResult(False, str(exc), 0.0)
        return ProbeResult(bool(data["ok"]), str(data["reason"]), float(data["latency"]), data.get("status"),
                           str(data.get("body", "")))

    async def request(self, spec: ProbeSpec, method: str, path: str, body: Any = None,
                      timeout: float = 5.0) -> Answer:
        arguments = ["--mode", "request", "--method", method, "--path", path]
        if body is not None:
            arguments += ["--body", json.dumps(body)]
        data = await self._probe(spec, arguments, timeout)
        if "error" in data:
            raise RemoteProbeError(data["error"])
        return Answer(int(data["status"]), str(data["body"]), float(data["latency"]))

    async def certificate_expiry(self, spec: ProbeSpec, timeout: float) -> float | None:
        data = await self._probe(spec, ["--mode", "expiry"], timeout)
        if "error" in data:
            raise RemoteProbeError(data["error"])
        return data["expiry"]

    async def _probe(self, spec: ProbeSpec, arguments: list[str], timeout: float) -> dict[str, Any]:
        command = [REMOTE_KUBESMITH, "probe", format_probe(spec), "--timeout", f"{timeout:g}", *arguments]
        result = await self.transport.run(self.address, shlex.join(command), timeout=timeout + 30)
        if not result.ok:
            raise RemoteProbeError(f"kubesmith probe on {self.address} failed: {result.stderr.strip()[-300:]}")
        return json.loads(result.stdout)


async def active_units(transport: SshTransport, address: str, units: list[str]) -> dict[str, bool]:
    """systemd's view: which of `units` are active on the host."""
    if not units:
        return {}
    result = await transport.run(address, "systemctl is-active " + " ".join(shlex.quote(u) for u in units))
    states = result.stdout.split()
    return {unit: state == "active" for unit, state in zip(units, states)}
