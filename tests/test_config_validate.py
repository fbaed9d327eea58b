"""Validate before use, with the real v1.36.2 binaries: the kubelet's and kube-scheduler's own loads
of their configuration, and kubesmith's flag and file checks for every component."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubesmith.agent.checkpoints import ComponentConfig
from kubesmith.agent.validate import validate
from k8s_support import UNREACHABLE_KUBECONFIG, real_binaries
from plan_support import registry

MINOR = "1.36"


def _kubelet(tmp_path: Path, extra: str, *flags: str) -> ComponentConfig:
    config = tmp_path / "kubelet.yaml"
    # failCgroupV1: false so that the same configuration is valid on cgroup v1 machines (kubesmith's
    # plan sets it from what it observed of the host; here the host is whatever runs the tests)
    config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                      f"failCgroupV1: false\nfailSwapOn: false\n{extra}")
    argv = (f"--config={config}", f"--root-dir={tmp_path / 'kubelet-root'}", "--hostname-override=node1", *flags)
    return ComponentConfig("kubelet", argv, (str(config),))


def test_a_valid_kubelet_configuration_passes_the_kubelets_own_load(tmp_path: Path) -> None:
    verdict = validate(_kubelet(tmp_path, "maxPods: 50\n"), "kubelet", real_binaries() / "kubelet", MINOR,
                       registry(), timeout=60)
    assert verdict.ok, verdict.problems
    assert "kubelet's own load" in verdict.checks
    assert not (tmp_path / "kubelet-root").exists()  # a load, not a start: nothing written


@pytest.mark.parametrize(("extra", "expected"), [
    ("maxPods: -3\n", "kubelet refuses its configuration: failed to validate kubelet configuration, error: "
                      "invalid configuration: maxPods (--max-pods) -3 must not be a negative number"),
    ("maxPodz: 3\n", 'kubelet would ignore unknown field "maxPodz"'),
    ("healthzPort: 70000\n", "healthzPort (--healthz-port) 70000 must be between 1 and 65535"),
])
def test_the_kubelet_refuses_a_bad_configuration(tmp_path: Path, extra: str, expected: str) -> None:
    verdict = validate(_kubelet(tmp_path, extra), "kubelet", real_binaries() / "kubelet", MINOR, registry(),
                       timeout=60)
    assert not verdict.ok
    assert any(expected in problem for problem in verdict.problems), verdict.problems


def test_an_unknown_flag_is_named_from_the_registry_before_any_load(tmp_path: Path) -> None:
    config = _kubelet(tmp_path, "", "--max-podz=3")
    missing = real_binaries() / "no-such-kubelet"  # the registry answers first: the binary is never run
    verdict = validate(config, "kubelet", missing, MINOR, registry())
    assert verdict.problems == ("kubelet has no flag --max-podz in Kubernetes 1.36; did you mean 'max-pods'?",)


def _scheduler(tmp_path: Path, extra: str) -> ComponentConfig:
    kubeconfig = tmp_path / "scheduler.conf"
    kubeconfig.write_text(UNREACHABLE_KUBECONFIG)
    config = tmp_path / "scheduler.yaml"
    config.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
                      f"clientConnection: {{kubeconfig: {kubeconfig}}}\n{extra}")
    argv = (f"--config={config}", "--bind-address=127.0.0.1", "--secure-port=0", "--profiling=false")
    return ComponentConfig("kube-scheduler", argv, (str(config), str(kubeconfig)))


def test_kube_scheduler_loads_its_configuration_without_connecting(tmp_path: Path) -> None:
    good = validate(_scheduler(tmp_path, ""), "kube-scheduler", real_binaries() / "kube-scheduler", MINOR,
                    registry(), timeout=60)
    assert good.ok, good.problems
    bad = validate(_scheduler(tmp_path, "parallelism: -1\n"), "kube-scheduler", real_binaries() / "kube-scheduler",
                   MINOR, registry(), timeout=60)
    assert bad.problems == ("kube-scheduler refuses its configuration: parallelism: Invalid value: -1: should be an "
                            "integer value greater than zero",)


def test_kubesmiths_checks_for_components_without_a_load_of_their_own(tmp_path: Path) -> None:
    policy = tmp_path / "audit-policy.yaml"
    policy.write_text("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Metadata\n")  # unclosed
    config = ComponentConfig("kube-apiserver", ("--insecure-port=0", f"--audit-policy-file={policy}",
                                                f"--tls-cert-file={tmp_path / 'missing.crt'}"),
                             (str(policy), str(tmp_path / "missing.crt")))
    verdict = validate(config, "kube-apiserver", real_binaries() / "kube-apiserver", MINOR, registry())
    assert len(verdict.problems) == 3, verdict.problems
    assert verdict.problems[0].startswith("kube-apiserver --insecure-port was removed in Kubernetes 1.24")
    assert verdict.problems[1] == f"{policy} does not parse: while parsing a flow mapping"
    assert verdict.problems[2] == f"{tmp_path / 'missing.crt'} (named by a flag of kube-apiserver) does not exist"
    assert "kube-apiserver's own load" not in verdict.checks


def test_a_load_killed_by_a_signal_is_no_verdict_on_the_configuration(tmp_path: Path) -> None:
    """systemd signals the agent's whole cgroup when an apply restarts the agent, dry loads included:
    a load killed so must not reject (and so roll back) a configuration, as it once did in the lab,
    nor pass it. A stand-in that kills itself, every time (test_config_keeper times a signal to the
    real load)."""
    killed = tmp_path / "kube-scheduler"
    killed.write_text("#!/bin/sh\nkill -TERM $$\n")
    killed.chmod(0o755)
    verdict = validate(_scheduler(tmp_path, ""), "kube-scheduler", killed, MINOR, registry(), timeout=60)
    assert verdict.ok and verdict.interrupted, verdict  # owed: the keeper validates again (test_config_keeper)
    assert "kube-scheduler's own load interrupted (kube-scheduler killed by signal 15)" in verdict.checks


def test_a_load_reads_credentials_from_their_sources_not_from_systemds_copies(tmp_path: Path) -> None:
    """The copies in /run/credentials/<unit>/ exist only while the unit runs; the keeper validates while
    an apply restarts it. Seen in the lab: the scheduler's load failed on the missing copy of its
    kubeconfig, and a good configuration (with its host's whole release) was rolled back."""
    from kubesmith import layout
    from kubesmith.agent.validate import scheduler_load
    from kubesmith.plan.credentials import credential_name

    kubeconfig = tmp_path / "scheduler.conf"
    kubeconfig.write_text(UNREACHABLE_KUBECONFIG)
    copy = layout.credential_path("kube-scheduler", credential_name(str(kubeconfig)))
    assert not Path(copy).exists()  # as on a host while the unit restarts
    config = tmp_path / "scheduler.yaml"
    config.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
                      f"clientConnection: {{kubeconfig: {copy}}}\n")
    argv = (f"--config={config}", "--bind-address=127.0.0.1", "--secure-port=0", "--profiling=false")
    scheduler = real_binaries() / "kube-scheduler"
    assert any(copy in problem for problem in scheduler_load(scheduler, argv, 60))  # the copy itself: no load
    component = ComponentConfig("kube-scheduler", argv, (str(config), str(kubeconfig)))
    verdict = validate(component, "kube-scheduler", scheduler, MINOR, registry(), timeout=60)
    assert verdict.ok, verdict.problems
    assert "kube-scheduler's own load" in verdict.checks
