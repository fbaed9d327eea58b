"""What a component module is: typed options (interface) and a host contribution (implementation).

A module never touches disk or network. Given the evaluated cluster facts and one host, it
returns services, files, certificate requests, users and targets; the plan collects them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from kubesmith.vocabulary.facts import Contribution, HostContext, HostFacts
from kubesmith.vocabulary.model import File, Probe, Source, User
from kubesmith.vocabulary.types import ExtraArgs, FeatureGates, StrictModel

if TYPE_CHECKING:
    from kubesmith.spec.model import Cluster
    from kubesmith.versions.registry import VersionRegistry

LocPart = str | int


@dataclass(frozen=True, slots=True)
class OptionProblem:
    loc: tuple[LocPart, ...]  # relative to spec.components.<key>
    message: str
    severity: str = "error"


# What to set instead of a managed setting (Managed.flags and Managed.config): a bare name is an option of
# the same component (spec.components.<c>.<name>), anything else says where kubesmith takes the value from
PKI = "kubesmith's PKI (spec.pki)"
CONFIG = "kubesmith's configuration file for it; use extraConfig"
COMMON_FLAGS = {"v": "verbosity", "feature-gates": "featureGates"}
# --master replaces the API server of the component's kubeconfig: a plain http:// one would hand kube-proxy
# made-up Services and endpoints (and the cluster's traffic with them), past kubesmith's CA
MASTER = "its kubeconfig (the API server behind kubesmith's CA)"
# the fields every configuration document kubesmith writes has
DOCUMENT = {("apiVersion",): "spec.kubernetesVersion (the release's configuration API)",
            ("kind",): "the document it writes (KubeletConfiguration, KubeProxyConfiguration...)"}


@dataclass(frozen=True, slots=True)
class NoOption:
    """A managed setting no option replaces: kubesmith refuses it outright, for this reason."""

    why: str


@dataclass(frozen=True, slots=True)
class Managed:
    """Settings kubesmith sets itself, which extraArgs and extraConfig may not replace (spec/managed.py).

    The probes, kubeconfigs, certificates and unit files follow the typed options, so such an entry is an
    error that names what to set instead.
    """

    flags: Mapping[str, str | NoOption] = field(default_factory=dict)  # of `binary`, without dashes
    # switches that break the cluster or weaken it in one position only: their default (the value here) is
    # harmless and passes, as Go reads it (`false`, `0`, `f`...); a text (a string flag's "off", such as
    # empty) passes spelled exactly so
    harmless: Mapping[str, bool | str] = field(default_factory=dict)
    # flags the module sets as a default that extraArgs may replace: nothing else kubesmith writes follows
    # them, and the flag checks judge the value
    replaceable: frozenset[str] = frozenset()
    # fields of the component's configuration document (extraConfig), by path; extraConfig is merged over
    # kubesmith's document, so these would replace it
    config: Mapping[tuple[str, ...], str | NoOption] = field(default_factory=dict)
    # the values kubesmith writes itself where every supported release agrees: a pasted configuration
    # that repeats them replaces nothing, so it is no error
    same: Mapping[tuple[str, ...], Any] = field(default_factory=dict)
    # extraArgs flags the binary ignores next to the configuration file kubesmith gives it (--config)
    ignored_with_config: Callable[[str], bool] | None = None


@dataclass(frozen=True, slots=True)
class CisRule:
    """A setting that weakens a secure default, named by the CIS Kubernetes Benchmark (v1.12) check it
    breaks: spec/security.py refuses it unless spec.security.allowInsecure names the check.

    Either a typed option at `loc`, weak when `weak(options)` holds, or the setting of `flag` wherever the
    file sets it (typed option, flag or configuration field), weak when `weak(value)` holds for the value as
    the binary reads it, or for a boolean setting when Go reads it as anything but `secure`.
    """

    check: str  # CIS id
    title: str
    loc: tuple[LocPart, ...] = ()  # under spec.components.<component>
    flag: str | None = None
    weak: Callable[[Any], bool] | None = None
    secure: bool | None = None


@dataclass(frozen=True, slots=True)
class Trial:
    """How long a new configuration of the component's service runs on trial before it becomes
    last-known-good (seconds; the agent rolls it back if the component is not ready by then, crash-loops
    or loses readiness): the agent's default, which spec.components.agent.configTrials may replace."""

    service: str  # the component's service, as the agent's keeper and configTrials name it
    seconds: float
    rank: int  # where configTrials lists it (schema, options, defaults): the longer trials first


