"""Where things live on a host. One place, so modules, PKI and backends agree on every path."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ETC = "/etc/kubernetes"
PKI = f"{ETC}/pki"
CONFIG = f"{ETC}/config"  # component configuration documents
KUBESMITH_ETC = "/etc/kubesmith"
LIB = "/var/lib"
LOG = "/var/log/kubernetes"
BIN = "/usr/local/bin"  # kubesmith's wrapper, etcd and its tools (etcd is versioned on its own)
# Each Kubernetes release's binaries in a directory of their own, which the units name: a host keeps the
# release it ran before an upgrade beside the new one, so the agent's rollback of a unit (part of every
# configuration checkpoint) goes back to a binary that is still there, with no upload in between.
RELEASES = "/usr/local/lib/kubesmith/releases"
RELEASE_BINARIES = frozenset({"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy",
                              "kubectl"})
HOST_PYTHON = "/usr/bin/python3"  # what kubesmith's runtime on a host runs (its wrapper's #! line)
LEGACY_RELEASE = "unversioned"  # a host applied before RELEASES: its Kubernetes binaries are in BIN
UNIT_DIR = "/etc/systemd/system"
CA_SERVICE_CONFIG = f"{KUBESMITH_ETC}/ca-service.json"
CA_SERVICE_STATE = f"{LIB}/kubesmith/ca"  # the token store and replay memory
APPLIED_MANIFEST = f"{LIB}/kubesmith/applied.json"  # what the last apply put on a host, and for which cluster
AGENT_CONFIG = f"{KUBESMITH_ETC}/agent.json"
# beside an add-on file, the nodes to label first (read by `kubesmith addons apply` on a host, which
# must not import the modules to know it)
ADDON_LABELS_SUFFIX = ".labels.json"
AGENT_STATE = f"{LIB}/kubesmith/agent"
AGENT_STATE_FILE = f"{AGENT_STATE}/state.json"  # the agent's report, which `kubesmith status` shows
CONFIG_CHECKPOINTS = f"{LIB}/kubesmith/config"  # per component: checkpoints and the assigned/active/LKG records
COMPONENTS_FILE = f"{KUBESMITH_ETC}/components.json"  # what makes up each component's configuration (agent)
CREDENTIALS = "/run/credentials"  # systemd's per-unit copies of root-only files (LoadCredential=)
VERSIONS_CACHE = "/run/kubesmith/versions"  # binaries' `--version` answers by inode and times (a tmpfs)


def release_dir(version: str) -> str:
    return f"{RELEASES}/{version}"


def release_of(path: str) -> str | None:
    """The release a shipped Kubernetes binary's path belongs to: `<RELEASES>/<version>/<name>` gives
    the version, `<BIN>/<name>` LEGACY_RELEASE; None for any other path."""
    if path.startswith(RELEASES + "/"):
        version, _, name = path.removeprefix(RELEASES + "/").partition("/")
        return version if version and name and "/" not in name else None
    if path.startswith(BIN + "/") and path.removeprefix(BIN + "/") in RELEASE_BINARIES:
        return LEGACY_RELEASE
    return None


def pki_path(relative: str) -> str:
    return f"{PKI}/{relative}"


def kubeconfig_path(name: str) -> str:
    return f"{ETC}/{name}.conf"


def config_path(name: str) -> str:
    return f"{CONFIG}/{name}"


def credential_path(service: str, name: str) -> str:
    """Where systemd puts credential `name` of unit `service`.service for the service's own user."""
    return f"{CREDENTIALS}/{service}.service/{name}"


@dataclass(frozen=True, slots=True)
class RunPaths:
    """Where `kubesmith run` keeps one host under the state directory on this machine: its
    rendered tree, its root (the host's paths moved under it), its environment and its record."""

    state_dir: Path
    host: str

    @property
    def rendered(self) -> Path:
        return self.state_dir / "rendered" / self.host

    @property
    def base(self) -> Path:
        return self.state_dir / "run" / self.host

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def pki_dir(self) -> Path:
        return self.root / PKI.lstrip("/")

    @property
    def env_dir(self) -> Path:
        return self.base / "env"

    @property
    def state_file(self) -> Path:
        return self.base / "run.json"
