"""What every host gets regardless of components: CA certificates, CA keys for signers,
the administrators' kubeconfigs on control-plane hosts, and the start-up targets.

Administrators, as kubeadm 1.29+ splits them: `admin.conf` is in the group `kubesmith:cluster-admins`,
which a ClusterRoleBinding ties to cluster-admin (an add-on of mode EnsureExists: the
`kubesmith-addons` step of `modules/addons.py` creates it with `super-admin.conf` once the API
answers, unless it exists), so its rights can be taken back; `super-admin.conf` is in `system:masters` and stays the root-only break-glass
credential for when RBAC itself is broken.

Targets synchronise start-up: each is reached only when the services wanted by it are
ready (the systemd backend adds an "online" unit per service that waits for readiness).
"""

from __future__ import annotations

from kubesmith import layout
from kubesmith.modules.base import file_from
from kubesmith.modules.kubeconfigs import kubeconfig_file
from kubesmith.pki.certlist import AUTHORITIES, certificate
from kubesmith.vocabulary.facts import Contribution, HostContext
from kubesmith.vocabulary.model import Target

# (target, what it means, targets it comes after when present on the same host)
TARGETS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("kube-ca-online", "cluster CA service answers (joins, renewals)", ("network-online.target",)),
    ("etcd-online", "etcd member is healthy", ("network-online.target",)),
    ("kube-apiserver-online", "API server, controller-manager and scheduler are ready",
     ("etcd-online.target",)),
    ("node-online", "kubelet and kube-proxy are ready", ("kube-apiserver-online.target",)),
)

# CA keys go to the hosts that sign with them: controller-manager signs node CSRs with kubernetes-ca.
SIGNING_ROLES: dict[str, frozenset[str]] = {"kubernetes-ca": frozenset({"control-plane"})}


def common_contribution(ctx: HostContext, certificates: list[str], wanted_targets: set[str]) -> Contribution:
    contribution = Contribution()
    needed_cas = {"kubernetes-ca"} | {certificate(name).ca for name in certificates}
    for ca in AUTHORITIES:
        if ca.name in needed_cas:
            contribution.files.append(file_from("ca-certificate", ca.name, layout.pki_path(ca.cert_file), "root",
                                                0o644))
    if "control-plane" in ctx.host.roles:
        contribution.files.append(kubeconfig_file(ctx, "admin", "admin", "root"))
        contribution.files.append(kubeconfig_file(ctx, "super-admin", "super-admin", "root"))
        contribution.certificates += ["admin", "super-admin"]
    present = {f"{name}.target" for name, _, _ in TARGETS if f"{name}.target" in wanted_targets}
    for name, description, after in TARGETS:
        if f"{name}.target" in present:
            contribution.targets.append(Target(
                name=name, description=f"kubesmith: {description}",
                after=tuple(t for t in after if t in present or not t.endswith("-online.target")),
                wanted_by="kubernetes.target"))
    contribution.targets.append(Target(
        name="kubernetes", description="kubesmith: this host's part of the cluster is healthy",
        after=tuple(sorted(present)), wanted_by="multi-user.target"))
    return contribution


def ca_key_holders(ca: str, hosts: list[tuple[str, frozenset[str]]]) -> tuple[str, ...]:
    roles = SIGNING_ROLES.get(ca, frozenset())
    return tuple(name for name, host_roles in hosts if roles & host_roles)
