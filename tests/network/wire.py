"""Requests as RocketMQ clients send them, for broker tests."""

from __future__ import annotations

import struct
from collections import Counter

from kernel.model import encode_properties
from wire import record
from wire.remoting import RemotingClient, RemotingCommand, RequestCode


def send_request(
    topic: str,
    body: bytes,
    *,
    queue_id: int = 0,
    tags: str | None = None,
    keys: str | None = None,
    properties: dict[str, str] | None = None,
    code: int = RequestCode.SEND_MESSAGE,
    group: str = "PG",
) -> RemotingCommand:
    props = dict(properties or {})
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = keys
    header = {
        "producerGroup": group,
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": queue_id,
        "sysFlag": 0,
        "bornTimestamp": 1,
        "flag": 0,
        "properties": encode_properties(props).decode(),
        "reconsumeTimes": 0,
        "unitMode": False,
        "batch": False,
    }
    if code == RequestCode.SEND_MESSAGE_V2:
        letters = dict(zip("abcdefghijklm", header, strict=False))
        header = {letter: header[name] for letter, name in letters.items()}
    return RemotingCommand.request(code, header, body)


def batch_body(entries: list[tuple[bytes, dict[str, str]]]) -> bytes:
    out = bytearray()
    for body, props in entries:
        encoded = encode_properties(props)
        out += struct.pack(">iiiii", 20 + len(body) + 2 + len(encoded), 0, 0, 0, len(body))
        out += body + struct.pack(">h", len(encoded)) + encoded
    return bytes(out)


def pull_request(
    topic: str,
    queue_id: int,
    offset: int,
    *,
    group: str = "CG",
    subscription: str = "*",
    suspend_ms: int = 0,
    sys_flag: int = 4,
    max_msgs: int = 32,
    commit_offset: int = -1,
) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": group,
            "topic": topic,
            "queueId": queue_id,
            "queueOffset": offset,
            "maxMsgNums": max_msgs,
            "sysFlag": sys_flag | (2 if suspend_ms else 0),
            "commitOffset": commit_offset,
            "suspendTimeoutMillis": suspend_ms,
            "subscription": subscription,
            "subVersion": 1,
        },
    )


async def pulled_bodies(client: RemotingClient, broker: str, topic: str, queues: int) -> Counter[bytes]:
    """Every body of ``topic``'s first ``queues`` queues on ``broker``, pulled from offset 0
    (a body stored twice counts twice)."""
    seen: Counter[bytes] = Counter()
    for queue in range(queues):
        offset = 0
        while True:
            response = await client.invoke(broker, pull_request(topic, queue, offset, max_msgs=32), 10)
            if response.code != 0:
                break
            messages = record.decode_records(response.body)
            seen.update(m.body for m in messages)
            offset = messages[-1].queue_offset + 1
    return seen
