"""Parking a delayed message: RocketMQ's rewrite to ``SCHEDULE_TOPIC_XXXX`` before append.

The real topic and queue go to ``REAL_TOPIC`` / ``REAL_QID``, the queue becomes ``level - 1``
(levels above the maximum are clamped to it), and ``TIMER_OUT_MS`` holds the delivery time the
consume queue's tag field will carry. Unparking restores the original message.
"""

from __future__ import annotations

from collections.abc import Sequence

from kernel.model import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_OUT_MS,
    SCHEDULE_TOPIC,
    Message,
)
from kernel.record import StoredMessage

_PARKING_PROPERTIES = (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_TIMER_OUT_MS)


def park(message: Message, levels: Sequence[float], now_ms: int) -> None:
    """Rewrite ``message`` (delay level > 0) in place to wait in the schedule topic."""
    level = min(message.delay_level, len(levels))
    message.properties[PROPERTY_DELAY_TIME_LEVEL] = str(level)
    message.properties[PROPERTY_REAL_TOPIC] = message.topic
    message.properties[PROPERTY_REAL_QUEUE_ID] = str(message.queue_id)
    message.properties[PROPERTY_TIMER_OUT_MS] = str(now_ms + int(levels[level - 1] * 1000))
    message.topic = SCHEDULE_TOPIC
    message.queue_id = level - 1


def unpark(stored: StoredMessage) -> Message:
    """The message to deliver to its real topic once due (delay properties removed)."""
    properties = dict(stored.properties)
    topic = properties.get(PROPERTY_REAL_TOPIC, stored.topic)
    queue_id = int(properties.get(PROPERTY_REAL_QUEUE_ID, "0"))
    for name in (*_PARKING_PROPERTIES, PROPERTY_DELAY_TIME_LEVEL):
        properties.pop(name, None)
    return Message(
        topic,
        stored.body,
        queue_id,
        stored.flag,
        properties,
        stored.sys_flag,
        stored.born_timestamp,
        stored.born_host,
        stored.reconsume_times,
    )
