"""RocketMQ 4.x message-trace data: the text a traced client writes to ``RMQ_SYS_TRACE_TOPIC``
(or a custom trace topic), and what ``queryMsgTraceById`` reads back.

A trace message's body holds one or more records, each ended by ``FIELD_SPLITOR`` (``\\x02``),
their fields separated by ``CONTENT_SPLITOR`` (``\\x01``); the message's keys are the traced
messages' ids and keys, so the broker's key index finds the traces of a message id. Four record
types, with RocketMQ's field order:

* ``Pub``: type, timestamp, region, producer group, topic, msg id, tags, keys, store host, body
  length, cost ms, message type (ordinal), offset msg id, success; older clients wrote 13 fields
  (no offset msg id), newer ones may add the client host as a 15th;
* ``SubBefore``: type, timestamp, region, consumer group, request id, msg id, retry times, keys;
* ``SubAfter``: type, request id, msg id, cost ms, success, keys, then (newer) the consume
  return code and the timestamp;
* ``EndTransaction``: type, timestamp, region, group, topic, msg id, tags, keys, store host,
  message type, transaction id, transaction state, from-check.

Decoding accepts any client's records, skips types it does not know, and never raises for a
short or malformed record (it is skipped): trace data is written by many clients.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import attrs

CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TRACE_PRODUCER_GROUP_PREFIX = "_INNER_TRACE_PRODUCER"


class TraceType(enum.Enum):
    PUB = "Pub"
    SUB_BEFORE = "SubBefore"
    SUB_AFTER = "SubAfter"
    END_TRANSACTION = "EndTransaction"


class MessageType(enum.IntEnum):
    """RocketMQ's ``MessageType`` ordinals, as trace records carry them."""

    NORMAL = 0
    TRANS_HALF = 1
    TRANS_COMMIT = 2
    DELAY = 3
    ORDER = 4


@attrs.frozen
class TraceRecord:
    """One record of any type; fields a type does not carry keep their defaults."""

    type: TraceType
    msg_id: str
    timestamp: int = 0
    region: str = ""
    group: str = ""
    topic: str = ""
    tags: str = ""
    keys: str = ""
    store_host: str = ""
    body_length: int = 0
    cost_ms: int = 0
    message_type: int = MessageType.NORMAL
    offset_msg_id: str = ""
    success: bool = True
    client_host: str = ""
    request_id: str = ""
    retry_times: int = 0
    context_code: int = 0
    transaction_id: str = ""
    transaction_state: str = ""
    from_check: bool = False


def _bool(text: str) -> bool:
    return text.strip().lower() == "true"


def pub_text(
    timestamp: int,
    region: str,
    group: str,
    topic: str,
    msg_id: str,
    tags: str,
    keys: str,
    store_host: str,
    body_length: int,
    cost_ms: int,
    message_type: int,
    offset_msg_id: str,
    success: bool,
) -> str:
    """One Pub record, separators included (a traced client builds one per message sent, so
    this is one f-string, not a list of fields)."""
    return (
        f"Pub\x01{timestamp}\x01{region}\x01{group}\x01{topic}\x01{msg_id}\x01{tags}\x01{keys}\x01"
        f"{store_host}\x01{body_length}\x01{cost_ms}\x01{message_type}\x01{offset_msg_id}\x01"
        f"{'true' if success else 'false'}\x02"
    )


def sub_before_text(
    timestamp: int, region: str, group: str, request_id: str, msg_id: str, retry_times: int, keys: str
) -> str:
    return (
        f"SubBefore\x01{timestamp}\x01{region}\x01{group}\x01{request_id}\x01{msg_id}\x01"
        f"{retry_times}\x01{keys}\x02"
    )


def sub_after_text(
    request_id: str, msg_id: str, cost_ms: int, success: bool, keys: str, context_code: int, timestamp: int
) -> str:
    return (
        f"SubAfter\x01{request_id}\x01{msg_id}\x01{cost_ms}\x01{'true' if success else 'false'}\x01"
        f"{keys}\x01{context_code}\x01{timestamp}\x02"
    )


