"""The timer: delivers messages parked in ``rmq_sys_wheel_timer`` at their own times (RocketMQ 5's
arbitrary-time delay, without its timer wheel files).

Messages arrive in the timer queue in append order, not delivery order, so the scheduler keeps
every pending message in a heap of plain ints ``deliver_ms << 40 | queue_offset`` (about 45
bytes each; equal times keep append order), fed from the consume queue whose tag field holds
the delivery time. Each round enqueues newly parked entries and delivers one batch of due ones
in time order. Between rounds it sleeps until the heap's head is due or a message is parked
(:mod:`.arrivals`), ``poll_interval`` at most while nothing is pending.

Durable progress is a few numbers in ``config/timerProgress.json``, written between rounds
every ``progress_persist_interval`` and at shutdown:

- ``enqueueOffset``: entries below it had been read into the heap;
- ``lowOffset``: the lowest queue offset still pending (no entry below it is);
- ``pendingFrom``: the earliest pending ``[deliver_ms, queue_offset]``: every entry below
  ``enqueueOffset`` that sorts before it was delivered (the heap pops in that order).

At start the queue is read again from ``lowOffset``: entries below ``enqueueOffset`` from
``pendingFrom`` on and every entry from ``enqueueOffset`` on are pending. A clean restart
delivers nothing twice (except the rare message parked after its own time, which sorts before
messages already delivered); after a crash the messages delivered since the last write come
again: at-least-once, as with delay levels. A round is shielded from cancellation so a stop never
falls between a delivery and its bookkeeping.
"""

from __future__ import annotations

import heapq
import logging
from pathlib import Path
from typing import Any

import attrs
import trio

from kernel.clock import steady_ms
from kernel.context import BrokerRuntime
from kernel.model import TIMER_TOPIC, QueueEntry
from kernel.persist import JsonStateFile, read_json_with_backup
from plugins.retry_dlq.arrivals import ParkedArrivals, wait_for_arrival
from plugins.retry_dlq.config import RetryDlqConfig
from plugins.retry_dlq.delivery import RETRY_AFTER_FAILURE, Delivery, deliver_parked, offset_in_range

log = logging.getLogger(__name__)

OFFSET_BITS = 40
"""Queue offsets below 2**40 (a trillion parked messages) fit beside the delivery time."""
_OFFSET_MASK = (1 << OFFSET_BITS) - 1
TIMER_QUEUE = 0
RELOAD_BATCH = 8192


def _key(deliver_ms: int, queue_offset: int) -> int:
    return deliver_ms << OFFSET_BITS | queue_offset


def _split(key: int) -> tuple[int, int]:
    return key >> OFFSET_BITS, key & _OFFSET_MASK


@attrs.frozen
class TimerProgress:
    pending: int
    """Messages parked and not yet delivered (read into memory or not)."""
    next_deliver_ms: int | None
    """When the earliest pending message read so far is due."""
    enqueue_offset: int
    """Timer-queue entries read so far."""
    max_offset: int
    """Timer-queue entries written so far."""
    delivered: int
    """Delivered since start."""
    dropped: int
    """Dropped since start: parked records that named no real topic."""


