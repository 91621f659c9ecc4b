"""Parking a delayed message: RocketMQ's rewrite before append, and its undoing at delivery.

A message with a delay level goes to ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` (levels above
the maximum are clamped); one with an arbitrary time (RocketMQ 5's ``TIMER_DELIVER_MS``,
``TIMER_DELAY_MS`` or ``TIMER_DELAY_SEC``) goes to ``rmq_sys_wheel_timer`` queue 0. Either way
the real topic and queue go to ``REAL_TOPIC`` / ``REAL_QID`` and ``TIMER_OUT_MS`` holds the
delivery time the consume queue's tag field will carry. Unparking restores the original message
without the delay properties.
"""

from __future__ import annotations

from collections.abc import Sequence

from kernel.model import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OUT_MS,
    SCHEDULE_TOPIC,
    TIMER_PROPERTIES,
    TIMER_TOPIC,
    Message,
)
from wire.record import StoredMessage
from wire.units import format_duration

_PARKING_PROPERTIES = (
    PROPERTY_REAL_TOPIC,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_DELAY_TIME_LEVEL,
    *TIMER_PROPERTIES,
)


class IllegalDelay(ValueError):
    """The message's delay properties cannot be honoured; the text says which and why."""


def park(message: Message, levels: Sequence[float], now_ms: int) -> None:
    """Rewrite ``message`` (delay level > 0) in place to wait in the schedule topic."""
    level = min(message.delay_level, len(levels))
    message.properties[PROPERTY_DELAY_TIME_LEVEL] = str(level)
    _park_in(message, SCHEDULE_TOPIC, level - 1, now_ms + int(levels[level - 1] * 1000))


def timer_delivery_ms(message: Message, now_ms: int, max_delay: float) -> int | None:
    """The absolute delivery time a message asks for through a timer property, or None.

    :raises IllegalDelay: for a value that is not a whole number, a negative delay, more than
        one way of asking, or a time further than ``max_delay`` seconds ahead.
    """
    given = [name for name in TIMER_PROPERTIES if name in message.properties]
    if not given:
        return None
    if len(given) > 1 or message.delay_level > 0:
        asked = given + (["DELAY"] if message.delay_level > 0 else [])
        raise IllegalDelay(f"set one of DELAY, {', '.join(TIMER_PROPERTIES)}; this message sets {asked}")
    (name,) = given
    text = message.properties[name]
    try:
        value = int(text)
    except ValueError:
        raise IllegalDelay(f"{name} must be a whole number, got {text!r}") from None
    if name == PROPERTY_TIMER_DELIVER_MS:
        deliver_ms = value
    elif value < 0:
        raise IllegalDelay(f"{name} must not be negative, got {value}")
    else:
        deliver_ms = now_ms + (value * 1000 if name == PROPERTY_TIMER_DELAY_SEC else value)
    if deliver_ms - now_ms > max_delay * 1000:
        raise IllegalDelay(
            f"timer message illegal: {name}={text} is {deliver_ms - now_ms} ms ahead, more than the "
            f"maximum delay {format_duration(max_delay)} ([retry_dlq] timer_max_delay, timerMaxDelaySec)"
        )
    return deliver_ms


def park_timer(message: Message, deliver_ms: int, now_ms: int) -> None:
    """Rewrite ``message`` in place to wait in the timer topic until ``deliver_ms``; one already
    due is left in its topic with the timer properties removed (delivered at once)."""
    if deliver_ms <= now_ms:
        for name in TIMER_PROPERTIES:
            message.properties.pop(name, None)
        return
    _park_in(message, TIMER_TOPIC, 0, deliver_ms)


def _park_in(message: Message, topic: str, queue_id: int, deliver_ms: int) -> None:
    message.properties[PROPERTY_REAL_TOPIC] = message.topic
    message.properties[PROPERTY_REAL_QUEUE_ID] = str(message.queue_id)
    message.properties[PROPERTY_TIMER_OUT_MS] = str(deliver_ms)
    message.topic = topic
    message.queue_id = queue_id


def unpark(stored: StoredMessage) -> Message | None:
    """The message to deliver to its real topic once due (delay properties removed), or None
    for a record that names no real topic: it was not parked by this plugin (a client wrote to
    the parking topic directly), and "delivering" it back where it lies would loop forever."""
    properties = dict(stored.properties)
    topic = properties.get(PROPERTY_REAL_TOPIC)
    if not topic or topic in (SCHEDULE_TOPIC, TIMER_TOPIC):
        return None
    queue_id = int(properties.get(PROPERTY_REAL_QUEUE_ID, "0"))
    for name in _PARKING_PROPERTIES:
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
