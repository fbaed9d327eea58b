"""The version-skew policy (`kubesmith.skew`): table-driven over what runs where and the target."""

from __future__ import annotations

import pytest

from kubesmith.skew import Release, judge, running_from

CP = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy")
NODE = ("kubelet", "kube-proxy")
HOSTS = ("h1", "h2", "h3")


def cluster(*releases: str, node: str | None = None) -> dict[str, dict[str, str | None]]:
    """Control-plane hosts h1.. at the given releases (all their components), and optionally a node n1."""
    versions: dict[str, dict[str, str | None]] = {f"h{i + 1}": dict.fromkeys(CP, release)
                                                  for i, release in enumerate(releases)}
    if node:
        versions["n1"] = dict.fromkeys(NODE, node)
    return versions


def verdict(versions: dict[str, dict[str, str | None]], target: str, changing: tuple[str, ...] | None = None):
    return judge(running_from(versions), target, changing if changing is not None else tuple(versions))


CASES = [
    # (name, versions, target, changing (None: all), kind, refusal contains or None, note contains or None)
    ("first apply", {"h1": dict.fromkeys(CP, None)}, "1.36.2", None, "install", None, None),
    ("unchanged", cluster("1.36.2", "1.36.2"), "1.36.2", None, "unchanged", None, None),
    ("patch upgrade", cluster("1.36.1", "1.36.1"), "1.36.2", None, "patch-upgrade", None, None),
    ("patch downgrade is a note", cluster("1.36.2"), "1.36.1", None, "patch-downgrade", None,
     "a patch downgrade"),
    ("minor upgrade", cluster("1.35.6", "1.35.6", "1.35.6"), "1.36.2", None, "minor-upgrade", None, None),
    ("skipped minor", cluster("1.34.3"), "1.36.2", None, "minor-upgrade", "skips 1.35", None),
    ("minor downgrade", cluster("1.36.2", "1.36.2"), "1.35.6", None, "minor-rollback", "minor downgrade", None),
    ("another major", cluster("1.36.2"), "2.0.0", None, "minor-upgrade", "another major release", None),
    ("rollback of a halted upgrade", cluster("1.36.2", "1.35.6", "1.35.6"), "1.35.6", None, "mixed", None,
     "the upgrade had not finished"),
    ("nodes alone ahead of the API servers", cluster("1.35.6", node="1.35.6"), "1.36.2", ("n1",), "minor-upgrade",
     "newer than the API server on h1", None),
    ("nodes after the API servers", {"h1": dict.fromkeys(CP, "1.36.2"), "n1": dict.fromkeys(NODE, "1.35.6")},
     "1.36.2", ("n1",), "mixed", None, None),
    ("one control-plane host first", cluster("1.35.6", "1.35.6"), "1.36.2", ("h1",), "minor-upgrade",
     "newer than the API server on h2", None),
    ("API servers two minors apart", cluster("1.35.6", "1.36.2"), "1.37.0", ("h2",), "mixed",
     "one minor release apart at most", None),
]


@pytest.mark.parametrize(("name", "versions", "target", "changing", "kind", "refusal", "note"), CASES,
                         ids=[case[0] for case in CASES])
def test_skew_verdicts(name: str, versions, target: str, changing, kind: str, refusal: str | None,
                       note: str | None) -> None:
    result = verdict(versions, target, changing)
    assert result.kind == kind
    if refusal is None:
        assert result.allowed, result.refusals
    else:
        assert any(refusal in text for text in result.refusals), result.refusals
    if note is not None:
        assert any(note in text for text in result.notes), result.notes
    else:
        assert not result.notes


def test_refusal_names_host_component_and_what_to_do() -> None:
    result = verdict(cluster("1.36.2"), "1.35.6")
    assert result.refusals[0].startswith("h1: kube-apiserver runs 1.36.2;")
    assert "keep 1.36" in result.refusals[0] and "kubesmith etcd restore" in result.refusals[0]
    skipped = verdict(cluster("1.34.3"), "1.36.2").refusals[0]
    assert "apply 1.35.x first, then 1.36.2" in skipped


def test_hosts_left_out_are_not_judged_for_moving() -> None:
    """A host the apply does not change keeps its release: no downgrade is judged on it."""
    result = verdict(cluster("1.36.2", "1.36.2"), "1.36.2", ("h1",))
    assert result.allowed and result.kind == "unchanged"


def test_release_parse() -> None:
    assert Release.parse("v1.36.2-rc.1") == Release(1, 36, 2)
    assert str(Release.parse("1.35.6")) == "1.35.6"
    with pytest.raises(ValueError, match="not a Kubernetes release"):
        Release.parse("latest")
