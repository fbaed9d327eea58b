"""Flags kubesmith sets itself, which `extraArgs` may not replace.

The probes, kubeconfigs, certificates and unit files follow the typed options: an extraArgs
`secure-port: 7443` would move the API server while every client and probe kept 6443, and
`tls-private-key-file` would swap a key the PKI does not know. So such an entry is an error that
names what to set instead. Each module declares its own such flags and configuration fields
(`Module.managed`, in modules/<component>.py); this file gathers them and judges extraArgs and
extraConfig with them. tests/test_spec_security.py checks the flags against those every module emits,
so a new flag cannot be left out.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from kubesmith.images import PAUSE_IMAGE
from kubesmith.modules import MODULES
from kubesmith.modules.base import NoOption
from kubesmith.modules.container_runtime import RUNC_SYSTEMD_CGROUP
from kubesmith.spec.effective import go_bool, toml_value_at, value_at
from kubesmith.spec.model import Components


def _section(key: str) -> str:
    return Components.model_fields[key].alias or key


# each module declares its own (Module.managed); these tables gather them by binary and by section
MANAGED: dict[str, dict[str, str | NoOption]] = {
    module.binary: dict(module.managed.flags) for module in MODULES if module.binary and module.managed.flags}
_HARMLESS: dict[tuple[str, str], bool | str] = {(module.binary, flag): value for module in MODULES if module.binary
                                          for flag, value in module.managed.harmless.items()}
REPLACEABLE: dict[str, frozenset[str]] = {
    module.binary: module.managed.replaceable for module in MODULES if module.binary and module.managed.replaceable}
MANAGED_CONFIG: dict[str, dict[tuple[str, ...], str | NoOption]] = {
    _section(module.key): dict(module.managed.config) for module in MODULES if module.managed.config}
SAME_AS_KUBESMITH: dict[str, dict[tuple[str, ...], Any]] = {
    _section(module.key): dict(module.managed.same) for module in MODULES if module.managed.same}
_IGNORED_WITH_CONFIG: dict[str, Callable[[str], bool]] = {
    module.binary: module.managed.ignored_with_config for module in MODULES
    if module.binary and module.managed.ignored_with_config}


def managed_flag_problem(binary: str, component: str, flag: str, value: Any = None) -> str | None:
    """Why extraArgs may not set `flag` of `binary` (to `value`), or None when it may."""
    harmless = _HARMLESS.get((binary, flag))
    if harmless is not None and (value == harmless if isinstance(harmless, str) else go_bool(value) is harmless):
        return None
    instead = MANAGED.get(binary, {}).get(flag)
    return None if instead is None else _managed(f"--{flag}", component, instead, "extraArgs")


def ignored_flag_problem(binary: str, component: str, flag: str) -> str | None:
    """Why an extraArgs `flag` the binary knows would do nothing (it reads that setting from kubesmith's
    configuration file for it), or None."""
    ignored = _IGNORED_WITH_CONFIG.get(binary)
    if ignored is None or not ignored(flag):
        return None
    return (f"{binary} ignores --{flag} next to the configuration file kubesmith gives it (--config): set the "
            f"field in spec.components.{component}.extraConfig instead")


def managed_config_problem(section: str, path: tuple[str, ...]) -> str | None:
    """Why extraConfig of `section` may not set the field at `path`, or None when it may."""
    instead = MANAGED_CONFIG.get(section, {}).get(path)
    return None if instead is None else _managed(".".join(path), section, instead, "extraConfig")


def _raw(data: Any, *path: str, default: Any = None) -> Any:
    present, value = value_at(data, path)
    return value if present and value is not None else default


def typed_values(spec: Any) -> dict[str, dict[tuple[str, ...], Any]]:
    """What kubesmith writes for the managed fields a typed option (or spec.network) sets, from raw data
    (defaults: the models'); a field it derives from the host (cgroupDriver, unset) is absent."""
    components = _raw(spec, "components", default={})
    kubelet, proxy = _raw(components, "kubelet", default={}), _raw(components, "proxy", default={})
    runtime = _raw(components, "containerRuntime", default={})
    socket = _raw(runtime, "socket", default="/run/containerd/containerd.sock")
    values: dict[str, dict[tuple[str, ...], Any]] = {
        "kubelet": {("port",): _raw(kubelet, "port", default=10250),
                    ("healthzPort",): _raw(kubelet, "healthzPort", default=10248),
                    ("clusterDomain",): _raw(spec, "network", "dnsDomain", default="cluster.local"),
                    ("containerRuntimeEndpoint",): _raw(kubelet, "containerRuntimeEndpoint", default=f"unix://{socket}")},
        "proxy": {("clusterCIDR",): _raw(proxy, "clusterCidr",
                                          default=_raw(spec, "network", "clusterCidr", default="10.200.0.0/16"))},
        "containerRuntime": {("grpc", "address"): socket,
                             ("metrics", "address"): f"127.0.0.1:{_raw(runtime, 'metricsPort', default=1338)}"},
    }
    if "cgroupDriver" in kubelet:
        values["kubelet"][("cgroupDriver",)] = kubelet["cgroupDriver"]
        values["containerRuntime"][RUNC_SYSTEMD_CGROUP] = kubelet["cgroupDriver"] == "systemd"
    values["containerRuntime"][("plugins", "io.containerd.grpc.v1.cri", "sandbox_image")] = \
        _raw(runtime, "sandboxImage", default=PAUSE_IMAGE)
    return values


def managed_config_findings(components: Any, spec: Any = None) -> list[tuple[tuple[str, ...], str, str]]:
    """Every managed field set in an extraConfig (raw data: spec.components), located; a value equal to what
    kubesmith writes there replaces nothing and passes."""
    findings: list[tuple[tuple[str, ...], str, str]] = []
    typed = typed_values(spec if isinstance(spec, dict) else {"components": components})
    for section, fields in MANAGED_CONFIG.items():
        config = components.get(section) if isinstance(components, dict) else None
        config = config.get("extraConfig") if isinstance(config, dict) else None
        same = SAME_AS_KUBESMITH.get(section, {}) | typed.get(section, {})
        for path in fields:
            found = config_field(section, config, path)
            if found is None or (path in same and found[1] == same[path] and type(found[1]) is type(same[path])):
                continue
            if problem := managed_config_problem(section, path):
                findings.append((("spec", "components", section, "extraConfig", *found[0]), problem, "error"))
    return findings


def config_field(section: str, config: Any, path: tuple[str, ...]) -> tuple[tuple[str, ...], Any] | None:
    """(keys as spelled, value) of the field at `path` of a section's extraConfig, matched as its component
    matches keys: the kubelet, kube-proxy and kube-scheduler exactly (their decoders are case-sensitive; the
    v1.36.2 kubelet and kube-proxy ignore MaxPods or MetricsBindAddress as unknown fields), containerd as
    go-toml v1 does, past the tables kubesmith writes itself. None: not set there."""
    if section == "containerRuntime":
        return toml_value_at(config, containerd_written(), path)
    present, value = value_at(config, path)
    return (path, value) if present else None


@functools.cache
def containerd_written() -> dict[str, Any]:
    """kubesmith's own config.toml (its keys decide which spellings of extraConfig containerd reads)."""
    from kubesmith.modules.container_runtime import ContainerRuntimeOptions, containerd_config
    from kubesmith.vocabulary.environment import HostEnvironment
    return containerd_config(ContainerRuntimeOptions(), HostEnvironment())


def _managed(what: str, component: str, instead: str | NoOption, route: str) -> str:
    if isinstance(instead, NoOption):
        return f"{what}: {instead.why}"
    if instead.replace(".", "").isalnum() and instead[:1].islower() and " " not in instead:
        option = instead if "." in instead and instead.split(".")[0] in ("spec", "metadata") else \
            f"spec.components.{component}.{instead}"
        return f"kubesmith sets {what} from {option}: set that option instead ({route} cannot replace it)"
    return f"kubesmith sets {what} itself, from {instead}; {route} cannot replace it"


def extra_args_of(section: Any) -> dict[Any, Any]:
    extra = section.get("extraArgs") if isinstance(section, dict) else None
    return extra if isinstance(extra, dict) else {}
