"""Which queues this consumer should own, and where it starts on a queue it has never consumed
(RocketMQ's ``RebalanceImpl`` and ``computePullFromWhere``).

Every member computes the split on its own from the same sorted queues and sorted member ids
with the same strategy, so the shares never overlap once the membership has settled.
"""

from __future__ import annotations

import logging
import time

import attrs

from kernel.model import MessageQueue
from kernel.protocols import AllocateStrategyFn
from trocket.client.consumer.modes import ConsumeFromWhere, MessageModel
from trocket.client.consumer.offset_store import UNKNOWN, OffsetStore
from trocket.client.consumer.received import RETRY_PREFIX
from trocket.client.consumer.session import ConsumerSession
from trocket.client.errors import ClientError
from wire.remoting import RequestCode, ResponseCode

log = logging.getLogger(__name__)

REBALANCE_INTERVAL = 20.0
"""``rebalanceInterval``: seconds between periodic rebalances."""


@attrs.define(eq=False)
class Rebalancer:
    session: ConsumerSession
    allocate: AllocateStrategyFn

    async def assignment(self) -> dict[str, set[MessageQueue] | None]:
        """Per subscribed topic, the queues that are ours now; ``None`` for a topic whose
        route or member list could not be fetched (the caller keeps what it has)."""
        out: dict[str, set[MessageQueue] | None] = {}
        for topic in sorted(self.session.subscriptions):
            try:
                queues = sorted(await self.session.queues_of(topic), key=attrs.astuple)
                if self.session.message_model == MessageModel.BROADCASTING.value:
                    out[topic] = set(queues)
                    continue
                ids = await self.session.consumer_ids(queues)
            except ClientError as error:
                log.warning("group %s: cannot rebalance %s now: %s", self.session.group, topic, error)
                out[topic] = None
                continue
            if self.session.client_id not in ids:
                log.info(
                    "group %s: %s not yet listed by the broker", self.session.group, self.session.client_id
                )
            mine = self.allocate(self.session.group, self.session.client_id, queues, ids)
            out[topic] = set(mine)
        return out


async def start_offset(
    session: ConsumerSession,
    offsets: OffsetStore,
    queue: MessageQueue,
    where: ConsumeFromWhere,
    timestamp_ms: int,
) -> int:
    """The committed offset, or for a queue the group never consumed, the one ``where`` says.

    RocketMQ's rule is kept for ``LAST_OFFSET``: a queue whose first message is still in the
    broker's memory starts at 0 (the broker answers the offset query with 0), otherwise at the
    end. ``TIMESTAMP`` asks the broker for the first message stored at or after the time.

    :raises ClientError: the broker could not be asked.
    """
    stored = await offsets.read_stored(queue)
    if stored >= 0:
        return stored
    if where is ConsumeFromWhere.FIRST_OFFSET:
        return await queue_offset(session, queue, RequestCode.GET_MIN_OFFSET, {})
    if queue.topic.startswith(RETRY_PREFIX):
        return 0
    if where is ConsumeFromWhere.TIMESTAMP:
        return await queue_offset(
            session, queue, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"timestamp": timestamp_ms}
        )
    return await queue_offset(session, queue, RequestCode.GET_MAX_OFFSET, {})


async def queue_offset(
    session: ConsumerSession, queue: MessageQueue, code: int, extra: dict[str, object]
) -> int:
    response = await session.call(
        queue.broker_name, code, {"topic": queue.topic, "queueId": queue.queue_id, **extra}
    )
    if response.code != ResponseCode.SUCCESS:
        raise ClientError(
            f"{queue.topic}:{queue.broker_name}:{queue.queue_id}: offset lookup failed: "
            f"{response.code} {response.remark or ''}"
        )
    return int(response.ext.get("offset", 0))


def half_hour_ago_ms() -> int:
    """``consumeTimestamp``'s default: thirty minutes before the consumer started."""
    return int(time.time() * 1000) - 30 * 60 * 1000


__all__ = [
    "REBALANCE_INTERVAL",
    "UNKNOWN",
    "ConsumeFromWhere",
    "MessageModel",
    "Rebalancer",
    "half_hour_ago_ms",
    "start_offset",
]