def end_transaction_text(
    timestamp: int,
    region: str,
    group: str,
    topic: str,
    msg_id: str,
    tags: str,
    keys: str,
    store_host: str,
    message_type: int,
    transaction_id: str,
    transaction_state: str,
    from_check: bool,
) -> str:
    return (
        f"EndTransaction\x01{timestamp}\x01{region}\x01{group}\x01{topic}\x01{msg_id}\x01{tags}\x01"
        f"{keys}\x01{store_host}\x01{message_type}\x01{transaction_id}\x01{transaction_state}\x01"
        f"{'true' if from_check else 'false'}\x02"
    )


def record_text(r: TraceRecord) -> str:
    """``r`` as the text of one record, separators included."""
    if r.type is TraceType.PUB:
        return pub_text(
            r.timestamp, r.region, r.group, r.topic, r.msg_id, r.tags, r.keys, r.store_host,
            r.body_length, r.cost_ms, int(r.message_type), r.offset_msg_id, r.success,
        )  # fmt: skip
    if r.type is TraceType.SUB_BEFORE:
        return sub_before_text(r.timestamp, r.region, r.group, r.request_id, r.msg_id, r.retry_times, r.keys)
    if r.type is TraceType.SUB_AFTER:
        return sub_after_text(
            r.request_id, r.msg_id, r.cost_ms, r.success, r.keys, r.context_code, r.timestamp
        )
    return end_transaction_text(
        r.timestamp, r.region, r.group, r.topic, r.msg_id, r.tags, r.keys, r.store_host,
        int(r.message_type), r.transaction_id, r.transaction_state, r.from_check,
    )  # fmt: skip


def encode(records: Iterable[TraceRecord]) -> tuple[str, list[str]]:
    """The body text of a trace message holding ``records``, and its keys (each record's msg id
    and keys, once each, in order: RocketMQ keys a trace message by both, so the broker's index
    finds it by either)."""
    texts = []
    keys: dict[str, None] = {}
    for r in records:
        texts.append(record_text(r))
        if r.msg_id:
            keys[r.msg_id] = None
        if r.keys:
            keys[r.keys] = None
    return "".join(texts), list(keys)


def decode(text: str) -> list[TraceRecord]:
    """Every record of a trace message body this module can read, in order."""
    out = []
    for chunk in text.split(FIELD_SPLITOR):
        if not chunk:
            continue
        try:
            record = _decode_one(chunk.split(CONTENT_SPLITOR))
        except (ValueError, IndexError):
            continue
        if record is not None:
            out.append(record)
    return out


def _decode_one(f: list[str]) -> TraceRecord | None:
    kind = f[0]
    if kind == TraceType.PUB.value:
        offset_msg_id, success, client_host = "", _bool(f[12]) if len(f) == 13 else True, ""
        if len(f) >= 14:
            offset_msg_id, success = f[12], _bool(f[13])
        if len(f) >= 15:
            client_host = f[14]
        return TraceRecord(
            TraceType.PUB,
            f[5],
            int(f[1]),
            f[2],
            f[3],
            f[4],
            f[6],
            f[7],
            f[8],
            int(f[9]),
            int(f[10]),
            int(f[11]),
            offset_msg_id,
            success,
            client_host,
        )
    if kind == TraceType.SUB_BEFORE.value:
        return TraceRecord(
            TraceType.SUB_BEFORE,
            f[5],
            int(f[1]),
            f[2],
            f[3],
            keys=f[7],
            request_id=f[4],
            retry_times=int(f[6]),
        )
    if kind == TraceType.SUB_AFTER.value:
        return TraceRecord(
            TraceType.SUB_AFTER,
            f[2],
            int(f[7]) if len(f) >= 8 else 0,
            keys=f[5],
            cost_ms=int(f[3]),
            success=_bool(f[4]),
            request_id=f[1],
            context_code=int(f[6]) if len(f) >= 7 else 0,
        )
    if kind == TraceType.END_TRANSACTION.value:
        return TraceRecord(
            TraceType.END_TRANSACTION,
            f[5],
            int(f[1]),
            f[2],
            f[3],
            f[4],
            f[6],
            f[7],
            f[8],
            message_type=int(f[9]),
            transaction_id=f[10],
            transaction_state=f[11],
            from_check=_bool(f[12]),
        )
    return None
