"""The consistent-hash ring of RocketMQ's ``AllocateMessageQueueConsistentHash``.

Each consumer is placed on a ring of 32-bit positions ``virtual_nodes`` times (keys
``<client id>-<i>``); a queue belongs to the first virtual node at or after its own position,
wrapping around. Positions are the first four bytes of the key's MD5, big-endian, as in
RocketMQ, so Java and Trocket clients in one group agree.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence


def position(key: str) -> int:
    return int.from_bytes(hashlib.md5(key.encode(), usedforsecurity=False).digest()[:4], "big")


class HashRing:
    """Immutable once built; cheap enough to rebuild per rebalance (a few hundred hashes)."""

    def __init__(self, nodes: Sequence[str], virtual_nodes: int) -> None:
        owners: dict[int, str] = {}
        for node in nodes:
            for replica in range(virtual_nodes):
                owners[position(f"{node}-{replica}")] = node  # a collision: the later node wins, as in Java
        self._positions = sorted(owners)
        self._owners = [owners[p] for p in self._positions]

    def route(self, key: str) -> str:
        """The node owning ``key``.

        :raises ValueError: on an empty ring.
        """
        if not self._positions:
            raise ValueError("no nodes on the ring")
        at = bisect.bisect_left(self._positions, position(key))
        return self._owners[at % len(self._owners)]
