"""Which services a changed file restarts (`diff_host`, pure: what plan shows and apply does)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubesmith import layout
from kubesmith.backends.apply import HostState, diff_host, foreign_authorities, restart_commands
from kubesmith.hostfile import HostFile
from kubesmith.plan.evaluate import evaluate
from kubesmith.spec.load import load_spec_file
from kubesmith.versions.registry import load_registry

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "lab.yaml"


@pytest.mark.parametrize("path, restarted", [
    (f"{layout.UNIT_DIR}/etcd.service", True),
    (f"{layout.UNIT_DIR}/etcd.service.d/10-limits.conf", True),
    (f"{layout.UNIT_DIR}/etcd-online.service", True),    # the backend's own units of the service
    (f"{layout.UNIT_DIR}/etcd-certs.path", True),
    (f"{layout.UNIT_DIR}/etcd-defrag.timer", False),   # another unit that only begins with etcd's name
    (f"{layout.UNIT_DIR}/etcdbackup.service", False),
])
def test_a_changed_unit_file_restarts_only_the_service_it_belongs_to(path: str, restarted: bool) -> None:
    host = next(h for h in evaluate(load_spec_file(EXAMPLE).cluster, load_registry()).hosts
                if any(s.name == "etcd" for s in h.services))
    changed = HostFile(path, 0o644, "root", "root", b"new")
    changes = diff_host(host, [changed], {path: "0" * 64}, {path: "0" * 64}, frozenset(u.name for u in host.users))
    assert changes.changed == (path,)
    assert ("etcd" in changes.restart) is restarted, changes.restart


@pytest.mark.parametrize("held, refused", [
    (None, False),  # a new host, or one reset: nothing of anyone's
    ("same", False),  # this cluster's host
    ("other", True),  # another cluster's (or another state directory's) CA
])
def test_a_host_holding_another_ca_is_named_before_anything_is_written(held: str | None, refused: bool) -> None:
    host = evaluate(load_spec_file(EXAMPLE).cluster, load_registry()).hosts[0]
    path = f"{layout.PKI}/etcd/ca.crt"
    shipped = HostFile(path, 0o644, "root", "root", b"this cluster's etcd CA")
    current = {path: {None: None, "same": shipped.sha256, "other": "f" * 64}[held]}
    state = HostState(host, (shipped,), current, {}, frozenset(), diff_host(host, [shipped], current, {}, frozenset()))
    found = foreign_authorities([state])
    assert found == ([f"{host.name}: holds another cluster's certificate authority ({path} is not this state "
                      "directory's etcd-ca)"] if refused else []), found


def test_an_api_server_restarted_with_its_etcd_member_stops_before_the_member() -> None:
    """Its shutdown writes to etcd: one systemctl call for both stopped the member at once, and the API
    server's shutdown hung until systemd killed it (tests/test_rollout_lab.py checks the real thing)."""
    assert restart_commands(("etcd", "kube-apiserver", "kubesmith-agent")) == [
        "systemctl stop kube-apiserver.service",
        "systemctl try-reload-or-restart --no-block etcd.service kubesmith-agent.service"
        " && systemctl start --no-block kube-apiserver.service"]
    assert restart_commands(("kube-apiserver", "kubelet")) == [
        "systemctl try-reload-or-restart --no-block kube-apiserver.service kubelet.service"]
    assert restart_commands(()) == []
