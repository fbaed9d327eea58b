"""`status` when the hosts cannot be asked: a configuration problem is said once, in plain words,
before any probe; a host that cannot be reached is said once for the host."""

from __future__ import annotations

import yaml

from conftest import kubesmith
from pki_support import write_spec

HOST = [{"name": "n1", "address": "10.9.0.1", "roles": ["control-plane", "etcd", "node"]}]


def test_a_missing_known_hosts_file_is_said_once_and_status_exits(tmp_path):
    spec = write_spec(tmp_path / "c.yaml", "quiet", HOST)
    missing = tmp_path / "no-such-known-hosts"
    run = kubesmith("status", str(spec), "--known-hosts", str(missing), "--state-dir", str(tmp_path / "state"))
    assert run.returncode == 3, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and str(missing) in lines[0] and "does not exist" in lines[0]
    assert run.stdout == "" and "RecordedProbeError" not in run.stderr  # no report, no internal class name


def test_an_unreachable_host_is_said_once_for_the_host(tmp_path):
    """Every connection is refused at once: the SSH config sends the host to a closed loopback port."""
    spec = write_spec(tmp_path / "c.yaml", "down", HOST)
    document = yaml.safe_load(spec.read_text())
    document["spec"]["ssh"] = {"port": 9}  # discard: nothing listens on loopback's port 9
    spec.write_text(yaml.safe_dump(document))
    (tmp_path / "known_hosts").write_text("")
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n  HostName 127.0.0.1\n")
    run = kubesmith("status", str(spec), "--known-hosts", str(tmp_path / "known_hosts"), "--ssh-config", str(config),
                    "--state-dir", str(tmp_path / "state"))
    assert run.returncode == 4, run.stderr
    assert run.stdout.splitlines()[0].startswith("host n1: UNREACHABLE (10.9.0.1: cannot connect on port 9")
    assert run.stdout.count("cannot connect") == 1 and "RecordedProbeError" not in run.stdout + run.stderr
    assert "NOT READY (host not reached)" in run.stdout
