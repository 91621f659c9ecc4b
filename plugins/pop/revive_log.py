"""The revive log: POP's in-flight state as records of the topic ``rmq_sys_REVIVE_LOG_<cluster>``.

Every change to what is in flight is a record put through the broker's put pipeline before it
is answered, so it is flushed and replicated like any message, and a restarted broker or a
promoted slave rebuilds the same table by reading the log (:meth:`PopService.rebuild`).
Bodies are JSON with RocketMQ's short keys (``PopCheckPoint``, ``AckMsg``, ``BatchAckMsg``),
the tag names the kind:

* ``ck``: a pop of one queue: ``so`` start offset, ``pt`` pop time, ``it`` invisible time,
  ``n`` count, ``d`` offset differences from ``so``, ``q`` queue, ``t`` topic, ``c`` group,
  ``bn`` broker name;
* ``ack`` / ``bAck``: offsets of one checkpoint struck off (``ao`` one offset, ``aol`` a
  list), by a client's ack or because the revive re-delivered them;
* ``oAck`` (Trocket's own): an orderly queue's committed offset after an ack (``co``).

Unlike RocketMQ, the records are not timer messages: the deadline heap is in memory
(:mod:`plugins.pop.inflight`) and the log is only read at start.
"""

from __future__ import annotations

import time
from typing import Any

import attrs
import orjson

from kernel.model import Message
from plugins.pop.inflight import Checkpoint, CheckpointKey
from wire.names import PROPERTY_TAGS, PROPERTY_WAIT_STORE_MSG_OK
from wire.record import StoredMessage

REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
"""The group whose committed offsets in the revive topic say where replaying starts."""
CK_TAG, ACK_TAG, BATCH_ACK_TAG, ORDER_ACK_TAG = "ck", "ack", "bAck", "oAck"


def revive_topic(cluster_name: str) -> str:
    return REVIVE_TOPIC_PREFIX + cluster_name


def revive_queue_of(group: str, queue_count: int) -> int:
    """The revive queue of a group: fixed, so its checkpoints and acks replay in order."""
    return _stable_hash(group) % queue_count


def _stable_hash(text: str) -> int:
    value = 0
    for byte in text.encode():
        value = (value * 31 + byte) & 0x7FFFFFFF
    return value


@attrs.frozen
class AckRecord:
    group: str
    topic: str
    queue_id: int
    start_offset: int
    pop_time: int
    offsets: tuple[int, ...]

    @property
    def key(self) -> CheckpointKey:
        return (self.group, self.topic, self.queue_id, self.start_offset, self.pop_time)


@attrs.frozen
class OrderAckRecord:
    group: str
    topic: str
    queue_id: int
    committed: int


ReviveRecord = Checkpoint | AckRecord | OrderAckRecord


class UnreadableRecord(ValueError):
    """A revive-log record that is not one of ours (named in the text; skipped at replay)."""


def _message(topic: str, queue_id: int, tag: str, body: dict[str, Any]) -> Message:
    return Message(
        topic,
        orjson.dumps(body),
        queue_id,
        properties={PROPERTY_TAGS: tag, PROPERTY_WAIT_STORE_MSG_OK: "true"},
        born_timestamp=int(time.time() * 1000),
    )


def checkpoint_message(topic: str, checkpoint: Checkpoint, broker_name: str) -> Message:
    start = checkpoint.start_offset
    return _message(
        topic,
        checkpoint.revive_qid,
        CK_TAG,
        {
            "so": start,
            "pt": checkpoint.pop_time,
            "it": checkpoint.invisible_time,
            "n": len(checkpoint.offsets),
            "d": [offset - start for offset in checkpoint.offsets],
            "q": checkpoint.queue_id,
            "t": checkpoint.topic,
            "c": checkpoint.group,
            "bn": broker_name,
        },
    )


def ack_message(topic: str, revive_qid: int, ack: AckRecord, broker_name: str) -> Message:
    body: dict[str, Any] = {
        "so": ack.start_offset,
        "pt": ack.pop_time,
        "q": ack.queue_id,
        "t": ack.topic,
        "c": ack.group,
        "bn": broker_name,
    }
    if len(ack.offsets) == 1:
        body["ao"] = ack.offsets[0]
        return _message(topic, revive_qid, ACK_TAG, body)
    body["ao"] = -1
    body["aol"] = list(ack.offsets)
    return _message(topic, revive_qid, BATCH_ACK_TAG, body)


def order_ack_message(topic: str, revive_qid: int, ack: OrderAckRecord) -> Message:
    body = {"c": ack.group, "t": ack.topic, "q": ack.queue_id, "co": ack.committed}
    return _message(topic, revive_qid, ORDER_ACK_TAG, body)


def decode(stored: StoredMessage) -> ReviveRecord:
    """The record a stored revive-log message holds.

    :raises UnreadableRecord: an unknown tag, a body that is not JSON, a missing key.
    """
    tag = stored.properties.get(PROPERTY_TAGS, "")
    try:
        body = orjson.loads(stored.body)
        if tag == CK_TAG:
            start = int(body["so"])
            return Checkpoint(
                group=str(body["c"]),
                topic=str(body["t"]),
                queue_id=int(body["q"]),
                start_offset=start,
                pop_time=int(body["pt"]),
                invisible_time=int(body["it"]),
                revive_qid=stored.queue_id,
                offsets=tuple(start + int(diff) for diff in body["d"]),
                revive_offset=stored.queue_offset,
            )
        if tag in (ACK_TAG, BATCH_ACK_TAG):
            offsets = body.get("aol") or [body["ao"]]
            return AckRecord(
                str(body["c"]),
                str(body["t"]),
                int(body["q"]),
                int(body["so"]),
                int(body["pt"]),
                tuple(int(offset) for offset in offsets),
            )
        if tag == ORDER_ACK_TAG:
            return OrderAckRecord(str(body["c"]), str(body["t"]), int(body["q"]), int(body["co"]))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise UnreadableRecord(
            f"revive record at queue offset {stored.queue_offset} ({tag!r}): {error!r}"
        ) from None
    raise UnreadableRecord(f"revive record at queue offset {stored.queue_offset} has tag {tag!r}")
