"""PULL_MESSAGE (11): long polling, tag filtering by hash then by exact tag, offset commits.

Status mapping and next-offset rules follow RocketMQ's PullMessageProcessor; the body is the
stored records exactly as they are in the commit log.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import trio

from kernel import pull
from kernel.model import GetResult, GetStatus
from plugins.remoting.handlers.common import RequestProblem, int_field, required
from plugins.remoting.topics import PERM_READ
from wire import record
from wire.remoting import Connection, RemotingCommand, ResponseCode
from wire.stored_records import joined
from wire.subscription import Subscription

if TYPE_CHECKING:
    from plugins.remoting.service import BrokerNetwork

MASTER_ID = 0
SLAVE_WHEN_CONSUMING_SLOWLY = 1
"""RocketMQ's default ``whichBrokerWhenConsumeSlowly`` of a subscription group."""
PHYSICAL_OFFSET_AT = 28
"""Byte position of PHYSICALOFFSET in a v1 record (after size, magic, CRC, queue id, flag and
queue offset)."""
_PHYSICAL_OFFSET = struct.Struct(">q")

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4

_STATUS_CODES = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.NO_MATCHED_LOGIC_QUEUE: ResponseCode.PULL_OFFSET_MOVED,
}


def exact_tag_filter(result: GetResult, tags: frozenset[str]) -> GetResult:
    """Drop records whose tag only collided on the hash (RocketMQ leaves this to clients; we
    do it on the broker too, so every client sees exactly what it subscribed to)."""
    kept = [r for r in result.records if record.decode_dispatch(r, 0).properties.get("TAGS") in tags]
    if len(kept) == len(result.records):
        return result
    status = GetStatus.FOUND if kept else GetStatus.NO_MATCHED_MESSAGE
    return GetResult(status, kept, result.next_begin_offset, result.min_offset, result.max_offset)


def response_code(result: GetResult, requested_offset: int) -> int:
    if result.status is GetStatus.NO_MESSAGE_IN_QUEUE:
        return ResponseCode.PULL_OFFSET_MOVED if requested_offset != 0 else ResponseCode.PULL_NOT_FOUND
    return _STATUS_CODES[result.status]


async def handle_pull(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    group, topic = required(request, "consumerGroup", "topic")
    queue_id = int_field(request, "queueId")
    offset = int_field(request, "queueOffset")
    max_msgs = int_field(request, "maxMsgNums", 32)
    sys_flag = int_field(request, "sysFlag", 0)
    if not net.readable:
        return request.response(
            ResponseCode.NO_PERMISSION, remark=f"the broker[{net.broker_addr}] pulling message is forbidden"
        )
    group_config = net.groups.find_or_create(group, auto_create=net.config.auto_create_subscription_group)
    if group_config is None:
        return request.response(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, remark=f"subscription group [{group}] does not exist"
        )
    if not group_config.consume_enable:
        return request.response(
            ResponseCode.NO_PERMISSION, remark=f"subscription group no permission, {group}"
        )
    topic_config = net.topics.get(topic)
    if topic_config is None:
        return request.response(
            ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{topic}] not exist, apply first please!"
        )
    if not topic_config.perm & PERM_READ:
        return request.response(
            ResponseCode.NO_PERMISSION, remark=f"the topic[{topic}] pulling message is forbidden"
        )
    if not 0 <= queue_id < topic_config.read_queue_nums:
        return request.response(
            ResponseCode.SYSTEM_ERROR,
            remark=f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
            f"[{topic_config.read_queue_nums}] consumer:[{request.ext.get('consumerGroup')}]",
        )
    subscription = _subscription(net, request, group, topic, sys_flag)
    if subscription.expression_type.upper() != "TAG":
        return request.response(
            ResponseCode.SUBSCRIPTION_PARSE_FAILED,
            remark=f"expression type {subscription.expression_type} is not supported; use TAG",
        )
    if sys_flag & FLAG_COMMIT_OFFSET and not net.is_slave:
        # A slave's offsets are its master's copy (synchronised every slave_sync_interval).
        commit = int_field(request, "commitOffset", -1)
        if commit >= 0:
            net.offsets.commit(group, topic, queue_id, commit)

    long_polling = net.config.long_polling_enable
    if long_polling:
        hold = min(int_field(request, "suspendTimeoutMillis", 15000) / 1000, net.config.max_suspend_time)
    else:
        hold = net.config.short_polling_time
    deadline = trio.current_time() + hold
    while True:
        result = await pull.get_messages(
            net.runtime.store,
            topic,
            queue_id,
            offset,
            max_count=max(1, min(max_msgs, net.config.max_pull_messages)),
            max_bytes=net.config.max_pull_bytes,
            tags_codes=subscription.codes,
        )
        if result.status is GetStatus.FOUND and subscription.tags is not None:
            result = exact_tag_filter(result, subscription.tags)
        code = response_code(result, offset)
        remaining = deadline - trio.current_time()
        if code != ResponseCode.PULL_NOT_FOUND or not sys_flag & FLAG_SUSPEND or remaining <= 0:
            break
        woken = await net.waiters.wait(topic, queue_id, remaining)
        if not long_polling and not woken:
            deadline = trio.current_time()  # short polling: one more look, then answer
    net.offsets.record_pull(group, topic, queue_id, result.next_begin_offset)
    body = joined(result.records)
    if result.records:
        net.messages_pulled += len(result.records)
        net.stats.got(topic, group, len(result.records), len(body), trio.current_time())
        ctx = net.runtime.ctx
        ctx.hook.trocket_messages_pulled(
            topic=topic, group=group, count=len(result.records), size=len(body), ctx=ctx
        )
    return request.response(
        code,
        {
            "nextBeginOffset": result.next_begin_offset,
            "minOffset": result.min_offset,
            "maxOffset": result.max_offset,
            "suggestWhichBrokerId": suggested_broker_id(net, result),
        },
        body,
    )


def suggested_broker_id(net: BrokerNetwork, result: GetResult) -> int:
    """RocketMQ's ``suggestWhichBrokerId``: with ``slaveReadEnable``, a consumer that reads data
    no longer in memory is sent to a slave (1) and a caught-up one stays (0); without it, always
    the master (0). A client whose master is down reads from a slave whatever this says."""
    if not net.config.slave_read_enable:
        return MASTER_ID
    if result.records and not net.in_memory(_physical_offset(result.records[-1])):
        return SLAVE_WHEN_CONSUMING_SLOWLY
    return MASTER_ID


def _physical_offset(stored: bytes) -> int:
    return int(_PHYSICAL_OFFSET.unpack_from(stored, PHYSICAL_OFFSET_AT)[0])


def _subscription(
    net: BrokerNetwork, request: RemotingCommand, group: str, topic: str, sys_flag: int
) -> Subscription:
    if sys_flag & FLAG_SUBSCRIPTION:
        return Subscription.parse(
            topic,
            request.ext.get("subscription"),
            int_field(request, "subVersion", 0),
            request.ext.get("expressionType") or "TAG",
        )
    known = net.clients.subscription(group, topic)
    if known is None:
        raise RequestProblem(
            ResponseCode.SUBSCRIPTION_NOT_EXIST,
            f"the consumer's subscription of {topic} in group {group} is unknown (no heartbeat yet)",
        )
    return known
