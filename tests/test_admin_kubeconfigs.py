"""admin.conf and super-admin.conf as kubeadm 1.29+ splits them: admin.conf's group gets cluster-admin
through a ClusterRoleBinding (revocable), super-admin.conf is system:masters, root-only break-glass.
(The binding against a real API server: tests/test_run_real.py.)"""

from __future__ import annotations

import yaml
from cryptography.x509.oid import NameOID

from conftest import kubesmith
from kubesmith.backends.access import cluster_admins_binding
from kubesmith.pki.certlist import CLUSTER_ADMINS
from pki_support import HA_SPEC, cert_at, manifest, on_host, render_spec


def test_admin_is_a_bound_group_and_super_admin_the_only_system_masters(tmp_path):
    plan, _ = render_spec(HA_SPEC, tmp_path / "state", tmp_path / "out")
    for host in plan.hosts:
        files = manifest(tmp_path / "out", host.name)
        control_plane = "control-plane" in host.roles
        for name in ("admin", "super-admin"):
            conf = files.get(f"/etc/kubernetes/{name}.conf")
            assert (conf is not None) == control_plane, (host.name, name)
            if conf:
                assert (conf["mode"], conf["owner"], conf["group"]) == ("0600", "root", "root")
        services = {service.name: service for service in host.services}
        assert ("kubesmith-addons" in services) == control_plane  # the admins binding is an add-on
        if not control_plane:
            continue
        groups = {name: [a.value for a in cert_at(on_host(tmp_path / "out", host.name,
                         f"/etc/kubernetes/pki/{name}.crt")).subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
                  for name in ("admin", "super-admin")}
        assert groups == {"admin": [CLUSTER_ADMINS], "super-admin": ["system:masters"]}
        step = services["kubesmith-addons"]
        assert step.oneshot and step.wanted_by == "kube-apiserver-online.target"
        assert step.argv[:6] == ("addons", "apply", "--kubeconfig", "/etc/kubernetes/super-admin.conf", "--dir",
                                 "/etc/kubernetes/addons")
        binding = yaml.safe_load(on_host(tmp_path / "out", host.name, "/etc/kubernetes/addons/kubesmith-admins.yaml")
                                 .read_text())
        assert binding["items"] == [cluster_admins_binding()]
        assert binding["items"][0]["metadata"]["labels"]["addonmanager.kubernetes.io/mode"] == "EnsureExists"
        assert any(probe.path == "/readyz" and probe.client_certificate == "super-admin"
                   for gate in step.gates for probe in gate.any_of)
    masters = {request.name for host in plan.hosts for request in host.certificates
               if "system:masters" in request.organizations}
    assert masters == {"super-admin", "apiserver-kubelet-client"}  # the API server's own towards kubelets


def test_the_binding_ties_the_admins_group_to_cluster_admin():
    binding = cluster_admins_binding()
    assert binding["metadata"]["name"] == CLUSTER_ADMINS
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "cluster-admin"}
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": CLUSTER_ADMINS}]


def test_bootstrap_admins_without_its_kubeconfig_is_one_line(tmp_path):
    result = kubesmith("bootstrap-admins", "--kubeconfig", str(tmp_path / "super-admin.conf"))
    assert result.returncode == 3 and "no such file" in result.stderr and len(result.stderr.splitlines()) == 1
