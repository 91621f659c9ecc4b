"""Interval flush: acknowledgements do not wait; a background loop flushes by pages and time.

The loss window on an OS crash or power cut is bounded by ``thorough_interval`` (data can sit
dirty that long when fewer than ``least_pages`` pages accumulate) plus one flush duration.
A broker process crash loses nothing acknowledged: the bytes are in the page cache.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import trio
import trio.lowlevel

from kernel.abc import MessageStore
from kernel.errors import FlushError
from kernel.model import AppendResult, Durability

log = logging.getLogger(__name__)


@attrs.frozen
class IntervalFlushStatistics:
    flushes: int
    thorough_flushes: int
    failures: int
    unflushed_bytes: int
    """Bytes written but not yet flushed (the current loss window on power loss)."""


@attrs.define(eq=False)
class IntervalFlush:
    """The ``"async"`` flush policy (RocketMQ's ASYNC_FLUSH, ``FlushRealTimeService``)."""

    store: MessageStore
    interval: float
    least_pages: int
    thorough_interval: float
    timed: bool = True
    name: str = "async"
    _flushes: int = attrs.field(default=0, init=False)
    _thorough: int = attrs.field(default=0, init=False)
    _failures: int = attrs.field(default=0, init=False)

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        """Flush every ``interval`` if ``least_pages`` are dirty; everything every
        ``thorough_interval``. Error handling: failures are logged and counted; the store is
        read-only from then on, and the loop keeps reporting until cancelled."""
        task_status.started()
        last_thorough = trio.current_time()
        wrote = self.store.positions.wrote
        while True:
            if self.timed:
                await trio.sleep(self.interval)
            else:
                with trio.move_on_after(self.interval):
                    await wrote.wait_reached(self.store.positions.flushed.value + 1)
                    await trio.lowlevel.checkpoint()
            now = trio.current_time()
            thorough = now - last_thorough >= self.thorough_interval
            try:
                await self.store.flush(least_pages=0 if thorough else self.least_pages)
            except FlushError as error:
                self._failures += 1
                log.error("async flush failed: %s", error)
                continue
            self._flushes += 1
            if thorough:
                self._thorough += 1
                last_thorough = now

    async def wait_durable(self, result: AppendResult, *, wait: bool) -> Durability:
        await trio.lowlevel.checkpoint()
        return Durability.IN_PAGE_CACHE

    async def final_flush(self) -> None:
        await self.store.flush()

    def statistics(self) -> IntervalFlushStatistics:
        marks = self.store.watermarks()
        return IntervalFlushStatistics(
            self._flushes, self._thorough, self._failures, marks.wrote - marks.flushed
        )
