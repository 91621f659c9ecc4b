"""Held pulls (RocketMQ's PullRequestHoldService): a pull on a queue with nothing new waits
until the dispatch loop makes a message of that queue visible, or until its timeout.

Waking is driven by ``trocket_records_dispatched`` (once per dispatched batch), so a held pull
answers within milliseconds of the send; there is no polling interval on the fast path.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs
import trio


@attrs.define(eq=False)
class PullWaiters:
    _events: dict[tuple[str, int], trio.Event] = attrs.field(factory=dict, init=False)
    held: int = attrs.field(default=0, init=False)
    woken: int = attrs.field(default=0, init=False)

    async def wait(self, topic: str, queue_id: int, timeout: float) -> bool:
        """Wait until new messages arrive for the queue; ``False`` on timeout."""
        key = (topic, queue_id)
        event = self._events.get(key)
        if event is None:
            event = self._events[key] = trio.Event()
        self.held += 1
        try:
            with trio.move_on_after(timeout):
                await event.wait()
                return True
            return False
        finally:
            self.held -= 1

    def notify(self, queues: Iterable[tuple[str, int]]) -> None:
        for key in queues:
            event = self._events.pop(key, None)
            if event is not None:
                self.woken += 1
                event.set()

    def waiting_queues(self) -> int:
        return len(self._events)
