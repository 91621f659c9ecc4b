"""RocketMQ 5's POP receipt handle (``extraInfo``) and the offset-info headers of a POP answer.

A popped message is acknowledged with the handle it was delivered with. RocketMQ writes it as
space-separated fields::

    ckQueueOffset popTime invisibleTime reviveQid topicType brokerName queueId [queueOffset]

``ckQueueOffset`` is where the pop that delivered the message started reading its queue (the
checkpoint's key together with ``popTime``), ``topicType`` says whether it came from the
topic itself (0) or the group's POP retry topic (1, ``%RETRY%<group>_<topic>``; 2 for the
``+`` spelling of RocketMQ's ``enableRetryTopicV2``), and ``reviveQid`` 999 marks an orderly
(FIFO) pop. The broker, the gRPC proxy and the SDK all read and write it here.

A POP answer does not carry one handle per message: its header lists, per queue read,
``startOffsetInfo`` (``type queueId startOffset``), ``msgOffsetInfo`` (``type queueId
o1,o2,...``) and for orderly pops ``orderCountInfo``, entries separated by ``;``. A client
rebuilds each message's handle from them; messages of a retry topic carry theirs in the
``POP_CK`` property instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from wire.names import RETRY_PREFIX

ORDER_REVIVE_QUEUE = 999
"""RocketMQ's ``POP_ORDER_REVIVE_QUEUE``: the ``reviveQid`` of an orderly pop's handle."""
NORMAL, RETRY_V1, RETRY_V2 = 0, 1, 2
"""``topicType`` values."""
PROPERTY_POP_CK = "POP_CK"
"""The handle of a message popped from a retry topic, in the message's properties."""


class BadReceipt(ValueError):
    """A receipt handle that is not RocketMQ's ``extraInfo`` form (the text says what is wrong)."""


def retry_topic(group: str, topic: str) -> str:
    """The POP retry topic of ``group`` for ``topic`` (RocketMQ 5's default, v1 spelling)."""
    return f"{RETRY_PREFIX}{group}_{topic}"


def topic_type(topic: str) -> int:
    """The ``topicType`` of a topic a message was popped from."""
    if not topic.startswith(RETRY_PREFIX):
        return NORMAL
    return RETRY_V2 if "+" in topic else RETRY_V1


def real_topic(topic: str, group: str, kind: int) -> str:
    """The topic a handle's message lives in: ``topic`` itself, or its POP retry topic."""
    if kind == NORMAL or topic.startswith(RETRY_PREFIX):
        return topic
    if kind == RETRY_V2:
        return f"{RETRY_PREFIX}{group}+{topic}"
    return retry_topic(group, topic)


@attrs.frozen
class ReceiptHandle:
    """One message's ``extraInfo``."""

    ck_queue_offset: int
    pop_time: int
    """Milliseconds since the epoch when the pop (or the last invisibility change) happened."""
    invisible_time: int
    """Milliseconds the message stays invisible after ``pop_time``."""
    revive_qid: int
    topic_type: int
    broker_name: str
    queue_id: int
    queue_offset: int = -1
    """-1 when the handle names no message offset (RocketMQ's seven-field form)."""

    @property
    def next_visible_time(self) -> int:
        return self.pop_time + self.invisible_time

    @property
    def orderly(self) -> bool:
        return self.revive_qid == ORDER_REVIVE_QUEUE

    def expired(self, now_ms: int) -> bool:
        """Whether the message has become visible again (acking it is then too late)."""
        return self.next_visible_time <= now_ms

    def format(self) -> str:
        fields = [
            self.ck_queue_offset,
            self.pop_time,
            self.invisible_time,
            self.revive_qid,
            self.topic_type,
            self.broker_name,
            self.queue_id,
        ]
        if self.queue_offset >= 0:
            fields.append(self.queue_offset)
        return " ".join(str(field) for field in fields)

    @classmethod
    def parse(cls, text: str) -> ReceiptHandle:
        """:raises BadReceipt: fewer than seven fields, or a number that is not one."""
        fields = text.split(" ")
        if len(fields) < 7:
            raise BadReceipt(f"receipt handle {text!r} has {len(fields)} fields, expected 7 or more")
        try:
            return cls(
                int(fields[0]),
                int(fields[1]),
                int(fields[2]),
                int(fields[3]),
                int(fields[4]),
                fields[5],
                int(fields[6]),
                int(fields[7]) if len(fields) > 7 else -1,
            )
        except ValueError:
            raise BadReceipt(f"receipt handle {text!r} has a field that is not a number") from None


@attrs.frozen
class QueueRead:
    """What one pop read from one queue, for the answer's offset-info headers."""

    topic: str
    queue_id: int
    start_offset: int
    offsets: tuple[int, ...]
    """Queue offsets of the messages delivered, in order."""
    order_count: int = 0
    """Orderly pops: how many times these messages were delivered before."""


def start_offset_info(reads: Iterable[QueueRead]) -> str:
    return ";".join(f"{topic_type(r.topic)} {r.queue_id} {r.start_offset}" for r in reads)


def msg_offset_info(reads: Iterable[QueueRead]) -> str:
    return ";".join(
        f"{topic_type(r.topic)} {r.queue_id} {','.join(str(o) for o in r.offsets)}" for r in reads
    )


def order_count_info(reads: Iterable[QueueRead]) -> str:
    return ";".join(f"{topic_type(r.topic)} {r.queue_id} {r.order_count}" for r in reads)


def parse_offset_info(text: str) -> dict[tuple[int, int], list[int]]:
    """``startOffsetInfo``/``msgOffsetInfo``/``orderCountInfo`` as {(topicType, queueId): numbers}.

    :raises BadReceipt: an entry is not three space-separated fields of numbers.
    """
    out: dict[tuple[int, int], list[int]] = {}
    if not text:
        return out
    for entry in text.split(";"):
        fields = entry.split(" ")
        if len(fields) != 3:
            raise BadReceipt(f"offset info entry {entry!r} is not 'type queueId offsets'")
        try:
            out[(int(fields[0]), int(fields[1]))] = [int(v) for v in fields[2].split(",")]
        except ValueError:
            raise BadReceipt(f"offset info entry {entry!r} has a field that is not a number") from None
    return out


def receipt_handles(
    header: Mapping[str, str], messages: Sequence[tuple[str, int, int, Mapping[str, str]]], broker_name: str
) -> list[ReceiptHandle]:
    """The handle of each message of a POP answer, as a RocketMQ client rebuilds it.

    :param header: the answer's header fields (``popTime``, ``invisibleTime``, ``reviveQid``,
        ``startOffsetInfo``).
    :param messages: per message, as decoded: topic, queue id, queue offset, properties.
    :param broker_name: the broker popped from.
    :raises BadReceipt: the header does not name where a message's pop started.
    """
    pop_time, invisible = int(header["popTime"]), int(header["invisibleTime"])
    revive_qid = int(header["reviveQid"])
    starts = parse_offset_info(header.get("startOffsetInfo", ""))
    out = []
    for topic, queue_id, queue_offset, properties in messages:
        carried = properties.get(PROPERTY_POP_CK)
        if carried:
            out.append(ReceiptHandle.parse(carried))
            continue
        start = starts.get((topic_type(topic), queue_id))
        if not start:
            raise BadReceipt(f"the POP answer names no start offset for {topic} queue {queue_id}")
        out.append(
            ReceiptHandle(
                start[0],
                pop_time,
                invisible,
                revive_qid,
                topic_type(topic),
                broker_name,
                queue_id,
                queue_offset,
            )
        )
    return out
