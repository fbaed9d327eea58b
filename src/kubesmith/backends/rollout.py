"""A change to running hosts goes out in waves, so the cluster keeps serving while it changes.

Control-plane and etcd hosts get it one at a time (an API server and an etcd member at most are
restarting at any moment, so etcd keeps its quorum and the API its other servers); node-only hosts
by `spec.rollout.maxUnavailable`. Each wave must be healthy before the next begins: its targets
are active, and with `components.agent.keepConfigs` every restarted component passed its trial
(`kubesmith config wait` on the host). A failed trial halts the roll-out: the host's agent already
put its last-known-good configuration back (in an upgrade, the whole host's previous release:
`agent.hostrelease`), and the later waves are left untouched.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import Any

from kubesmith import layout
from kubesmith.agent.trial import FOLLOWED, TrialPolicy, short
from kubesmith.backends.phases import StepError
from kubesmith.settings import AgentConfig
from kubesmith.vocabulary.model import HostPlan
from kubesmith.transport.ssh import SshTransport

SERIAL_ROLES = frozenset({"control-plane", "etcd"})
VERDICT_MARGIN = 90.0  # beyond the longest trial: the keeper's pass interval, validation's dry load, a restart


class TrialFailed(StepError):
    """A component's new configuration failed its trial on a host; the roll-out stops there."""


def agent_config(host: HostPlan) -> AgentConfig | None:
    """The settings of the host's agent as its module wrote them into the plan; None: it runs no agent."""
    document = next((f.data for f in host.files if f.path == layout.AGENT_CONFIG), None)
    return AgentConfig.from_document(document) if isinstance(document, dict) else None


def trial_seconds(host: HostPlan) -> dict[str, float]:
    """Trial lengths of the components the host's agent keeps; empty when it keeps none (keepConfigs off)."""
    settings = agent_config(host)
    if settings is None or not settings.keep_configs:
        return {}
    return {str(name): float(seconds) for name, seconds in settings.config_trials.items()}


def on_trial(host: HostPlan, restarted: Sequence[str]) -> list[str]:
    """The restarted services whose new configuration runs on trial (the keeper keeps them)."""
    kept = trial_seconds(host)
    return [name for name in restarted if name in kept]


def waves(hosts: Sequence[HostPlan], max_unavailable: int) -> list[list[HostPlan]]:
    """Control-plane and etcd hosts one per wave, in spec order; then node-only hosts, `max_unavailable` at a time."""
    serial = [[host] for host in hosts if SERIAL_ROLES & set(host.roles)]
    nodes = [host for host in hosts if not SERIAL_ROLES & set(host.roles)]
    return serial + [nodes[i:i + max_unavailable] for i in range(0, len(nodes), max_unavailable)]


async def host_clock(transport: SshTransport, host: HostPlan) -> float:
    """The host's own time: trials are recorded on its clock, not this machine's."""
    result = await transport.run(host.address, "date +%s.%N")
    try:
        return float(result.stdout.strip())
    except ValueError:
        raise StepError(f"{host.name}: reading the host's clock failed ({result.exit_status}): "
                        f"{result.stderr.strip()[-300:]}") from None


async def await_trials(transport: SshTransport, host: HostPlan, components: Sequence[str], since: float) -> str:
    """Block until each component's new configuration passed its trial on the host; TrialFailed names
    the first that failed (and the configuration it runs again) or was not decided in time."""
    trials = trial_seconds(host)
    timeout = max(TrialPolicy(trials[name]).startup_bound for name in components) + VERDICT_MARGIN
    command = (f"{layout.BIN}/kubesmith config wait --output json --since {since:.3f} --timeout {timeout:.0f} "
               + " ".join(map(shlex.quote, components)))
    result = await transport.run(host.address, command, timeout=timeout + 60)
    try:
        found = json.loads(result.stdout)["components"]
    except (ValueError, KeyError, TypeError):
        raise StepError(f"{host.name}: `kubesmith config wait` failed ({result.exit_status}): "
                        f"{result.stderr.strip()[-300:]}") from None
    for entry in found:
        if not entry["decided"]:
            raise TrialFailed(f"{host.name}: {entry['component']}'s new configuration got no verdict within "
                              f"{timeout:.0f}s (is the host's kubesmith-agent running?)")
    failed = [entry for entry in found if not entry["passed"]]
    if failed:
        raise TrialFailed(failure_line(host.name, failed))
    return ", ".join(f"{e['component']} {short(e['hash'])}" for e in found)


def failure_line(host: str, failed: Sequence[dict[str, Any]]) -> str:
    """One line for the failed trials of a host: the component that failed by itself and why; those that
    went back with the host's release (`trial.FOLLOWED`) are only named."""
    own = [entry for entry in failed if not str(entry["reason"]).startswith(FOLLOWED)]
    followers = [entry["component"] for entry in failed if entry not in own]
    entry = (own or failed)[0]
    back = (f"; the host runs its last-known-good configuration {short(entry['running'])} again"
            if entry["running"] else "; there was no last-known-good configuration to go back to")
    also = f" ({', '.join(followers)} went back with it)" if own and followers else ""
    return (f"{host}: {entry['component']}'s new configuration {short(entry['hash'])} failed its trial: "
            f"{entry['reason']}{back}{also}")
