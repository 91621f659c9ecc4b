"""RocketMQ's queue-allocation strategies as pure functions (seed 001; the Java client's
``AllocateMessageQueue*`` classes, same results for the same inputs).

Every strategy answers "which of ``queues`` does ``current_id`` consume?". The caller (a
rebalance) passes queues and consumer ids sorted, as RocketMQ's ``RebalanceImpl`` does, so all
clients of a group agree; a Trocket client and a Java client with the same strategy in one
group compute the same split. A consumer id not in ``consumer_ids`` gets nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence

from kernel.model import MessageQueue
from kernel.protocols import AllocateStrategyFn
from plugins.allocate.hash_ring import HashRing

DEFAULT_VIRTUAL_NODES = 10
"""RocketMQ's ``AllocateMessageQueueConsistentHash`` default."""


def averagely(
    group: str, current_id: str, queues: Sequence[MessageQueue], consumer_ids: Sequence[str]
) -> list[MessageQueue]:
    """Contiguous blocks; the first ``len(queues) % len(consumers)`` consumers get one more.
    10 consumers, 22 queues: consumer 0 gets queues 0-2, consumer 1 gets 3-5, the rest two each.
    """
    if current_id not in consumer_ids or not queues:
        return []
    index = consumer_ids.index(current_id)
    total, consumers = len(queues), len(consumer_ids)
    remainder = total % consumers
    if total <= consumers:
        size = 1
    else:
        size = total // consumers + (1 if index < remainder else 0)
    start = index * size if index < remainder else index * size + remainder
    count = min(size, total - start)
    return [queues[(start + i) % total] for i in range(max(0, count))]


def averagely_by_circle(
    group: str, current_id: str, queues: Sequence[MessageQueue], consumer_ids: Sequence[str]
) -> list[MessageQueue]:
    """Dealt like cards: queue i goes to consumer ``i % len(consumers)``. 10 consumers, 22
    queues: consumer 0 gets queues 0, 10, 20; consumer 2 gets 2, 12."""
    if current_id not in consumer_ids:
        return []
    index, consumers = consumer_ids.index(current_id), len(consumer_ids)
    return [queue for i, queue in enumerate(queues) if i % consumers == index]


def by_config(configured: Collection[tuple[str, int]]) -> AllocateStrategyFn:
    """Always the configured ``(broker name, queue id)`` queues, whoever else consumes: for
    pinning a consumer to queues by hand. Queues that do not exist are not invented."""

    def allocate(
        group: str, current_id: str, queues: Sequence[MessageQueue], consumer_ids: Sequence[str]
    ) -> list[MessageQueue]:
        return [q for q in queues if (q.broker_name, q.queue_id) in configured]

    return allocate


def broker_room(queue: MessageQueue) -> str:
    """RocketMQ's machine-room convention: broker names ``room@name``."""
    return queue.broker_name.split("@", 1)[0]


def by_machine_room(rooms: Collection[str]) -> AllocateStrategyFn:
    """Only queues of brokers in ``rooms`` (broker names ``room@name``), shared among all
    consumers: ``len // consumers`` each in blocks, the remainder dealt to the first ones."""

    def allocate(
        group: str, current_id: str, queues: Sequence[MessageQueue], consumer_ids: Sequence[str]
    ) -> list[MessageQueue]:
        if current_id not in consumer_ids:
            return []
        index, consumers = consumer_ids.index(current_id), len(consumer_ids)
        mine = [q for q in queues if broker_room(q) in rooms]
        each, remainder = divmod(len(mine), consumers)
        result = mine[index * each : (index + 1) * each]
        if remainder > index:
            result.append(mine[index + each * consumers])
        return result

    return allocate


def consumer_room(consumer_id: str) -> str:
    """A consumer's room: its client id is ``ip@instance``; the instance name starts with the
    room, ``room@...`` or ``room-...`` (e.g. ``10.0.0.7@hz-orders-1`` is in ``hz``)."""
    instance = consumer_id.split("@", 1)[1] if "@" in consumer_id else consumer_id
    return re.split(r"[@-]", instance, maxsplit=1)[0]


def machine_room_nearby(
    inner: AllocateStrategyFn,
    queue_room: Callable[[MessageQueue], str] = broker_room,
    client_room: Callable[[str], str] = consumer_room,
) -> AllocateStrategyFn:
    """Decorates ``inner``: queues of a room are split by ``inner`` among the consumers in the
    same room; queues of a room with no consumer are split among every consumer."""

    def allocate(
        group: str, current_id: str, queues: Sequence[MessageQueue], consumer_ids: Sequence[str]
    ) -> list[MessageQueue]:
        if current_id not in consumer_ids:
            return []
        queues_by_room: dict[str, list[MessageQueue]] = {}
        for queue in queues:
            queues_by_room.setdefault(queue_room(queue), []).append(queue)
        consumers_by_room: dict[str, list[str]] = {}
        for consumer in consumer_ids:
            consumers_by_room.setdefault(client_room(consumer), []).append(consumer)
        my_room = client_room(current_id)
        result = []
        if local := queues_by_room.pop(my_room, None):
            result += inner(group, current_id, local, consumers_by_room[my_room])
        for room, room_queues in queues_by_room.items():
            if room not in consumers_by_room:
                result += inner(group, current_id, room_queues, consumer_ids)
        return result

    return allocate


def consistent_hash(virtual_nodes: int = DEFAULT_VIRTUAL_NODES) -> AllocateStrategyFn:
    """Each queue goes to the consumer whose virtual node follows the queue's hash on a ring
    (MD5, as RocketMQ): when a consumer leaves or joins, only the queues it owned (or takes)
    move."""
    if virtual_nodes < 1:
        raise ValueError(f"virtual_nodes must be at least 1, got {virtual_nodes}")

    def allocate(
        group: str, current_id: str, queues: Sequence[MessageQueue], consumer_ids: Sequence[str]
    ) -> list[MessageQueue]:
        if current_id not in consumer_ids:
            return []
        ring = HashRing(consumer_ids, virtual_nodes)
        return [q for q in queues if ring.route(queue_key(q)) == current_id]

    return allocate


def queue_key(queue: MessageQueue) -> str:
    """The text RocketMQ hashes for a queue (Java's ``MessageQueue.toString()``)."""
    return f"MessageQueue [topic={queue.topic}, brokerName={queue.broker_name}, queueId={queue.queue_id}]"
