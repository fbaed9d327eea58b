"""Where things live on a host. One place, so modules, PKI and backends agree on every path."""

from __future__ import annotations

ETC = "/etc/kubernetes"
PKI = f"{ETC}/pki"
CONFIG = f"{ETC}/config"  # component configuration documents
KUBESMITH_ETC = "/etc/kubesmith"
LIB = "/var/lib"
LOG = "/var/log/kubernetes"
BIN = "/usr/local/bin"
UNIT_DIR = "/etc/systemd/system"
CA_SERVICE_CONFIG = f"{KUBESMITH_ETC}/ca-service.json"
CA_SERVICE_STATE = f"{LIB}/kubesmith/ca"  # the token store and replay memory
AGENT_CONFIG = f"{KUBESMITH_ETC}/agent.json"
AGENT_STATE = f"{LIB}/kubesmith/agent"
AGENT_STATE_FILE = f"{AGENT_STATE}/state.json"  # the agent's report, which `kubesmith status` shows


def pki_path(relative: str) -> str:
    return f"{PKI}/{relative}"


def kubeconfig_path(name: str) -> str:
    return f"{ETC}/{name}.conf"


def config_path(name: str) -> str:
    return f"{CONFIG}/{name}"
