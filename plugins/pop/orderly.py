"""Orderly (FIFO) POP: one batch in flight per (group, queue) at a time.

A queue popped orderly is blocked while its last batch is neither fully acked nor past its
invisible time; once it expires, the next pop delivers the same offsets again with a higher
delivery count. Acks move the group's committed offset to the first offset still unacked, so
nothing after an unacked message is delivered before it (RocketMQ's ConsumerOrderInfoManager).

No checkpoint is written for an orderly pop: after a crash the queue is popped again from its
committed offset (a duplicate, never a loss). Acks are written (``oAck``), so an acknowledged
message is not delivered again after a restart.
"""

from __future__ import annotations

import attrs

QueueKey = tuple[str, str, int]
"""(group, topic, queue id)."""


@attrs.define(eq=False)
class OrderBatch:
    offsets: tuple[int, ...]
    pop_time: int
    invisible_time: int
    deliveries: int
    """How many times these offsets have been delivered (1 the first time)."""
    acked: set[int] = attrs.field(factory=set)
    announced: bool = False
    """Whether waiting pops were woken since the batch expired."""

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_time

    @property
    def resolved(self) -> bool:
        return len(self.acked) >= len(self.offsets)

    def committed_after_acks(self) -> int:
        """The first offset not acked, or one past the last when all are."""
        for offset in self.offsets:
            if offset not in self.acked:
                return offset
        return self.offsets[-1] + 1


@attrs.define(eq=False)
class OrderlyQueues:
    batches: dict[QueueKey, OrderBatch] = attrs.field(factory=dict)

    def blocked(self, key: QueueKey, now_ms: int) -> bool:
        batch = self.batches.get(key)
        return batch is not None and not batch.resolved and now_ms < batch.deadline

    def deliveries_before(self, key: QueueKey, offsets: tuple[int, ...]) -> int:
        """How often the first of ``offsets`` was delivered before (0: never)."""
        batch = self.batches.get(key)
        if batch is None or batch.resolved or not offsets or offsets[0] not in batch.offsets:
            return 0
        return batch.deliveries

    def delivered(self, key: QueueKey, batch: OrderBatch) -> None:
        self.batches[key] = batch

    def ack(self, key: QueueKey, offset: int, pop_time: int) -> int | None:
        """Strike ``offset`` off the queue's batch popped at ``pop_time``; the new committed
        offset, or ``None`` when no such batch holds the offset (a stale handle)."""
        batch = self.batches.get(key)
        if batch is None or batch.pop_time != pop_time or offset not in batch.offsets:
            return None
        batch.acked.add(offset)
        return batch.committed_after_acks()

    def extend(self, key: QueueKey, offset: int, pop_time: int, now_ms: int, invisible_ms: int) -> bool:
        """Change the invisible time of the batch holding ``offset``; False for a stale handle."""
        batch = self.batches.get(key)
        if batch is None or batch.pop_time != pop_time or offset not in batch.offsets:
            return False
        batch.pop_time = now_ms
        batch.invisible_time = invisible_ms
        batch.announced = False
        return True

    def newly_expired(self, now_ms: int) -> list[QueueKey]:
        """Queues whose batch expired since the last call: pops waiting on them may go on."""
        out = []
        for key, batch in self.batches.items():
            if not batch.announced and not batch.resolved and batch.deadline <= now_ms:
                batch.announced = True
                out.append(key)
        return out

    def in_flight(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for (group, _, _), batch in self.batches.items():
            out[group] = out.get(group, 0) + len(batch.offsets) - len(batch.acked)
        return out

    def clear(self) -> None:
        self.batches.clear()
