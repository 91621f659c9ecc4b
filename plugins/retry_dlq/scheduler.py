"""The scheduler: one task per delay level moves due messages from ``SCHEDULE_TOPIC_XXXX`` queue
``level - 1`` to their real topic, in order (RocketMQ's ``ScheduleMessageService``).

A level's queue is FIFO by delivery time (every message of a level waits the same delay), so a
task only looks at the head: due entries (tag field = delivery time) are delivered in batches,
then it sleeps until the head is due (nothing parked later can be due sooner) or, with nothing
parked, until a message is parked at its level (:mod:`.arrivals`; ``poll_interval`` at most).

Progress (the next schedule-queue offset per level) lives in ``config/delayOffset.json``,
written every ``progress_persist_interval`` and at shutdown, and corrected at start against the
queue's real range. A crash between a delivery and the next progress write delivers those
messages again after restart: duplicates, never losses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import trio

from kernel.clock import steady_ms
from kernel.context import BrokerRuntime
from kernel.model import SCHEDULE_TOPIC
from kernel.persist import JsonStateFile, lenient_json_keys, read_json_with_backup
from plugins.retry_dlq.arrivals import ParkedArrivals, wait_for_arrival
from plugins.retry_dlq.config import RetryDlqConfig
from plugins.retry_dlq.delivery import RETRY_AFTER_FAILURE, deliver_parked, offset_in_range


@attrs.frozen
class LevelProgress:
    level: int
    delay: float
    """Seconds."""
    next_offset: int
    """Next schedule-queue offset to deliver."""
    max_offset: int
    """One past the last parked message."""
    pending: int
    """Messages parked and not yet delivered."""
    delivered: int
    """Delivered since start."""
    dropped: int
    """Dropped since start: parked records that named no real topic."""


@attrs.define(eq=False)
class DelayScheduler:
    """See the module docstring."""

    runtime: BrokerRuntime
    levels: tuple[float, ...]
    config: RetryDlqConfig
    path: Path
    arrivals: ParkedArrivals = attrs.field(factory=lambda: ParkedArrivals(SCHEDULE_TOPIC))
    offsets: dict[int, int] = attrs.field(factory=dict)
    _delivered: dict[int, int] = attrs.field(factory=dict, init=False)
    _dropped: dict[int, int] = attrs.field(factory=dict, init=False)
    _file: JsonStateFile = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._file = JsonStateFile(self.path)

    def load(self) -> None:
        """Read ``delayOffset.json`` (fastjson's unquoted keys accepted) and clamp each level's
        offset to its queue's range."""
        data = read_json_with_backup(self.path, preprocess=lenient_json_keys) or {}
        table = data.get("offsetTable", {})
        store = self.runtime.store
        for level in range(1, len(self.levels) + 1):
            saved = int(table.get(str(level), 0))
            what = f"delay level {level}"
            self.offsets[level] = offset_in_range(store, SCHEDULE_TOPIC, level - 1, saved, what)

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        """Deliver until cancelled; progress is persisted periodically and, shielded, at the end."""
        self.load()
        try:
            async with trio.open_nursery() as nursery:
                for level in self.offsets:
                    nursery.start_soon(self._deliver_level, level)
                nursery.start_soon(self._persist_periodically)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True):
                await self.runtime.ctx.background_writes.attempt(str(self._file.path), self.persist)

    async def persist(self) -> None:
        await self._file.write({"offsetTable": {str(k): v for k, v in sorted(self.offsets.items())}})

    async def _persist_periodically(self) -> None:
        writes = self.runtime.ctx.background_writes
        await writes.every(self.config.progress_persist_interval, str(self._file.path), self.persist)

    async def _deliver_level(self, level: int) -> None:
        store = self.runtime.store
        queue_id = level - 1
        while True:
            offset = self.offsets[level]
            parked = self.arrivals.event(queue_id)
            entries = store.lookup(SCHEDULE_TOPIC, queue_id, offset, self.config.delivery_batch)
            if entries and entries[0].queue_offset > offset:
                offset = self.offsets[level] = entries[0].queue_offset  # retention moved the head
            now = steady_ms()
            due = []
            for entry in entries:
                if entry.tags_code > now:
                    break
                due.append(entry)
            if not due:
                if entries:
                    await trio.sleep(max(0.0, (entries[0].tags_code - now) / 1000))
                else:
                    await wait_for_arrival(parked, self.config.poll_interval)
                continue
            delivery = await deliver_parked(self.runtime, due)
            if delivery.done:
                self.offsets[level] = due[-1].queue_offset + 1
                self._delivered[level] = self._delivered.get(level, 0) + len(due) - delivery.dropped
                self._dropped[level] = self._dropped.get(level, 0) + delivery.dropped
            else:
                await trio.sleep(RETRY_AFTER_FAILURE)

    def progress(self) -> list[LevelProgress]:
        store = self.runtime.store
        out = []
        for level, offset in sorted(self.offsets.items()):
            high = store.max_queue_offset(SCHEDULE_TOPIC, level - 1)
            out.append(
                LevelProgress(
                    level,
                    self.levels[level - 1],
                    offset,
                    high,
                    high - offset,
                    self._delivered.get(level, 0),
                    self._dropped.get(level, 0),
                )
            )
        return out
