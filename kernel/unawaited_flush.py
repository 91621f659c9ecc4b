"""A flush policy's hint to the store: no put waits for this flush.

Why: a store waits for its disk sync by blocking the event loop briefly (at most the flush
waiters' block limit, 1 ms) before waiting asynchronously: for a put that waits for the sync
anyway, blocking saves the wake-up between the sync's end and its answer. An interval flush
(``flush_async``: every 500 ms, or the commit of staged writes) has nobody waiting; blocking for
it only holds back the requests that arrive meanwhile (with 1 KiB bodies at one send in flight
it held the loop 290-1,190 µs a flush, docs/performance.md, thirty-fourth step). A policy sets
:data:`FLUSH_UNAWAITED` in the task that runs such flushes; stores read it when they choose how
to wait, and a flush without it keeps the brief block.
"""

from __future__ import annotations

from contextvars import ContextVar

FLUSH_UNAWAITED: ContextVar[bool] = ContextVar("trocket_flush_unawaited", default=False)
"""True in a task whose flushes no put waits for: the store waits for the disk without
holding the event loop."""