@attrs.define(eq=False)
class TimerScheduler:
    """See the module docstring."""

    runtime: BrokerRuntime
    config: RetryDlqConfig
    path: Path
    enqueue_offset: int = 0
    arrivals: ParkedArrivals = attrs.field(factory=lambda: ParkedArrivals(TIMER_TOPIC))
    _heap: list[int] = attrs.field(factory=list, init=False)
    _delivered: int = attrs.field(default=0, init=False)
    _dropped: int = attrs.field(default=0, init=False)
    _file: JsonStateFile = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._file = JsonStateFile(self.path)

    def load(self) -> None:
        """Rebuild the heap from the saved progress (see the module docstring)."""
        data = read_json_with_backup(self.path) or {}
        store = self.runtime.store
        saved_enqueue = int(data.get("enqueueOffset", 0))
        self.enqueue_offset = offset_in_range(store, TIMER_TOPIC, TIMER_QUEUE, saved_enqueue, "timer enqueue")
        low = store.min_queue_offset(TIMER_TOPIC, TIMER_QUEUE)
        high = store.max_queue_offset(TIMER_TOPIC, TIMER_QUEUE)
        pending_from = _key(*data["pendingFrom"]) if data.get("pendingFrom") else None
        offset = max(int(data.get("lowOffset", self.enqueue_offset)), low)
        while pending_from is not None and offset < self.enqueue_offset:
            entries = store.lookup(TIMER_TOPIC, TIMER_QUEUE, offset, RELOAD_BATCH)
            if not entries:
                break
            for entry in entries:
                if entry.queue_offset >= self.enqueue_offset:
                    break
                key = _key(entry.tags_code, entry.queue_offset)
                if key >= pending_from:
                    self._heap.append(key)
            offset = entries[-1].queue_offset + 1
        heapq.heapify(self._heap)
        behind = high - self.enqueue_offset
        if self._heap or behind:
            log.info("timer: %d parked messages pending at start", len(self._heap) + behind)

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        """Deliver until cancelled; progress is written between rounds and, shielded, at the end."""
        self.load()
        task_status.started()
        persisted_at = trio.current_time()
        try:
            while True:
                parked = self.arrivals.event(TIMER_QUEUE)
                with trio.CancelScope(shield=True):
                    worked = await self._round()
                if trio.current_time() - persisted_at >= self.config.progress_persist_interval:
                    await self._persist_or_log()
                    persisted_at = trio.current_time()
                if worked:
                    await trio.lowlevel.checkpoint()
                else:
                    await wait_for_arrival(parked, self._idle_wait())
        finally:
            with trio.CancelScope(shield=True):
                await self._persist_or_log()

    async def _persist_or_log(self) -> None:
        await self.runtime.ctx.background_writes.attempt(str(self._file.path), self.persist)

    async def persist(self) -> None:
        heap = self._heap
        await self._file.write(
            {
                "enqueueOffset": self.enqueue_offset,
                "lowOffset": min((key & _OFFSET_MASK for key in heap), default=self.enqueue_offset),
                "pendingFrom": list(_split(heap[0])) if heap else None,
            }
        )

    def _idle_wait(self) -> float:
        """Until the head is due; with nothing pending, ``poll_interval`` (a parked message
        wakes the loop earlier either way)."""
        if self._heap:
            return max(0.0, (_split(self._heap[0])[0] - steady_ms()) / 1000)
        return self.config.poll_interval

    async def _round(self) -> bool:
        """Enqueue newly parked entries and deliver one batch of due ones; True if either
        happened (more may be waiting)."""
        store = self.runtime.store
        entries = store.lookup(TIMER_TOPIC, TIMER_QUEUE, self.enqueue_offset, self.config.delivery_batch)
        for entry in entries:
            heapq.heappush(self._heap, _key(entry.tags_code, entry.queue_offset))
        if entries:
            self.enqueue_offset = entries[-1].queue_offset + 1
        now = steady_ms()
        due: list[int] = []
        while self._heap and len(due) < self.config.delivery_batch and _split(self._heap[0])[0] <= now:
            due.append(heapq.heappop(self._heap))
        delivery = await self._deliver(due)
        if not delivery.done:
            for key in due:
                heapq.heappush(self._heap, key)
            await trio.sleep(RETRY_AFTER_FAILURE)
            return False
        self._delivered += len(due) - delivery.dropped
        self._dropped += delivery.dropped
        return bool(entries or due)

    async def _deliver(self, keys: list[int]) -> Delivery:
        """Deliver the parked messages of ``keys`` in order (not done: retry later)."""
        store = self.runtime.store
        entries: list[QueueEntry] = []
        for key in keys:
            offset = _split(key)[1]
            found = store.lookup(TIMER_TOPIC, TIMER_QUEUE, offset, 1)
            if not found or found[0].queue_offset != offset:
                log.error("timer: parked message at queue offset %d is gone (retention?); skipped", offset)
                continue
            entries.append(found[0])
        return await deliver_parked(self.runtime, entries)

    def progress(self) -> TimerProgress:
        high = self.runtime.store.max_queue_offset(TIMER_TOPIC, TIMER_QUEUE)
        return TimerProgress(
            pending=len(self._heap) + high - self.enqueue_offset,
            next_deliver_ms=_split(self._heap[0])[0] if self._heap else None,
            enqueue_offset=self.enqueue_offset,
            max_offset=high,
            delivered=self._delivered,
            dropped=self._dropped,
        )
