"""A corpus of bad cluster files: each gets a located one-line message, exit code 1 and no traceback."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import EXAMPLES, ROOT, kubesmith, kubesmith_process
from kubesmith.vocabulary.errors import SpecError
from kubesmith.spec.load import load_spec_text

BAD = ROOT / "tests" / "specs" / "bad"

# file stem -> (option path, message fragment, "line:column")
EXPECTED: dict[str, tuple[str, str, str]] = {
    "port-string": ("spec.components.apiserver.securePort", "valid integer, got '6443'", "11:7"),
    "bool-for-int": ("spec.components.kubelet.maxPods", "valid integer, got true", "11:7"),
    "version-number": ("spec.kubernetesVersion", "valid string, got 1.33", "6:3"),
    "feature-gate-string": ("spec.featureGates.SomeGate", "valid boolean, got 'true'", "9:18"),
    "hosts-mapping": ("spec.hosts", "valid list, got a mapping", "7:3"),
    "network-list": ("spec.network", "got a list", "7:3"),
    "null-spec": ("spec", "got nothing (null)", "5:1"),
    "extra-arg-list": ("spec.components.apiserver.extraArgs.max-requests-inflight",
                       "a flag value must be a string, integer or boolean", "11:19"),
    "unknown-key-typo": ("spec.netwrok", "unknown option; did you mean 'network'?", "9:3"),
    "unknown-component-option": ("spec.components.apiserver.securePrt",
                                 "unknown option; did you mean 'securePort'?", "11:7"),
    "duplicate-key": ("spec.network.clusterCidr", "duplicate key (first defined at line 10)", "11:5"),
    "bad-cidr": ("spec.network.clusterCidr", "'10.200.0.0/33' is not a valid CIDR", "8:5"),
    "cidr-host-bits": ("spec.network.serviceCidr", "has host bits set", "8:5"),
    "overlap": ("spec.network.serviceCidr", "10.32.0.0/16 overlaps clusterCidr 10.0.0.0/8", "9:5"),
    "small-service-cidr": ("spec.network.serviceCidr", "is too small", "8:5"),
    "dns-ip-outside": ("spec.network.dnsServiceIp", "10.99.0.10 is outside serviceCidr 10.32.0.0/16", "8:5"),
    "dns-ip-is-api-ip": ("spec.network.dnsServiceIp", "is the API server's service IP", "8:5"),
    "host-in-cidr": ("spec.hosts[0].address", "10.200.1.5 lies inside clusterCidr 10.200.0.0/16", "8:18"),
    "dup-host-name": ("spec.hosts[1].name", "name 'h1' is already used by spec.hosts[0]", "9:8"),
    "dup-host-address": ("spec.hosts[1].address", "address '10.0.0.11' is already used by spec.hosts[0]", "9:18"),
    "bad-address": ("spec.hosts[0].address", "'10.0.0.300' is not a valid IPv4 or IPv6 address", "8:18"),
    "advertise-address": ("spec.components.apiserver.advertiseAddress", "'my-host' is not a valid IPv4", "11:7"),
    "kubelet-cluster-dns": ("spec.components.kubelet.clusterDns[1]", "'dns.local' is not a valid IPv4", "11:32"),
    "bad-label": ("spec.hosts[0].labels.tier", "'a,b=c' is not a valid label value", "8:83"),
    "endpoint-bad": ("spec.controlPlaneEndpoint", "must be HOST:PORT", "7:3"),
    "endpoint-bad-host": ("spec.controlPlaneEndpoint", "'10.0.0.300:6443' must be HOST:PORT", "7:3"),
    "no-control-plane": ("spec.hosts", "no host has the control-plane role", "7:3"),
    "no-etcd": ("spec.hosts", "no host has the etcd role", "7:3"),
    "no-hosts": ("spec.hosts", "at least 1 item", "7:3"),
    "missing-hosts": ("spec.hosts", "required option is missing", "5:1"),
    "missing-spec": ("spec", "required option is missing", "1:1"),
    "missing-name": ("metadata.name", "required option is missing", "3:1"),
    "bad-name": ("metadata.name", "'Demo_Cluster' must be a DNS label", "4:3"),
    "bad-role": ("spec.hosts[0].roles[2]", "'control-plane', 'etcd' or 'node', got 'worker'", "8:67"),
    "duplicate-role": ("spec.hosts[0].roles", "role 'etcd' is listed twice", "8:38"),
    "empty-roles": ("spec.hosts[0].roles", "at least 1 item", "8:38"),
    "bad-key-algo": ("spec.pki.keyAlgorithm", "got 'dsa-1024'", "10:5"),
    "port-range": ("spec.components.apiserver.securePort", "less than or equal to 65535", "11:7"),
    "removed-insecure-port": ("spec.components.apiserver.extraArgs.insecure-port",
                              "kube-apiserver --insecure-port was removed in Kubernetes 1.24; no replacement flag",
                              "11:19"),
    "removed-apiserver-port": ("spec.components.apiserver.extraArgs.port",
                               "--port was removed in Kubernetes 1.24; use --secure-port instead", "12:9"),
    "removed-kubelet-pod-infra": ("spec.components.kubelet.extraArgs.pod-infra-container-image",
                                  "kubelet --pod-infra-container-image was removed in Kubernetes 1.35; use the "
                                  "container runtime's sandbox", "12:9"),
    "not-yet-added": ("spec.components.apiserver.extraArgs.authentication-config",
                      "not available in Kubernetes 1.28; it was added in 1.29", "12:9"),
    "unknown-flag": ("spec.components.apiserver.extraArgs.audit-log-maxag",
                     "no flag --audit-log-maxag in Kubernetes 1.33; did you mean 'audit-log-maxage'?", "12:9"),
    "etcd-unknown-flag": ("spec.components.etcd.extraArgs.heartbeat-intervall",
                          "etcd has no flag --heartbeat-intervall in etcd 3.5; did you mean 'heartbeat-interval'?", "11:19"),
    "leading-dashes": ("spec.components.scheduler.extraArgs.--profiling",
                       "write flag names without leading dashes: 'profiling'", "12:9"),
    "version-old": ("spec.kubernetesVersion", "Kubernetes 1.27.0 is not supported; supported releases: 1.28 to",
                    "6:3"),
    "version-future": ("spec.kubernetesVersion", "Kubernetes 1.99.0 is not supported", "6:3"),
    "version-syntax": ("spec.kubernetesVersion", "'1.33' must be a release version", "6:3"),
    "wrong-apiversion": ("apiVersion", "should be 'kubesmith.io/v1alpha1', got 'kubesmith.io/v1'", "1:1"),
    "wrong-kind": ("kind", "should be 'Cluster', got 'Deployment'", "2:1"),
    "yaml-syntax": ("(document)", "YAML syntax error: while parsing a flow mapping", "9:1"),
    "yaml-tab": ("(document)", "YAML syntax error", "9:1"),
    "anchor-alias-error": ("(document)", "found undefined alias", "10:16"),
    "multi-document": ("(document)", "expected a single document", "9:1"),
    "comments-only": ("(document)", "the file is empty", "1:1"),
    "document-list": ("(document)", "the document must be a mapping (a Cluster), got a list", "1:1"),
    "document-scalar": ("(document)", "the document must be a mapping (a Cluster), got a string", "1:1"),
}
SINGLE_ERROR = sorted(EXPECTED)


def test_corpus_is_complete() -> None:
    on_disk = {path.stem for path in BAD.glob("*.yaml")} - {"many-errors"}
    assert on_disk == set(EXPECTED)
    assert len(EXPECTED) >= 30


@pytest.mark.parametrize("stem", SINGLE_ERROR)
def test_bad_spec_is_reported_with_location(stem: str) -> None:
    path, fragment, position = EXPECTED[stem]
    result = kubesmith("validate", f"{stem}.yaml", cwd=BAD)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[-1] == "1 error found"
    assert lines[0] == f"error: {path}: {lines[0].split(': ', 2)[2]}"  # one line: error, option path, message
    assert fragment in lines[0]
    assert lines[0].endswith(f"({stem}.yaml:{position})")


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "empty.yaml").write_text("")
    result = kubesmith("validate", "empty.yaml", cwd=tmp_path)
    assert result.returncode == 1
    assert "error: (document): the file is empty; expected a Cluster document (empty.yaml:1:1)" in result.stderr
    assert "Traceback" not in result.stderr


def test_several_errors_are_all_reported() -> None:
    result = kubesmith_process("validate", "many-errors.yaml", cwd=BAD)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert [line.split(":")[1].strip() for line in errors] == [
        "spec.network.clusterCidr", "spec.hosts[0].address", "spec.hosts[1].name", "spec.hosts[1].colour",
        "spec.components.apiserver.securePort"]
    assert all(re.search(r"\(many-errors\.yaml:\d+:\d+\)$", line) for line in errors)
    assert "valid keys: address, labels, name, podCidr, roles" in errors[3]
    assert result.stderr.splitlines()[-1] == "5 errors found"


def test_semantic_errors_are_all_reported_together() -> None:
    text = (BAD / "dup-host-name.yaml").read_text().replace("roles: [node]", "roles: [node]}\n    - {name: h3, "
                                                                               "address: 10.0.0.11, roles: [node]")
    text = text.replace("  hosts:", "  network: {serviceCidr: 10.200.0.0/24}\n  hosts:")
    with pytest.raises(SpecError) as caught:
        load_spec_text(text, "multi.yaml")
    messages = [f"{p.path}: {p.message}" for p in caught.value.errors]
    assert any(m.startswith("spec.network.serviceCidr: 10.200.0.0/24 overlaps") for m in messages)
    assert any(m.startswith("spec.hosts[1].name: name 'h1'") for m in messages)
    assert any(m.startswith("spec.hosts[2].address: address '10.0.0.11'") for m in messages)


def test_warnings_do_not_fail(tmp_path: Path) -> None:
    text = (ROOT / "examples" / "lab.yaml").read_text().replace(
        "    - {name: h3, address: 10.213.0.13, roles: [control-plane, etcd, node]}\n",
        "    - {name: h3, address: 10.213.0.13, roles: [control-plane, etcd, node]}\n"
        "    - {name: h4, address: 10.213.0.14, roles: [etcd]}\n")
    (tmp_path / "even.yaml").write_text(text)
    result = kubesmith("validate", "even.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "warning: spec.hosts: 4 etcd members tolerate no more failures than 3; use an odd number" in result.stderr
    assert "error" not in result.stderr
    assert result.stdout.startswith("even.yaml: valid (cluster lab, Kubernetes 1.36.2, 4 hosts)")


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_examples_are_valid(example: Path) -> None:
    result = kubesmith("validate", str(example))
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr


def test_missing_file_exits_3(tmp_path: Path) -> None:
    result = kubesmith_process("validate", str(tmp_path / "nope.yaml"))
    assert result.returncode == 3
    assert result.stderr == f"error: {tmp_path / 'nope.yaml'}: no such file\n"
    directory = kubesmith("validate", str(tmp_path))
    assert directory.returncode == 3 and "is a directory" in directory.stderr


def test_exit_codes_are_documented_in_help() -> None:
    result = kubesmith_process("--help")
    assert result.returncode == 0
    help_text = " ".join(result.stdout.split())
    assert "Exit codes: 0 ok, 1 invalid cluster file, 2 bad command line, 3 file not readable/writable" in help_text


def test_validate_json_output() -> None:
    bad = kubesmith("validate", "--output", "json", "many-errors.yaml", cwd=BAD)
    assert bad.returncode == 1
    document = json.loads(bad.stdout)
    assert document["valid"] is False
    assert len(document["problems"]) == 5
    first = document["problems"][0]
    assert first == {"severity": "error", "path": "spec.network.clusterCidr", "file": "many-errors.yaml",
                     "line": 8, "column": 5, "message": first["message"]}
    assert "is not a valid CIDR" in first["message"]
    good = kubesmith("validate", "-o", "json", str(ROOT / "examples" / "lab.yaml"))
    assert good.returncode == 0
    document = json.loads(good.stdout)
    assert document["valid"] is True
    assert document["problems"] == []  # the lab's control plane has a virtual IP: nothing to note


def test_plan_of_a_bad_spec_fails_the_same_way(tmp_path: Path) -> None:
    shutil.copy(BAD / "removed-insecure-port.yaml", tmp_path / "cluster.yaml")
    result = kubesmith("plan", "--offline", "cluster.yaml", cwd=tmp_path)
    assert result.returncode == 1
    assert "insecure-port was removed in Kubernetes 1.24" in result.stderr
    assert "(cluster.yaml:11:19)" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_undecodable_file_is_an_io_error(tmp_path: Path) -> None:
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00garbage")
    result = kubesmith_process("validate", "binary.yaml", cwd=tmp_path)
    assert result.returncode == 3
    assert "not UTF-8 text" in result.stderr and "Traceback" not in result.stderr
