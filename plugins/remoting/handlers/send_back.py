"""CONSUMER_SEND_MSG_BACK (36): a consumer gives a message back for a later retry.

The mechanics live here (look the message up by commit-log offset, copy it to
``%RETRY%<group>`` or ``%DLQ%<group>``); *whether and when* to retry is the
``trocket_redelivery_decision`` hook's answer, which the retry_dlq plugin provides. Without
such a plugin the broker says so instead of dropping the message.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from kernel.model import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    Message,
    MessageBatch,
    Redelivery,
    RedeliveryAction,
)
from plugins.remoting.handlers.common import PUT_STATUS_CODES, int_field, record_at, required
from plugins.remoting.topics import DLQ_PREFIX, RETRY_PREFIX, TopicConfig
from wire import record
from wire.remoting import Connection, RemotingCommand, ResponseCode

if TYPE_CHECKING:
    from plugins.remoting.service import BrokerNetwork

VERSION_3_4_9 = 121
"""Clients from this version on send ``maxReconsumeTimes`` that overrides the group's."""


async def handle_send_back(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    (group,) = required(request, "group")
    offset = int_field(request, "offset")
    delay_level = int_field(request, "delayLevel", 0)
    group_config = net.groups.get(group)
    if group_config is None:
        return request.response(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, remark=f"subscription group not exist, {group}"
        )
    if not net.writable:
        return request.response(
            ResponseCode.NO_PERMISSION, remark=f"the broker[{net.broker_addr}] sending message is forbidden"
        )
    data = await record_at(net, offset, "look message by offset failed")
    stored = record.decode_record(data)
    view = record.decode_dispatch(data, 0)
    max_times = group_config.retry_max_times
    if request.version >= VERSION_3_4_9 and request.ext.get("maxReconsumeTimes"):
        max_times = int_field(request, "maxReconsumeTimes")
    attempt = stored.reconsume_times + 1
    ctx = net.runtime.ctx
    if delay_level < 0 or attempt > max_times:
        decision: Redelivery | None = Redelivery.dead_letter()
    else:
        decision = ctx.hook.trocket_redelivery_decision(
            message=view,
            group=group,
            attempt=attempt,
            max_attempts=max_times,
            ctx=ctx,
        )
        if decision is not None and delay_level > 0 and decision.action is RedeliveryAction.RETRY:
            decision = Redelivery.retry(delay_level)
    if decision is None:
        return request.response(
            ResponseCode.SYSTEM_ERROR,
            remark="consumer retries are not enabled on this broker: add the retry_dlq plugin to "
            "[broker] plugins (the message was not re-queued)",
        )
    properties = dict(stored.properties)
    properties.setdefault(PROPERTY_RETRY_TOPIC, stored.topic)
    properties.setdefault(
        PROPERTY_ORIGIN_MESSAGE_ID,
        request.ext.get("originMsgId") or stored.unique_key or stored.offset_msg_id,
    )
    properties.pop(PROPERTY_DELAY_TIME_LEVEL, None)
    if decision.action is RedeliveryAction.DEAD_LETTER:
        topic = DLQ_PREFIX + group
        config = net.topics.get(topic) or await _create(net, topic, 1)
        reason = "delay level < 0" if delay_level < 0 else f"attempt {attempt} of {max_times}"
        ctx.hook.trocket_dead_lettered(message=view, group=group, reason=reason, ctx=ctx)
    else:
        topic = RETRY_PREFIX + group
        config = net.topics.get(topic) or await _create(net, topic, max(1, group_config.retry_queue_nums))
        if decision.delay_level > 0:
            properties[PROPERTY_DELAY_TIME_LEVEL] = str(decision.delay_level)
    copy = Message(
        topic,
        stored.body,
        random.randrange(config.write_queue_nums),
        stored.flag,
        properties,
        stored.sys_flag,
        stored.born_timestamp,
        stored.born_host,
        attempt,
    )
    result = await net.runtime.put(MessageBatch([copy], group))
    if not result.status.stored:
        return request.response(PUT_STATUS_CODES[result.status], remark=result.remark or result.status.value)
    return request.response()


async def _create(net: BrokerNetwork, topic: str, queue_nums: int) -> TopicConfig:
    await net.create_system_topic(topic, queue_nums)
    config = net.topics.get(topic)
    assert config is not None
    return config
