"""The node components' ConfigOK conditions on the host's own Node object, as the kubelet's
dynamic-config controller showed its `KubeletConfigOk`: `kubectl describe node` says which
configuration the kubelet (kube-proxy, containerd) runs, and why.

The agent patches the Node's status with the kubelet's own credential: the Node authorizer and
NodeRestriction let a node change its own Node's status, and a condition type the kubelet does not
own survives its status updates (conditions merge by type), as node-problem-detector's do.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kubesmith.apiclient import ApiError, Credentials, api_request

LOG = logging.getLogger("kubesmith.agent")
NODE_COMPONENTS = ("kubelet", "kube-proxy", "containerd")
REFRESH_SECONDS = 300.0  # sent again unchanged this often (lastHeartbeatTime)
REASONS = {"trial": "OnTrial", "good": "TrialPassed", "rolling-back": "RollingBack", "rolled-back": "RolledBack",
           "failed": "TrialFailed"}


def condition_type(component: str) -> str:
    """kubelet -> KubeletConfigOK, kube-proxy -> KubeProxyConfigOK."""
    return "".join(part.capitalize() for part in component.split("-")) + "ConfigOK"


def node_conditions(configs: dict[str, dict[str, str | None]], now: str,
                    transitions: dict[str, tuple[str, str]]) -> list[dict[str, str]]:
    """The Node conditions of the node components among `configs` (the agent's ConfigOK documents).
    `transitions` (type -> (status, since)) keeps lastTransitionTime across calls; it is updated."""
    found = []
    for component in NODE_COMPONENTS:
        config = configs.get(component)
        if config is None:
            continue
        kind, status = condition_type(component), str(config["status"])
        if transitions.get(kind, ("", ""))[0] != status:
            transitions[kind] = (status, now)
        message = str(config["message"]) + (f": {config['reason']}" if config.get("reason") else "")
        found.append({"type": kind, "status": status, "reason": REASONS.get(str(config.get("phase")), "NoCheckpoint"),
                      "message": message, "lastHeartbeatTime": now, "lastTransitionTime": transitions[kind][1]})
    return found


@dataclass(slots=True)
class NodeConditions:
    """Publishes the conditions when they change, and every REFRESH_SECONDS."""

    node: str
    kubeconfig: Path
    transitions: dict[str, tuple[str, str]] = field(default_factory=dict)
    sent: list[dict[str, str]] | None = None
    sent_at: float = float("-inf")
    last_error: str = ""

    async def publish(self, configs: dict[str, dict[str, str | None]], now: str, clock: float) -> bool:
        """Patch the Node's status if there is news; True once the API took it. An unreachable API
        is logged once per kind of error and tried again on the next call."""
        conditions = node_conditions(configs, now, self.transitions)
        if not conditions or (_same(conditions, self.sent) and clock - self.sent_at < REFRESH_SECONDS):
            return False
        patch: dict[str, Any] = {"status": {"conditions": conditions}}
        try:
            await api_request(Credentials.of_kubeconfig(self.kubeconfig), "PATCH",
                              f"/api/v1/nodes/{quote(self.node)}/status", patch, 30,
                              content_type="application/strategic-merge-patch+json")
        except ApiError as exc:
            if str(exc) != self.last_error:
                LOG.warning("node %s: ConfigOK conditions not published: %s", self.node, exc)
            self.last_error = str(exc)
            return False
        self.sent, self.sent_at, self.last_error = conditions, clock, ""
        return True


def _same(new: list[dict[str, str]], old: list[dict[str, str]] | None) -> bool:
    """Equal but for the heartbeat."""
    def bare(conditions: list[dict[str, str]]) -> list[dict[str, str]]:
        return [{k: v for k, v in c.items() if k != "lastHeartbeatTime"} for c in conditions]
    return old is not None and bare(new) == bare(old)
