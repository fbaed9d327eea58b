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


@dataclass(frozen=True, slots=True)
class CaServiceConfig:
    """Everything `ca serve` needs (`/etc/kubesmith/ca-service.json`, written by the ca-service module);
    `kubesmith token` reads the same file. The paths' defaults are those of a file without them."""

    ca_cert: Path = Path(layout.pki_path("ca.crt"))
    ca_key: Path = Path(layout.pki_path("ca.key"))
    tls_cert: Path = Path(layout.pki_path("ca-service/serving.crt"))
    tls_key: Path = Path(layout.pki_path("ca-service/serving.key"))
    state_dir: Path = Path(layout.CA_SERVICE_STATE)
    listen: str = "127.0.0.1"
    port: int = 8443
    validity_seconds: float = 365 * 86400.0
    failed_auth_delay: float = 0.5
    max_failed_auth_delay: float = 10.0
    reserved_nodes: tuple[str, ...] = ()  # names a token bound at first use may not take
    nodes_kubeconfig: Path | None = None  # one that may read Nodes: a registered Node's name is taken too
    removed_keys: tuple[tuple[str, str], ...] = ()  # (`sha256:<hex>` of a key, host): a removed host's, not renewed
    service_sans: tuple[str, ...] = ()  # the API server's names and addresses, which no node may carry
    default_token_ttl: float = 3600.0  # `token create` without --ttl
    cert_reload_interval: float = 10.0

    @property
    def token_file(self) -> Path:
        return self.state_dir / "tokens.json"

    def to_document(self) -> dict[str, Any]:
        """The JSON document of the settings file; `cert_reload_interval` only when it is not the
        default (the module never sets it, and the file never had it)."""
        document: dict[str, Any] = {
            "ca_cert": str(self.ca_cert), "ca_key": str(self.ca_key), "tls_cert": str(self.tls_cert),
            "tls_key": str(self.tls_key), "state_dir": str(self.state_dir), "listen": self.listen, "port": self.port,
            "validity_seconds": self.validity_seconds, "default_token_ttl": self.default_token_ttl,
            "failed_auth_delay": self.failed_auth_delay, "max_failed_auth_delay": self.max_failed_auth_delay,
            "reserved_nodes": list(self.reserved_nodes),
            "nodes_kubeconfig": None if self.nodes_kubeconfig is None else str(self.nodes_kubeconfig),
            "removed_keys": dict(self.removed_keys), "service_sans": list(self.service_sans),
        }
        if self.cert_reload_interval != CaServiceConfig.__dataclass_fields__["cert_reload_interval"].default:
            document["cert_reload_interval"] = self.cert_reload_interval
        return document

    @classmethod
    def from_document(cls, document: Mapping[str, Any], **overrides: Any) -> CaServiceConfig:
        """The settings of a file's document, each override that is not None (a flag given) replacing
        the file's value. ValueError for a key the service does not know; TypeError for a path that is
        not a string."""
        settings = {**document, **_given(overrides)}
        for name in ("ca_cert", "ca_key", "tls_cert", "tls_key", "state_dir"):
            if name in settings:
                settings[name] = Path(settings[name])
        if settings.get("nodes_kubeconfig") is not None:
            settings["nodes_kubeconfig"] = Path(settings["nodes_kubeconfig"])
        for name in ("reserved_nodes", "service_sans"):
            if name in settings:
                settings[name] = tuple(settings[name])
        if "removed_keys" in settings:
            settings["removed_keys"] = tuple(sorted(dict(settings["removed_keys"]).items()))
        if unknown := sorted(set(settings) - set(cls.__dataclass_fields__)):
            raise ValueError(f"unknown CA service setting {unknown[0]!r}")
        return cls(**settings)
