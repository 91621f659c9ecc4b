"""Client bookkeeping and offsets: HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), LOCK/UNLOCK_BATCH_MQ (41/42), QUERY/UPDATE_CONSUMER_OFFSET
(14/15), GET_MAX/MIN_OFFSET (30/31), SEARCH_OFFSET_BY_TIMESTAMP (29),
GET_EARLIEST_MSG_STORETIME (32)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import trio

from kernel.model import MessageQueue
from plugins.remoting.handlers.common import (
    int_field,
    parse_json_body,
    queryable,
    required,
    valid_group,
    valid_topic,
)
from plugins.remoting.topics import PERM_READ, PERM_WRITE, RETRY_PREFIX
from wire.remoting import Connection, RemotingCommand, ResponseCode

if TYPE_CHECKING:
    from plugins.remoting.service import BrokerNetwork


def _queues(items: Any) -> list[MessageQueue]:
    return [MessageQueue(str(q["topic"]), str(q["brokerName"]), int(q["queueId"])) for q in items or ()]


def _queue_json(queue: MessageQueue) -> dict[str, Any]:
    return {"brokerName": queue.broker_name, "queueId": queue.queue_id, "topic": queue.topic}


async def heartbeat(net: BrokerNetwork, connection: Connection, request: RemotingCommand) -> RemotingCommand:
    data = parse_json_body(request)
    if not isinstance(data, dict):
        return request.response(ResponseCode.SYSTEM_ERROR, remark="heartbeat body must be a JSON object")
    _check_heartbeat_names(data)
    connection.attributes["client_id"] = data.get("clientID", "")
    for name in net.clients.heartbeat(connection, request, data, trio.current_time()):
        group = net.groups.find_or_create(name, auto_create=net.config.auto_create_subscription_group)
        if group is not None and group.retry_queue_nums > 0:
            retry = RETRY_PREFIX + name
            if net.topics.get(retry) is None:
                net.topics.create_system_topic(retry, group.retry_queue_nums, PERM_READ | PERM_WRITE)
                await net.topics_changed()
    return request.response()


def _check_heartbeat_names(data: dict[str, Any]) -> None:
    """Every group and subscribed topic of a heartbeat is a valid name, or the whole heartbeat
    is refused before anything is registered or created (a consumer group's retry topic)."""
    for producer in data.get("producerDataSet") or ():
        valid_group(producer.get("groupName"), "heartbeat producerDataSet groupName")
    for consumer in data.get("consumerDataSet") or ():
        valid_group(consumer.get("groupName"), "heartbeat consumerDataSet groupName")
        for item in consumer.get("subscriptionDataSet") or ():
            valid_topic(item.get("topic"), "heartbeat subscriptionDataSet topic")


async def unregister_client(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    net.clients.unregister(
        connection, request.ext.get("producerGroup", ""), request.ext.get("consumerGroup", "")
    )
    return request.response()


async def consumer_list(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    (group,) = required(request, "consumerGroup")
    consumer = net.clients.online(group)
    if consumer is None:
        return request.response(
            ResponseCode.SYSTEM_ERROR, remark=f"no consumer for this group, {group} (is it online?)"
        )
    return request.response(body=json.dumps({"consumerIdList": consumer.client_ids()}).encode())


async def lock_batch(net: BrokerNetwork, connection: Connection, request: RemotingCommand) -> RemotingCommand:
    data = parse_json_body(request)
    locked = net.locks.try_lock(
        valid_group(data.get("consumerGroup"), "lock consumerGroup"),
        _queues(data.get("mqSet")),
        str(data.get("clientId", "")),
        trio.current_time(),
    )
    return request.response(body=json.dumps({"lockOKMQSet": [_queue_json(q) for q in locked]}).encode())


async def unlock_batch(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    data = parse_json_body(request)
    net.locks.unlock(
        valid_group(data.get("consumerGroup"), "unlock consumerGroup"),
        _queues(data.get("mqSet")),
        str(data.get("clientId", "")),
    )
    return request.response()


async def query_offset(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    group, topic = required(request, "consumerGroup", "topic")
    queue_id = int_field(request, "queueId")
    offset = net.offsets.query(group, topic, queue_id)
    if offset is not None:
        return request.response(ext={"offset": offset})
    store = net.runtime.store
    zero_if_not_found = str(request.ext.get("setZeroIfNotFound", "true")).lower() != "false"
    if (
        zero_if_not_found
        and store.min_queue_offset(topic, queue_id) <= 0
        and _first_message_in_memory(net, topic, queue_id)
    ):
        return request.response(ext={"offset": 0})
    return request.response(
        ResponseCode.QUERY_NOT_FOUND, remark="Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
    )


def _first_message_in_memory(net: BrokerNetwork, topic: str, queue_id: int) -> bool:
    entries = net.runtime.store.lookup(topic, queue_id, 0, 1)
    return not entries or net.in_memory(entries[0].physical_offset)


async def update_offset(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    group, topic = required(request, "consumerGroup", "topic")
    net.offsets.commit(group, topic, int_field(request, "queueId"), int_field(request, "commitOffset"))
    return request.response()


async def max_offset(net: BrokerNetwork, connection: Connection, request: RemotingCommand) -> RemotingCommand:
    (topic,) = required(request, "topic")
    return request.response(
        ext={"offset": net.runtime.store.max_queue_offset(topic, int_field(request, "queueId"))}
    )


async def min_offset(net: BrokerNetwork, connection: Connection, request: RemotingCommand) -> RemotingCommand:
    (topic,) = required(request, "topic")
    return request.response(
        ext={"offset": net.runtime.store.min_queue_offset(topic, int_field(request, "queueId"))}
    )


async def search_offset(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    (topic,) = required(request, "topic")
    store = queryable(net)
    offset = store.offset_by_time(topic, int_field(request, "queueId"), int_field(request, "timestamp"))
    return request.response(ext={"offset": offset})


async def earliest_store_time(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    (topic,) = required(request, "topic")
    queue_id = int_field(request, "queueId")
    store = queryable(net)
    timestamp = store.store_time(topic, queue_id, store.min_queue_offset(topic, queue_id))
    if timestamp < 0:
        return request.response(ResponseCode.SYSTEM_ERROR, remark=f"queue {topic}:{queue_id} has no message")
    return request.response(ext={"timestamp": timestamp})
