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
    """One :class:`trio.Event` per (topic, queue id) a task waits on; set and dropped when a
    dispatched batch touches that queue."""

    _waiting: dict[tuple[str, int], trio.Event] = attrs.field(factory=dict)
    _topics: dict[str, int] = attrs.field(factory=dict)
    """Waited-on queues per topic: a batch of other topics is passed over without its keys."""

    def event(self, topic: str, queue_id: int) -> trio.Event:
        """The event the next arrival in ``topic`` / ``queue_id`` sets. Take it before looking
        at the queue (with no checkpoint between): an arrival after the look then sets it."""
        key = (topic, queue_id)
        event = self._waiting.get(key)
        if event is None:
            event = self._waiting[key] = trio.Event()
            self._topics[topic] = self._topics.get(topic, 0) + 1
        return event

    def notify(self, records: Sequence[DispatchRecord]) -> None:
        """Set the events of the queues ``records`` touch (from the dispatch hook)."""
        if not self._topics:
            return
        topics = records.topics if isinstance(records, DispatchBatch) else {r.topic for r in records}
        if not any(topic in self._topics for topic in topics):
            return
        for key in queue_keys(records):
            event = self._waiting.pop(key, None)
            if event is not None:
                event.set()
                left = self._topics[key[0]] - 1
                if left:
                    self._topics[key[0]] = left
                else:
                    del self._topics[key[0]]


async def wait_for_arrival(event: trio.Event, timeout: float) -> None:
    """``event`` set or ``timeout`` seconds passed (``inf``: no timeout)."""
    with trio.move_on_after(timeout):
        await event.wait()
