"""trio building blocks shared by flush policies, replication and dispatch.

A :class:`Watermark` is a monotone position (bytes written, flushed, replicated) that tasks can
wait on. Group commit is "every put waits until ``flushed`` reaches its end offset": one flush
releases every covered waiter, with no request queue and no polling.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque

import attrs
import trio

from kernel.errors import WatermarkFailed


@attrs.frozen
class WatermarkStatistics:
    """Snapshot of a :class:`Watermark`."""

    value: int
    """The current position."""
    waiters: int
    """Tasks blocked in :meth:`Watermark.wait_reached`."""
    failed: bool
    """Whether :meth:`Watermark.fail` was called."""


@attrs.define(eq=False)
class Watermark:
    """A monotone integer position that tasks can wait to reach.

    ``advance`` is sync (it never blocks); ``wait_reached`` is async. Waiters are kept in a heap
    keyed by target, so ``advance`` wakes exactly the covered ones in O(k log n).
    Memory bound: one heap entry per blocked task.
    """

    _value: int = attrs.field(default=0, alias="value")
    _waiters: list[tuple[int, int, trio.Event]] = attrs.field(factory=list, init=False)
    _counter: itertools.count[int] = attrs.field(factory=itertools.count, init=False)
    _failure: BaseException | None = attrs.field(default=None, init=False)
    _deadlines: deque[tuple[float, trio.Event]] = attrs.field(factory=deque, init=False)
    """Waiters of :meth:`wait_reached_by` in deadline order (callers use one timeout, so
    appending keeps the order; an earlier deadline re-sorts, rarely)."""
    _new_deadline: trio.Event = attrs.field(factory=trio.Event, init=False)
    _reapers: int = attrs.field(default=0, init=False)
    """Tasks running :meth:`expire_overdue_waiters` (at least one must, for deadlines to hold)."""

    @property
    def value(self) -> int:
        return self._value

    def advance(self, value: int) -> None:
        """Move the position forward to ``value`` (never backward) and wake covered waiters."""
        if value <= self._value:
            return
        self._value = value
        waiters = self._waiters
        while waiters and waiters[0][0] <= value:
            heapq.heappop(waiters)[2].set()

    def reset(self, value: int) -> None:
        """Set the position to ``value`` even if lower; used only by recovery and truncation."""
        self._value = value

    def fail(self, error: BaseException) -> None:
        """Wake every waiter with :class:`WatermarkFailed`; later waits fail too until cleared."""
        self._failure = error
        waiters, self._waiters = self._waiters, []
        for _, _, event in waiters:
            event.set()

    def clear_failure(self) -> None:
        self._failure = None

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    def reached(self, target: int) -> bool:
        return self._value >= target

    async def wait_reached(self, target: int) -> int:
        """Block until the position is at least ``target``; return the position then.

        :raises WatermarkFailed: if :meth:`fail` was called before or while waiting.
        """
        if self._failure is not None:
            raise WatermarkFailed(str(self._failure)) from self._failure
        if self._value >= target:
            await trio.lowlevel.checkpoint()
            return self._value
        event = trio.Event()
        entry = (target, next(self._counter), event)
        heapq.heappush(self._waiters, entry)
        try:
            await event.wait()
        except BaseException:
            # Cancelled: drop our heap entry so the heap does not grow with dead waiters.
            if not event.is_set():
                self._waiters.remove(entry)
                heapq.heapify(self._waiters)
            raise
        if self._failure is not None:
            raise WatermarkFailed(str(self._failure)) from self._failure
        return self._value

    async def wait_reached_or_timeout(self, target: int, timeout: float) -> bool:
        """Like :meth:`wait_reached` with a deadline; return whether the target was reached."""
        if math.isinf(timeout):
            await self.wait_reached(target)
            return True
        with trio.move_on_after(timeout):
            await self.wait_reached(target)
            return True
        return False

    async def wait_reached_by(self, target: int, deadline: float) -> bool:
        """Like :meth:`wait_reached_or_timeout` with an absolute trio deadline, without a cancel
        scope per call (the hot path of group commit: a scope costs more than the wait) while a
        task runs :meth:`expire_overdue_waiters`; without one it falls back to a cancel scope,
        so a deadline always holds. Return whether the target was reached.

        :raises WatermarkFailed: as :meth:`wait_reached`.
        """
        if self._failure is not None:
            raise WatermarkFailed(str(self._failure)) from self._failure
        if self._value >= target:
            # No checkpoint: the puts of a group one flush covered are released one after
            # another by the same task, and a scheduler pass for each (a checkpoint) cost sync
            # flush with 64 sends in flight a fifth of its rate. Callers wait for other things
            # (the network) between calls, so this never starves the loop.
            return True
        if not self._reapers:
            # No expire_overdue_waiters task (not started, or not yet scheduled): a cancel scope
            # keeps the deadline; slower, never wrong, so forgetting the reaper costs speed only.
            with trio.move_on_at(deadline):
                await self.wait_reached(target)
                return True
            return False
        event = trio.Event()
        entry = (target, next(self._counter), event)
        heapq.heappush(self._waiters, entry)
        deadlines = self._deadlines
        while len(deadlines) > 1 and deadlines[0][1].is_set():
            # Released waiters, oldest first: keeps the queue short. One stays, so the reaper
            # (asleep until the head's deadline) is not woken by every wait of a lone producer.
            deadlines.popleft()
        if not deadlines:
            deadlines.append((deadline, event))
            self._new_deadline.set()
        elif deadline >= deadlines[-1][0]:
            deadlines.append((deadline, event))
        else:
            self._deadlines = deque(sorted([*deadlines, (deadline, event)], key=lambda d: d[0]))
            self._new_deadline.set()
        try:
            await event.wait()
        except BaseException:
            if not event.is_set():
                event.set()  # the reaper and advance() skip set entries
            raise
        if self._failure is not None:
            raise WatermarkFailed(str(self._failure)) from self._failure
        return self._value >= target

    async def expire_overdue_waiters(self) -> None:
        """Wake :meth:`wait_reached_by` waiters whose deadline passed (they return False).
        Runs until cancelled, as a sibling of whatever advances the watermark."""
        self._reapers += 1
        try:
            await self._expire_overdue_waiters()
        finally:
            self._reapers -= 1

    async def _expire_overdue_waiters(self) -> None:
        while True:
            deadlines = self._deadlines
            while deadlines and deadlines[0][1].is_set():
                deadlines.popleft()
            self._new_deadline = trio.Event()
            if not deadlines:
                await self._new_deadline.wait()
                continue
            with trio.move_on_at(deadlines[0][0]):
                await self._new_deadline.wait()
                continue
            now = trio.current_time()
            expired = False
            while deadlines and deadlines[0][0] <= now:
                event = deadlines.popleft()[1]
                if not event.is_set():
                    event.set()
                    expired = True
            if expired:
                self._waiters = [w for w in self._waiters if not w[2].is_set()]
                heapq.heapify(self._waiters)

    def statistics(self) -> WatermarkStatistics:
        return WatermarkStatistics(
            value=self._value, waiters=len(self._waiters), failed=self._failure is not None
        )


@attrs.define(eq=False)
class LogPositions:
    """The waitable positions of a commit log (see :class:`kernel.protocols.LogPositions`)."""

    wrote: Watermark = attrs.field(factory=Watermark)
    flushed: Watermark = attrs.field(factory=Watermark)
