"""How each etcd member first started: its `--initial-cluster` and `--initial-cluster-state`.

etcd reads those two flags only when a member's data directory is empty; once a member runs they
are history. So they are kept as they were (the cluster's state directory records them, see
`backends.etcd_members`): a member added later changes no other member's flags and restarts
none. A member added to a running cluster joins it: `existing`, with the members it finds then
plus itself (what `etcdctl member add` prints for it). With no record, the cluster is new: every
member of the spec starts `new`, together.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class Bootstrap:
    state: Literal["new", "existing"]
    initial_cluster: str  # name=peer-url,...

    def as_dict(self) -> dict[str, str]:
        return {"state": self.state, "initialCluster": self.initial_cluster}


def bootstraps(members: Sequence[str], peer_url: Callable[[str], str],
               recorded: Mapping[str, Bootstrap]) -> dict[str, Bootstrap]:
    """Each spec member's first start: recorded ones as recorded; the others, in spec order, join
    the recorded members that are still in the spec and those that joined before them."""
    known = [name for name in recorded if name in members]
    if not known:
        everyone = ",".join(f"{name}={peer_url(name)}" for name in members)
        return {name: Bootstrap("new", everyone) for name in members}
    result = {name: recorded[name] for name in known}
    present = [f"{name}={peer_url(name)}" for name in known]
    for name in members:
        if name not in result:
            present.append(f"{name}={peer_url(name)}")
            result[name] = Bootstrap("existing", ",".join(present))
    return result
