"""Per-topic and per-group put and get counts over the last minute, hour and day (RocketMQ's
``BrokerStatsManager`` items ``TOPIC_PUT_NUMS``, ``TOPIC_PUT_SIZE``, ``GROUP_GET_NUMS``,
``GROUP_GET_SIZE``), served by ``VIEW_BROKER_STATS_DATA`` for mqadmin ``statsAll``.

Counted once per request (a send's batch, a pull's answer), never per message: an add is a
dict lookup and three bucket increments. Each counter keeps 10-second buckets for the minute,
minute buckets for the hour and hour buckets for the day, so its memory is bounded whatever
the traffic (about 90 buckets); a counter silent for a day is dropped at the next sweep.
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


@attrs.define(eq=False)
class RollingCounter:
    levels: list[deque[list[int]]] = attrs.field(factory=lambda: [deque() for _ in _LEVELS])
    """Per level, buckets ``[index, sum, times]`` oldest first."""
    last: float = 0.0

    def add(self, value: int, now: float) -> None:
        self.last = now
        for (width, keep), buckets in zip(_LEVELS, self.levels, strict=True):
            index = int(now // width)
            if buckets and buckets[-1][0] == index:
                buckets[-1][1] += value
                buckets[-1][2] += 1
            else:
                buckets.append([index, value, 1])
                while buckets[0][0] <= index - keep:
                    buckets.popleft()

    def window(self, level: int, now: float) -> tuple[int, int]:
        """(sum, times) over the level's window ending now."""
        width, keep = _LEVELS[level]
        first = int(now // width) - keep + 1
        total = times = 0
        for index, value, count in self.levels[level]:
            if index >= first:
                total += value
                times += count
        return total, times


def _item(total: int, times: int, seconds: int) -> dict[str, Any]:
    return {
        "sum": total,
        "tps": round(total / seconds, 2),
        "avgpt": round(total / times, 2) if times else 0.0,
    }


@attrs.define(eq=False)
class BrokerStats:
    counters: dict[tuple[str, str], RollingCounter] = attrs.field(factory=dict)

    def add(self, name: str, key: str, value: int, now: float) -> None:
        counter = self.counters.get((name, key))
        if counter is None:
            counter = self.counters[(name, key)] = RollingCounter()
        counter.add(value, now)

    def put(self, topic: str, messages: int, size: int, now: float) -> None:
        self.add(TOPIC_PUT_NUMS, topic, messages, now)
        self.add(TOPIC_PUT_SIZE, topic, size, now)

    def got(self, topic: str, group: str, messages: int, size: int, now: float) -> None:
        self.add(GROUP_GET_NUMS, f"{topic}@{group}", messages, now)
        self.add(GROUP_GET_SIZE, f"{topic}@{group}", size, now)

    def view(self, name: str, key: str, now: float) -> dict[str, Any] | None:
        """RocketMQ's ``BrokerStatsData`` of one item, None when it never counted."""
        counter = self.counters.get((name, key))
        if counter is None:
            return None
        return {
            "statsMinute": _item(*counter.window(0, now), 60),
            "statsHour": _item(*counter.window(1, now), 3600),
            "statsDay": _item(*counter.window(2, now), 86400),
        }

    def sweep(self, now: float) -> None:
        """Drop counters silent for a day."""
        for key in [k for k, c in self.counters.items() if now - c.last > 86400]:
            del self.counters[key]
