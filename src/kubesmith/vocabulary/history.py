"""What the cluster's state directory remembers of earlier applies, which the spec alone cannot say.

The plan is a function of the spec, what was observed of the hosts, and this: how each etcd member
first started (`plan.membership`), and the keys of hosts removed from the cluster, whose
certificates the CA services refuse to renew.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kubesmith.vocabulary.membership import Bootstrap


@dataclass(frozen=True, slots=True)
class History:
    etcd: Mapping[str, Bootstrap] = field(default_factory=dict)  # member name -> its first start
    removed_keys: Mapping[str, str] = field(default_factory=dict)  # `sha256:<hex>` of a key -> the host it was

    def with_removed(self, keys: Mapping[str, str]) -> History:
        return History(self.etcd, {**self.removed_keys, **keys})
