"""Shared by the consumer tests: producing test messages and collecting what listeners see."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import attrs
import trio

from trocket import ConsumeStatus, Message, OrderlyStatus, Producer, ReceivedMessage


async def produce(namesrv: str, topic: str, count: int, prefix: str = "m", **fields: object) -> list[bytes]:
    bodies = [f"{prefix}{i}".encode() for i in range(count)]
    async with Producer("PG_tests", namesrv) as producer:
        for body in bodies:
            await producer.send(Message(topic, body, **fields))  # type: ignore[arg-type]
    return bodies


@attrs.define(eq=False)
class Collector:
    """A listener that records every message it is given."""

    status: ConsumeStatus | OrderlyStatus = ConsumeStatus.CONSUME_SUCCESS
    received: list[ReceivedMessage] = attrs.field(factory=list)
    _changed: trio.Event = attrs.field(factory=trio.Event)

    async def __call__(self, messages, context):
        self.received.extend(messages)
        self._changed.set()
        return self.status

    @property
    def bodies(self) -> Counter[bytes]:
        return Counter(m.body for m in self.received)

    async def wait_for(self, count: int, timeout: float = 30.0) -> None:
        with trio.fail_after(timeout):
            while len(self.received) < count:
                self._changed = trio.Event()
                await self._changed.wait()


async def eventually(condition: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    """Wait until ``condition()`` holds, checking every 50 ms (for state with no event to wait on)."""
    with trio.move_on_after(timeout):
        while True:
            if condition():
                return
            await trio.sleep(0.05)
    raise AssertionError(f"{what} did not hold within {timeout} s")
