"""Single sends of different connections, put together while several connections send.

Why: a connection's sends read together are put as one group (``handle_send_group``), but 64
producers with one send in flight each arrive one per connection, and each paid its own put:
its own record encoding, ``pwrite`` and dispatch batch. Gathered through
:class:`~kernel.gathered_puts.GatheredPuts` (the first put of a scheduler pass waits one pass,
the others of that pass join it, one ``put_group`` for all) 64 producers went from 12.4-15.3k
to 19.8-21.5k sends a second. But the pass a lone send waits costs one message in flight about
a fifth of its rate (9.1-9.8k -> 7.8-8.0k), so sends are gathered only while another
connection sent within ``WINDOW``: a single producer's sends, one at a time, are put at once
as before (docs/performance.md, sixteenth step). A batch request (SEND_BATCH_MESSAGE) takes the
same way; ``put_group`` stores each batch on its own, so it only shares the pass.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
import trio

from kernel.gathered_puts import GatheredPuts, PutGroup
from kernel.model import MessageBatch, PutResult
from kernel.put_alone import PUT_ALONE

WINDOW = 0.001
"""Sends of two different connections this close together are gathered: concurrent
producers' sends come microseconds apart, and a single producer's come all on its own
connection, which never counts as another."""


@attrs.define(eq=False)
class LoneSends:
    """Puts single sends directly, or gathered while several connections send (see the module
    docstring)."""

    put_group: PutGroup
    """``BrokerRuntime.put_group``."""
    put: Callable[[MessageBatch], Awaitable[PutResult]]
    """``BrokerRuntime.put``."""
    _gathered: GatheredPuts = attrs.field(init=False)
    _last_sender: object = attrs.field(default=None, init=False)
    _last_at: float = attrs.field(default=float("-inf"), init=False)

    def __attrs_post_init__(self) -> None:
        self._gathered = GatheredPuts(self.put_group)

    @property
    def gathered(self) -> int:
        """Sends put through a gathered group (``putGatheredTotal``)."""
        return self._gathered.puts

    async def put_from(self, sender: object, batch: MessageBatch, *, sender_idle: bool = False) -> PutResult:
        """Put ``batch``, sent on connection ``sender``: gathered when another connection
        sent within ``WINDOW``, else at once. ``sender_idle``: nothing else of the sender's is
        in flight, so a put made at once is alone (:data:`~kernel.put_alone.PUT_ALONE`: the
        sync flush syncs it without waiting for a pass that could bring nothing)."""
        now = trio.current_time()
        concurrent = sender is not self._last_sender and now - self._last_at < WINDOW
        self._last_sender, self._last_at = sender, now
        if concurrent or self._gathered.gathering:  # joining an open group keeps send order
            return await self._gathered.put(batch)
        if not sender_idle:
            return await self.put(batch)
        token = PUT_ALONE.set(True)
        try:
            return await self.put(batch)
        finally:
            PUT_ALONE.reset(token)
