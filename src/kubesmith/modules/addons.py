"""Add-ons: Kubernetes objects kubesmith keeps applied, as the seed's addon manager does.

Each add-on is one file in /etc/kubernetes/addons on every control-plane host (a `List` of its
objects): the manifests the spec names in `spec.addons` (read and checked when the spec is loaded),
CoreDNS (`modules/core_dns.py`) and kubesmith's own admins binding. The `kubesmith-addons` step
(`kubesmith addons apply`) applies them once the API answers, with server-side apply and the field
manager `kubesmith`, and prunes the objects of add-ons that are gone; apply runs it again at its end,
every time, so a hand edit of a `Reconcile` object is put back by the next apply. Per object, the
label `addonmanager.kubernetes.io/mode` (the addon manager's) says who owns it after creation:
`Reconcile` (the default: kubesmith's state wins, and it is deleted when its add-on goes) or
`EnsureExists` (created once, then the user's: never changed or deleted again).

A unit rather than only a step of apply: a host that boots, and `kubesmith run`, bring the add-ons
up too, and the step runs where the API and super-admin.conf are, never on the operator's machine.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from kubesmith import layout
from kubesmith.modules.base import Module
from kubesmith.modules.kubeconfigs import api_gate
from kubesmith.pki.certlist import CLUSTER_ADMINS
from kubesmith.vocabulary.facts import Contribution, HostContext
from kubesmith.vocabulary.model import File, RestartPolicy, Service
from kubesmith.vocabulary.types import StrictModel

ADDONS_DIR = "/etc/kubernetes/addons"
SERVICE = "kubesmith-addons"
ADMINS = "kubesmith-admins"
MODE_LABEL = "addonmanager.kubernetes.io/mode"
MODES = ("Reconcile", "EnsureExists")
UNIT_NODE_WAIT = 45.0  # within a oneshot's start timeout (90 s); apply's own run waits longer
APPLY_NODE_WAIT = 120.0


class AddonsOptions(StrictModel):
    rollout_deadline: float = Field(default=300.0, gt=0, le=3600, description="Seconds apply waits for the "
                                    "add-ons' Deployments and DaemonSets to roll out (their new pods Ready).")


class AddonsModule(Module):
    key = "addons"
    position = 130
    title = "add-on manager (spec.addons, CoreDNS, the admins binding)"
    options = AddonsOptions
    roles = frozenset({"control-plane"})

    def contribute(self, ctx: HostContext, options: AddonsOptions) -> Contribution:
        files = [ctx.shared("admins-addon", lambda: addon_file(ADMINS, [cluster_admins_binding()]))]
        for name, objects in ctx.spec.spec.addon_manifests:
            files.append(ctx.shared(("spec-addon", name), lambda objects=objects, name=name: addon_file(
                name, objects)))
        return Contribution(files=files, services=[addons_service(ctx, options)])


def addon_file(name: str, objects: list[dict[str, Any]]) -> File:
    """One add-on's objects as a `List` document (0600: a manifest may hold a Secret)."""
    return File(f"{ADDONS_DIR}/{name}.yaml", 0o600,
                data={"apiVersion": "v1", "kind": "List", "items": objects}, format="yaml")


def node_labels_file(name: str, label: str, nodes: list[str]) -> File:
    """A label the add-on step puts on nodes once they are registered (`label=true`): what the
    scheduler must know of them, such as which nodes hold an image kubesmith imported. The file names
    its own host at most; apply adds the other nodes it reached (`--label-node`), so adding a node
    changes no other host's files."""
    return File(f"{ADDONS_DIR}/{name}{layout.ADDON_LABELS_SUFFIX}", 0o644,
                data={"label": label, "nodes": sorted(nodes)}, format="json")


def cluster_admins_binding() -> dict[str, Any]:
    """admin.conf's group to cluster-admin (kubeadm 1.29+'s kubeadm:cluster-admins, under kubesmith's
    name); EnsureExists: deleting it takes admin.conf's rights back until the step runs again."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": CLUSTER_ADMINS, "labels": {"app.kubernetes.io/managed-by": "kubesmith",
                                                             MODE_LABEL: "EnsureExists"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": CLUSTER_ADMINS}]}


def addons_argv(options: AddonsOptions) -> tuple[str, ...]:
    """`kubesmith addons apply` as the unit runs it (apply adds `--wait` at its end)."""
    return ("addons", "apply", "--kubeconfig", layout.kubeconfig_path("super-admin"), "--dir", ADDONS_DIR,
            "--rollout-deadline", f"{options.rollout_deadline:g}", "--node-wait", f"{UNIT_NODE_WAIT:g}")


def addons_service(ctx: HostContext, options: AddonsOptions) -> Service:
    """Applies the add-ons as super-admin once the API answers (no wait for roll-outs: at boot the
    nodes may not be back yet)."""
    super_admin = layout.kubeconfig_path("super-admin")
    return Service(
        name=SERVICE,
        component="addons",
        description="kubesmith: keep the add-ons applied (server-side apply; admins binding, CoreDNS, spec.addons)",
        binary="kubesmith",
        argv=addons_argv(options),
        user="root",
        group="root",
        wanted_by="kube-apiserver-online.target",
        after=("kube-apiserver.service",),
        gates=(api_gate(ctx, "super-admin"),),
        restart=RestartPolicy("on-failure", 5.0, 60.0),
        needs_files=(super_admin,),
        hardening=False,
        oneshot=True,
        holds_target=False,  # a failed add-on is apply's error to report, not a reason the API is not online
    )


MODULE = AddonsModule()
