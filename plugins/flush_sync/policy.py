"""Group commit: a put is acknowledged only after a flush covering its bytes.

No request queue: each waiting put awaits ``store.positions.flushed`` reaching its end offset,
and the flusher loop flushes whenever somebody waits. Puts arriving during a flush are covered
by the next one, so one fsync releases a whole group.

A put that finds no flush running flushes itself (the *leader*): handing the flush to the
loop's task and being woken by it cost a lone sync put four scheduler passes, each running the
connections' busy poller (``docs/performance.md``, thirteenth step: 2,383 -> 2,683 sends a
second in the probe). The leader first lets the scheduler pass it was elected in finish, so
the puts read in that pass (a pipelining connection's requests, other connections' lone sends)
append before its sync and are covered by it: a leader that synced at once synced its own put
alone, and each of those puts then led a sync of its own (16 connections with a send each in
flight: 3.3-3.5k against 6.6-8.1k sends a second; docs/performance.md, sixteenth step). Puts
arriving while the leader flushes wake the loop as before, so the next group forms behind it.

A leader whose store can start a flush early (:class:`~kernel.protocols.EarlyFlushStore`: the
io_uring's sync) starts it before walking to the store's flush and its locks: the disk works
during those 50 µs of Python, and the started flush needs no deadline scope (it waits for the
disk only; docs/performance.md, thirty-fifth step).
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import trio

from kernel.errors import FlushError, WatermarkFailed
from kernel.latency import LatencyHistogram, LatencySnapshot
from kernel.model import AppendResult, Durability
from kernel.protocols import EarlyFlushStore, MessageStore
from kernel.put_alone import PUT_ALONE

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
    led: int = 0
    """Flushes a put ran itself, finding no flush under way (the rest ran on the loop's task)."""
    led_alone: int = 0
    """Of those, puts their front end marked alone (:data:`~kernel.put_alone.PUT_ALONE`),
    flushed without waiting for the rest of their scheduler pass."""
    started_early: int = 0
    """Leaders' flushes whose sync the store started before the flush call
    (:class:`~kernel.protocols.EarlyFlushStore`)."""


@attrs.define(eq=False)
class GroupCommitFlush:
    """The ``"sync"`` flush policy (RocketMQ's SYNC_FLUSH)."""

    store: MessageStore
    timeout: float
    name: str = "sync"
    _wanted: trio.Event = attrs.field(factory=trio.Event, init=False)
    _flushing: int = attrs.field(default=0, init=False)
    """Flushes under way (the loop's and a leader's; the store serialises them)."""
    _leading: bool = attrs.field(default=False, init=False)
    """A leader is elected and lets its scheduler pass finish: puts appended meanwhile are
    covered by its flush and ask for none."""
    _led: int = attrs.field(default=0, init=False)
    _alone: int = attrs.field(default=0, init=False)
    _flushes: int = attrs.field(default=0, init=False)
    _released: int = attrs.field(default=0, init=False)
    _timeouts: int = attrs.field(default=0, init=False)
    _failures: int = attrs.field(default=0, init=False)
    _latency: LatencyHistogram = attrs.field(factory=LatencyHistogram, init=False)
    _started_early: int = attrs.field(default=0, init=False)
    _early: EarlyFlushStore | None = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._early = self.store if isinstance(self.store, EarlyFlushStore) else None

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
            await self._flush()

    async def _flush(self) -> None:
        self._flushing += 1
        started = trio.current_time()
        try:
            await self.store.flush()
            self._flushes += 1
            self._latency.observe(trio.current_time() - started)
        except FlushError as error:
            self._failures += 1
            log.error("sync flush failed: %s", error)
        finally:
            self._flushing -= 1

    async def wait_durable(self, result: AppendResult, *, wait: bool) -> Durability:
        flushed = self.store.positions.flushed
        end = result.end_offset
        if flushed.value >= end:  # a flush already past this put (an earlier one of its group)
            if not wait:
                return Durability.IN_PAGE_CACHE
            self._released += 1
            return Durability.FLUSHED
        deadline = trio.current_time() + self.timeout
        idle = not (self._flushing or self._leading or self._wanted.is_set())
        if wait and idle and flushed.failure is None:
            # The leader: nobody flushes, so this put's task does, with no hand-over.
            self._led += 1
            await self._lead(deadline, alone=PUT_ALONE.get())
            if flushed.value >= end:
                self._released += 1
                return Durability.FLUSHED
        if flushed.failure is None and not self._leading:
            # A failed store is not flushed again (its waiters get FAILED); a put appended
            # while a leader waits for its turn is covered by the leader's flush.
            self._wanted.set()
        if not wait:
            return Durability.IN_PAGE_CACHE
        try:
            reached = await flushed.wait_reached_by(end, deadline)
        except WatermarkFailed:
            return Durability.FAILED
        if not reached:
            self._timeouts += 1
            return Durability.TIMEOUT
        self._released += 1
        return Durability.FLUSHED

    async def _lead(self, deadline: float, *, alone: bool = False) -> None:
        """The leader's flush, after one scheduler pass (see the module docstring) unless the
        put is ``alone`` (:data:`~kernel.put_alone.PUT_ALONE`: nothing could join it). Its
        deadline still holds while the flush waits for the store (its locks); a flush already
        on the disk is waited for (it cannot be abandoned), as the loop's is, which is all a
        flush the store started early does, so that one runs without the deadline's scope.
        Whatever stops the leader short (its deadline, a cancelled request), the puts that
        counted on it are flushed by the loop."""
        self._leading = True
        try:
            try:
                if alone:
                    self._alone += 1
                else:
                    await trio.lowlevel.checkpoint()
            finally:
                self._leading = False
            if self._early is not None and self._early.start_flush():
                # Started: the flush left waits only for the disk, which no deadline could
                # abandon (EarlyFlushStore's promise), so it runs without the deadline's scope
                # (a scope and a deadline for trio to track: 1-6 % of a lone sync put's
                # cycle here; docs/performance.md, thirty-fifth step).
                self._started_early += 1
                await self._flush()
            else:
                with trio.move_on_at(deadline):
                    await self._flush()
        finally:
            positions = self.store.positions
            behind = positions.flushed.value < positions.wrote.value
            if behind and not self._flushing and positions.flushed.failure is None:
                self._wanted.set()

    async def final_flush(self) -> None:
        await self.store.flush()

    def statistics(self) -> GroupCommitStatistics:
        return GroupCommitStatistics(
            self._flushes,
            self._released,
            self._timeouts,
            self._failures,
            self._latency.snapshot(),
            self._led,
            self._alone,
            self._started_early,
        )
