"""Half messages: a prepared send rewritten to wait in the half topic, and the message a commit
or a give-up rebuilds from the stored half record (RocketMQ 4.x's formats, byte for byte).

A half message is the producer's message with topic ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, the
transaction type bits of its sysFlag cleared, and the real topic, queue and producer group in
``REAL_TOPIC``, ``REAL_QID`` and ``PGROUP``. ``TRAN_MSG=true`` stays, as RocketMQ keeps it, so
the record is recognisable as transactional wherever it is read.
"""

from __future__ import annotations

import time

from kernel.model import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_ROLLBACK,
    TRANSACTION_HALF_TOPIC,
    Message,
)
from wire.record import StoredMessage

HALF_TOPIC = TRANSACTION_HALF_TOPIC
HALF_QUEUE = 0
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
"""Op records: each body lists half-queue offsets that were committed or rolled back."""
OP_TAG = "d"
"""RocketMQ's ``REMOVETAG``: the tag of an op record that ends half messages."""
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
"""Where a half message goes after ``check_max`` unanswered check-backs."""
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
_TRANSACTION_BITS = SYSFLAG_TRANSACTION_ROLLBACK
"""Bits 2-3 of sysFlag: NOT (0), PREPARED (4), COMMIT (8), ROLLBACK (12)."""


class HalfMessageError(ValueError):
    """A record read as a half message is not one (or lacks what a half message carries)."""


def to_half(message: Message, producer_group: str) -> None:
    """Rewrite a prepared ``message`` in place to wait in the half queue."""
    properties = message.properties
    properties[PROPERTY_REAL_TOPIC] = message.topic
    properties[PROPERTY_REAL_QUEUE_ID] = str(message.queue_id)
    properties.setdefault(PROPERTY_TRANSACTION_PREPARED, "true")
    if producer_group:
        properties.setdefault(PROPERTY_PRODUCER_GROUP, producer_group)
    message.sys_flag &= ~_TRANSACTION_BITS
    message.topic = HALF_TOPIC
    message.queue_id = HALF_QUEUE


def real_destination(half: StoredMessage) -> tuple[str, int]:
    """The topic and queue the producer sent ``half`` to.

    :raises HalfMessageError: it is not a half record, or names no real topic or queue.
    """
    if half.topic != HALF_TOPIC:
        raise HalfMessageError(f"the record at {half.physical_offset} is in {half.topic!r}, not {HALF_TOPIC}")
    topic = half.properties.get(PROPERTY_REAL_TOPIC, "")
    queue = half.properties.get(PROPERTY_REAL_QUEUE_ID, "")
    if not topic or not queue.isdigit():
        raise HalfMessageError(
            f"the half record at {half.physical_offset} names no real topic and queue "
            f"({PROPERTY_REAL_TOPIC}={topic!r}, {PROPERTY_REAL_QUEUE_ID}={queue!r})"
        )
    return topic, int(queue)


def committed(half: StoredMessage) -> Message:
    """The message a commit makes visible: the producer's message on its real topic and queue,
    sysFlag COMMIT, ``preparedTransactionOffset`` = the half record's commit-log offset, without
    the half-only properties (RocketMQ's ``endMessageTransaction``)."""
    topic, queue = real_destination(half)
    properties = dict(half.properties)
    for name in (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_TRANSACTION_PREPARED):
        properties.pop(name, None)
    sys_flag = (half.sys_flag & ~_TRANSACTION_BITS) | SYSFLAG_TRANSACTION_COMMIT
    return _rebuilt(half, topic, queue, properties, sys_flag, half.physical_offset)


def for_check(half: StoredMessage, check_times: int) -> Message:
    """The message a check-back shows the producer: on its real topic and queue, as the
    producer sent it, with ``TRANSACTION_CHECK_TIMES`` counting this check."""
    topic, queue = real_destination(half)
    properties = dict(half.properties)
    properties[PROPERTY_CHECK_TIMES] = str(check_times)
    return _rebuilt(half, topic, queue, properties, half.sys_flag, half.prepared_transaction_offset)


def given_up(half: StoredMessage, check_times: int) -> Message:
    """The half message as kept in ``TRANS_CHECK_MAX_TIME_TOPIC`` queue 0 after its last check,
    for an operator to inspect: the real topic and queue still in its properties, ``TRAN_MSG``
    dropped (it is no longer a transaction anybody can end)."""
    properties = dict(half.properties)
    properties.pop(PROPERTY_TRANSACTION_PREPARED, None)
    properties[PROPERTY_CHECK_TIMES] = str(check_times)
    return _rebuilt(half, CHECK_MAX_TOPIC, 0, properties, half.sys_flag, half.physical_offset)


def _rebuilt(
    half: StoredMessage, topic: str, queue: int, properties: dict[str, str], sys_flag: int, prepared: int
) -> Message:
    """``half``'s body, flag, birth and reconsume count under a new address and properties."""
    return Message(
        topic,
        half.body,
        queue,
        half.flag,
        properties,
        sys_flag,
        half.born_timestamp,
        half.born_host,
        half.reconsume_times,
        prepared,
    )


def op_records(half_offsets: list[int], max_body: int, store_host: tuple[str, int]) -> list[Message]:
    """Op records for ``half_offsets``: comma-separated offsets (RocketMQ 5's batched form; a
    4.x record holds one), each body at most ``max_body`` bytes, tag ``d``."""
    out: list[Message] = []
    now = int(time.time() * 1000)
    parts: list[str] = []
    length = 0
    for offset in half_offsets:
        text = str(offset)
        if parts and length + 1 + len(text) > max_body:
            out.append(_op(parts, now, store_host))
            parts, length = [], 0
        length += len(text) + (1 if parts else 0)
        parts.append(text)
    if parts:
        out.append(_op(parts, now, store_host))
    return out


def _op(parts: list[str], now: int, store_host: tuple[str, int]) -> Message:
    return Message(
        OP_TOPIC,
        ",".join(parts).encode(),
        HALF_QUEUE,
        properties={PROPERTY_TAGS: OP_TAG},
        born_timestamp=now,
        born_host=store_host,
    )


def op_offsets(op: StoredMessage) -> list[int]:
    """The half offsets an op record ends; empty for a record that is not a removal (another
    tag) or whose body does not parse (such a record is skipped, never guessed at)."""
    if op.properties.get(PROPERTY_TAGS) != OP_TAG:
        return []
    try:
        return [int(part) for part in op.body.decode("ascii").split(",") if part.strip()]
    except (UnicodeDecodeError, ValueError):
        return []


def immunity_ms(half: StoredMessage, timeout_ms: int) -> int:
    """How long after its birth a half message is left alone: ``transactionTimeOut``, or the
    message's ``CHECK_IMMUNITY_TIME_IN_SECONDS`` when that is longer (RocketMQ's rule)."""
    text = half.properties.get(PROPERTY_CHECK_IMMUNITY)
    if text is None:
        return timeout_ms
    try:
        return max(timeout_ms, int(text) * 1000)
    except ValueError:
        return timeout_ms


def transaction_id(half: StoredMessage) -> str:
    """The transaction id RocketMQ uses: the client's unique message id."""
    return half.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "") or half.offset_msg_id
