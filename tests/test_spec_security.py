"""extraArgs may not replace a flag kubesmith sets; the table of such flags follows the modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import EXAMPLES, kubesmith
from plan_support import plan_of, plan_of_text
from kubesmith.spec.managed import MANAGED, REPLACEABLE

# everything optional set, so conditional flags (verbosity, feature gates, labels, quota) show too
MAXIMAL = """\
apiVersion: kubesmith.io/v1alpha1
kind: Cluster
metadata: {name: maximal}
spec:
  kubernetesVersion: "1.33.2"
  featureGates: {CPUManagerPolicyAlphaOptions: true}
  hosts:
    - {name: h1, address: 10.0.0.11, roles: [control-plane, etcd, node], labels: {zone: a}}
  components:
    apiserver: {verbosity: 2}
    controllerManager: {verbosity: 2, allocateNodeCidrs: true}
    scheduler: {verbosity: 2}
    kubelet: {verbosity: 2}
    proxy: {verbosity: 2}
    etcd: {quotaBackendBytes: 4000000000}
"""


@pytest.mark.parametrize("source", [*EXAMPLES, "maximal"], ids=[*(p.stem for p in EXAMPLES), "maximal"])
def test_every_flag_a_module_sets_is_managed(source: Path | str) -> None:
    plan = plan_of_text(MAXIMAL) if source == "maximal" else plan_of(Path(source))
    unlisted = {(service.binary, argument[2:].partition("=")[0])
                for host in plan.hosts for service in host.services if service.binary in MANAGED
                for argument in service.argv if argument.startswith("--")}
    unlisted = {(binary, flag) for binary, flag in unlisted
                if flag not in MANAGED[binary] and flag not in REPLACEABLE.get(binary, ())}
    assert not unlisted - {("kube-apiserver", "max-requests-inflight")}, "add them to their module's `managed`"


@pytest.mark.parametrize(("component", "flag", "says"), [
    ("apiserver", "secure-port", "from spec.components.apiserver.securePort: set that option instead"),
    ("apiserver", "etcd-servers", "from the hosts with the etcd role"),
    ("apiserver", "tls-private-key-file", "from kubesmith's PKI"),
    ("apiserver", "event-ttl", "from spec.components.apiserver.eventTtl"),
    ("etcd", "data-dir", "from spec.components.etcd.dataDir"),
    ("kubelet", "v", "from spec.components.kubelet.verbosity"),
    ("controllerManager", "cluster-signing-duration", "from spec.components.controllerManager.signingDuration"),
    # no option: kubesmith decides it (a "set that option instead" would name a path that is none)
    ("etcd", "initial-cluster-state", "itself, from the member's history (new on the cluster's first start, "
                                      "existing when a member joins one); extraArgs cannot replace it"),
])
def test_a_managed_flag_in_extra_args_names_the_option(component: str, flag: str, says: str,
                                                       tmp_path: Path) -> None:
    text = next(p.read_text() for p in EXAMPLES if "components:" not in p.read_text())
    (tmp_path / "c.yaml").write_text(text + f"  components:\n    {component}:\n      extraArgs: {{{flag}: \"1\"}}\n")
    result = kubesmith("validate", "c.yaml", cwd=tmp_path)
    assert result.returncode == 1
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert line.startswith(f"error: spec.components.{component}.extraArgs.{flag}: kubesmith sets --{flag} ")
    assert says in line and "(c.yaml:" in line
