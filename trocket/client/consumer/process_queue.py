"""The messages of one queue pulled but not yet acknowledged (RocketMQ's ``ProcessQueue``).

It is what flow control measures (count, bytes, offset span) and what the committed offset is
computed from: the lowest offset still in flight, or one past the highest pulled when nothing
is, so a message is never committed before it is consumed, however the workers interleave.
"""

from __future__ import annotations

import bisect
import time

import attrs
import trio

from trocket.client.consumer.received import ReceivedMessage


@attrs.define(eq=False)
class ProcessQueue:
    _offsets: list[int] = attrs.field(factory=list, init=False)
    """Sorted offsets in flight."""
    _messages: dict[int, ReceivedMessage] = attrs.field(factory=dict, init=False)
    size_bytes: int = 0
    highest_pulled: int = -1
    dropped: bool = False
    """Set when rebalance takes the queue away: pulls stop, results are discarded."""
    locked: bool = False
    """Orderly consumption: the broker lock is held (renewed every 20 s)."""
    last_lock_time: float = 0.0
    consume_lock: trio.Lock = attrs.field(factory=trio.Lock)
    """Orderly consumption: held while a batch of this queue is consumed."""
    last_pull_time: float = 0.0

    @property
    def count(self) -> int:
        return len(self._offsets)

    @property
    def span(self) -> int:
        """Highest minus lowest offset in flight (``consumeConcurrentlyMaxSpan`` limits it)."""
        return self._offsets[-1] - self._offsets[0] if self._offsets else 0

    def put(self, messages: list[ReceivedMessage]) -> None:
        for message in messages:
            if message.queue_offset in self._messages:
                continue
            bisect.insort(self._offsets, message.queue_offset)
            self._messages[message.queue_offset] = message
            self.size_bytes += len(message.body)
            self.highest_pulled = max(self.highest_pulled, message.queue_offset)

    def remove(self, messages: list[ReceivedMessage]) -> int:
        """Acknowledge ``messages``; returns the offset to commit now (-1: nothing pulled)."""
        for message in messages:
            if self._messages.pop(message.queue_offset, None) is not None:
                index = bisect.bisect_left(self._offsets, message.queue_offset)
                del self._offsets[index]
                self.size_bytes -= len(message.body)
        return self.commit_offset()

    def commit_offset(self) -> int:
        if self._offsets:
            return self._offsets[0]
        return self.highest_pulled + 1 if self.highest_pulled >= 0 else -1

    def info(self, committed: int) -> dict[str, object]:
        """RocketMQ's ``ProcessQueueInfo`` (mqadmin ``consumerStatus``); ``committed``: the
        offset the store will commit. Times are kept on trio's clock and shown as wall-clock
        milliseconds (0: never)."""

        def wall_ms(at: float) -> int:
            return int((time.time() - (trio.current_time() - at)) * 1000) if at else 0

        return {
            "commitOffset": committed,
            "cachedMsgMinOffset": self._offsets[0] if self._offsets else 0,
            "cachedMsgMaxOffset": self._offsets[-1] if self._offsets else 0,
            "cachedMsgCount": len(self._offsets),
            "cachedMsgSizeInMiB": self.size_bytes // (1 << 20),
            "locked": self.locked,
            "lastLockTimestamp": wall_ms(self.last_lock_time),
            "droped": self.dropped,
            "lastPullTimestamp": wall_ms(self.last_pull_time),
        }

    def take_in_order(self, limit: int) -> list[ReceivedMessage]:
        """Orderly consumption: the lowest ``limit`` messages in flight, still held."""
        return [self._messages[o] for o in self._offsets[:limit]]

    def clear(self) -> None:
        self._offsets.clear()
        self._messages.clear()
        self.size_bytes = 0
