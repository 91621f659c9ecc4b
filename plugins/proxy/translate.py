"""Messages between RocketMQ 5's protobuf form and the broker's stored form.

Outgoing (a client's send): system properties become RocketMQ 4.x properties (``TAGS``,
``KEYS``, ``UNIQ_KEY`` = the client's message id, ``__SHARDINGKEY`` = the FIFO message group,
``TIMER_DELIVER_MS`` = the delivery timestamp, ``TRAN_MSG``/``PGROUP`` for a transactional
half message), so a 4.x client consuming the topic sees the same message. A GZIP body is
stored inflated: 4.x clients only know zlib.

Incoming (a receive): the stored record becomes a protobuf ``Message`` with its receipt
handle, delivery attempt (reconsume times + 1) and a CRC32 body digest, which the clients
check.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Mapping

import attrs
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from plugins.proxy.status import Code, ProxyProblem
from wire.grpc_v2 import definition_pb2 as pb
from wire.names import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    SYSFLAG_COMPRESSED,
    topic_problem,
)
from wire.record import StoredMessage

PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
"""RocketMQ 5's FIFO message group."""
PROPERTY_PRODUCER_GROUP = "PGROUP"
SYSFLAG_TRANSACTION_PREPARED = 0x4
_SEPARATORS = ("\x01", "\x02")
"""The 4.x property text's separators: never inside a key or value."""
SYSTEM_PROPERTIES = frozenset(
    {
        PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, PROPERTY_WAIT_STORE_MSG_OK,
        PROPERTY_TIMER_DELIVER_MS, PROPERTY_TRANSACTION_PREPARED, PROPERTY_SHARDING_KEY,
        PROPERTY_PRODUCER_GROUP, "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "MIN_OFFSET",
        "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG",
        "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME", "POP_CK", "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_OUT_MS",
        "TRAN_PREPARED_QUEUE_OFFSET", "CHECK_IMMUNITY_TIME_IN_SECONDS", "CLUSTER", "INNER_NUM",
        "INNER_BASE", "FIRST_POP_TIME", "__STARTDELIVERTIME",
    }
)  # fmt: skip
"""Property names a client may not set as user properties (RocketMQ's reserved keys)."""


@attrs.frozen
class Outgoing:
    """A client's message, ready for SEND_MESSAGE_V2."""

    topic: str
    body: bytes
    properties: dict[str, str]
    sys_flag: int
    born_timestamp: int
    message_type: pb.MessageType
    message_id: str
    message_group: str


def _has_separators(text: str) -> bool:
    return any(separator in text for separator in _SEPARATORS)


def _bad_text(text: str) -> bool:
    return not text.strip() or any(ord(ch) < 0x20 for ch in text)


