"""A consumed message as listeners see it (RocketMQ's ``MessageExt``), read from the columns of
a pull answer.

Decoding is the consumer's hot path (a backlog drains at hundreds of thousands of messages a
second). A pull answer is decoded once, in bulk, by :class:`wire.record_columns.RecordColumns`
(the decoder the Spark reader uses too); a :class:`ReceivedMessage` is then a row number into
those columns, and each field is read from them when asked for: the properties text is split
into a dict on first use, ids and host strings likewise. A listener that only reads bodies
pays for bodies only.
"""

from __future__ import annotations

import socket
import struct
import zlib
from collections.abc import Container, Iterator, Sequence
from typing import Any, overload

import numpy as np

from kernel.model import (
    PROPERTY_RETRY_TOPIC,
    SYSFLAG_COMPRESSED,
    MessagePropertiesView,
    MessageQueue,
    decode_properties,
)
from trocket.client.errors import ClientError
from wire.record_columns import RecordColumns

RETRY_PREFIX = "%RETRY%"


class _Pulled:
    """One pull answer's columns, shared by its messages; plain-int lists made on first use."""

    __slots__ = ("records", "queue", "inflated", "_lists", "_topics")

    def __init__(self, records: RecordColumns, queue: MessageQueue) -> None:
        self.records = records
        self.queue = queue
        self._lists: dict[str, list[Any]] = {}
        self._topics: dict[bytes, str] = {}
        self.inflated: dict[int, bytes] = {}
        compressed = np.flatnonzero(records.header["sys_flag"].astype(np.int64) & SYSFLAG_COMPRESSED)
        for row in compressed.tolist():
            start, length = int(records.body_start[row]), int(records.body_len[row])
            try:
                self.inflated[row] = zlib.decompress(records.data[start : start + length])
            except zlib.error as error:
                offset = int(records.header["queue_offset"][row])
                raise ClientError(
                    f"message at {queue.topic}:{queue.broker_name}:{queue.queue_id} offset {offset} "
                    f"is flagged compressed but does not inflate: {error}"
                ) from None

    def topic(self, row: int) -> str:
        """Row ``row``'s topic as stored, decoded once per distinct name (on first use: a
        consumer that never asks pays nothing, 7 % of a 1 KiB backlog's client CPU)."""
        start = self.column("topic_start")[row]
        raw = self.records.data[start : start + self.column("topic_len")[row]]
        name = self._topics.get(raw)
        if name is None:
            name = self._topics[raw] = raw.decode("utf-8", "replace")
        return name

    def column(self, name: str) -> list[Any]:
        values = self._lists.get(name)
        if values is None:
            source = getattr(self.records, name) if name in _POSITIONS else self.records.header[name]
            values = self._lists[name] = source.tolist()
        return values


_POSITIONS = frozenset({"body_start", "body_len", "props_start", "props_len", "topic_start", "topic_len"})


