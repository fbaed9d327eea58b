"""The components file (`layout.COMPONENTS_FILE`): what the agent's configuration keeper keeps on a host.

Render writes it beside the units and the agent reads it (`agent.configloop.load_components`); this
is their shared vocabulary, derived from the plan alone. Each entry is one component: its service's
argv and the files its configuration consists of (`component_config`), the registry's name for its
binary, its readiness probe argument and its executable on the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubesmith import layout
from kubesmith.formats import strings_in

if TYPE_CHECKING:  # the agent reads the components file without loading the plan's model
    from kubesmith.vocabulary.model import HostPlan, Service


@dataclass(frozen=True, slots=True)
class ComponentConfig:
    """What makes up one component's configuration on a host: argv and the files behind it."""

    name: str  # the service (unit) name: kube-apiserver
    argv: tuple[str, ...]
    paths: tuple[str, ...]  # absolute paths on the host, sorted

    def document(self) -> dict[str, Any]:
        return {"name": self.name, "argv": list(self.argv), "paths": list(self.paths)}

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> ComponentConfig:
        return cls(str(document["name"]), tuple(map(str, document["argv"])), tuple(map(str, document["paths"])))


def component_config(host: HostPlan, service: Service) -> ComponentConfig:
    """The files a service's configuration consists of: its unit, the plan's files that its argv
    names, that it needs or watches, and those that its configuration documents name in turn
    (the kubelet's KubeletConfiguration names its certificates; admission.yaml its plugins')."""
    by_path = {file.path: file for file in host.files}
    wanted = {f"{layout.UNIT_DIR}/{service.name}.service"}
    wanted |= {path for path in (*service.needs_files, *service.watch_files) if path in by_path}
    wanted |= {path for path in by_path if any(path in argument for argument in service.argv)}
    wanted |= {source for _, source in service.credentials if source in by_path}
    pending = [path for path in wanted if path in by_path]
    while pending:
        named = set(strings_in(by_path[pending.pop()].data)) & set(by_path)
        pending += sorted(named - wanted)
        wanted |= named
    return ComponentConfig(service.name, service.argv, tuple(sorted(wanted)))


@dataclass(frozen=True, slots=True)
class Component:
    config: ComponentConfig
    binary: str  # the registry's name for it: kube-scheduler
    probe: str | None  # readiness probe argument (health.probespec); None: no probe, never ready
    executable: str | None = None  # the binary on the host, for its own load (validate)
    after: tuple[str, ...] = ()  # the kept components on this host it starts after: while one is not
    # ready, its trial does not hold its readiness or exits against it

    def document(self) -> dict[str, Any]:
        return {**self.config.document(), "binary": self.binary, "probe": self.probe, "executable": self.executable,
                "after": list(self.after)}

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> Component:
        return cls(ComponentConfig.from_document(document), str(document["binary"]), document.get("probe"),
                   document.get("executable"), tuple(str(name) for name in document.get("after", ())))
