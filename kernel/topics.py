"""What a plugin may ask of the broker's topic table.

The table belongs to whichever plugin serves the broker's port (``remoting``: it persists
``topics.json`` and registers the table with the NameServers). A plugin that writes to a topic
of its own and wants it readable by consumers and admin tools (the transaction plugin's
``TRANS_CHECK_MAX_TIME_TOPIC``) creates it here, through :data:`TOPIC_DIRECTORY`, without
importing that plugin.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from kernel.context import StashKey


@attrs.frozen
class TopicQueues:
    """What a consumer-side plugin needs of one topic's configuration."""

    read_queue_nums: int
    write_queue_nums: int
    readable: bool
    writable: bool


class TopicDirectory(Protocol):
    """The broker's topic configurations (RocketMQ's ``TopicConfigManager``)."""

    async def create_system_topic(self, topic: str, queue_nums: int) -> None:
        """Make ``topic`` exist with ``queue_nums`` read and write queues, readable and
        writable, and registered with the NameServers (RocketMQ's
        ``createTopicInSendMessageBackMethod``); nothing happens if it exists already.
        Clients still may not send to a system topic; they may read it."""
        ...

    def topic_queues(self, topic: str) -> TopicQueues | None:
        """The queue counts and permissions of ``topic``, or ``None`` when it does not exist."""
        ...


TOPIC_DIRECTORY = StashKey[TopicDirectory]("kernel.topic_directory")
"""Set in ``ctx.stash`` by the plugin serving the broker's port once it runs; absent on a
broker without one (then a plugin's topics are in the store but have no route)."""
