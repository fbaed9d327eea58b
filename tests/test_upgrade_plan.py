"""Upgrade planning without a lab: the hosts' answer to the versions command (run here against the
real binaries of both releases), the registry's differences, the health gate, the plan's text."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from kubesmith import layout
from kubesmith.backends import upgrade
from kubesmith.cli.upgrade_commands import describe, text_lines
from kubesmith.health.status import AgentReport, ClusterStatus, ComponentStatus, ConfigCondition, HostStatus, NodeState
from kubesmith.skew import judge
from kubesmith.versions.registry import load_registry
from k8s_support import OLDER_RELEASE, older_binaries, real_binaries
from plan_support import plan_of_text

OLD_RELEASE = f"v{OLDER_RELEASE}"


def ask_here(directory: Path, kept: Path) -> dict[str, upgrade.Installed]:
    """The versions command as a host runs it, with the binaries of `directory` in place of the host's
    (no such services run here, so each answer comes from the binary: `stopped`), and `kept` for its
    cache of answers."""
    command = upgrade.VERSIONS_COMMAND.replace(layout.BIN, str(directory)).replace(layout.VERSIONS_CACHE,
                                                                                    str(kept))
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, check=True)
    return upgrade.parse_versions(result.stdout)


def test_versions_command_reads_real_binaries_of_both_releases(tmp_path: Path) -> None:
    new, old = ask_here(real_binaries(), tmp_path / "kept"), ask_here(older_binaries(), tmp_path / "kept")
    assert {name: found.release for name, found in new.items() if name != "etcd"} == dict.fromkeys(
        ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"), "1.36.2")
    assert old["kube-apiserver"] == upgrade.Installed("1.35.6", running=False)
    verdict = upgrade.verdict_of({"h1": old}, "1.36.2", ["h1"])
    assert verdict.allowed and verdict.kind == "minor-upgrade"
    assert not upgrade.verdict_of({"h1": new}, "1.35.6", ["h1"]).allowed


def test_a_binary_is_asked_its_version_once_until_it_changes(tmp_path: Path) -> None:
    """Every apply asks; a Go binary's --version costs 0.1-0.2 CPU-s. The answer is kept by the file's
    identity and times: kept, it is not asked again; a binary replaced at the same path is."""
    kept, binaries = tmp_path / "kept", tmp_path / "bin"
    binaries.mkdir()
    for name in ("kubelet", "kube-proxy"):
        shutil.copy2(real_binaries() / name, binaries / name)
    # Why a stand-in: every real kube-scheduler names its release on --version; only a stand-in answers
    # without one, the answer the memo must not keep.
    (binaries / "kube-scheduler").write_text("#!/bin/sh\necho 'no release here'\n")
    (binaries / "kube-scheduler").chmod(0o755)
    first = ask_here(binaries, kept)
    assert first["kubelet"].release == first["kube-proxy"].release == "1.36.2"
    assert first["kube-scheduler"].release is None
    (kubelet_answer,) = kept.glob("kubelet.*")
    assert {path.name.split(".")[0] for path in kept.iterdir()} == {"kubelet", "kube-proxy"}  # no release, not kept
    kubelet_answer.write_text("Kubernetes v1.99.0\n")  # stands for the answer: the binary is not run again
    assert ask_here(binaries, kept)["kubelet"].release == "1.99.0"
    shutil.copy2(older_binaries() / "kubelet", binaries / "kubelet.new")
    (binaries / "kubelet.new").rename(binaries / "kubelet")  # as apply replaces a binary: another file
    assert ask_here(binaries, kept)["kubelet"].release == OLDER_RELEASE


def test_parse_versions_of_etcd_and_a_binary_that_names_no_release() -> None:
    text = ("etcd running etcd Version: 3.6.5 Git SHA: abc Go Version: go1.24\n"
            "kubelet running Kubernetes v1.36.2\nkube-proxy stopped bash: no such file\nnoise\n")
    found = upgrade.parse_versions(text)
    assert found["etcd"] == upgrade.Installed("3.6.5", True)
    assert found["kubelet"] == upgrade.Installed("1.36.2", True)
    assert found["kube-proxy"] == upgrade.Installed(None, False)


def test_registry_differences_name_removed_flags_with_their_replacement() -> None:
    differences = upgrade.registry_differences(load_registry(), "1.35", "1.36")
    removed = [d for d in differences if d.change == "removed"]
    assert any(d.binary == "kube-proxy" and d.flag == "alsologtostderr" for d in removed)
    assert all(d.note and "removed in Kubernetes 1.36" in d.note for d in removed if d.binary == "kube-proxy")
    assert any(d.binary == "kube-apiserver" and d.flag == "tls-curve-preferences" and d.change == "added"
               for d in differences)
    assert upgrade.registry_differences(load_registry(), "1.36", "1.36") == []
    assert "AuthenticationConfiguration: None -> apiserver.config.k8s.io/v1alpha1" in \
        upgrade.config_api_differences(load_registry(), "1.28", "1.29")
    assert upgrade.config_api_differences(load_registry(), "1.35", "1.36") == []


def test_unhealthy_names_every_reason_not_to_start() -> None:
    sick = HostStatus("h1", (ComponentStatus("h1", "kube-apiserver", True, False, "connection refused", None, "p"),),
                      etcd_error="no leader", node=NodeState(False, "KubeletNotReady"),
                      agent=AgentReport(None, None, None, 0, (), (ConfigCondition("kube-apiserver", "Unknown", "m",
                                                                                   phase="trial"),)))
    well = HostStatus("h2", (ComponentStatus("h2", "kube-apiserver", True, True, "ok", 1.0, "p"),))
    lines = upgrade.unhealthy(ClusterStatus("lab", (sick, well)))
    assert lines == ["h1: kube-apiserver is not ready (connection refused)", "h1: etcd: no leader",
                     "h1: its Node is not Ready (KubeletNotReady)",
                     "h1: kube-apiserver's configuration is still on trial"]
    verdict = judge([], "1.36.2", [])
    assert all("must be healthy" in line for line in upgrade.refusal_lines(verdict, lines))


def test_upgrade_plan_text_and_order() -> None:
    plan = plan_of_text(Path("examples/lab.yaml").read_text())
    versions = {name: {"kube-apiserver": upgrade.Installed("1.35.6", True), "kubelet": upgrade.Installed("1.35.6", True),
                       "etcd": upgrade.Installed("3.6.5", True)} for name in ("h1", "h2", "h3")}
    verdict = upgrade.verdict_of(versions, plan.kubernetes_version, ["h1", "h2", "h3"])
    report = describe(plan, versions, verdict, [], 1)
    assert report["order"] == [["h1"], ["h2"], ["h3"]] and report["etcd"] == ["3.6.5"]
    assert report["kind"] == "minor-upgrade" and not report["refusals"]
    text = "\n".join(text_lines(report))
    assert "target: Kubernetes 1.36.2 (minor-upgrade)" in text
    assert "h1: etcd 3.6.5, kube-apiserver 1.35.6, kubelet 1.35.6" in text and "note:" not in text
    assert "order: etcd snapshot, then h1 -> h2 -> h3" in text and "verdict: allowed" in text


def test_snapshot_before_an_upgrade_is_kept_with_the_periodic_ones() -> None:
    import datetime as dt

    from kubesmith.agent.snapshots import PREFIX, SUFFIX

    name = upgrade.snapshot_name(dt.datetime(2026, 11, 27, 1, 2, 3, tzinfo=dt.timezone.utc), "1.35.6", "1.36.2")
    assert name == "snapshot-20261127T010203Z-upgrade-1.35.6-to-1.36.2.db"
    assert name.startswith(PREFIX) and name.endswith(SUFFIX)  # the agent's glob: kept and pruned with them
    plan = plan_of_text(Path("examples/lab.yaml").read_text())
    assert upgrade.snapshot_directory(plan.host("h1")).startswith("/")


def test_nodes_are_drained_through_a_control_plane_host_outside_their_wave() -> None:
    plan = plan_of_text(Path("examples/lab.yaml").read_text())
    assert upgrade.drain_via(plan, ["h1"]).name == "h2"  # type: ignore[union-attr]
    assert upgrade.drain_via(plan, ["h2"]).name == "h1"  # type: ignore[union-attr]


def test_status_shows_each_hosts_release_and_a_change_in_progress() -> None:
    from kubesmith.health.status import status_lines

    def host(name: str, version: str) -> HostStatus:
        return HostStatus(name, (ComponentStatus(name, "kube-apiserver", True, True, "ok", 1.0, "p", f"v{version}"),
                                 ComponentStatus(name, "etcd", True, True, "ok", 1.0, "p", "3.6.5")))

    lines = status_lines(ClusterStatus("lab", (host("h1", "1.36.2"), host("h2", "1.35.6"), host("h3", "1.35.6"))))
    assert "host h1: healthy, Kubernetes 1.36.2" in lines
    assert "release change in progress (or halted): h2, h3 at 1.35.6; h1 at 1.36.2" in lines
    same = status_lines(ClusterStatus("lab", (host("h1", "1.36.2"), host("h2", "1.36.2"))))
    assert not any("in progress" in line for line in same)
