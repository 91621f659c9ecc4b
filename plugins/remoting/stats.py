"""Per-topic and per-group put and get counts over the last minute, hour and day (RocketMQ's
``BrokerStatsManager`` items ``TOPIC_PUT_NUMS``, ``TOPIC_PUT_SIZE``, ``GROUP_GET_NUMS``,
``GROUP_GET_SIZE``), served by ``VIEW_BROKER_STATS_DATA`` for mqadmin ``statsAll``.

Counted once per request (a send's batch, a pull's answer), never per message: an add is a
dict lookup and three increments of the open 10-second bucket. Closed buckets fold into
10-second buckets for the minute, minute buckets for the hour and hour buckets for the day, so
a counter's memory is bounded whatever the traffic (about 90 buckets); a counter silent for a
day is dropped at the next sweep.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import attrs

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
STATS_NAMES = frozenset({TOPIC_PUT_NUMS, TOPIC_PUT_SIZE, GROUP_GET_NUMS, GROUP_GET_SIZE})

_LEVELS = ((10, 6), (60, 60), (3600, 24))
"""(bucket seconds, buckets in the window): the minute, the hour, the day."""

_VIEWS = {
    TOPIC_PUT_NUMS: ("put", 0),
    TOPIC_PUT_SIZE: ("put", 1),
    GROUP_GET_NUMS: ("get", 0),
    GROUP_GET_SIZE: ("get", 1),
}
"""Stats name -> (counter kind, which of its two sums)."""


@attrs.define(eq=False)
class RollingCounter:
    """Two sums (messages, bytes) and a count of adds, over the last minute, hour and day.

    An add touches only the open 10-second bucket; when the next one opens, the closed bucket
    is folded into the minute, hour and day levels (amortised: once per 10 s per counter)."""

    levels: list[deque[list[int]]] = attrs.field(factory=lambda: [deque() for _ in _LEVELS])
    """Per level, closed buckets ``[index, messages, bytes, times]``, oldest first."""
    open_index: int = -1
    open: list[int] = attrs.field(factory=lambda: [0, 0, 0])
    last: float = 0.0

    def add(self, messages: int, size: int, now: float) -> None:
        index = int(now // 10)
        if index != self.open_index:
            self._close(index)
        bucket = self.open
        bucket[0] += messages
        bucket[1] += size
        bucket[2] += 1
        self.last = now

    def _close(self, new_index: int) -> None:
        if self.open_index >= 0 and self.open[2]:
            start = self.open_index * 10
            for (width, keep), buckets in zip(_LEVELS, self.levels, strict=True):
                index = start // width
                if buckets and buckets[-1][0] == index:
                    for i in range(3):
                        buckets[-1][i + 1] += self.open[i]
                else:
                    buckets.append([index, *self.open])
                while buckets and buckets[0][0] <= new_index * 10 // width - keep:
                    buckets.popleft()
        self.open_index, self.open = new_index, [0, 0, 0]

    def window(self, level: int, now: float) -> tuple[int, int, int]:
        """(messages, bytes, adds) over the level's window ending now."""
        width, keep = _LEVELS[level]
        first = int(now // width) - keep + 1
        totals = [0, 0, 0]
        for index, *values in self.levels[level]:
            if index >= first:
                for i in range(3):
                    totals[i] += values[i]
        if self.open_index >= 0 and self.open_index * 10 // width >= first:
            for i in range(3):
                totals[i] += self.open[i]
        return totals[0], totals[1], totals[2]


def _item(total: int, times: int, seconds: int) -> dict[str, Any]:
    average = round(total / times, 2) if times else 0.0
    return {"sum": total, "tps": round(total / seconds, 2), "avgpt": average}


@attrs.define(eq=False)
class BrokerStats:
    counters: dict[tuple[str, str], RollingCounter] = attrs.field(factory=dict)

    def _counter(self, kind: str, key: str) -> RollingCounter:
        counter = self.counters.get((kind, key))
        if counter is None:
            counter = self.counters[(kind, key)] = RollingCounter()
        return counter

    def put(self, topic: str, messages: int, size: int, now: float) -> None:
        self._counter("put", topic).add(messages, size, now)

    def got(self, topic: str, group: str, messages: int, size: int, now: float) -> None:
        self._counter("get", f"{topic}@{group}").add(messages, size, now)

    def view(self, name: str, key: str, now: float) -> dict[str, Any] | None:
        """RocketMQ's ``BrokerStatsData`` of one item, None when it never counted."""
        kind, which = _VIEWS[name]
        counter = self.counters.get((kind, key))
        if counter is None:
            return None
        out = {}
        for level, (label, seconds) in enumerate(
            (("statsMinute", 60), ("statsHour", 3600), ("statsDay", 86400))
        ):
            window = counter.window(level, now)
            out[label] = _item(window[which], window[2], seconds)
        return out

    def sweep(self, now: float) -> None:
        """Drop counters silent for a day."""
        for key in [k for k, c in self.counters.items() if now - c.last > 86400]:
            del self.counters[key]
