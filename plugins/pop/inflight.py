"""What each group has popped and not yet acknowledged, with a deadline per pop (in memory).

A pop of one queue makes one :class:`Checkpoint`: the offsets it delivered, when, and for how
long they are invisible. Acks strike offsets off; a checkpoint whose deadline passes with
offsets left is *due*: the service re-delivers those offsets and then strikes them off too.
The table is rebuilt at start from the revive log (:mod:`plugins.pop.revive_log`), so it
holds nothing that is not written there first.

Pure data and arithmetic: no I/O, no clock (callers pass ``now_ms``), so it is tested alone.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator

import attrs

CheckpointKey = tuple[str, str, int, int, int]
"""(group, topic, queue id, start offset, pop time): how an ack names its checkpoint."""


@attrs.define(eq=False)
class Checkpoint:
    group: str
    topic: str
    """The topic read: the subscribed topic or the group's POP retry topic."""
    queue_id: int
    start_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    offsets: tuple[int, ...]
    """Queue offsets delivered, ascending (a tag filter may leave gaps)."""
    revive_offset: int = -1
    """Where the checkpoint's record sits in its revive queue (-1: not written yet)."""
    acked: set[int] = attrs.field(factory=set)
    acking: set[int] = attrs.field(factory=set)
    """Offsets whose ack record is being written: the revive leaves them alone until it is."""
    reviving: set[int] = attrs.field(factory=set)
    """Offsets the revive is re-delivering: an ack for them comes too late."""

    @property
    def key(self) -> CheckpointKey:
        return (self.group, self.topic, self.queue_id, self.start_offset, self.pop_time)

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_time

    def pending(self) -> list[int]:
        return [offset for offset in self.offsets if offset not in self.acked]

    @property
    def resolved(self) -> bool:
        return len(self.acked) >= len(self.offsets)


class AckOutcome:
    ACKED = "acked"
    """The offset was in flight and is not any more."""
    ALREADY = "already"
    """The checkpoint is known and the offset was acked (or re-delivered) before."""
    UNKNOWN = "unknown"
    """No such checkpoint: revived and resolved already, or never written (a stale handle)."""
    NOT_IN_CHECKPOINT = "not-in-checkpoint"


@attrs.define(eq=False)
class InFlightTable:
    checkpoints: dict[CheckpointKey, Checkpoint] = attrs.field(factory=dict)
    _deadlines: list[tuple[int, int, CheckpointKey]] = attrs.field(factory=list)
    _sequence: Iterator[int] = attrs.field(factory=itertools.count)
    _per_queue: dict[tuple[str, str, int], int] = attrs.field(factory=dict)
    """Offsets in flight per (group, topic, queue)."""

    def __len__(self) -> int:
        return len(self.checkpoints)

    def add(self, checkpoint: Checkpoint) -> None:
        """Track a checkpoint (one whose key is taken replaces nothing: callers pick a free
        pop time, see :meth:`free_pop_time`)."""
        key = checkpoint.key
        if key in self.checkpoints:
            raise ValueError(f"checkpoint {key} is tracked already")
        self.checkpoints[key] = checkpoint
        heapq.heappush(self._deadlines, (checkpoint.deadline, next(self._sequence), key))
        queue = (checkpoint.group, checkpoint.topic, checkpoint.queue_id)
        self._per_queue[queue] = self._per_queue.get(queue, 0) + len(checkpoint.pending())

    def free_pop_time(self, group: str, topic: str, queue_id: int, start_offset: int, pop_time: int) -> int:
        """``pop_time``, or the next millisecond no checkpoint of that start offset uses."""
        while (group, topic, queue_id, start_offset, pop_time) in self.checkpoints:
            pop_time += 1
        return pop_time

    def get(self, key: CheckpointKey) -> Checkpoint | None:
        return self.checkpoints.get(key)

    def ack(self, key: CheckpointKey, offsets: Iterable[int]) -> str:
        """Strike ``offsets`` off the checkpoint ``key``; a resolved checkpoint is dropped.

        Returns an :class:`AckOutcome` value: ``ACKED`` when any offset was in flight.
        """
        checkpoint = self.checkpoints.get(key)
        if checkpoint is None:
            return AckOutcome.UNKNOWN
        outcome = AckOutcome.ALREADY
        members = set(checkpoint.offsets)
        for offset in offsets:
            if offset not in members:
                return AckOutcome.NOT_IN_CHECKPOINT
            if offset not in checkpoint.acked:
                checkpoint.acked.add(offset)
                outcome = AckOutcome.ACKED
                queue = (checkpoint.group, checkpoint.topic, checkpoint.queue_id)
                self._per_queue[queue] -= 1
        if checkpoint.resolved:
            self._drop(checkpoint)
        return outcome

    def _drop(self, checkpoint: Checkpoint) -> None:
        del self.checkpoints[checkpoint.key]
        queue = (checkpoint.group, checkpoint.topic, checkpoint.queue_id)
        left = self._per_queue.get(queue, 0) - len(checkpoint.pending())
        if left > 0:
            self._per_queue[queue] = left
        else:
            self._per_queue.pop(queue, None)

    def forget(self, checkpoint: Checkpoint) -> None:
        """Drop a checkpoint whatever it still holds (its topic or group is gone)."""
        if self.checkpoints.get(checkpoint.key) is checkpoint:
            self._drop(checkpoint)

    def due(self, now_ms: int) -> list[Checkpoint]:
        """Checkpoints whose deadline is at or before ``now_ms`` and that still hold offsets,
        earliest first. They stay tracked until their offsets are acked (by the revive)."""
        out = []
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            _, _, key = heapq.heappop(self._deadlines)
            checkpoint = self.checkpoints.get(key)
            if checkpoint is not None:
                out.append(checkpoint)
        return out

    def postpone(self, checkpoint: Checkpoint, until_ms: int) -> None:
        """Look at a due checkpoint again at ``until_ms`` (its re-delivery failed for now)."""
        if self.checkpoints.get(checkpoint.key) is checkpoint:
            heapq.heappush(self._deadlines, (until_ms, next(self._sequence), checkpoint.key))

    def in_flight(self, group: str, topic: str, queue_id: int) -> int:
        return self._per_queue.get((group, topic, queue_id), 0)

    def in_flight_by_group(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for (group, _, _), count in self._per_queue.items():
            out[group] = out.get(group, 0) + count
        return out

    def replay_floor(self, revive_qid: int, end: int) -> int:
        """Where replaying revive queue ``revive_qid`` must start to see every checkpoint still
        tracked: the lowest revive offset among them, or ``end`` when there is none."""
        floor = end
        for checkpoint in self.checkpoints.values():
            if checkpoint.revive_qid == revive_qid and 0 <= checkpoint.revive_offset < floor:
                floor = checkpoint.revive_offset
        return floor

    def clear(self) -> None:
        self.checkpoints.clear()
        self._deadlines.clear()
        self._per_queue.clear()
