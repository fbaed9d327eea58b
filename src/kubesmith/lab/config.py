"""Where a lab lives and how it is named: one frozen value, read once from the environment.

Everything else in `kubesmith.lab` takes a `LabConfig`, so tests can run a lab of
their own (own state dir, own network namespace) next to a user's lab.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_STATE_DIR = Path("/var/lib/kubesmith/lab")
DEFAULT_CACHE_DIR = Path("/var/cache/kubesmith/lab")
DEFAULT_NETNS = "kubesmith-lab"
DEFAULT_BRIDGE = "kslab0"
DEFAULT_NETWORK = "10.213.0"  # a /24: the bridge is .1, host hN is .(10+N)
MAX_HOSTS = 200

ENV_STATE = "KUBESMITH_LAB_STATE"
ENV_CACHE = "KUBESMITH_LAB_CACHE"
ENV_NETNS = "KUBESMITH_LAB_NETNS"
ENV_BOOT_TIMEOUT = "KUBESMITH_LAB_BOOT_TIMEOUT"
ENV_NSPAWN_ARGS = "KUBESMITH_LAB_NSPAWN_ARGS"


@dataclass(frozen=True, slots=True)
class LabHost:
    """One lab host: its name (also its hostname) and its address on the lab bridge."""

    name: str
    address: str


@dataclass(frozen=True, slots=True)
class LabConfig:
    """Names and paths of one lab instance; two instances differ in state_dir and netns."""

    state_dir: Path = DEFAULT_STATE_DIR
    cache_dir: Path = DEFAULT_CACHE_DIR
    netns: str = DEFAULT_NETNS
    bridge: str = DEFAULT_BRIDGE
    network: str = DEFAULT_NETWORK
    boot_timeout: float = 120.0
    nspawn_args: tuple[str, ...] = field(default=())
    link: bool = False  # reach the hosts from the machine's own namespace (`netns.link`); `lab up` sets it
    suite: str | None = None  # Debian suite the hosts boot; None: this machine's own (`lab up --suite` sets it)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LabConfig:
        """The lab the CLI works on: defaults, overridden by KUBESMITH_LAB_* variables."""
        env = os.environ if environ is None else environ
        return cls(
            state_dir=Path(env.get(ENV_STATE) or DEFAULT_STATE_DIR),
            cache_dir=Path(env.get(ENV_CACHE) or DEFAULT_CACHE_DIR),
            netns=env.get(ENV_NETNS) or DEFAULT_NETNS,
            boot_timeout=float(env.get(ENV_BOOT_TIMEOUT) or 120.0),
            nspawn_args=tuple((env.get(ENV_NSPAWN_ARGS) or "").split()),
        )

    # -- derived names and paths -------------------------------------------------------------

    @property
    def netns_path(self) -> Path:
        return Path("/run/netns") / self.netns

    @property
    def bridge_address(self) -> str:
        return f"{self.network}.1"

    @property
    def image_dir(self) -> Path:
        """Where the hosts' image is cached: the cache dir itself for this machine's suite (as before
        suites could be chosen, so an existing cache stays valid), a directory of its own per other suite."""
        return self.cache_dir if self.suite is None else self.cache_dir / "suites" / self.suite

    @property
    def rootfs(self) -> Path:
        return self.image_dir / "rootfs"

    @property
    def hosts_dir(self) -> Path:
        return self.state_dir / "hosts"

    @property
    def ssh_config(self) -> Path:
        return self.state_dir / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.state_dir / "known_hosts"

    @property
    def client_key(self) -> Path:
        return self.state_dir / "id_ed25519"

    def host_dir(self, name: str) -> Path:
        return self.hosts_dir / name

    def machine_name(self, name: str) -> str:
        """The nspawn machine name; unique per lab so two labs never share nspawn's /run entries."""
        return f"{self.netns}-{name}"

    def cgroup_name(self, name: str) -> str:
        return f"{self.netns}.{name}"

    def host(self, index: int) -> LabHost:
        """Host number `index` (1-based): h1 at .11, h2 at .12, ..."""
        return LabHost(name=f"h{index}", address=f"{self.network}.{10 + index}")

    def hosts(self, count: int) -> tuple[LabHost, ...]:
        return tuple(self.host(i) for i in range(1, count + 1))
