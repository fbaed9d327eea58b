"""The lab a bench boots: its own state directory and network namespace, never the user's lab nor a
test session's, so a bench can run beside either."""

from __future__ import annotations

from pathlib import Path

from kubesmith.lab.config import LabConfig


def own_lab(state_name: str, netns: str) -> LabConfig:
    """The machine's lab settings (image cache, boot timeout) with a state directory and namespace of
    the bench's own."""
    base = LabConfig.from_env()
    return LabConfig(state_dir=Path("/var/lib/kubesmith") / state_name, cache_dir=base.cache_dir, netns=netns,
                     boot_timeout=base.boot_timeout)