class ComponentOptions(StrictModel):
    """Options every Kubernetes component shares."""

    verbosity: int | None = Field(default=None, ge=0, le=10, description="Log verbosity (--v); default: the binary's.")
    extra_args: ExtraArgs = Field(default={}, description="Additional command-line flags (without leading dashes); "
                                  "not the flags kubesmith sets from typed options, which are refused.")
    feature_gates: FeatureGates | None = Field(default=None, description="Feature gates; default: spec.featureGates, "
                                               "overridden gate by gate.",
                                               json_schema_extra={"x-derived-from": "spec.featureGates"})


class Module:
    """Base class: subclasses set the class attributes and implement `contribute`; the file exports one
    instance as `MODULE`, which is how `kubesmith.modules` finds the component (modules/discovery.py)."""

    key: ClassVar[str]  # spec.components.<key>
    position: ClassVar[int]  # where it comes among the components (spec.components, options, schema, plan)
    title: ClassVar[str]
    options: ClassVar[type[StrictModel]]
    roles: ClassVar[frozenset[str]]  # hosts with any of these roles run the component
    binary: ClassVar[str | None] = None  # for flag checks of extraArgs
    managed: ClassVar[Managed] = Managed()
    cis_rules: ClassVar[tuple[CisRule, ...]] = ()  # the settings that weaken it, by CIS check
    trial: ClassVar[Trial | None] = None  # its configuration's trial when the agent keeps it (keepConfigs)

    def applies(self, host: HostFacts) -> bool:
        return bool(self.roles & host.roles)

    def contribute(self, ctx: HostContext, options: Any) -> Contribution:
        raise NotImplementedError

    def check(self, spec: Cluster, options: Any, registry: VersionRegistry) -> list[OptionProblem]:
        """Semantic checks beyond types and extraArgs flags (those are checked for every module)."""
        return []


def render_flags(defaults: dict[str, Any], extra: ExtraArgs) -> tuple[str, ...]:
    """`--name=value` arguments; a user's extraArgs entry replaces the default of the same flag.

    None drops a flag, so modules can state optional flags inline.
    """
    merged = {name: value for name, value in defaults.items() if value is not None}
    merged.update(extra)
    return tuple(f"--{name}={flag_value(value)}" for name, value in merged.items())


def flag_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(item) for item in value)
    return str(value)


def feature_gates_flag(gates: tuple[tuple[str, bool], ...] | dict[str, bool] | None) -> str | None:
    items = sorted(dict(gates or ()).items())
    return ",".join(f"{name}={flag_value(enabled)}" for name, enabled in items) or None


def effective_gates(ctx: HostContext, binary: str, own: FeatureGates | None) -> dict[str, bool]:
    """The cluster's feature gates that `binary` knows (validation refused names none knows), overridden
    gate by gate by the component's own: a gate is never handed to a component that would not take it."""
    known = ctx.registry.gates(binary, ctx.cluster.minor)
    gates = {name: value for name, value in ctx.cluster.feature_gates if known is None or name in known}
    gates.update(own or {})
    return gates


def file_from(source_kind: str, name: str, path: str, owner: str, mode: int, **options: str) -> File:
    return File(path=path, mode=mode, owner=owner, group=owner,
                source=Source(kind=source_kind, name=name, options=tuple(sorted(options.items()))))  # type: ignore[arg-type]


def https_probe(host: str, port: int, path: str, ca: str, client: str | None = None,
                run_on: str | None = None) -> Probe:
    return Probe(kind="https", host=host, port=port, path=path, ca=ca, client_certificate=client, run_on=run_on)


def system_user(name: str, home: str, description: str) -> User:
    return User(name=name, group=name, home=home, description=description)
