"""Which address ranges (CIDRs) overlap. Two ranges overlap only when one holds the other, so a range is looked
up among its own supernets and among the supernets of the ranges recorded before it: linear in the number of
ranges, where comparing every pair made 10,000 hosts with pod ranges of their own take minutes."""

from __future__ import annotations

import ipaddress
from typing import Generic, TypeVar

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Tag = TypeVar("Tag")
_Key = tuple[int, int, int]  # (version, prefix length, the address's leading bits)


def _keys(network: Network) -> list[_Key]:
    """The keys of `network`'s supernets, from the whole address space down to `network` itself (last)."""
    value, bits = int(network.network_address), network.max_prefixlen
    return [(network.version, prefix, value >> (bits - prefix)) for prefix in range(network.prefixlen + 1)]


class RangeIndex(Generic[Tag]):
    """Ranges recorded in order, each with a tag (the host it is from); a range is found overlapping each."""

    def __init__(self) -> None:
        self._ranges: dict[_Key, Tag] = {}  # each range recorded -> the first tag recorded with it
        self._holders: dict[_Key, Tag] = {}  # each supernet of a range recorded -> the first such range's tag

    def overlapping(self, network: Network) -> list[Tag]:
        """The tags of the recorded ranges `network` overlaps (of each one that holds it or is it, and of the
        first one inside it)."""
        keys = _keys(network)
        found = [self._ranges[key] for key in keys if key in self._ranges]
        if keys[-1] in self._holders:
            found.append(self._holders[keys[-1]])
        return found

    def add(self, network: Network, tag: Tag) -> None:
        keys = _keys(network)
        self._ranges.setdefault(keys[-1], tag)
        for key in keys:
            self._holders.setdefault(key, tag)
