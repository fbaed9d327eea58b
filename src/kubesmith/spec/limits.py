"""Sizes a cluster file may ask for that nothing else bounds, checked before any plan is built."""

from __future__ import annotations

from kubesmith.spec.checks import Finding
from kubesmith.spec.model import Cluster

MAX_ETCD_MEMBERS = 9


def limit_findings(cluster: Cluster) -> list[Finding]:
    """More etcd members than etcd runs well with: every member lists every other one
    (--initial-cluster), so 10,000 of them made `plan` quadratic; etcd itself recommends 3, 5 or 7,
    as each member slows every write, and 9 is the most kubesmith takes."""
    members = [index for index, host in enumerate(cluster.spec.hosts) if "etcd" in host.roles]
    if len(members) <= MAX_ETCD_MEMBERS:
        return []
    return [(("spec", "hosts", members[MAX_ETCD_MEMBERS], "roles"),
             f"{len(members)} hosts have the etcd role, more than {MAX_ETCD_MEMBERS}: etcd recommends 3, 5 or 7 "
             "members (each one slows every write and adds no capacity); give the etcd role to fewer hosts",
             "error")]
