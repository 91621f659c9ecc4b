"""Admin requests: topics (17, 215, 21, 202), subscription groups (200, 201, 207), runtime
info (28), consume stats (208), consumer connections (203), all consumer offsets (43).

Bodies keyed by a MessageQueue use fastjson's object-key form (``{{"brokerName":..}:..}``),
as RocketMQ's own admin tools expect; :func:`wire.remoting.admin_json.loads` reads it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import trio

from kernel import runtime_settings
from kernel.config.effective import effective_settings, properties_text
from kernel.config.properties_file import parse_properties
from kernel.consumer_progress import POP_PROGRESS
from kernel.errors import ConfigError, RemotingError
from plugins.remoting.handlers.common import int_field, parse_json_body, queryable, required, valid_group
from plugins.remoting.stats import STATS_NAMES
from plugins.remoting.subscriptions import SubscriptionGroupConfig
from plugins.remoting.topics import TopicConfig, apply_attributes, topic_problem
from wire.remoting import Connection, RemotingCommand, RequestCode, ResponseCode
from wire.remoting.admin_json import dumps_queue_keyed

if TYPE_CHECKING:
    from plugins.remoting.service import BrokerNetwork

VERSION_DESCRIPTION = "V4_9_8 (trocket)"


def _json(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


async def update_topic(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    (topic,) = required(request, "topic")
    problem = topic_problem(topic)
    if problem:
        return request.response(ResponseCode.SYSTEM_ERROR, remark=problem)
    existing = net.topics.get(topic)
    try:
        attributes = apply_attributes(
            existing.attributes if existing else {}, request.ext.get("attributes", "")
        )
    except ValueError as error:
        return request.response(ResponseCode.INVALID_PARAMETER, remark=str(error))
    config = TopicConfig(
        topic,
        int_field(request, "readQueueNums", 8),
        int_field(request, "writeQueueNums", 8),
        int_field(request, "perm", 6),
        request.ext.get("topicFilterType", "SINGLE_TAG"),
        int_field(request, "topicSysFlag", 0),
        request.ext.get("order", "false").lower() == "true",
        attributes,
    )
    problem = _creatable(net, config)
    if problem:
        return request.response(ResponseCode.SYSTEM_ERROR, remark=problem)
    net.topics.update(config)
    await net.topics_changed()
    return request.response()


async def topic_config(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    """RocketMQ 5's ``GET_TOPIC_CONFIG``: one topic's configuration, attributes included (the
    gRPC proxy reads ``message.type`` from it)."""
    (topic,) = required(request, "topic")
    config = net.topics.get(topic)
    if config is None:
        return request.response(ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{topic}] not exist")
    return request.response(body=orjson.dumps({**config.to_json(), "topicName": topic}))


async def update_topic_list(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    """RocketMQ 5's ``UPDATE_AND_CREATE_TOPIC_LIST``: every topic of the body, or none (the
    first bad one is named); one persist and one registration for the whole list."""
    data = parse_json_body(request)
    listed = data.get("topicConfigList") if isinstance(data, dict) else None
    if not isinstance(listed, list) or not listed:
        return request.response(
            ResponseCode.SYSTEM_ERROR, remark='the body must be {"topicConfigList": [topic configs]}'
        )
    configs = []
    for index, item in enumerate(listed):
        try:
            config = TopicConfig.from_json(item)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            return request.response(
                ResponseCode.SYSTEM_ERROR, remark=f"topicConfigList[{index}] is not a topic config: {error!r}"
            )
        problem = topic_problem(config.topic_name) or _creatable(net, config)
        if problem:
            return request.response(ResponseCode.SYSTEM_ERROR, remark=f"topicConfigList[{index}]: {problem}")
        configs.append(config)
    for config in configs:
        net.topics.update(config)
    await net.topics_changed()
    return request.response()


def _creatable(net: BrokerNetwork, config: TopicConfig) -> str | None:
    """Why ``config`` cannot be created here (its name is checked by the caller), or None."""
    if config.topic_name == net.runtime.ctx.broker.cluster_name:
        return f"the topic[{config.topic_name}] is conflict with system reserved words"
    if not (1 <= config.read_queue_nums <= 1024 and 1 <= config.write_queue_nums <= 1024):
        return "queue numbers must be within [1, 1024]"
    return None


async def delete_topic(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    (topic,) = required(request, "topic")
    net.topics.delete(topic)
    net.offsets.remove_topic(topic)
    await net.topics_changed()
    return request.response()


async def all_topic_config(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    return request.response(body=_json(net.topics.snapshot()))


async def update_group(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    try:
        config = SubscriptionGroupConfig.from_json(json.loads(request.body))
    except (ValueError, KeyError, TypeError) as error:
        return request.response(
            ResponseCode.SYSTEM_ERROR, remark=f"subscription group body is invalid: {error}"
        )
    valid_group(config.group_name, "subscription group groupName")
    net.groups.update(config)
    await net.groups.persist()
    return request.response()


async def group_config(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    """RocketMQ 5's ``GET_SUBSCRIPTIONGROUP_CONFIG``: one group's configuration (the gRPC proxy
    reads ``retryMaxTimes`` and ``consumeMessageOrderly`` from it)."""
    (group,) = required(request, "group")
    config = net.groups.get(group)
    if config is None:
        return request.response(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, remark=f"subscription group [{group}] does not exist"
        )
    return request.response(body=orjson.dumps(config.to_json()))


async def all_groups(net: BrokerNetwork, connection: Connection, request: RemotingCommand) -> RemotingCommand:
    return request.response(body=_json(net.groups.snapshot()))


async def delete_group(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    (group,) = required(request, "groupName")
    net.groups.delete(group)
    await net.groups.persist()
    return request.response()


DELAY_OFFSET_FILE = "delayOffset.json"
"""RocketMQ's name for delay-level progress under ``<data_dir>/config``; the delay plugin writes
it, this plugin serves and copies it as bytes (RocketMQ's ``GET_ALL_DELAY_OFFSET``)."""


async def all_delay_offsets(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    path = net.runtime.ctx.data_dir / "config" / DELAY_OFFSET_FILE
    try:
        body = await trio.Path(path).read_bytes()
    except FileNotFoundError:
        body = b'{"offsetTable":{}}'
    return request.response(body=body)


async def all_consumer_offsets(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    return request.response(body=_json(net.offsets.snapshot()))


async def ha_status(net: BrokerNetwork, connection: Connection, request: RemotingCommand) -> RemotingCommand:
    replicator = net.runtime.replicator
    if replicator is None:
        return request.response(
            ResponseCode.SYSTEM_ERROR,
            remark=f"the broker[{net.broker_addr}] replicates nothing (no replicator configured)",
        )
    return request.response(body=_json(dict(replicator.runtime_info())))


async def runtime_info(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    runtime = net.runtime
    stats = runtime.statistics()
    put, dispatch = stats.put, stats.dispatch
    marks = runtime.store.watermarks()
    reactor = net.server.reactor if net.server else None
    table: dict[str, Any] = {
        "brokerVersionDesc": VERSION_DESCRIPTION,
        "brokerVersion": "409",
        "brokerName": runtime.ctx.broker.broker_name,
        "brokerId": runtime.ctx.broker.broker_id,
        "brokerRole": runtime.role.value,
        "brokerAddr": net.broker_addr,
        "state": stats.state,
        "commitLogMinOffset": marks.min_offset,
        "commitLogMaxOffset": marks.wrote,
        "commitLogFlushedOffset": marks.flushed,
        "dispatchBehindBytes": dispatch.behind_bytes if dispatch else 0,
        "putMessageTimesTotal": put.messages if put else 0,
        "putBatchesTotal": put.batches if put else 0,
        "putAppendsTotal": put.appends if put else 0,
        "putGatheredTotal": net.lone_sends.gathered,
        "sendsReadTogetherTotal": reactor.answered_across if reactor else 0,
        "sendsReadTogetherPasses": reactor.passes_answered if reactor else 0,
        "putStatus": json.dumps(put.by_status if put else {}),
        "getMessageTimesTotal": net.messages_pulled,
        "commitLogDiskRatio": f"{_disk_ratio(runtime.ctx.data_dir):.4f}",
        "flushPolicy": getattr(stats.flush, "name", "") or runtime.ctx.broker.flush or "",
        "brokerPermission": net.config.broker_permission,
        "connections": len(net.server.connections) if net.server else 0,
        "heldPulls": net.waiters.held,
        "consumerGroups": len(net.clients.consumers),
        "topics": len(net.topics.topics),
        "uptimeSeconds": int(trio.current_time() - net.started_at),
        "bootTimestamp": net.boot_timestamp,
        "dispatchErrors": dispatch.errors if dispatch else 0,
        "dispatchBatchesTotal": dispatch.batches if dispatch else 0,
        "dispatchOverlappedTotal": dispatch.overlapped if dispatch else 0,
        **runtime.ctx.background_writes.figures(),
    }
    for figures in runtime.ctx.hook.trocket_runtime_figures(ctx=runtime.ctx):
        for key, value in figures.items():
            table.setdefault(key, value)  # the broker's own figures win over a plugin's
    return request.response(body=_json({"table": {k: str(v) for k, v in table.items()}}))


def _consume_stats(
    net: BrokerNetwork, group: str, topics: list[str]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """RocketMQ's ConsumeStats offset table of ``group`` over ``topics`` on this broker."""
    store = queryable(net)
    broker_name = net.runtime.ctx.broker.broker_name
    popped = net.runtime.ctx.stash.get(POP_PROGRESS, None)
    entries = []
    for topic in topics:
        config = net.topics.get(topic)
        if config is None:
            continue
        committed = net.offsets.queues(group, topic)
        for queue_id in range(config.write_queue_nums):
            broker_offset = store.max_queue_offset(topic, queue_id)
            consumer_offset = committed.get(queue_id, 0)
            last_ts = store.store_time(topic, queue_id, consumer_offset - 1) if consumer_offset > 0 else 0
            entries.append(
                (
                    {"brokerName": broker_name, "queueId": queue_id, "topic": topic},
                    {
                        "brokerOffset": broker_offset,
                        "consumerOffset": consumer_offset,
                        "lastTimestamp": max(last_ts, 0),
                        # Trocket's own: popped and not acked yet (RocketMQ 5 POP); 0 without POP.
                        "popInFlight": popped.in_flight(group, topic, queue_id) if popped else 0,
                    },
                )
            )
    return entries


async def consume_stats(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    (group,) = required(request, "consumerGroup")
    wanted = request.ext.get("topic") or ""
    topics = [wanted] if wanted else net.offsets.topics_of_group(group)
    if not wanted:
        consumer = net.clients.consumers.get(group)
        if consumer is not None:
            topics = sorted(set(topics) | set(consumer.subscriptions))
    if not topics:
        return request.response(
            ResponseCode.SYSTEM_ERROR,
            remark=f"group {group} has no committed offsets and no subscriptions here",
        )
    body = dumps_queue_keyed({"consumeTps": 0.0}, "offsetTable", _consume_stats(net, group, topics))
    return request.response(body=body)


async def broker_consume_stats(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    """RocketMQ's ``GET_BROKER_CONSUME_STATS`` (mqadmin ``brokerConsumeStats``): every
    subscription group's ConsumeStats per topic it has offsets of (orderly groups only with
    ``isOrder``), and the total of their lags."""
    only_orderly = str(request.ext.get("isOrder", "false")).lower() == "true"
    groups = []
    total_diff = 0
    for name, config in sorted(net.groups.groups.items()):
        if only_orderly and not config.consume_message_orderly:
            continue
        stats = []
        for topic in net.offsets.topics_of_group(name):
            entries = _consume_stats(net, name, [topic])
            if not entries:
                continue
            total_diff += sum(v["brokerOffset"] - v["consumerOffset"] for _, v in entries)
            stats.append(dumps_queue_keyed({"consumeTps": 0.0}, "offsetTable", entries).decode())
        if stats:
            groups.append("{" + json.dumps(name) + ":[" + ",".join(stats) + "]}")
    address = json.dumps(net.broker_addr)
    body = f'{{"brokerAddr":{address},"consumeStatsList":[{",".join(groups)}],"totalDiff":{total_diff}}}'
    return request.response(body=body.encode())


async def broker_config(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    """RocketMQ's ``GET_BROKER_CONFIG`` (mqadmin ``getBrokerConfig``): every effective setting
    as properties text, RocketMQ's keys and units where they exist."""
    ctx = net.runtime.ctx
    body = properties_text(effective_settings(ctx))
    return request.response(ext={"version": json.dumps(net.topics.version.to_json())}, body=body.encode())


async def update_broker_config(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    """RocketMQ's ``UPDATE_BROKER_CONFIG`` (mqadmin ``updateBrokerConfig``): the body's
    ``key=value`` lines, all applied and kept, or none: a key that takes effect only at a restart
    is refused (NO_PERMISSION, as RocketMQ refuses its black-listed keys), a bad value too."""
    try:
        changes = parse_properties(request.body.decode("utf-8", "replace"), source="UPDATE_BROKER_CONFIG")
    except ConfigError as error:
        return request.response(ResponseCode.INVALID_PARAMETER, remark=str(error))
    try:
        runtime_settings.update(net.runtime.ctx, changes)
    except runtime_settings.SettingRefused as refused:
        code = ResponseCode.NO_PERMISSION if refused.unchangeable else ResponseCode.INVALID_PARAMETER
        return request.response(code, remark=str(refused))
    return request.response()


async def consumer_running_info(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    """RocketMQ's ``GET_CONSUMER_RUNNING_INFO`` (mqadmin ``consumerStatus``): asked of the
    consumer ``clientId`` of the group over its own connection, its answer passed back."""
    group, client_id = required(request, "consumerGroup", "clientId")
    consumer = net.clients.online(group)
    channels = [c for c in consumer.channels.values() if c.client_id == client_id] if consumer else []
    if not channels or channels[0].connection.closed:
        return request.response(
            ResponseCode.SYSTEM_ERROR, remark=f"The Consumer <{group}> <{client_id}> not online"
        )
    ask = RemotingCommand.request(
        RequestCode.GET_CONSUMER_RUNNING_INFO,
        {
            "consumerGroup": group,
            "clientId": client_id,
            "jstackEnable": request.ext.get("jstackEnable", "false"),
        },
    )
    try:
        answer = await channels[0].connection.request(ask, 5.0)
    except RemotingError as error:
        return request.response(
            ResponseCode.SYSTEM_ERROR, remark=f"consumer {client_id} did not answer: {error}"
        )
    return request.response(answer.code, remark=answer.remark, body=answer.body)


async def view_broker_stats(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    """RocketMQ's ``VIEW_BROKER_STATS_DATA``: one stats item (``TOPIC_PUT_NUMS`` of a topic,
    ``GROUP_GET_NUMS`` of ``topic@group``, or their ``_SIZE``) over the last minute, hour, day."""
    name, key = required(request, "statsName", "statsKey")
    if name not in STATS_NAMES:
        return request.response(
            ResponseCode.SYSTEM_ERROR, remark=f"unknown stats {name}; known: {sorted(STATS_NAMES)}"
        )
    data = net.stats.view(name, key, trio.current_time())
    if data is None:
        return request.response(ResponseCode.SYSTEM_ERROR, remark=f"The stats <{name}> <{key}> not exist")
    return request.response(body=orjson.dumps(data))


async def topic_consumers(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    """RocketMQ's ``QUERY_TOPIC_CONSUME_BY_WHO``: the groups with offsets of a topic here."""
    (topic,) = required(request, "topic")
    groups = set(net.offsets.groups_of_topic(topic))
    groups |= {name for name, group in net.clients.consumers.items() if topic in group.subscriptions}
    return request.response(body=orjson.dumps({"groupList": sorted(groups)}))


async def producer_connections(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    """RocketMQ's ``GET_PRODUCER_CONNECTION_LIST`` (mqadmin ``producerConnection``): the
    producers of a group heard from in heartbeats."""
    (group,) = required(request, "producerGroup")
    channels = [c for c in net.clients.producers.get(group, {}).values() if not c.connection.closed]
    if not channels:
        return request.response(ResponseCode.SYSTEM_ERROR, remark=f"the producer group[{group}] not exist")
    return request.response(body=orjson.dumps({"connectionSet": [c.to_json() for c in channels]}))


async def topic_stats(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    (topic,) = required(request, "topic")
    config = net.topics.get(topic)
    if config is None:
        return request.response(ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{topic}] not exist")
    store = queryable(net)
    broker_name = net.runtime.ctx.broker.broker_name
    entries = []
    for queue_id in range(config.write_queue_nums):
        low, high = store.min_queue_offset(topic, queue_id), store.max_queue_offset(topic, queue_id)
        updated = store.store_time(topic, queue_id, high - 1) if high > 0 else 0
        entries.append(
            (
                {"brokerName": broker_name, "queueId": queue_id, "topic": topic},
                {"lastUpdateTimestamp": max(updated, 0), "maxOffset": high, "minOffset": low},
            )
        )
    return request.response(body=dumps_queue_keyed({}, "offsetTable", entries))


async def consumer_connections(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    (group,) = required(request, "consumerGroup")
    consumer = net.clients.online(group)
    if consumer is None:
        return request.response(
            ResponseCode.CONSUMER_NOT_ONLINE, remark=f"the consumer group[{group}] not online"
        )
    body = {
        "connectionSet": [c.to_json() for c in consumer.channels.values()],
        "consumeFromWhere": consumer.consume_from_where,
        "consumeType": consumer.consume_type,
        "messageModel": consumer.message_model,
        "subscriptionTable": {t: s.to_json() for t, s in sorted(consumer.subscriptions.items())},
    }
    return request.response(body=_json(body))


def _disk_ratio(path: Path) -> float:
    """RocketMQ's ``commitLogDiskRatio``: the used share of the store's file system."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return 0.0
    return (usage.total - usage.free) / usage.total if usage.total else 0.0
