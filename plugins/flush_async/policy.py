"""Interval flush: acknowledgements do not wait; a background loop flushes by pages and time.

The loop's flushes and commits are marked :data:`~kernel.unawaited_flush.FLUSH_UNAWAITED`: no
put waits for them, so the store need not hold the event loop for their disk (the built-in
store's io_uring then awaits its sync from the start).

The loss window on an OS crash or power cut is bounded by ``thorough_interval`` (data can sit
dirty that long when fewer than ``least_pages`` pages accumulate) plus one flush duration.
A broker process crash loses nothing acknowledged: the bytes are in the page cache. The
exception is a store staging its writes (``write_path = "buffered"``): staged bytes are only in
the broker's memory until the commit loop writes them, so a process crash can lose up to
``commit_thorough_interval`` of acknowledged appends (RocketMQ's transient store pool trade-off).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import attrs
import trio
import trio.lowlevel

from kernel.errors import FlushError
from kernel.latency import LatencyHistogram, LatencySnapshot
from kernel.model import AppendResult, Durability
from kernel.protocols import BufferedStore, MessageStore
from kernel.unawaited_flush import FLUSH_UNAWAITED

log = logging.getLogger(__name__)


@attrs.frozen
class IntervalFlushStatistics:
    flushes: int
    thorough_flushes: int
    failures: int
    unflushed_bytes: int
    """Bytes written but not yet flushed (the current loss window on power loss)."""
    commits: int
    """Commits of staged appends (0 unless the store stages writes)."""
    uncommitted_bytes: int
    """Staged bytes not yet in the files (lost by a process crash)."""
    flush_latency: LatencySnapshot | None = None
    """How long each flush that wrote something took (the policy's timed no-op looks are left
    out)."""


@attrs.define(eq=False)
class IntervalFlush:
    """The ``"async"`` flush policy (RocketMQ's ASYNC_FLUSH, ``FlushRealTimeService``)."""

    store: MessageStore
    interval: float
    least_pages: int
    thorough_interval: float
    timed: bool = True
    commit_interval: float = 0.2
    commit_least_pages: int = 4
    commit_thorough_interval: float = 0.2
    name: str = "async"
    acknowledges_at_once: ClassVar[bool] = True
    """Acknowledgements wait for nothing (see ``kernel.protocols.FlushPolicy``)."""
    _commits: int = attrs.field(default=0, init=False)
    _flushes: int = attrs.field(default=0, init=False)
    _thorough: int = attrs.field(default=0, init=False)
    _failures: int = attrs.field(default=0, init=False)
    _latency: LatencyHistogram = attrs.field(factory=LatencyHistogram, init=False)

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        """Flush every ``interval`` if ``least_pages`` are dirty; everything every
        ``thorough_interval``. Error handling: failures are logged and counted; the store is
        read-only from then on, and the loop keeps reporting until cancelled."""
        if isinstance(self.store, BufferedStore) and self.store.stages_writes:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._commit_loop, self.store)
                await self._flush_loop(task_status)
        else:
            await self._flush_loop(task_status)

    async def _flush_loop(self, task_status: trio.TaskStatus[Any]) -> None:
        FLUSH_UNAWAITED.set(True)  # this task's flushes: no put waits for them
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
            before = self.store.positions.flushed.value
            try:
                await self.store.flush(least_pages=0 if thorough else self.least_pages)
            except FlushError as error:
                self._failures += 1
                log.error("async flush failed: %s", error)
                continue
            self._flushes += 1
            if self.store.positions.flushed.value > before:
                self._latency.observe(trio.current_time() - now)
            if thorough:
                self._thorough += 1
                last_thorough = now

    async def _commit_loop(self, store: BufferedStore) -> None:
        """RocketMQ's ``CommitRealTimeService``: every ``commit_interval`` write staged appends
        into the files once ``commit_least_pages`` accumulated, and whatever is staged every
        ``commit_thorough_interval``. A failure makes the store read-only (as a flush failure)."""
        FLUSH_UNAWAITED.set(True)  # this task's commits: no put waits for them
        last_thorough = trio.current_time()
        while True:
            await trio.sleep(self.commit_interval)
            now = trio.current_time()
            thorough = now - last_thorough >= self.commit_thorough_interval
            before = self.store.positions.wrote.value
            try:
                committed = await store.commit(least_pages=0 if thorough else self.commit_least_pages)
            except FlushError as error:
                self._failures += 1
                log.error("async commit failed: %s", error)
                return
            if committed > before:
                self._commits += 1
            if thorough:
                last_thorough = now

    async def wait_durable(self, result: AppendResult, *, wait: bool) -> Durability:
        # No checkpoint: nothing is awaited, and a yield would let other tasks run before the
        # put's answer is written.
        return Durability.IN_PAGE_CACHE

    async def final_flush(self) -> None:
        await self.store.flush()

    def statistics(self) -> IntervalFlushStatistics:
        marks = self.store.watermarks()
        return IntervalFlushStatistics(
            self._flushes,
            self._thorough,
            self._failures,
            marks.wrote - marks.flushed,
            self._commits,
            marks.wrote - marks.committed,
            self._latency.snapshot(),
        )
