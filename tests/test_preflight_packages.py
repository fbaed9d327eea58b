"""Preflight's `packages` check: what each role needs from the distribution, and the install line.

The observation is the real shell probe (`observe_command`) run on this machine (a Debian host with
every package) and over a real sshd; what this machine has cannot be taken away, so a missing
program is one the spec names at a path where nothing is, and other distributions are other
/etc/os-release files read by the probe's own awk.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import yaml
from test_preflight import HOST, _over_ssh, failures, write_spec

from kubesmith.backends import preflight
from kubesmith.vocabulary.environment import HOST_PYTHON, observe_command, parse_facts, parse_observation
from kubesmith.plan.evaluate import evaluate
from kubesmith.vocabulary.model import Plan
from kubesmith.spec.load import load_spec_file
from kubesmith.versions.registry import load_registry

ROLES_ALL = ["control-plane", "etcd", "node"]


def observed_here(spec: Path, probe_spec: bool = True) -> Plan:
    """The plan for HOST as this machine shows it, through the probe the spec asks for."""
    cluster = load_spec_file(spec).cluster
    command = preflight.observation_for(cluster) if probe_spec else observe_command()
    output = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True, timeout=60).stdout
    return evaluate(cluster, load_registry(), {HOST: parse_observation(output, time.time())})


def os_release_words(text: str, tmp_path: Path) -> tuple[str, ...]:
    """ID and ID_LIKE as the probe's awk reads them from an os-release file with `text`."""
    release = tmp_path / "os-release"
    release.write_text(text)
    command = observe_command().replace("/etc/os-release", str(release))
    output = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True, timeout=60).stdout
    return parse_facts(output, 0.0).distribution


def test_this_machine_has_every_package_it_needs(tmp_path: Path) -> None:
    """The suite's machine carries Debian's packages (as the lab's hosts do): nothing is missing."""
    assert failures(observed_here(write_spec(tmp_path)), "packages") == []


def test_each_role_needs_its_programs(tmp_path: Path) -> None:
    vip = write_spec(tmp_path, hosts=[{"name": "cp", "address": "10.213.98.2", "roles": ["control-plane", "etcd"]},
                                      {"name": "w1", "address": "10.213.98.3", "roles": ["node"]}], name="vip.yaml")
    document = yaml.safe_load(vip.read_text())
    document["spec"]["controlPlaneVIP"] = "10.213.98.10"
    vip.write_text(yaml.safe_dump(document))
    plan = evaluate(load_spec_file(vip).cluster, load_registry())
    inputs = preflight.Inputs(plan)
    needs = {host.name: dict(preflight.needed_programs(host, inputs)) for host in plan.hosts}
    assert needs["cp"] == {"/usr/sbin/keepalived": "keepalived", HOST_PYTHON: "python3"}
    assert needs["w1"] == {"/usr/bin/containerd": "containerd", "runc": "runc", "containerd-shim-runc-v2": "containerd",
                           "/usr/sbin/haproxy": "haproxy", "iptables": "iptables", HOST_PYTHON: "python3"}
    here = preflight.Inputs(plan, binaries_where=None)  # `run`, `join`: kubesmith already runs on the host
    assert HOST_PYTHON not in dict(preflight.needed_programs(plan.hosts[1], here))
    nft = write_spec(tmp_path, components={"proxy": {"mode": "nftables"}}, name="nft.yaml")
    plan = evaluate(load_spec_file(nft).cluster, load_registry())
    needed = dict(preflight.needed_programs(plan.hosts[0], preflight.Inputs(plan)))
    assert needed["nft"] == "nftables" and needed["iptables"] == "iptables"  # kube-proxy's; the pods' masquerade


# where nothing is installed; not under /tmp, where the spec may not put what a service runs or loads
NOWHERE = Path("/opt/kubesmith-test-nowhere")


def test_every_missing_package_is_in_one_finding_with_the_install_line(tmp_path: Path) -> None:
    """A node whose containerd and HAProxy the spec puts where nothing is: one failure, one apt-get line."""
    nowhere = NOWHERE
    spec = write_spec(tmp_path, hosts=[{"name": "cp", "address": "10.213.98.3", "roles": ["control-plane", "etcd"]},
                                       {"name": HOST, "address": "10.213.98.2", "roles": ["node"]}],
                      components={"containerRuntime": {"binary": f"{nowhere}/containerd"},
                                  "apiLoadBalancer": {"binary": f"{nowhere}/haproxy"}})
    (failure,) = failures(observed_here(spec), "packages")
    assert failure.host == HOST
    assert failure.problem == f"not installed: {nowhere}/containerd, {nowhere}/haproxy"
    assert failure.fix == "`apt-get install -y containerd haproxy`"


