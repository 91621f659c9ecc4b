"""Group commit: a put is acknowledged only after a flush covering its bytes.

No request queue: each waiting put awaits ``store.positions.flushed`` reaching its end offset,
and the flusher loop flushes whenever somebody waits. Puts arriving during a flush are covered
by the next one, so one fsync releases a whole group.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import trio

from kernel.errors import FlushError, WatermarkFailed
from kernel.latency import LatencyHistogram, LatencySnapshot
from kernel.model import AppendResult, Durability
from kernel.protocols import MessageStore

log = logging.getLogger(__name__)


@attrs.frozen
class GroupCommitStatistics:
    flushes: int
    """Flushes performed."""
    released: int
    """Puts acknowledged after a flush."""
    timeouts: int
    """Puts answered FLUSH_DISK_TIMEOUT."""
    failures: int
    """Flushes that failed."""
    flush_latency: LatencySnapshot | None = None
    """How long each flush (one fsync releasing a group of puts) took."""


@attrs.define(eq=False)
class GroupCommitFlush:
    """The ``"sync"`` flush policy (RocketMQ's SYNC_FLUSH)."""

    store: MessageStore
    timeout: float
    name: str = "sync"
    _wanted: trio.Event = attrs.field(factory=trio.Event, init=False)
    _flushes: int = attrs.field(default=0, init=False)
    _released: int = attrs.field(default=0, init=False)
    _timeouts: int = attrs.field(default=0, init=False)
    _failures: int = attrs.field(default=0, init=False)
    _latency: LatencyHistogram = attrs.field(factory=LatencyHistogram, init=False)

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        """Flush whenever a put waits. Error handling: a failed flush is logged and counted;
        the store has already failed its ``flushed`` watermark, so waiters get FAILED."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.store.positions.flushed.expire_overdue_waiters)
            task_status.started()
            await self._flush_loop()  # runs until cancelled

    async def _flush_loop(self) -> None:
        while True:
            await self._wanted.wait()
            self._wanted = trio.Event()
            started = trio.current_time()
            try:
                await self.store.flush()
                self._flushes += 1
                self._latency.observe(trio.current_time() - started)
            except FlushError as error:
                self._failures += 1
                log.error("sync flush failed: %s", error)

    async def wait_durable(self, result: AppendResult, *, wait: bool) -> Durability:
        flushed = self.store.positions.flushed
        if flushed.value < result.end_offset:
            self._wanted.set()  # a flush already past this put (an earlier one of its group) needs no other
        if not wait:
            return Durability.IN_PAGE_CACHE
        try:
            reached = await flushed.wait_reached_by(result.end_offset, trio.current_time() + self.timeout)
        except WatermarkFailed:
            return Durability.FAILED
        if not reached:
            self._timeouts += 1
            return Durability.TIMEOUT
        self._released += 1
        return Durability.FLUSHED

    async def final_flush(self) -> None:
        await self.store.flush()

    def statistics(self) -> GroupCommitStatistics:
        return GroupCommitStatistics(
            self._flushes, self._released, self._timeouts, self._failures, self._latency.snapshot()
        )