class ReceivedMessage(MessagePropertiesView):
    """One message pulled from a broker, body inflated, topic as the producer sent it.

    ``queue`` and ``queue_offset`` say where it was pulled from: for a retried message that is
    the group's ``%RETRY%`` queue while ``topic`` is the original one (as RocketMQ resets it).
    Equal when pulled from the same place with the same content.
    """

    __slots__ = ("_pulled", "_row", "_properties", "_reconsume_times")

    def __init__(self, pulled: _Pulled, row: int) -> None:
        self._pulled = pulled
        self._row = row
        self._properties: dict[str, str] | None = None
        self._reconsume_times: int | None = None

    def with_reconsume_times(self, times: int) -> ReceivedMessage:
        """A copy that reports ``times`` reconsumes (a push consumer counting local retries)."""
        copy = ReceivedMessage(self._pulled, self._row)
        copy._properties = self._properties
        copy._reconsume_times = times
        return copy

    def _field(self, name: str) -> Any:
        return self._pulled.column(name)[self._row]

    @property
    def properties(self) -> dict[str, str]:  # type: ignore[override]
        if self._properties is None:
            start, length = self._field("props_start"), self._field("props_len")
            data = self._pulled.records.data
            self._properties = decode_properties(data[start : start + length]) if length > 0 else {}
        return self._properties

    @property
    def topic(self) -> str:
        topic = self._pulled.topic(self._row)
        if topic.startswith(RETRY_PREFIX):
            return self.properties.get(PROPERTY_RETRY_TOPIC, topic)
        return topic

    @property
    def body(self) -> bytes:
        inflated = self._pulled.inflated.get(self._row)
        if inflated is not None:
            return inflated
        start = self._field("body_start")
        return self._pulled.records.data[start : start + self._field("body_len")]

    @property
    def queue(self) -> MessageQueue:
        return self._pulled.queue

    @property
    def queue_offset(self) -> int:
        return int(self._field("queue_offset"))

    @property
    def commit_log_offset(self) -> int:
        return int(self._field("physical_offset"))

    @property
    def reconsume_times(self) -> int:
        if self._reconsume_times is not None:
            return self._reconsume_times
        return int(self._field("reconsume_times"))

    @property
    def born_timestamp(self) -> int:
        return int(self._field("born_timestamp"))

    @property
    def store_timestamp(self) -> int:
        return int(self._field("store_timestamp"))

    @property
    def born_address(self) -> tuple[bytes, int]:
        return _address(self._field("born_host"))

    @property
    def store_address(self) -> tuple[bytes, int]:
        """IPv4 bytes and port, as stored (see ``born_host`` / ``store_host``)."""
        return _address(self._field("store_host"))

    @property
    def flag(self) -> int:
        return int(self._field("flag"))

    @property
    def sys_flag(self) -> int:
        return int(self._field("sys_flag"))

    @property
    def stored_size(self) -> int:
        return int(self._field("size"))

    def _identity(self) -> tuple[Any, ...]:
        return (self.queue, self.queue_offset, self.commit_log_offset, self.topic, self.body, self.properties)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReceivedMessage):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash((self.queue, self.queue_offset, self.commit_log_offset))

    def __repr__(self) -> str:
        return (
            f"ReceivedMessage(topic={self.topic!r}, queue={self.queue!r}, queue_offset={self.queue_offset}, "
            f"body={self.body[:64]!r}, properties={self.properties!r})"
        )

    @property
    def msg_id(self) -> str:
        """The producer's unique id (``UNIQ_KEY``), else the broker's offset message id."""
        return self.unique_key or self.offset_msg_id

    @property
    def offset_msg_id(self) -> str:
        """The broker's id: store IPv4 + port + commit-log offset, 32 hex characters."""
        ip, port = self.store_address
        return (ip + struct.pack(">iq", port, self.commit_log_offset)).hex().upper()

    @property
    def born_host(self) -> str:
        return f"{socket.inet_ntoa(self.born_address[0])}:{self.born_address[1]}"

    @property
    def store_host(self) -> str:
        return f"{socket.inet_ntoa(self.store_address[0])}:{self.store_address[1]}"


class PulledMessages(Sequence[ReceivedMessage]):
    """A pull answer's messages, each :class:`ReceivedMessage` made when it is asked for.

    Why: a lite pull consumer holds up to ``pull_threshold_for_all`` pulled messages in its
    buffer; made at pull time, they outlived the collector's young generations there, and
    each full collection then walked them all (a 1 KiB backlog's client CPU 1.20 µs a message
    against 1.05 with the collector off). Made when :meth:`LitePullConsumer.poll` hands them
    out, they die young in the usual loop.
    """

    __slots__ = ("_pulled", "_rows")

    def __init__(self, pulled: _Pulled, rows: range | list[int]) -> None:
        self._pulled = pulled
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> ReceivedMessage: ...

    @overload
    def __getitem__(self, index: slice) -> list[ReceivedMessage]: ...

    def __getitem__(self, index: int | slice) -> ReceivedMessage | list[ReceivedMessage]:
        if isinstance(index, slice):
            return [ReceivedMessage(self._pulled, row) for row in self._rows[index]]
        return ReceivedMessage(self._pulled, self._rows[index])

    def __iter__(self) -> Iterator[ReceivedMessage]:
        pulled = self._pulled
        return (ReceivedMessage(pulled, row) for row in self._rows)

    def messages(self) -> list[ReceivedMessage]:
        """Every message, made now."""
        pulled = self._pulled
        return [ReceivedMessage(pulled, row) for row in self._rows]

    def tagged(self, tags: Container[str]) -> list[ReceivedMessage]:
        """The messages whose tag is in ``tags`` (a subscription's filter), made now: each
        kept one has its properties decoded already."""
        return [message for message in self if message.tags in tags]


def decode_pulled(data: bytes, queue: MessageQueue) -> PulledMessages:
    """The records of a PULL_MESSAGE answer as received messages (decoded in bulk; each
    message is made when asked for, and reads its fields from the shared columns when asked).

    :raises CorruptRecord: a record's magic, size or lengths are wrong (the broker sent damage).
    :raises ClientError: a body flagged compressed does not inflate.
    """
    records = RecordColumns.read(data)
    return PulledMessages(_Pulled(records, queue), range(len(records)))


def _address(packed: int) -> tuple[bytes, int]:
    return (packed >> 32).to_bytes(4, "big"), packed & 0xFFFFFFFF
