"""Wake-ups for the idle schedulers: a parked message wakes the task that delivers its queue as
soon as it is dispatched, so an idle delay level or timer sleeps instead of polling.

Why: with RocketMQ's 18 delay levels polling every 100 ms, an idle broker woke 180 times a
second, and a busy one paid each wake-up (a timer's expiry and a task switch, 45 µs of the
event loop's CPU a wake-up on this project's slowest machine) between its requests. Arrivals
come through ``trocket_records_dispatched``, after the consume queues are written, so the woken
task's lookup finds them.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import trio

from kernel.model import DispatchRecord
from wire.dispatch_batch import DispatchBatch, queue_keys


@attrs.define(eq=False)
class ParkedArrivals:
    """The waits on the queues of one parking ``topic``: a :class:`trio.Event` per queue a task
    waits on, set and dropped when a dispatched batch touches that queue."""

    topic: str
    _waiting: dict[int, trio.Event] = attrs.field(factory=dict, init=False)

    def event(self, queue_id: int) -> trio.Event:
        """The event the next arrival in queue ``queue_id`` sets. Take it before looking at the
        queue (with no checkpoint between): an arrival after the look then sets it."""
        event = self._waiting.get(queue_id)
        if event is None:
            event = self._waiting[queue_id] = trio.Event()
        return event

    def notify(self, records: Sequence[DispatchRecord]) -> None:
        """Set the events of the queues ``records`` touch (from the dispatch hook). A batch
        without this topic, the common case, is passed over without computing its queues."""
        if not self._waiting:
            return
        if isinstance(records, DispatchBatch):
            if self.topic not in records.topics:
                return
        elif all(r.topic != self.topic for r in records):
            return
        for topic, queue_id in queue_keys(records):
            if topic == self.topic and (event := self._waiting.pop(queue_id, None)) is not None:
                event.set()


async def wait_for_arrival(event: trio.Event, timeout: float) -> None:
    """``event`` set or ``timeout`` seconds passed (``inf``: no timeout)."""
    with trio.move_on_after(timeout):
        await event.wait()
