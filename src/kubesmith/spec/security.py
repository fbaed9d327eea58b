"""Settings that weaken a secure default, each named by the CIS Kubernetes Benchmark (v1.12) check
it breaks. Such a setting is an error unless the cluster file opts out by that check's id in
`spec.security.allowInsecure`; with the opt-out, `validate` and `plan` still say which check breaks.

tests/test_cis.py proves each id here: the plan of a spec with the setting (and the opt-out) fails
exactly that check when evaluated as kube-bench does.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kubesmith.durations import go_duration_ns
from kubesmith.modules.proxy import metrics_endpoint
from kubesmith.spec.effective import effective, go_bool
from kubesmith.spec.types import go_int
from kubesmith.spec.errors import LocPart

Loc = tuple[LocPart, ...]


@dataclass(frozen=True, slots=True)
class Weakening:
    loc: Loc  # under spec.components.<component>
    check: str  # CIS id
    title: str


TITLES = {
    "1.2.1": "API server --anonymous-auth=false",
    "1.2.2": "API server --token-auth-file not set",
    "1.2.6": "API server --authorization-mode not AlwaysAllow",
    "1.2.7": "API server --authorization-mode includes Node",
    "1.2.8": "API server --authorization-mode includes RBAC",
    "1.2.15": "API server --profiling=false",
    "1.2.27": "API server --encryption-provider-config set",
    "1.3.2": "controller-manager --profiling=false",
    "1.3.7": "controller-manager --bind-address=127.0.0.1",
    "1.4.1": "scheduler --profiling=false",
    "1.4.2": "scheduler --bind-address=127.0.0.1",
    "4.2.1": "kubelet anonymous authentication off",
    "4.2.2": "kubelet authorization mode not AlwaysAllow",
    "4.2.4": "kubelet read-only port 0",
    "4.2.5": "kubelet streaming connection idle timeout not 0",
    "4.2.6": "kubelet makes its iptables utility chains",
    "4.2.14": "kubelet seccomp default on",
    "4.3.1": "kube-proxy metrics bound to loopback",
}


def weakenings(components: Any) -> Iterator[tuple[str, Weakening]]:
    """(component alias, weakening) for every insecure setting in the typed component options."""
    for alias, attribute, rules in _RULES:
        options = getattr(components, attribute)
        for check, finder in rules:
            for loc in finder(options):
                yield alias, Weakening(loc, check, TITLES[check])


def _set(options: Any, component: str, flag: str, weak: Callable[[Any], bool]) -> list[Loc]:
    """Where the file sets the setting of `flag` (typed option, flag or configuration field), when the value
    given there, as the binary reads it, is weak (the defaults are not)."""
    found = effective(options, component, flag)
    return [found[0]] if found is not None and weak(found[1]) else []


def _go_true(value: Any) -> bool:
    """True as Go reads it; a value Go refuses counts as weak too (the flag checks name it as well)."""
    return go_bool(value) is not False


def _go_false(value: Any) -> bool:
    return go_bool(value) is not True


def _nonzero(value: Any) -> bool:
    return go_int(value) != 0


def _when(condition: bool, *loc: LocPart) -> list[Loc]:
    return [loc] if condition else []


def _not_loopback(value: Any) -> bool:
    """kube-proxy's metrics address off loopback. An empty one is its default, 127.0.0.1:10249 (kube-proxy
    v1.36 defaults "" from the configuration file and the flag alike; kubeadm's generated file writes "")."""
    if str(value) == "":
        return False
    host = metrics_endpoint(str(value))[0]
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host != "localhost"


def _zero_duration(value: Any) -> bool:
    """0 as Go reads it (`0`, `0s`, `0h0m`, `-0.0s`...); an unreadable duration counts as weak too."""
    try:
        return go_duration_ns(str(value)) == 0
    except ValueError:
        return True


_RULES: tuple[tuple[str, str, tuple[tuple[str, Callable[[Any], list[Loc]]], ...]], ...] = (
    ("apiserver", "apiserver", (
        ("1.2.1", lambda o: _when(o.anonymous_auth, "anonymousAuth")),
        ("1.2.2", lambda o: _when("token-auth-file" in o.extra_args, "extraArgs", "token-auth-file")),
        ("1.2.6", lambda o: _when("AlwaysAllow" in o.authorization_mode, "authorizationMode")),
        ("1.2.7", lambda o: _when("Node" not in o.authorization_mode, "authorizationMode")),
        ("1.2.8", lambda o: _when("RBAC" not in o.authorization_mode, "authorizationMode")),
        ("1.2.15", lambda o: _when(o.profiling, "profiling")),
        ("1.2.27", lambda o: _when(not o.encrypt_secrets, "encryptSecrets")),
    )),
    ("controllerManager", "controller_manager", (
        ("1.3.2", lambda o: _when(o.profiling, "profiling")),
        ("1.3.7", lambda o: _when(o.bind_address != "127.0.0.1", "bindAddress")),
    )),
    ("scheduler", "scheduler", (
        ("1.4.1", lambda o: _when(o.profiling, "profiling")),
        ("1.4.2", lambda o: _when(o.bind_address != "127.0.0.1", "bindAddress")),
    )),
    ("kubelet", "kubelet", (
        ("4.2.1", lambda o: _set(o, "kubelet", "anonymous-auth", _go_true)),
        ("4.2.2", lambda o: _set(o, "kubelet", "authorization-mode", lambda v: str(v) != "Webhook")),
        ("4.2.4", lambda o: _set(o, "kubelet", "read-only-port", _nonzero)),
        ("4.2.5", lambda o: _set(o, "kubelet", "streaming-connection-idle-timeout", _zero_duration)),
        ("4.2.6", lambda o: _set(o, "kubelet", "make-iptables-util-chains", _go_false)),
        ("4.2.14", lambda o: _set(o, "kubelet", "seccomp-default", _go_false)),
    )),
    ("proxy", "proxy", (
        ("4.3.1", lambda o: _set(o, "proxy", "metrics-bind-address", _not_loopback)),
    )),
)
