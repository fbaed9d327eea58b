"""The upstream version-skew policy, as a pure judgement of "what runs where" against a target release.

An apply that changes `spec.kubernetesVersion` is an upgrade; before anything changes on a host it is
judged here (https://kubernetes.io/releases/version-skew-policy/):

- one minor release at a time, and no minor downgrade (a patch downgrade is allowed, with a note):
  an API server of a newer minor may have written objects in storage versions the older one cannot read;
- the API servers move first: a kubelet or kube-proxy is never newer than the oldest API server, and
  a controller-manager or scheduler never newer than the API servers it talks to (any of them, through
  the control-plane endpoint);
- the API servers of one cluster are at most one minor apart.

The rules are checked on the state the apply leaves: components on the hosts it changes run the target,
the others keep what they run. So applying a new release to node hosts alone (`--hosts`) is refused
while an API server is older, and applying the old release again after an upgrade that halted part-way
is allowed as long as some API server still runs it (the upgrade has not finished; see `judge`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

APISERVER = "kube-apiserver"
CONTROL_PLANE_CLIENTS = ("kube-controller-manager", "kube-scheduler")
NODE_COMPONENTS = ("kubelet", "kube-proxy")
COMPONENTS = (APISERVER, *CONTROL_PLANE_CLIENTS, *NODE_COMPONENTS)
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True, slots=True, order=True)
class Release:
    """A Kubernetes release as major, minor, patch (pre-release suffixes are ignored)."""

    major: int
    minor: int
    patch: int

    @classmethod
    def parse(cls, text: str) -> Release:
        match = _VERSION.match(text.strip())
        if not match:
            raise ValueError(f"{text!r} is not a Kubernetes release (want 1.36.2)")
        return cls(*(int(part) for part in match.groups()))

    @property
    def minor_release(self) -> tuple[int, int]:
        return (self.major, self.minor)

    @property
    def minor_name(self) -> str:
        return f"{self.major}.{self.minor}"

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


@dataclass(frozen=True, slots=True)
class Running:
    """One component on one host and the release it runs (None: not there yet, nothing to judge)."""

    host: str
    component: str
    release: Release | None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What an apply to `target` is: its kind, why it is refused (empty: allowed) and what to know."""

    target: Release
    kind: str  # "install", "unchanged", "patch-upgrade", "patch-downgrade", "minor-upgrade", "minor-rollback", "mixed"
    refusals: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    oldest: Release | None = None
    newest: Release | None = None

    @property
    def allowed(self) -> bool:
        return not self.refusals

    @property
    def changes_release(self) -> bool:
        return self.kind not in ("install", "unchanged")

    def as_dict(self) -> dict[str, object]:
        return {"target": str(self.target), "kind": self.kind, "allowed": self.allowed,
                "refusals": list(self.refusals), "notes": list(self.notes),
                "oldest": str(self.oldest) if self.oldest else None,
                "newest": str(self.newest) if self.newest else None}


@dataclass(slots=True)
class _Findings:
    refusals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def refuse(self, text: str) -> None:
        if text not in self.refusals:
            self.refusals.append(text)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def running_from(versions: Mapping[str, Mapping[str, str | None]]) -> list[Running]:
    """`{host: {component: "1.35.6" | None}}` (what `backends.host_versions` reads) as Running entries;
    components outside the policy (etcd, kubesmith's own) are left out."""
    return [Running(host, component, Release.parse(text) if text else None)
            for host, components in sorted(versions.items())
            for component, text in sorted(components.items()) if component in COMPONENTS]


