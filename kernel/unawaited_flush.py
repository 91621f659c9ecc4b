"""A flush policy's hint to the store: no put waits for this flush.

Why: a store waits for its disk sync by blocking the event loop briefly (at most the flush
waiters' block limit, 1 ms) before waiting asynchronously: for a put that waits for the sync
anyway, blocking saves the wake-up between the sync's end and its answer. An interval flush
(``flush_async``: every 500 ms, or the commit of staged writes) has nobody waiting; blocking for
it only holds back the requests that arrive meanwhile (with 1 KiB bodies at one send in flight
it held the loop 290-1,190 µs a flush, docs/performance.md, thirty-fourth step). A policy sets
:data:`FLUSH_UNAWAITED` in the task that runs such flushes, and a store waits for them in the
way that costs the loop least: the built-in store's io_uring awaits the completion from the
start (an eventfd in the loop's epoll set: one scheduler pass), while its flush thread keeps
the brief block (awaiting the thread costs the loop a wake-up through the trio token and a GIL
hand-over while it serves, which measured worse: docs/performance.md, thirteenth step). A flush
without the hint keeps the brief block.
"""

from __future__ import annotations

from contextvars import ContextVar

FLUSH_UNAWAITED: ContextVar[bool] = ContextVar("trocket_flush_unawaited", default=False)
"""True in a task whose flushes no put waits for: the store need not hold the event loop for
the disk (the built-in store's io_uring awaits; its flush thread keeps the brief block)."""
