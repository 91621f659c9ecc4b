"""What a plugin may read of consumer groups' progress (metrics of consumer lag, a console).

The committed offsets belong to whichever plugin serves the broker's port (``remoting``: it
persists ``consumerOffset.json``). It publishes a :class:`ConsumerProgress` view in
``ctx.stash`` under :data:`CONSUMER_PROGRESS`, so other plugins read it without importing it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

import attrs

from kernel.context import StashKey


@attrs.frozen
class QueueProgress:
    group: str
    topic: str
    queue_id: int
    committed: int
    """The group's committed offset in the queue (0 when it committed none yet)."""
    pulled: int = -1
    """The next offset the group's last pull of the queue was answered with (RocketMQ's pull
    offset); -1 when it pulled none since the broker started."""

    @property
    def in_flight(self) -> int:
        """Messages pulled and not yet committed (RocketMQ's ``rocketmq_consumer_inflight_messages``
        for a queue): 0 without a pull since the start."""
        return max(0, self.pulled - self.committed) if self.pulled >= 0 else 0


class ConsumerProgress(Protocol):
    def queues(self) -> Iterator[QueueProgress]:
        """Every queue of every topic a group committed offsets for (RocketMQ's
        ``consumerProgress`` rows, before the broker's own offsets are added)."""
        ...


CONSUMER_PROGRESS = StashKey[ConsumerProgress]("kernel.consumer_progress")
"""Set by the plugin serving the broker's port once it runs; absent without one."""


@attrs.frozen
class GroupSettings:
    """What a consumer-side plugin needs of a subscription group's configuration."""

    consume_enable: bool
    retry_max_times: int
    """RocketMQ's ``retryMaxTimes``: deliveries after the first before the dead-letter queue."""


class ConsumerOffsets(Protocol):
    """Committed offsets and subscription groups, for a plugin that consumes on behalf of
    clients (POP): the same table ``consumerOffset.json`` keeps, so admin tools, lag metrics
    and a slave's copy see its progress like any group's."""

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed "next to consume" offset in the queue; ``None`` if none."""
        ...

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Set the committed offset (in memory; written with the table periodically and at stop)."""
        ...

    def group_settings(self, group: str) -> GroupSettings | None:
        """The group's settings, created with defaults when the broker auto-creates groups
        (``autoCreateSubscriptionGroup``); ``None`` when it does not exist."""
        ...


CONSUMER_OFFSETS = StashKey[ConsumerOffsets]("kernel.consumer_offsets")
"""Set by the plugin serving the broker's port once it runs; absent without one."""


class PopProgress(Protocol):
    """What RocketMQ 5's POP consumption is doing, for admin tools and metrics."""

    def in_flight(self, group: str, topic: str, queue_id: int) -> int:
        """Messages of the queue popped by ``group`` and neither acked nor delivered again yet."""
        ...

    def counts(self) -> Mapping[str, int]:
        """Counters since start: ``popped``, ``acked``, ``revived``, ``dead_lettered``."""
        ...


POP_PROGRESS = StashKey[PopProgress]("kernel.pop_progress")
"""Set by the plugin serving POP (``pop``); absent without one (no message is popped)."""