def test_plugins_in_another_directory_name_the_option(tmp_path: Path) -> None:
    empty = NOWHERE / "cni"
    plan = observed_here(write_spec(tmp_path, components={"containerRuntime": {"cniBinDir": str(empty)}}))
    (failure,) = failures(plan, "packages")
    assert failure.problem == f"the CNI plugins are in /usr/lib/cni, not in {empty} where containerd looks"
    assert failure.fix == "set spec.components.containerRuntime.cniBinDir: /usr/lib/cni"


def test_a_program_not_looked_for_is_not_claimed_missing(tmp_path: Path) -> None:
    """run and join observe with the modules' defaults: a path the spec sets elsewhere is unknown, not missing."""
    spec = write_spec(tmp_path, components={"containerRuntime": {"binary": str(NOWHERE / "containerd")}})
    assert failures(observed_here(spec, probe_spec=False), "packages") == []


def test_the_install_line_follows_the_distribution(tmp_path: Path) -> None:
    missing = [preflight.Missing("/usr/sbin/haproxy", "haproxy"), preflight.Missing("runc", "runc"),
               preflight.Missing("containerd-shim-runc-v2", "containerd"),
               preflight.Missing("/usr/bin/containerd", "containerd")]
    cases = {
        'ID=debian\nVERSION_ID="12"\n': "`apt-get install -y haproxy runc containerd`",
        'NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\n': "`apt-get install -y haproxy runc containerd`",
        'ID=linuxmint\nID_LIKE="ubuntu debian"\n': "`apt-get install -y haproxy runc containerd`",
        'ID=fedora\nVERSION_ID=40\n': "`dnf install -y haproxy runc containerd`",
        "ID='rocky'\nID_LIKE='rhel centos fedora'\n": "`dnf install -y haproxy runc containerd`",
        'ID="Arch"\n': "install /usr/sbin/haproxy, runc, containerd-shim-runc-v2, /usr/bin/containerd with arch's "
                       "package manager",
        "": "install /usr/sbin/haproxy, runc, containerd-shim-runc-v2, /usr/bin/containerd with the host's "
            "distribution's package manager",
    }
    for text, expected in cases.items():
        assert preflight.install_command(os_release_words(text, tmp_path), missing) == expected, text


def test_a_python_older_than_the_runtime_needs_fails(tmp_path: Path) -> None:
    plan = evaluate(load_spec_file(write_spec(tmp_path)).cluster, load_registry())
    host, check = plan.hosts[0], next(c for c in preflight.CHECKS if c.name == "packages")
    for seen, expected in (("3.7", 1), ("3.9", 1), ("3.10", 0), ("3.13", 0)):
        facts = parse_facts(f"program=/usr/bin/python3\t/usr/bin/python3\npython3={seen}\nos_id=debian\n", 0.0)
        found = check.evaluate(host, facts, preflight.Inputs(plan))
        assert len(found) == expected, (seen, found)
    (old,) = check.evaluate(host, parse_facts("python3=3.9\n", 0.0), preflight.Inputs(plan))
    assert old.problem == "/usr/bin/python3 is Python 3.9; kubesmith's runtime needs 3.10 or newer"
    assert old.fix == ("install python3 3.10 or newer as /usr/bin/python3 (Debian 12 and Ubuntu 22.04 have it, "
                       "as do later releases)")
    facts = parse_facts("program=/usr/bin/python3\t-\nos_id=debian\n", 0.0)
    (finding,) = check.evaluate(host, facts, preflight.Inputs(plan))
    assert finding.problem == "not installed: /usr/bin/python3" and finding.fix == "`apt-get install -y python3`"


def test_over_ssh_the_probe_looks_where_the_spec_says(local_sshd, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """apply's real observation of a node over sshd, with HAProxy configured at a path where none is."""
    from test_preflight import _node_spec

    spec = _node_spec(tmp_path, local_sshd, components={"apiLoadBalancer": {"binary": "/opt/none/haproxy"}})
    (failure,) = failures(_over_ssh(local_sshd, spec), "packages")
    assert failure.host == "w1" and failure.problem == "not installed: /opt/none/haproxy"
    assert failure.fix == "`apt-get install -y haproxy`"
