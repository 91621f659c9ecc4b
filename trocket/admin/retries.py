"""Admin views of consumer retries: a group's dead letters, resending one, and the scheduler's
progress. Built on :class:`AdminClient` requests any RocketMQ broker answers (route, topic
stats, pull, view by id, send, runtime info); the timer figures are Trocket's own."""

from __future__ import annotations

from typing import Any

from kernel.model import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TIMER_OUT_MS,
)
from trocket.admin.client import TOOLS_PRODUCER, AdminClient, AdminError
from trocket.client import ClientError, Message, Producer
from wire.record import StoredMessage

DLQ_PREFIX = "%DLQ%"
PULL_BATCH = 32
_NOT_RESENT = (PROPERTY_RETRY_TOPIC, PROPERTY_DELAY_TIME_LEVEL, PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID,
               PROPERTY_TIMER_OUT_MS)  # fmt: skip
"""Retry bookkeeping a resent message must not carry: it starts over in its original topic."""


async def dlq_messages(client: AdminClient, group: str, *, max_num: int = 64) -> list[StoredMessage]:
    """Up to ``max_num`` messages in ``%DLQ%<group>``, oldest first per queue."""
    topic = DLQ_PREFIX + group
    try:
        queues = await client.topic_status(topic)
    except AdminError as error:
        raise AdminError(f"group {group!r} has no dead-letter queue yet ({error})") from None
    route = await client.route(topic)
    masters = {b["brokerName"]: b["brokerAddrs"].get("0") for b in route["brokerDatas"]}
    found: list[StoredMessage] = []
    for queue in queues:
        address = masters.get(queue["brokerName"])
        offset, end = queue["minOffset"], queue["maxOffset"]
        while address and offset < end and len(found) < max_num:
            messages, next_offset = await client.pull(
                address, topic, queue["queueId"], offset, min(PULL_BATCH, max_num - len(found))
            )
            found += messages
            if next_offset <= offset:
                break
            offset = next_offset
    return found


async def resend_dlq_message(client: AdminClient, group: str, msg_id: str) -> dict[str, Any]:
    """Send the dead letter ``msg_id`` (its offset message id, as ``queryDlqMsg`` prints it)
    back to its original topic with a producer, reconsume times reset and ``UNIQ_KEY`` kept.
    The dead letter itself stays."""
    dead = await client.view_message(msg_id)
    if dead.topic != DLQ_PREFIX + group:
        raise AdminError(f"message {msg_id} is in topic {dead.topic!r}, not {DLQ_PREFIX + group!r}")
    original = dead.properties.get(PROPERTY_RETRY_TOPIC)
    if not original:
        raise AdminError(f"message {msg_id} does not say its original topic (no {PROPERTY_RETRY_TOPIC})")
    properties = {k: v for k, v in dead.properties.items() if k not in _NOT_RESENT}
    copy = Message(original, dead.payload, properties=properties, flag=dead.flag)
    try:
        async with Producer(
            TOOLS_PRODUCER,
            client.namesrv_addrs,
            send_timeout=client.timeout,
            credentials=client.remoting.credentials,  # the admin's keys and TLS, not only the environment's
            tls=client.remoting.tls,
        ) as producer:
            result = await producer.send(copy)
    except ClientError as error:
        raise AdminError(f"resending {msg_id} to {original!r} failed: {error}") from None
    return {
        "msgId": msg_id,
        "topic": original,
        "brokerName": result.queue.broker_name,
        "queueId": result.queue.queue_id,
        "newOffsetMsgId": result.offset_msg_id,
    }


async def schedule_progress(client: AdminClient, broker_addrs: list[str]) -> list[dict[str, Any]]:
    """One row per delay level and one for the timer, per broker, from its runtime info."""
    rows: list[dict[str, Any]] = []
    for address in broker_addrs:
        table = await client.broker_runtime_info(address)
        if "messageDelayLevel" not in table:
            raise AdminError(f"broker {address} does not schedule delayed messages (no retry_dlq plugin)")
        delays = table["messageDelayLevel"].split()
        for level, delay in enumerate(delays, start=1):
            next_offset, max_offset = (int(x) for x in table[f"scheduleMessageOffset_{level}"].split(","))
            rows.append(
                {
                    "broker": address,
                    "level": str(level),
                    "delay": delay,
                    "nextOffset": next_offset,
                    "maxOffset": max_offset,
                    "pending": max_offset - next_offset,
                }
            )
        if "timerPending" in table:
            rows.append(
                {
                    "broker": address,
                    "level": "timer",
                    "delay": "any",
                    "nextOffset": "",
                    "maxOffset": "",
                    "pending": int(table["timerPending"]),
                }
            )
    return rows
