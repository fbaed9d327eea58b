"""Component modules: every file here that exports a `MODULE` (modules/discovery.py), in `position` order.
Order matters only for presentation; dependencies are explicit in the plan."""

from __future__ import annotations

from kubesmith.modules.base import Module
from kubesmith.modules.discovery import component_modules

MODULES: tuple[Module, ...] = component_modules()

# each component's default trial length, as its module declares it (Module.trial), by its service: the agent's
# defaults (through the cluster facts) and the services whose configurations it keeps
TRIAL_SECONDS: dict[str, float] = {module.trial.service: module.trial.seconds for module in MODULES
                                   if module.trial is not None}
