"""`kubesmith run` moves a host's paths under its own root: what its pods' network allocates too."""

from __future__ import annotations

import json
from pathlib import Path

from kubesmith.backends.run import rerooted_bytes, rerooted_kind
from kubesmith.modules.pod_network import CNI_CONFIG, PodNetworkOptions, cni_configuration


def test_the_pod_networks_address_allocations_live_under_the_run_root_not_the_machines(tmp_path: Path) -> None:
    """host-local IPAM keeps one file per address it hands out; a run whose pods were not torn down by
    CNI (it stops the kubelet and containerd) left them in the machine's /var/lib/cni/networks, until a
    later run found the range full ("no IP addresses available in range set")."""
    data = json.dumps(cni_configuration(PodNetworkOptions(), "10.200.0.0/24")).encode()
    assert rerooted_kind(CNI_CONFIG)
    document = json.loads(rerooted_bytes(CNI_CONFIG, data, tmp_path))
    (bridge, portmap) = document["plugins"]
    assert bridge["ipam"]["dataDir"] == f"{tmp_path}/var/lib/cni/networks"
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.200.0.0/24"}]] and bridge["bridge"] == "cni0"
    assert portmap == {"type": "portmap", "capabilities": {"portMappings": True}}
