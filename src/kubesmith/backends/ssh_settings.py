"""Which SSH settings to use for a cluster: command line, then the spec, then a running lab."""

from __future__ import annotations

from pathlib import Path

from kubesmith.lab.config import LabConfig
from kubesmith.spec.model import Cluster
from kubesmith.transport.ssh import SshOptions


def ssh_options(cluster: Cluster, config_file: str | None = None, known_hosts: str | None = None,
                identity: str | None = None, user: str | None = None) -> tuple[SshOptions, str]:
    """The options and a one-line note on where they came from (shown to the operator)."""
    spec = cluster.spec.ssh
    config = config_file or spec.config_file
    known = known_hosts or spec.known_hosts_file
    key = identity or spec.identity_file
    source = "command line and spec"
    lab = LabConfig.from_env()
    if not (config or known or key) and _all_lab_hosts(cluster, lab) and lab.ssh_config.exists():
        config, known, key = str(lab.ssh_config), str(lab.known_hosts), str(lab.client_key)
        source = f"the lab's SSH settings ({lab.ssh_config})"
    options = SshOptions(
        user=user or spec.user,
        port=spec.port,
        config_file=Path(config) if config else None,
        known_hosts=Path(known) if known else None,
        identity_files=(Path(key),) if key else (),
        connect_retry_for=spec.connect_retry_seconds,
        max_parallel_hosts=spec.max_parallel_hosts,
    )
    return options, source


def _all_lab_hosts(cluster: Cluster, lab: LabConfig) -> bool:
    prefix = f"{lab.network}."
    return all(host.address.startswith(prefix) for host in cluster.spec.hosts)
