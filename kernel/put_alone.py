"""A front end's hint to the flush policy: nothing can join this put's flush.

Why: the sync flush's leader (``flush_sync``) lets the scheduler pass it was elected in finish
before it syncs, so that the puts other connections read in that pass are covered by the same
``fdatasync`` (16 connections with a send in flight each: twice the rate). A put its front end
knows to be alone (one connection sending, nothing else of it in flight) gains nothing from
that pass, and one sync send in flight paid 22 µs of a 390 µs round trip for it
(docs/performance.md, twenty-fourth step). The front end sets :data:`PUT_ALONE` around such a
put; policies may read it, and a put without it keeps the pass.
"""

from __future__ import annotations

from contextvars import ContextVar

PUT_ALONE: ContextVar[bool] = ContextVar("trocket_put_alone", default=False)
"""True while the current task puts a batch no other put can join before its flush."""
