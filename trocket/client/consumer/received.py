"""A consumed message as listeners see it (RocketMQ's ``MessageExt``), decoded straight from a
pull answer's stored records.

Decoding is the consumer's hot path (a backlog drains at hundreds of thousands of messages a
second), so a record is unpacked with one ``struct`` call and the ids and host strings that
few listeners read are computed when first asked for.
"""

from __future__ import annotations

import socket
import struct
import zlib

import attrs

from kernel.errors import CorruptRecord
from kernel.model import PROPERTY_RETRY_TOPIC, SYSFLAG_COMPRESSED, MessagePropertiesView, MessageQueue
from kernel.record import HEADER, HEADER_SIZE, MAGIC_V1
from trocket.client.errors import ClientError

RETRY_PREFIX = "%RETRY%"
_PROPS_LEN = struct.Struct(">h")


@attrs.frozen
class ReceivedMessage(MessagePropertiesView):
    """One message pulled from a broker, body inflated, topic as the producer sent it.

    ``queue`` and ``queue_offset`` say where it was pulled from: for a retried message that is
    the group's ``%RETRY%`` queue while ``topic`` is the original one (as RocketMQ resets it).
    """

    topic: str
    body: bytes
    properties: dict[str, str]
    queue: MessageQueue
    queue_offset: int
    commit_log_offset: int
    reconsume_times: int
    born_timestamp: int
    store_timestamp: int
    born_address: tuple[bytes, int]
    store_address: tuple[bytes, int]
    """IPv4 bytes and port, as stored (see ``born_host`` / ``store_host``)."""
    flag: int = 0
    sys_flag: int = 0
    stored_size: int = 0

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


def decode_pulled(data: bytes, queue: MessageQueue) -> list[ReceivedMessage]:
    """The records of a PULL_MESSAGE answer as received messages.

    :raises CorruptRecord: a record's magic or size is wrong (the broker sent damage).
    :raises ClientError: a body flagged compressed does not inflate.
    """
    out = []
    at, end = 0, len(data)
    view = memoryview(data)
    while at < end:
        (size, magic, _crc, _queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts, born_ip,
         born_port, store_ts, store_ip, store_port, reconsume, _prepared,
         body_len) = HEADER.unpack_from(data, at)  # fmt: skip
        if magic != MAGIC_V1 or size < HEADER_SIZE or at + size > end:
            raise CorruptRecord(at, f"record of {size} bytes with magic {magic & 0xFFFFFFFF:#010x}")
        cursor = at + HEADER_SIZE
        body = data[cursor : cursor + body_len]
        cursor += body_len
        topic_len = data[cursor]
        topic = data[cursor + 1 : cursor + 1 + topic_len].decode()
        cursor += 1 + topic_len
        (props_len,) = _PROPS_LEN.unpack_from(data, cursor)
        properties: dict[str, str] = {}
        if props_len > 0:
            for part in str(view[cursor + 2 : cursor + 2 + props_len], "utf-8", "replace").split("\x02"):
                key, sep, value = part.partition("\x01")
                if sep:
                    properties[key] = value
        if sys_flag & SYSFLAG_COMPRESSED:
            try:
                body = zlib.decompress(body)
            except zlib.error as error:
                raise ClientError(
                    f"message at {queue.topic}:{queue.broker_name}:{queue.queue_id} offset {queue_offset} "
                    f"is flagged compressed but does not inflate: {error}"
                ) from None
        if topic.startswith(RETRY_PREFIX):
            topic = properties.get(PROPERTY_RETRY_TOPIC, topic)
        out.append(
            ReceivedMessage(
                topic,
                body,
                properties,
                queue,
                queue_offset,
                physical_offset,
                reconsume,
                born_ts,
                store_ts,
                (born_ip, born_port),
                (store_ip, store_port),
                flag,
                sys_flag,
                size,
            )  # fmt: skip
        )
        at += size
    return out
