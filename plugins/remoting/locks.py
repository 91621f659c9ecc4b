"""Queue locks for orderly consumers (RocketMQ's RebalanceLockManager).

A queue of a group belongs to one client at a time; a lock lasts ``expiry`` seconds unless the
owner renews it (clients re-lock every 20 s).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from kernel.model import MessageQueue


@attrs.define
class _Lock:
    client_id: str
    last_update: float


@attrs.define(eq=False)
class QueueLocks:
    expiry: float = 60.0
    _locks: dict[tuple[str, MessageQueue], _Lock] = attrs.field(factory=dict, init=False)

    def try_lock(
        self, group: str, queues: Iterable[MessageQueue], client_id: str, now: float
    ) -> list[MessageQueue]:
        """Lock (or renew) every queue that is free, expired or already ours; return those."""
        locked = []
        for queue in queues:
            key = (group, queue)
            held = self._locks.get(key)
            if held is None or held.client_id == client_id or now - held.last_update > self.expiry:
                self._locks[key] = _Lock(client_id, now)
                locked.append(queue)
        return locked

    def unlock(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> None:
        for queue in queues:
            held = self._locks.get((group, queue))
            if held is not None and held.client_id == client_id:
                del self._locks[(group, queue)]

    def owner(self, group: str, queue: MessageQueue, now: float) -> str | None:
        held = self._locks.get((group, queue))
        if held is None or now - held.last_update > self.expiry:
            return None
        return held.client_id
