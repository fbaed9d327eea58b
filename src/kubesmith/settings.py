"""The settings files of kubesmith's own services on a host, as typed values.

A module builds the value and writes `to_document()` into the plan (a JSON file on the host); the
service's command reads the file back with `from_document()`, its flags overriding what the file
says. Both sides import this file, so it sits on the bottom rung (tests/test_layers.py): the
modules may not import the agent or the CLI, and the CLI's commands start without the modules.

`to_document()` writes exactly the keys the modules have always written, so the files on existing
hosts keep their bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubesmith import layout


def _given(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The flags that were given (a flag left out is None)."""
    return {name: value for name, value in overrides.items() if value is not None}


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """The kubesmith agent's settings (`/etc/kubesmith/agent.json`, written by the agent module)."""

    host: str
    pki_dir: Path = Path(layout.PKI)
    kubeconfig_dir: Path = Path(layout.ETC)
    state_file: Path = Path(layout.AGENT_STATE_FILE)
    ca_urls: tuple[str, ...] = ()
    renew_fraction: float = 2 / 3
    check_interval: float = 300.0
    retry_initial: float = 1.0
    retry_max: float = 60.0
    agent_certificate: str = "agent-client"  # PKI-relative name without .crt/.key
    ca_keys: dict[str, str] = field(default_factory=dict)  # CA name -> key file held here (default: PKI layout)
    config_trials: dict[str, float] = field(default_factory=dict)  # component -> trial seconds (checkpoints)
    keep_configs: bool = False  # run the configuration keeper (agent.configloop) beside the renewals
    components_file: Path = Path(layout.COMPONENTS_FILE)  # what the keeper keeps
    checkpoints_dir: Path = Path(layout.CONFIG_CHECKPOINTS)
    etcd_snapshots: dict[str, Any] | None = None  # an etcd member's periodic snapshots (agent.snapshots)
    node_kubeconfig: str | None = None  # a node's kubelet credential: the keeper's conditions go on its Node

    def to_document(self) -> dict[str, Any]:
        """The JSON document of the settings file. `retry_initial` and `agent_certificate` appear only
        when they differ from their defaults: the module never sets them, and the file never had them."""
        document: dict[str, Any] = {
            "host": self.host, "pki_dir": str(self.pki_dir), "kubeconfig_dir": str(self.kubeconfig_dir),
            "state_file": str(self.state_file), "ca_urls": list(self.ca_urls),
            "renew_fraction": self.renew_fraction, "check_interval": self.check_interval, "retry_max": self.retry_max,
            "config_trials": dict(self.config_trials), "keep_configs": self.keep_configs,
            "components_file": str(self.components_file), "checkpoints_dir": str(self.checkpoints_dir),
            "ca_keys": dict(self.ca_keys), "etcd_snapshots": self.etcd_snapshots,
            "node_kubeconfig": self.node_kubeconfig,
        }
        for name in ("retry_initial", "agent_certificate"):
            if (value := getattr(self, name)) != AgentConfig.__dataclass_fields__[name].default:
                document[name] = value
        return document

    @classmethod
    def from_document(cls, document: Mapping[str, Any], **overrides: Any) -> AgentConfig:
        """The settings of a file's document, each override that is not None (a flag given) replacing
        the file's value. An empty or missing host stays empty: the caller knows the machine's name.
        TypeError for a key the agent does not know, or a path that is not a string."""
        settings = {**document, **_given(overrides)}
        paths = {name: Path(settings[name]) for name in ("components_file", "checkpoints_dir", "pki_dir",
                                                          "kubeconfig_dir", "state_file") if name in settings}
        return cls(**{**settings, **paths, "host": str(settings["host"]) if settings.get("host") else "",
                      "ca_urls": tuple(settings.get("ca_urls") or ())})
