"""Work the event loop does while the store's disk sync runs without it.

Why it exists: a sync-flush put holds the event loop for its ``fdatasync`` (at most the flush
waiters' block limit, docs/durability.md; 0.1-0.2 ms on this project's machines), and the loop
does nothing meanwhile. The views' dispatch of the records just appended then runs after the
answer, and a client's next request that arrives during it waits for it: that was half of the
slowest sync sends (docs/performance.md, fifteenth step). A store whose sync runs in the
kernel's own worker (io_uring) submits it, calls :meth:`SyncOverlap.run`, and only then waits
for the completion, so that work costs no time on the put's way when it is shorter than the
sync. A store whose sync needs Python on another thread (the flush thread) does not call it:
that thread needs the interpreter lock the work would hold.

Each piece of work is synchronous, bounded (a fraction of a sync), optional (skipping it loses
nothing: its owner does it later anyway) and never raises into the caller's flush.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs

log = logging.getLogger(__name__)

OverlapWork = Callable[[], object]
"""A piece of work: synchronous, bounded, and safe to skip (see the module docstring)."""


@attrs.define(eq=False)
class SyncOverlap:
    """The work registered for a broker's sync waits (one per broker, on its context)."""

    _work: list[OverlapWork] = attrs.field(factory=list, init=False)
    runs: int = attrs.field(default=0, init=False)
    """Sync waits that ran the registered work."""
    failures: int = attrs.field(default=0, init=False)
    """Pieces of work that raised (logged; their owner does the work later)."""

    def add(self, work: OverlapWork) -> None:
        self._work.append(work)

    def remove(self, work: OverlapWork) -> None:
        if work in self._work:
            self._work.remove(work)

    @property
    def wanted(self) -> bool:
        """Whether any work is registered (a store splits its sync's submit and wait only then)."""
        return bool(self._work)

    def run(self) -> None:
        """Run every registered piece once; an exception is logged and counted, never raised."""
        self.runs += 1
        for work in tuple(self._work):
            try:
                work()
            except Exception:
                self.failures += 1
                log.exception("work during a disk sync failed (it is left to its owner)")
