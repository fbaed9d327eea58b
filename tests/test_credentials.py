"""Keys and kubeconfigs stay root:root 0600 on disk (CIS 1.1.14-1.1.19); a component that runs as its own
user reads its secrets as systemd credentials, which `kubesmith run` imitates."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import EXAMPLES
from plan_support import plan_of
from kubesmith import layout
from kubesmith.backends.run import load_credentials, reroot
from kubesmith.backends.systemd import unit_files
from kubesmith.plan import credentials
from kubesmith.vocabulary.model import File, HostPlan, Service


def _argument_values(service: Service) -> set[str]:
    return {part for argument in service.argv for part in argument.partition("=")[2].split(",")}


def _secrets(host: HostPlan) -> dict[str, File]:
    return {file.path: file for file in host.files if file.mode & 0o077 == 0}


@pytest.mark.parametrize("spec", EXAMPLES, ids=lambda path: path.stem)
def test_every_secret_is_root_only_and_each_component_reads_its_own_as_a_credential(spec: Path) -> None:
    for host in plan_of(spec).hosts:
        secrets = _secrets(host)
        assert {(f.owner, f.group) for f in secrets.values()} <= {("root", "root")}, host.name
        for service in host.services:
            named = _argument_values(service)
            loaded = {layout.credential_path(service.name, name): source for name, source in service.credentials}
            assert set(loaded.values()) <= set(secrets), service.name
            assert {value for value in named if value.startswith(layout.CREDENTIALS)} <= set(loaded), service.name
            if service.user != "root":  # it could not open a root-only file: every secret it names is a credential
                assert not named & set(secrets), (host.name, service.name, named & set(secrets))
            else:
                assert not service.credentials, service.name


def test_the_unprivileged_components_get_exactly_their_secrets() -> None:
    host = next(h for h in plan_of(next(p for p in EXAMPLES if p.stem == "ha")).hosts if h.name == "cp1")
    loaded = {service.name: {source for _, source in service.credentials} for service in host.services}
    pki, etc = layout.pki_path, layout.ETC
    assert loaded["etcd"] == {pki("etcd/server.key"), pki("etcd/peer.key")}
    assert loaded["kube-scheduler"] == {f"{etc}/scheduler.conf", pki("scheduler-serving.key")}
    assert loaded["kube-controller-manager"] == {f"{etc}/controller-manager.conf", pki("controller-manager-serving.key"),
                                                 pki("controller-manager/ca.key"), pki("controller-manager/sa.key")}
    assert loaded["kube-apiserver"] == {pki("apiserver.key"), pki("apiserver-etcd-client.key"), pki("sa.key"),
                                        pki("apiserver-kubelet-client.key"), pki("front-proxy-client.key"),
                                        layout.config_path("encryption.yaml")}
    # the scheduler's configuration document points at the credential too, not at the root-only kubeconfig
    document = next(f for f in host.files if f.path == layout.config_path("scheduler.yaml")).data
    assert document["clientConnection"]["kubeconfig"] == layout.credential_path("kube-scheduler", "scheduler.conf")
    unit = unit_files(host)[f"{layout.UNIT_DIR.lstrip('/')}/kube-scheduler.service"]
    assert f"LoadCredential=scheduler.conf:{etc}/scheduler.conf\n" in unit
    assert "ReadWritePaths=-/run/credentials" not in unit  # systemd mounts it; the sandbox must not be asked to


def test_a_secret_no_service_names_is_root_owned_without_a_credential() -> None:
    reader = Service(name="reader", component="x", description="x", binary="x", user="reader", group="reader",
                     argv=("--key=/etc/kubernetes/pki/used.key", "--config=/etc/kubernetes/config/x.yaml"),
                     needs_files=("/etc/kubernetes/config/x.yaml",))
    files = [File("/etc/kubernetes/pki/used.key", 0o600, "reader", "reader"),
             File("/etc/kubernetes/pki/unused.key", 0o600, "reader", "reader"),
             File("/etc/kubernetes/x.conf", 0o600, "reader", "reader"),
             File("/etc/kubernetes/config/x.yaml", 0o644, data={"kubeconfig": "/etc/kubernetes/x.conf"}),
             File("/etc/kubernetes/pki/public.crt", 0o644, "reader", "reader")]
    (service,), out = credentials.hand_over([reader], files)
    by_path = {file.path: file for file in out}
    assert service.credentials == (("pki_used.key", "/etc/kubernetes/pki/used.key"), ("x.conf", "/etc/kubernetes/x.conf"))
    assert service.argv[0] == "--key=/run/credentials/reader.service/pki_used.key"
    assert by_path["/etc/kubernetes/config/x.yaml"].data == {"kubeconfig": "/run/credentials/reader.service/x.conf"}
    assert {by_path[p].owner for p in ("/etc/kubernetes/pki/used.key", "/etc/kubernetes/pki/unused.key")} == {"root"}
    assert by_path["/etc/kubernetes/pki/public.crt"].owner == "reader"  # not a secret: left as the module said


def test_run_hands_a_fresh_private_copy_at_each_start(tmp_path: Path) -> None:
    """`kubesmith run` has no systemd: it copies each credential under its root before every start."""
    service = Service(name="etcd", component="etcd", description="x", binary="etcd", user="etcd", group="etcd",
                      argv=(), credentials=(("pki_etcd_server.key", layout.pki_path("etcd/server.key")),))
    source = Path(reroot(layout.pki_path("etcd/server.key"), tmp_path))
    source.parent.mkdir(parents=True)
    source.write_bytes(b"first")
    copy = Path(reroot(layout.credential_path("etcd", "pki_etcd_server.key"), tmp_path))
    load_credentials(service, tmp_path)
    assert copy.read_bytes() == b"first" and copy.stat().st_mode & 0o777 == 0o600
    source.write_bytes(b"renewed")
    load_credentials(service, tmp_path)
    assert copy.read_bytes() == b"renewed"
