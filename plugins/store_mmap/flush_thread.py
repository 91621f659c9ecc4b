"""The store's own thread for fsync-class calls, waited for without waking the event loop.

A sync-flush put waits for one ``msync`` of a page or two (about 0.1 ms on this project's
machines). Through ``trio.to_thread.run_sync`` that wait cost another 0.115 ms: a worker
woken from trio's thread cache (42 µs at the median, measured inside the broker), then the
event loop woken from ``epoll`` by the worker's completion (73 µs), with the loop asleep in
between. Here the loop blocks on the thread's completion for at most ``BLOCK_LIMIT``, which a
fast flush beats: the wake-ups become two futex hand-offs and the loop runs on at once. A flush
that takes longer is waited for asynchronously from then on, so a stalled disk holds the loop
for ``BLOCK_LIMIT`` once, never for the stall; while recent flushes run slow (a disk that is
slow, not stalled) the loop does not block at all.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import trio

T = TypeVar("T")

BLOCK_LIMIT = 0.001
"""Longest the event loop blocks for a call before waiting asynchronously: several times a
page's msync here, short enough that the connections' tasks hardly notice."""
SLOW_SHARE = 0.5
"""Calls are waited for asynchronously from the start while the recent mean exceeds this share
of ``BLOCK_LIMIT``."""
_SMOOTHING = 0.2
"""Weight of the newest call in the recent mean of call durations."""


@attrs.define
class BlockingWaits:
    """The waiting policy of both flush waiters (this thread and :mod:`.ring_sync`): block for a
    call while recent calls were fast, and count how each was waited for."""

    recent_seconds: float = 0.0
    """Smoothed duration of recent calls, as the event loop saw them."""
    blocked: int = 0
    """Calls the loop waited for by blocking (at most ``BLOCK_LIMIT``)."""
    awaited: int = 0
    """Calls waited for asynchronously: slower than the limit, or too slow lately to block."""

    def may_block(self) -> bool:
        return self.recent_seconds <= BLOCK_LIMIT * SLOW_SHARE

    def count(self, elapsed: float, *, blocked: bool) -> None:
        if blocked:
            self.blocked += 1
        else:
            self.awaited += 1
        self.recent_seconds += _SMOOTHING * (elapsed - self.recent_seconds)


class _Call:
    __slots__ = ("function", "args", "result", "error", "finished", "done", "woken", "token")

    def __init__(self, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.function = function
        self.args = args
        self.result: Any = None
        self.error: BaseException | None = None
        self.finished = False
        self.done = threading.Event()
        self.woken: trio.Event | None = None
        """Set (from the thread, through the trio token) when the loop stopped blocking."""
        self.token: trio.lowlevel.TrioToken | None = None


class FlushThread:
    """One thread running blocking calls in order; :meth:`run` awaits one."""

    def __init__(self, name: str = "trocket-flush") -> None:
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()
        self.waits = BlockingWaits()

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` on the thread; its result or its exception. Not cancellable
        once submitted (as ``trio.to_thread.run_sync``): the caller's state depends on the
        call having finished."""
        call = _Call(function, args)
        started = trio.current_time()
        self._calls.put(call)
        blocked = self.waits.may_block() and call.done.wait(BLOCK_LIMIT)
        if not blocked:
            with self._lock:
                if not call.finished:
                    call.woken = trio.Event()
                    call.token = trio.lowlevel.current_trio_token()
            if call.woken is not None:
                with trio.CancelScope(shield=True):
                    await call.woken.wait()
        self.waits.count(trio.current_time() - started, blocked=blocked)
        if call.error is not None:
            raise call.error
        return call.result  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop the thread after the calls already submitted."""
        self._calls.put(None)
        self._thread.join(timeout=10)

    def _serve(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            try:
                call.result = call.function(*call.args)
            except BaseException as error:  # noqa: BLE001 (handed to the caller, raised there)
                call.error = error
            with self._lock:
                call.finished = True
                woken, token = call.woken, call.token
            call.done.set()
            if woken is not None and token is not None:
                try:
                    token.run_sync_soon(woken.set)
                except trio.RunFinishedError:
                    pass


__all__ = ["BLOCK_LIMIT", "BlockingWaits", "FlushThread"]