def outgoing(message: pb.Message, *, max_body_size: int) -> Outgoing:
    """:raises ProxyProblem: with the status RocketMQ's proxy gives the same mistake."""
    topic = message.topic.name
    if problem := topic_problem(topic):
        raise ProxyProblem(Code.ILLEGAL_TOPIC, problem)
    system = message.system_properties
    if not system.message_id:
        raise ProxyProblem(Code.ILLEGAL_MESSAGE_ID, "message_id is empty")
    body = message.body
    if system.body_encoding == pb.GZIP:
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error) as error:
            raise ProxyProblem(Code.MESSAGE_CORRUPTED, f"the GZIP body does not inflate: {error}") from None
    if not body:
        raise ProxyProblem(Code.MESSAGE_BODY_EMPTY, "the message body is empty")
    if len(body) > max_body_size:
        raise ProxyProblem(
            Code.MESSAGE_BODY_TOO_LARGE,
            f"the body is {len(body)} bytes, more than the {max_body_size} allowed",
        )
    properties: dict[str, str] = {}
    for key, value in message.user_properties.items():
        if key in SYSTEM_PROPERTIES or _bad_text(key) or _has_separators(key) or _has_separators(value):
            raise ProxyProblem(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"user property {key!r} is reserved or holds control characters",
            )
        properties[key] = value
    if system.HasField("tag"):
        if _bad_text(system.tag) or "|" in system.tag:
            raise ProxyProblem(
                Code.ILLEGAL_MESSAGE_TAG, f"tag {system.tag!r} is blank, has '|' or control characters"
            )
        properties[PROPERTY_TAGS] = system.tag
    if system.keys:
        if any(_bad_text(key) or " " in key for key in system.keys):
            raise ProxyProblem(
                Code.ILLEGAL_MESSAGE_KEY, "a key is blank or holds spaces or control characters"
            )
        properties[PROPERTY_KEYS] = " ".join(system.keys)
    properties[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = system.message_id
    message_type = system.message_type or pb.NORMAL
    group = system.message_group if system.HasField("message_group") else ""
    if group:
        if _bad_text(group) or _has_separators(group) or len(group) > 64:
            raise ProxyProblem(Code.ILLEGAL_MESSAGE_GROUP, f"message group {group!r} is not usable")
        properties[PROPERTY_SHARDING_KEY] = group
    if system.HasField("delivery_timestamp"):
        try:
            properties[PROPERTY_TIMER_DELIVER_MS] = str(system.delivery_timestamp.ToMilliseconds())
        except ValueError as error:
            raise ProxyProblem(Code.ILLEGAL_DELIVERY_TIME, f"delivery_timestamp: {error}") from None
    sys_flag = 0
    if message_type == pb.TRANSACTION:
        properties[PROPERTY_TRANSACTION_PREPARED] = "true"
        properties[PROPERTY_PRODUCER_GROUP] = topic
        sys_flag |= SYSFLAG_TRANSACTION_PREPARED
    _check_type(message_type, group, system.HasField("delivery_timestamp"))
    return Outgoing(
        topic,
        body,
        properties,
        sys_flag,
        _born(system),
        message_type,
        system.message_id,
        group,
    )


def _born(system: pb.SystemProperties) -> int:
    try:
        return system.born_timestamp.ToMilliseconds() if system.HasField("born_timestamp") else 0
    except ValueError:
        return 0  # the broker stamps it


def _check_type(message_type: pb.MessageType, group: str, delayed: bool) -> None:
    """RocketMQ's rule: a message group makes a FIFO message, a delivery timestamp a DELAY one,
    and each type carries exactly its own."""
    why = None
    if message_type == pb.FIFO and (not group or delayed):
        why = "a FIFO message has a message group and no delivery timestamp"
    elif message_type == pb.DELAY and (not delayed or group):
        why = "a DELAY message has a delivery timestamp and no message group"
    elif message_type in (pb.NORMAL, pb.TRANSACTION) and (group or delayed):
        why = "a NORMAL or TRANSACTION message has neither a message group nor a delivery timestamp"
    if why:
        raise ProxyProblem(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, why)


def message_type_of(properties: Mapping[str, str]) -> pb.MessageType:
    if PROPERTY_SHARDING_KEY in properties:
        return pb.FIFO
    if PROPERTY_TIMER_DELIVER_MS in properties:
        return pb.DELAY
    if PROPERTY_PRODUCER_GROUP in properties and PROPERTY_TRANSACTION_PREPARED in properties:
        return pb.TRANSACTION
    return pb.NORMAL


def _timestamp(ms: int) -> Timestamp:
    stamp = Timestamp()
    stamp.FromMilliseconds(ms)
    return stamp


def _duration(ms: int) -> Duration:
    duration = Duration()
    duration.FromMilliseconds(ms)
    return duration


def incoming(
    stored: StoredMessage,
    *,
    topic: str,
    namespace: str,
    receipt_handle: str | None,
    invisible_ms: int | None,
    delivery_attempt: int,
) -> pb.Message:
    """The protobuf form of a delivered record (``topic``: the name the client subscribed)."""
    properties = stored.properties
    body = stored.body
    if stored.sys_flag & SYSFLAG_COMPRESSED:
        body = zlib.decompress(body)
    system = pb.SystemProperties(
        keys=properties.get(PROPERTY_KEYS, "").split(),
        message_id=properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or stored.offset_msg_id,
        body_digest=pb.Digest(type=pb.CRC32, checksum=format(zlib.crc32(body) & 0xFFFFFFFF, "08X")),
        body_encoding=pb.IDENTITY,
        message_type=message_type_of(properties),
        born_timestamp=_timestamp(stored.born_timestamp),
        born_host=stored.born_host[0],
        store_timestamp=_timestamp(stored.store_timestamp),
        store_host=f"{stored.store_host[0]}:{stored.store_host[1]}",
        queue_id=stored.queue_id,
        queue_offset=stored.queue_offset,
        delivery_attempt=delivery_attempt,
    )
    if PROPERTY_TAGS in properties:
        system.tag = properties[PROPERTY_TAGS]
    if PROPERTY_SHARDING_KEY in properties:
        system.message_group = properties[PROPERTY_SHARDING_KEY]
    if PROPERTY_TIMER_DELIVER_MS in properties:
        try:
            system.delivery_timestamp.CopyFrom(_timestamp(int(properties[PROPERTY_TIMER_DELIVER_MS])))
        except ValueError:
            pass
    if receipt_handle is not None:
        system.receipt_handle = receipt_handle
    if invisible_ms is not None:
        system.invisible_duration.CopyFrom(_duration(invisible_ms))
    user = {k: v for k, v in properties.items() if k not in SYSTEM_PROPERTIES}
    return pb.Message(
        topic=pb.Resource(name=topic, resource_namespace=namespace),
        user_properties=user,
        system_properties=system,
        body=body,
    )