def judge(running: Iterable[Running], target: str | Release, changing: Iterable[str]) -> Verdict:
    """The verdict for moving the components on the hosts in `changing` to `target`, the others staying
    as they run. Pure: every refusal names the host, the component, what is wrong and what to do."""
    goal = target if isinstance(target, Release) else Release.parse(target)
    entries = [entry for entry in running if entry.release is not None]
    moving = frozenset(changing)
    findings = _Findings()
    if not entries:
        return Verdict(goal, "install")
    old_apiservers = [e.release for e in entries if e.component == APISERVER and e.release]
    for entry in entries:
        if entry.host in moving:
            _judge_move(entry, goal, old_apiservers, findings)
    after = [Running(e.host, e.component, goal if e.host in moving else e.release) for e in entries]
    _judge_skew(after, moving, findings)
    releases = sorted(e.release for e in entries if e.release)
    return Verdict(goal, _kind(releases, goal), tuple(findings.refusals), tuple(findings.notes),
                   releases[0], releases[-1])


def _judge_move(entry: Running, goal: Release, apiservers: list[Release], findings: _Findings) -> None:
    """One component moving from what it runs to `goal`: one minor up at most; down only within a minor,
    or back to a minor some API server still runs (an upgrade that halted part-way)."""
    now = entry.release
    assert now is not None
    where = f"{entry.host}: {entry.component} runs {now}"
    if now.major != goal.major:
        findings.refuse(f"{where}; {goal} is another major release: kubesmith moves one minor release at a time")
    elif goal.minor > now.minor + 1:
        skipped = ", ".join(f"{goal.major}.{minor}" for minor in range(now.minor + 1, goal.minor))
        findings.refuse(f"{where}; {goal} skips {skipped}: upgrade one minor release at a time "
                        f"(apply {goal.major}.{now.minor + 1}.x first, then {goal})")
    elif goal.minor < now.minor:
        if any(api.minor_release == goal.minor_release for api in apiservers):
            findings.note(f"{entry.host}: {entry.component} goes back from {now} to {goal}: the upgrade had not "
                          f"finished (an API server still runs {goal.minor_name})")
        else:
            findings.refuse(f"{where}; going back to {goal} is a minor downgrade, which Kubernetes does not "
                            f"support once every API server runs {now.minor_name}: keep {now.minor_name} "
                            f"(set kubernetesVersion to {now.minor_name}.x) or restore an etcd snapshot taken "
                            f"before the upgrade (`kubesmith etcd restore`)")
    elif goal.minor == now.minor and goal.patch < now.patch:
        findings.note(f"{entry.host}: {entry.component} goes back from {now} to {goal} (a patch downgrade; "
                      "allowed within a minor release)")


def _judge_skew(after: list[Running], moving: frozenset[str], findings: _Findings) -> None:
    """The skew rules on the state the apply leaves: clients never newer than the oldest API server,
    API servers at most one minor apart."""
    apiservers = [e for e in after if e.component == APISERVER and e.release]
    if not apiservers:
        return
    oldest = min(apiservers, key=lambda e: e.release)  # type: ignore[arg-type,return-value]
    newest = max(apiservers, key=lambda e: e.release)  # type: ignore[arg-type,return-value]
    assert oldest.release is not None and newest.release is not None
    if newest.release.minor - oldest.release.minor > 1:
        findings.refuse(f"{newest.host}: kube-apiserver would run {newest.release} while {oldest.host}'s runs "
                        f"{oldest.release}: API servers may be one minor release apart at most; upgrade "
                        f"{oldest.host} first")
    for entry in after:
        if entry.component == APISERVER or entry.release is None or entry.host not in moving:
            continue
        if entry.release.minor_release > oldest.release.minor_release:
            findings.refuse(f"{entry.host}: {entry.component} would run {entry.release}, newer than the API server "
                            f"on {oldest.host} ({oldest.release}): the API servers move first; apply to the "
                            f"control-plane hosts too (leave out --hosts, or name {oldest.host})")


def _kind(releases: list[Release], goal: Release) -> str:
    if releases[0] == releases[-1] == goal:
        return "unchanged"
    if releases[0].minor_release != releases[-1].minor_release:
        return "mixed"
    now = releases[-1]
    if now.minor_release == goal.minor_release:
        return "patch-upgrade" if goal >= now else "patch-downgrade"
    return "minor-upgrade" if goal.minor_release > now.minor_release else "minor-rollback"
