"""What `up` records in the state dir, so `down`/`status` work from any later process."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kubesmith.lab.config import LabConfig, LabHost

STATE_FILE = "lab.json"


@dataclass(frozen=True, slots=True)
class LabState:
    """The lab as brought up: its namespace and bridge names and its hosts."""

    netns: str
    bridge: str
    hosts: tuple[LabHost, ...]
    linked: bool = False  # reachable from the machine's own namespace

    def save(self, config: LabConfig) -> None:
        data = {"netns": self.netns, "bridge": self.bridge, "linked": self.linked,
                "hosts": [{"name": h.name, "address": h.address} for h in self.hosts]}
        (config.state_dir / STATE_FILE).write_text(json.dumps(data, indent=2) + "\n")

    @classmethod
    def load(cls, config: LabConfig) -> LabState | None:
        try:
            data = json.loads((config.state_dir / STATE_FILE).read_text())
            hosts = tuple(LabHost(name=h["name"], address=h["address"]) for h in data["hosts"])
            return cls(netns=str(data["netns"]), bridge=str(data["bridge"]), hosts=hosts,
                       linked=bool(data.get("linked", False)))
        except (OSError, ValueError, KeyError, TypeError):
            return None


def mounts_under(path: Path) -> list[Path]:
    """Mount points at or below path, deepest first (from /proc/self/mountinfo)."""
    prefix = str(path.resolve()).rstrip("/")
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = _unescape(line.split()[4])
        if point == prefix or point.startswith(prefix + "/"):
            found.append(Path(point))
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    return field.encode().decode("unicode_escape") if "\\" in field else field
