"""Queue selectors for ordered messages (RocketMQ's ``MessageQueueSelector``): messages with the
same sharding key go to the same queue, so one consumer sees them in order."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kernel.model import MessageQueue

QueueSelector = Callable[[Sequence[MessageQueue], object], MessageQueue]
"""``selector(queues, arg) -> queue``; ``arg`` is what the caller passed to ``send``."""


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` (over UTF-16 code units, 32-bit signed), so a Python and a
    Java producer using hash selection put the same key in the same queue."""
    value = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        value = (31 * value + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def select_by_hash(queues: Sequence[MessageQueue], arg: object) -> MessageQueue:
    """RocketMQ's ``SelectMessageQueueByHash``: ``abs(hash(arg) % n)``; ``arg`` is a string key or
    an integer."""
    code = arg if isinstance(arg, int) else java_string_hash(str(arg))
    return queues[abs(code) % len(queues)]  # Java: |code % n|, the same for either sign


def select_by_index(queues: Sequence[MessageQueue], arg: object) -> MessageQueue:
    """``queues[arg % n]`` for an integer ``arg`` (what the C++ client's ``send_orderly`` does)."""
    if not isinstance(arg, int):
        raise TypeError(f"select_by_index needs an integer argument, got {arg!r}")
    return queues[arg % len(queues)]
