"""Giving a failed message back for a later retry (clustering only).

First ``CONSUMER_SEND_MSG_BACK`` to the broker the message came from (the broker copies it to
``%RETRY%<group>`` with a delay, or to ``%DLQ%<group>`` after ``max_reconsume_times``). When that
broker cannot, the client publishes the copy to the retry topic itself, as RocketMQ's client
does, so a failing broker does not stall the queue.
"""

from __future__ import annotations

import logging

from kernel.model import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
)
from trocket.client.consumer.received import RETRY_PREFIX, ReceivedMessage
from trocket.client.consumer.session import ConsumerSession
from trocket.client.errors import ClientError
from trocket.client.message import Message
from trocket.client.producer import Producer
from trocket.client.sending import PROPERTY_RECONSUME_TIME
from wire.remoting import RequestCode, ResponseCode

log = logging.getLogger(__name__)

PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
FIRST_RETRY_LEVEL = 3
"""A retry's delay level is 3 + the attempts so far (10 s, 30 s, 1 min, ...)."""


async def send_back(
    session: ConsumerSession,
    producer: Producer,
    message: ReceivedMessage,
    delay_level: int,
    max_reconsume_times: int,
) -> bool:
    """Hand ``message`` back for a retry; False when neither the broker nor the fallback
    publish took it (the caller keeps it and consumes it again locally)."""
    header = {
        "offset": message.commit_log_offset,
        "group": session.group,
        "delayLevel": delay_level,
        "originMsgId": message.msg_id,
        "originTopic": message.topic,
        "unitMode": False,
        "maxReconsumeTimes": max_reconsume_times,
    }
    try:
        response = await session.call(message.queue.broker_name, RequestCode.CONSUMER_SEND_MSG_BACK, header)
        if response.code == ResponseCode.SUCCESS:
            return True
        problem = f"{response.code} {response.remark or ''}"
    except ClientError as error:
        problem = str(error)
    log.warning("send back of %s to %s failed (%s); publishing to the retry topic", message.msg_id,
                message.queue.broker_name, problem)  # fmt: skip
    properties = dict(message.properties)
    properties.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, message.msg_id)
    properties[PROPERTY_RETRY_TOPIC] = message.topic
    properties[PROPERTY_RECONSUME_TIME] = str(message.reconsume_times + 1)
    properties[PROPERTY_MAX_RECONSUME_TIMES] = str(max_reconsume_times)
    properties.pop(PROPERTY_DELAY_TIME_LEVEL, None)
    copy = Message(
        RETRY_PREFIX + session.group,
        message.body,
        properties=properties,
        delay_level=delay_level or FIRST_RETRY_LEVEL + message.reconsume_times,
        flag=message.flag,
    )
    try:
        await producer.send(copy)
    except ClientError as error:
        log.warning("republishing %s to the retry topic failed too: %s", message.msg_id, error)
        return False
    return True
