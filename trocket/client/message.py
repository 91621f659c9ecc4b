"""What applications send and what a send returns (RocketMQ's ``Message`` and ``SendResult``)."""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs

from kernel.model import PROPERTY_DELAY_TIME_LEVEL, PROPERTY_KEYS, PROPERTY_TAGS, MessageQueue

KEY_SEPARATOR = " "
"""RocketMQ joins several keys with a space in the ``KEYS`` property."""


@attrs.define
class Message:
    """A message to send. ``keys`` are indexed by the broker (``queryMsgByKey``); ``tags``
    filter on the consumer side; ``delay_level`` parks the message (broker's
    ``messageDelayLevel``); ``properties`` are the user's own (RocketMQ's reserved names such
    as ``TIMER_DELIVER_MS`` pass through)."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: Sequence[str] = ()
    properties: dict[str, str] = attrs.field(factory=dict)
    delay_level: int = 0
    flag: int = 0

    def wire_properties(self) -> dict[str, str]:
        """The properties as they travel: user properties plus tags, keys and delay."""
        out = dict(self.properties)
        if self.tags:
            out[PROPERTY_TAGS] = self.tags
        if self.keys:
            out[PROPERTY_KEYS] = KEY_SEPARATOR.join(self.keys)
        if self.delay_level > 0:
            out[PROPERTY_DELAY_TIME_LEVEL] = str(self.delay_level)
        return out


class SendStatus(enum.Enum):
    """Stored, with how durable (a non-OK status still means the broker has the message)."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@attrs.frozen
class SendResult:
    status: SendStatus
    msg_id: str
    """The client's unique id (``UNIQ_KEY``); for a batch, the ids joined by commas."""
    offset_msg_id: str
    """The broker's id: store host + commit-log offset (``queryMsgById``)."""
    queue: MessageQueue
    queue_offset: int
