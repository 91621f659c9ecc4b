"""A consumer's two modes: how a group shares messages and where a new group starts."""

from __future__ import annotations

import enum


class ConsumeFromWhere(enum.Enum):
    """Where a group with no committed offset on a queue starts."""

    LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"
    """The group's members share the queues; each message goes to one member."""
    BROADCASTING = "BROADCASTING"
    """Every member gets every message."""
