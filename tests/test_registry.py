"""The version registry: which flags each binary accepts per release, and why a flag is refused."""

from __future__ import annotations

import pytest

from kubesmith.versions.registry import VersionRegistry, load_registry

REGISTRY = load_registry()


def small_registry() -> VersionRegistry:
    """A registry with known history, to pin the added_in/removed_in semantics."""
    return VersionRegistry({
        "minors": ["1.30", "1.28", "1.29"],
        "binaries": {
            "kube-x": {"documented_in": "1.30", "flags": ["stable", "late", "gone-later"],
                       "history": [
                           {"flag": "late", "added_in": "1.29"},
                           {"flag": "gone-later", "added_in": "1.28", "removed_in": "1.30",
                            "replacement": "--stable"},
                           {"flag": "old-only", "added_in": None, "removed_in": "1.29", "note": "no replacement flag"},
                       ]},
            "etcd": {"documented_in": "3.5", "flags": ["name"]},
        },
        "removed_before_supported": [{"binary": "kube-x", "flag": "ancient", "removed_in": "1.24",
                                      "replacement": "--stable"}],
        "config_apis": {"Thing": {"1.28": "x/v1beta1", "1.29": "x/v1", "1.30": None}},
    })


def test_minors_sorted_numerically_and_newest() -> None:
    registry = small_registry()
    assert registry.minors == ("1.28", "1.29", "1.30")
    assert registry.newest == "1.30"
    assert registry.supports("1.29") and not registry.supports("1.27") and not registry.supports("1.3")


@pytest.mark.parametrize("minor, expected", [
    ("1.28", {"stable", "gone-later", "old-only"}),
    ("1.29", {"stable", "late", "gone-later"}),
    ("1.30", {"stable", "late"}),
])
def test_history_decides_availability(minor: str, expected: set[str]) -> None:
    assert small_registry().flags("kube-x", minor) == expected


def test_etcd_is_not_versioned_with_kubernetes() -> None:
    registry = small_registry()
    assert registry.flags("etcd", "1.28") == registry.flags("etcd", "1.30") == {"name"}
    assert registry.check_flag("etcd", "nmae", "1.28") == "etcd has no flag --nmae in etcd 3.5; did you mean 'name'?"


def test_check_flag_messages() -> None:
    registry = small_registry()
    assert registry.check_flag("kube-x", "stable", "1.28") is None
    assert registry.check_flag("kube-x", "gone-later", "1.30") == \
        "kube-x --gone-later was removed in Kubernetes 1.30; use --stable instead"
    assert registry.check_flag("kube-x", "old-only", "1.29") == \
        "kube-x --old-only was removed in Kubernetes 1.29; no replacement flag"
    assert registry.check_flag("kube-x", "ancient", "1.28") == \
        "kube-x --ancient was removed in Kubernetes 1.24; use --stable instead"
    assert registry.check_flag("kube-x", "late", "1.28") == \
        "kube-x --late is not available in Kubernetes 1.28; it was added in 1.29"
    assert registry.check_flag("kube-x", "stabel", "1.28") == \
        "kube-x has no flag --stabel in Kubernetes 1.28; did you mean 'stable'?"
    assert registry.check_flag("kube-x", "zzz", "1.28") == "kube-x has no flag --zzz in Kubernetes 1.28"


@pytest.mark.parametrize("flag", ["--stable", "-stable", "---stable"])
def test_leading_dashes(flag: str) -> None:
    assert small_registry().check_flag("kube-x", flag, "1.30") == \
        "write flag names without leading dashes: 'stable'"


def test_config_api() -> None:
    registry = small_registry()
    assert registry.config_api("Thing", "1.28") == "x/v1beta1"
    with pytest.raises(KeyError, match="Thing does not exist in Kubernetes 1.30"):
        registry.config_api("Thing", "1.30")


def test_bundled_registry_covers_the_supported_range() -> None:
    minors = REGISTRY.minors
    assert minors[0] == "1.28"
    assert [int(m.split(".")[1]) for m in minors] == list(range(28, 28 + len(minors)))
    assert set(REGISTRY.binaries) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                                      "kubelet", "kube-proxy"}
    for minor in minors:
        assert REGISTRY.config_api("KubeletConfiguration", minor).startswith("kubelet.config.k8s.io/")
        for binary in REGISTRY.binaries:
            assert len(REGISTRY.flags(binary, minor)) > 20


@pytest.mark.parametrize("binary, flag, minor, fragment", [
    ("kube-apiserver", "insecure-port", "1.28", "removed in Kubernetes 1.24"),
    ("kube-apiserver", "experimental-encryption-provider-config", "1.33",
     "removed in Kubernetes 1.24; use --encryption-provider-config instead"),
    ("kube-apiserver", "address", "1.37", "use --bind-address instead"),
    ("kubelet", "pod-infra-container-image", "1.35", "removed in Kubernetes 1.35"),
    ("kube-apiserver", "authentication-config", "1.28", "added in 1.29"),
    ("kube-controller-manager", "cluster-cider", "1.33", "did you mean 'cluster-cidr'?"),
])
def test_bundled_registry_messages(binary: str, flag: str, minor: str, fragment: str) -> None:
    message = REGISTRY.check_flag(binary, flag, minor)
    assert message is not None and fragment in message


def test_bundled_registry_accepts_current_flags() -> None:
    for minor in REGISTRY.minors:
        assert REGISTRY.check_flag("kube-apiserver", "audit-log-maxage", minor) is None
        assert REGISTRY.check_flag("kubelet", "config", minor) is None
    assert REGISTRY.check_flag("kubelet", "pod-infra-container-image", "1.34") is None
    assert REGISTRY.check_flag("kube-apiserver", "authentication-config", "1.29") is None
