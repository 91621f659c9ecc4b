"""RocketMQ 4.x stored message unit (magic v1): encode, verify and decode.

The same bytes are the commit-log record on disk and an element of a PULL_MESSAGE response
body, so stores keep them as they are and the network layer ships them unchanged.

Layout (big-endian, IPv4 hosts)::

    0 totalSize i | 4 magic i | 8 bodyCRC i | 12 queueId i | 16 flag i | 20 queueOffset q
    28 physicalOffset q | 36 sysFlag i | 40 bornTimestamp q | 48 bornHost 4s+i
    56 storeTimestamp q | 64 storeHost 4s+i | 72 reconsumeTimes i | 76 preparedTxOffset q
    84 bodyLen i | 88 body | topicLen b | topic | propertiesLen h | properties

A commit-log file ends with a BLANK record (length + blank magic) when the next record does
not fit. The body CRC is ``zlib.crc32(body) & 0x7FFFFFFF`` as RocketMQ computes it.
"""

from __future__ import annotations

import functools
import socket
import struct
import zlib
from collections.abc import Mapping, Sequence

import attrs
import numpy as np

from wire.dispatch_record import DispatchRecord
from wire.errors import CorruptRecord
from wire.message import Message, MessagePropertiesView, decode_properties, encode_properties, tags_code
from wire.names import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_COMPRESSED,
    SYSFLAG_STOREHOST_V6,
    TOPIC_MAX_LENGTH,
)
from wire.record_layout import HEADER, HEADER_SIZE, MAGIC_BLANK, MAGIC_V1, MAGIC_V2, MIN_RECORD_SIZE
from wire.wire_batch import WireBatch

__all__ = ["HEADER", "HEADER_SIZE", "MAGIC_BLANK", "MAGIC_V1", "MAGIC_V2", "MIN_RECORD_SIZE"]

BLANK = struct.Struct(">ii")
_SIZE_MAGIC = struct.Struct(">ii")
SIZE_MAGIC = _SIZE_MAGIC
"""TOTALSIZE and MAGICCODE, the first 8 bytes of every record (walk a log by sizes with it)."""
_TOPIC_LEN = struct.Struct(">b")
_PROPS_LEN = struct.Struct(">h")
_STORE_TS = struct.Struct(">q")
MAX_TOPIC_LENGTH = TOPIC_MAX_LENGTH
"""The v1 record's topic length is one signed byte: RocketMQ's topic limit is this."""


def body_crc(body: bytes | memoryview) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def host_bytes(host: str) -> bytes:
    """IPv4 address bytes (RocketMQ 4.x clients only decode 8-byte hosts)."""
    try:
        return socket.inet_aton(host)
    except OSError:
        return socket.inet_aton(socket.gethostbyname(host))


@attrs.define(eq=False)
class RecordEncoder:
    """Batch encoder for one store host, with the per-topic and per-host byte strings cached
    (the put path encodes every message once, with no intermediate objects)."""

    store_host: tuple[str, int]
    _store_ip: bytes = attrs.field(init=False)
    _topics: dict[str, bytes] = attrs.field(factory=dict, init=False)
    """Topic as stored (length byte + UTF-8) per topic name."""
    _hosts: dict[str, bytes] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        self._store_ip = host_bytes(self.store_host[0])

    def encode_run(
        self,
        messages: Sequence[Message],
        physical_offset: int,
        queue_offsets: Mapping[tuple[str, int], int],
        store_timestamp: int,
    ) -> EncodedRun:
        """Encode ``messages`` as consecutive records from ``physical_offset`` in one pass.

        Queue offsets continue from ``queue_offsets`` (not modified; the result carries the
        new values). This is the put path's hot loop: validation, property encoding, CRC and
        header packing are fused so each message is touched once, with no intermediate objects.

        :raises ValueError: topic over 127 bytes, properties over 32767 bytes, or a NUL
            character in either (stored records use NUL-free text to detect torn writes).
        """
        if isinstance(messages, WireBatch):
            return self._encode_wire(messages, physical_offset, queue_offsets, store_timestamp)
        parts: list[bytes] = []
        add = parts.append
        offsets: list[int] = []
        sizes: list[int] = []
        assigned: list[int] = []
        next_offsets: dict[tuple[str, int], int] = {}
        topics = self._topics
        hosts = self._hosts
        pack = HEADER.pack
        pack_props_len = _PROPS_LEN.pack
        crc32 = zlib.crc32
        store_ip, store_port = self._store_ip, self.store_host[1]
        host_mask = ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
        at = physical_offset
        as_given = True
        for message in messages:
            properties = message.properties
            if properties:
                try:
                    props = ("\x02".join(map("\x01".join, properties.items())) + "\x02").encode()
                except TypeError:  # a non-str value: let the general encoder format it
                    props = encode_properties(properties)
                    as_given = False
                if len(props) > 32767:
                    raise ValueError(f"properties are {len(props)} bytes; the limit is 32767")
                if b"\0" in props:
                    raise ValueError("a topic or property contains a NUL character")
            else:
                props = b""
            topic = message.topic
            prefix = topics.get(topic)
            if prefix is None:
                prefix = self._topic_prefix(topic)
            born_host = message.born_host
            born_ip = hosts.get(born_host[0])
            if born_ip is None:
                born_ip = self._host(born_host[0])
            body = message.body
            size = HEADER_SIZE + len(body) + len(prefix) + 2 + len(props)
            key = (topic, message.queue_id)
            queue_offset = next_offsets.get(key)
            if queue_offset is None:
                queue_offset = queue_offsets.get(key, 0)
            next_offsets[key] = queue_offset + 1
            add(
                pack(
                    size,
                    MAGIC_V1,
                    crc32(body) & 0x7FFFFFFF,
                    message.queue_id,
                    message.flag,
                    queue_offset,
                    at,
                    message.sys_flag & host_mask,
                    message.born_timestamp,
                    born_ip,
                    born_host[1],
                    store_timestamp,
                    store_ip,
                    store_port,
                    message.reconsume_times,
                    message.prepared_transaction_offset,
                    len(body),
                )
            )
            add(body)
            add(prefix)
            add(pack_props_len(len(props)))
            add(props)
            offsets.append(at)
            sizes.append(size)
            assigned.append(queue_offset)
            at += size
        return EncodedRun(
            b"".join(parts), offsets, sizes, assigned, next_offsets, properties_as_given=as_given
        )

    def _encode_wire(
        self,
        batch: WireBatch,
        physical_offset: int,
        queue_offsets: Mapping[tuple[str, int], int],
        store_timestamp: int,
    ) -> EncodedRun:
        """:meth:`encode_run` for a batch kept as the client encoded it (column-wise, see
        :mod:`wire.wire_batch`)."""
        topic = batch.topic
        prefix = self._topics.get(topic) or self._topic_prefix(topic)
        if batch.has_nul_in_properties():
            raise ValueError("a topic or property contains a NUL character")
        born_ip = self._hosts.get(batch.born_host[0]) or self._host(batch.born_host[0])
        key = (topic, batch.queue_id)
        first = queue_offsets.get(key, 0)
        data, offsets, sizes = batch.encode_records(
            physical_offset=physical_offset,
            first_queue_offset=first,
            store_timestamp=store_timestamp,
            topic_prefix=prefix,
            born_ip=born_ip,
            store_ip=self._store_ip,
            store_port=self.store_host[1],
        )
        count = len(batch)
        return EncodedRun(
            data,
            offsets.tolist(),
            sizes.tolist(),
            list(range(first, first + count)),
            {key: first + count},
            (offsets, sizes),
        )

    def _topic_prefix(self, topic: str) -> bytes:
        """The topic as stored: its length byte, then its bytes (cached per topic)."""
        raw = topic.encode()
        if len(raw) > MAX_TOPIC_LENGTH:
            raise ValueError(f"topic is {len(raw)} bytes; the v1 record allows {MAX_TOPIC_LENGTH}")
        if b"\0" in raw:
            raise ValueError("a topic or property contains a NUL character")
        prefix = bytes((len(raw),)) + raw
        if len(self._topics) < 100_000:
            self._topics[topic] = prefix
        return prefix

    def _host(self, host: str) -> bytes:
        address = host_bytes(host)
        if len(self._hosts) < 100_000:
            self._hosts[host] = address
        return address


@attrs.frozen
class EncodedRun:
    """Records encoded by :meth:`RecordEncoder.encode_run`."""

    data: bytes
    offsets: list[int]
    sizes: list[int]
    queue_offsets: list[int]
    next_queue_offsets: dict[tuple[str, int], int]
    """The queue offset after the run, per (topic, queue id) it touched."""
    arrays: tuple[np.ndarray, np.ndarray] | None = attrs.field(default=None, eq=False)
    """``offsets`` and ``sizes`` as the arrays they were computed as, when the run was encoded
    column-wise (so a caller that wants arrays does not convert the lists back)."""
    properties_as_given: bool = attrs.field(default=False, eq=False)
    """Messages encoded one by one whose properties were all strings, stored as given: each
    message's ``properties`` is then what decoding its record gives back (see
    :func:`dispatch_records`)."""


def encode_record(
    message: Message,
    *,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
    store_host: tuple[str, int] = ("127.0.0.1", 10911),
) -> bytes:
    """One stored unit as bytes (tools and tests; stores keep a :class:`RecordEncoder`)."""
    key = (message.topic, message.queue_id)
    run = RecordEncoder(store_host).encode_run(
        [message], physical_offset, {key: queue_offset}, store_timestamp
    )
    return run.data


def blank_record(length: int) -> bytes:
    """The end-of-file filler: total size then the blank magic; the rest is left as is."""
    return BLANK.pack(length, MAGIC_BLANK)


def read_store_timestamp(buffer: bytes | bytearray | memoryview, offset: int) -> int:
    """The store timestamp of the record at ``offset`` (IPv4 layout)."""
    return _STORE_TS.unpack_from(buffer, offset + 56)[0]


def read_size_magic(buffer: bytes | bytearray | memoryview, offset: int) -> tuple[int, int]:
    return _SIZE_MAGIC.unpack_from(buffer, offset)


def check_header(
    buffer: bytes | bytearray | memoryview, offset: int, limit: int, check_crc: bool = True
) -> tuple[int, ...]:
    """Validate the record at ``offset`` (which must end before ``limit``) and return its
    :data:`HEADER` fields (size first, queue id at 3, queue offset at 5, body length at 16).

    One header unpack per record and positional arguments: recovery scans millions of
    records through this.

    :raises CorruptRecord: bad magic, impossible size, inconsistent lengths or CRC mismatch.
    """
    if limit - offset < MIN_RECORD_SIZE:
        raise CorruptRecord(offset, f"only {limit - offset} bytes left for a record")
    fields = HEADER.unpack_from(buffer, offset)
    size, magic, body_len = fields[0], fields[1], fields[16]
    if magic != MAGIC_V1:
        raise CorruptRecord(offset, f"magic {magic & 0xFFFFFFFF:#010x} is not a v1 message")
    if size < MIN_RECORD_SIZE or offset + size > limit:
        raise CorruptRecord(offset, f"size {size} does not fit in the {limit - offset} bytes left")
    topic_at = offset + HEADER_SIZE + body_len
    if body_len < 0 or topic_at + 3 > offset + size:
        raise CorruptRecord(offset, f"body length {body_len} exceeds record size {size}")
    props_at = topic_at + 1 + buffer[topic_at]
    if props_at + 2 > offset + size:
        raise CorruptRecord(offset, "topic length runs past the record")
    props_len = _PROPS_LEN.unpack_from(buffer, props_at)[0]
    if props_len < 0 or props_at + 2 + props_len != offset + size:
        raise CorruptRecord(offset, "lengths do not add up to the record size")
    if check_crc:
        # A slice copy is cheaper than exporting a memoryview per call; bodies are <= 4 MiB.
        if zlib.crc32(buffer[offset + HEADER_SIZE : topic_at]) & 0x7FFFFFFF != fields[2]:
            raise CorruptRecord(offset, "body CRC mismatch")
        # The CRC does not cover topic and properties. After a power loss the page holding
        # them may never have reached the disk while the body did: they read as zeros, and a
        # NUL is never valid in either (refused at put). Searched in place, no copy.
        find = buffer.tobytes().find if isinstance(buffer, memoryview) else buffer.find
        if (
            props_at == topic_at + 1
            or find(b"\0", topic_at + 1, props_at) >= 0
            or find(b"\0", props_at + 2, offset + size) >= 0
        ):
            raise CorruptRecord(offset, "topic or properties contain NUL bytes (a torn write?)")
    return fields


def check_record(
    buffer: bytes | bytearray | memoryview, offset: int, *, limit: int, check_crc: bool = True
) -> int:
    """Validate the record at ``offset`` (see :func:`check_header`); return its size."""
    return check_header(buffer, offset, limit, check_crc)[0]


def _schedule_time(props: dict[str, str]) -> int:
    """In a parking topic the consume-queue tag field holds the delivery time (ms), as in
    RocketMQ's schedule topic, so a scheduler finds due messages without reading the log."""
    try:
        return int(props.get(PROPERTY_TIMER_OUT_MS, "0"))
    except ValueError:
        return 0


def decode_dispatch(
    buffer: bytes | bytearray | memoryview, offset: int, parking: frozenset[str] = frozenset()
) -> DispatchRecord:
    """Decode what derived views need from a record already checked by :func:`check_record`.

    In the ``parking`` topics (:attr:`kernel.context.BrokerContext.parking_topics`) the tag
    code is the message's due time, not its tag's hash."""
    (size, _, _, queue_id, _, queue_offset, physical_offset, sys_flag, _, born_ip, born_port, store_ts,
     store_ip, store_port, _, prepared_tx, body_len) = HEADER.unpack_from(buffer, offset)  # fmt: skip
    at = offset + HEADER_SIZE + body_len
    topic_len = buffer[at]
    topic = bytes(buffer[at + 1 : at + 1 + topic_len]).decode()
    at += 1 + topic_len
    props_len = _PROPS_LEN.unpack_from(buffer, at)[0]
    props = decode_properties(buffer[at + 2 : at + 2 + props_len]) if props_len else {}
    return _dispatch_record(
        topic, queue_id, queue_offset, physical_offset, size, store_ts, sys_flag, props, prepared_tx, parking,
        body_len, f"{socket.inet_ntoa(born_ip)}:{born_port}", f"{socket.inet_ntoa(store_ip)}:{store_port}",
    )  # fmt: skip


def dispatch_records(
    messages: Sequence[Message],
    run: EncodedRun,
    store_ts: int,
    parking: frozenset[str] = frozenset(),
    store_host: str = "",
) -> list[DispatchRecord]:
    """What :func:`decode_dispatch` would read back from the records ``run`` encoded from
    ``messages`` (one by one, ``run.properties_as_given``), built from the messages instead:
    the dispatch loop of the process that appended them skips reading them back. A single
    send's dispatch runs between two requests of a waiting client, so the loop is kept to
    positional constructions (a keyword call of the record's 15 fields cost 3.5 times as much)."""
    assert run.properties_as_given, "properties were reformatted; read the records back"
    host_mask = ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
    out: list[DispatchRecord] = []
    placed = zip(run.offsets, run.sizes, run.queue_offsets, strict=True)
    for m, (offset, size, queue_offset) in zip(messages, placed, strict=True):
        born = m.born_host
        one = _dispatch_record(
            m.topic, m.queue_id, queue_offset, offset, size, store_ts, m.sys_flag & host_mask,
            dict(m.properties), m.prepared_transaction_offset, parking, len(m.body),
            f"{born[0]}:{born[1]}", store_host,
        )  # fmt: skip
        out.append(one)
    return out


def _dispatch_record(
    topic: str,
    queue_id: int,
    queue_offset: int,
    physical_offset: int,
    size: int,
    store_ts: int,
    sys_flag: int,
    props: dict[str, str],
    prepared_tx: int,
    parking: frozenset[str],
    body_length: int,
    born_host: str,
    store_host: str,
) -> DispatchRecord:
    get = props.get
    # Positional, in DispatchRecord's field order (topic ... store_host).
    return DispatchRecord(
        topic, queue_id, queue_offset, physical_offset, size,
        _schedule_time(props) if topic in parking else tags_code(get(PROPERTY_TAGS)),
        store_ts, sys_flag, get(PROPERTY_KEYS, ""), get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
        props, prepared_tx, body_length, born_host, store_host,
    )  # fmt: skip


@attrs.frozen
class StoredMessage(MessagePropertiesView):
    """A fully decoded stored unit (admin tools, clients, tests)."""

    size: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(self.store_host, self.physical_offset)

    @property
    def payload(self) -> bytes:
        """The body as the producer gave it: clients zlib-compress large bodies and set
        sysFlag bit 0, and the broker stores them as they came.

        :raises zlib.error: when a body flagged compressed does not inflate.
        """
        if self.sys_flag & SYSFLAG_COMPRESSED:
            return zlib.decompress(self.body)
        return self.body


def decode_record(buffer: bytes | bytearray | memoryview, offset: int = 0) -> StoredMessage:
    """Decode one stored unit completely (the body is returned as stored)."""
    (size, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts, born_ip,
     born_port, store_ts, store_ip, store_port, reconsume, prepared_tx,
     body_len) = HEADER.unpack_from(buffer, offset)  # fmt: skip
    if magic != MAGIC_V1:
        raise CorruptRecord(offset, f"magic {magic & 0xFFFFFFFF:#010x} is not a v1 message")
    at = offset + HEADER_SIZE
    body = bytes(buffer[at : at + body_len])
    at += body_len
    topic_len = buffer[at]
    topic = bytes(buffer[at + 1 : at + 1 + topic_len]).decode()
    at += 1 + topic_len
    props_len = _PROPS_LEN.unpack_from(buffer, at)[0]
    props = decode_properties(buffer[at + 2 : at + 2 + props_len])
    return StoredMessage(
        size=size,
        body_crc=crc,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=(socket.inet_ntoa(born_ip), born_port),
        store_timestamp=store_ts,
        store_host=(socket.inet_ntoa(store_ip), store_port),
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared_tx,
        body=body,
        topic=topic,
        properties=props,
    )


def decode_records(data: bytes | bytearray | memoryview) -> list[StoredMessage]:
    """Decode a concatenation of stored units (a PULL_MESSAGE body)."""
    out = []
    offset = 0
    while offset < len(data):
        message = decode_record(data, offset)
        out.append(message)
        offset += message.size
    return out


def offset_msg_id(store_host: tuple[str, int], physical_offset: int) -> str:
    """RocketMQ's offset message id: store IPv4 + port + commit-log offset, 32 hex chars."""
    return (host_bytes(store_host[0]) + struct.pack(">iq", store_host[1], physical_offset)).hex().upper()


def offset_msg_ids(store_host: tuple[str, int], physical_offsets: Sequence[int]) -> list[str]:
    """:func:`offset_msg_id` of many offsets of one store host (a batch's answer): the host part
    encoded once, each offset formatted as 16 hex digits."""
    if not physical_offsets:
        return []
    return list(map(_offset_msg_id_template(store_host).format, physical_offsets))


@functools.lru_cache(maxsize=64)
def _offset_msg_id_template(store_host: tuple[str, int]) -> str:
    """The store host's half of its offset message ids, and a slot for the offset (a broker
    answers every send with one: the host part is encoded once, not per answer)."""
    return offset_msg_id(store_host, 0)[:16] + "{:016X}"


def parse_offset_msg_id(msg_id: str) -> tuple[tuple[str, int], int]:
    """Inverse of :func:`offset_msg_id`.

    :raises ValueError: not a 32-hex-character IPv4 offset id.
    """
    if len(msg_id) != 32:
        raise ValueError(f"an offset message id has 32 hex characters, got {len(msg_id)}")
    raw = bytes.fromhex(msg_id)
    port, offset = struct.unpack(">iq", raw[4:])
    if not 0 < port < 65536 or offset < 0:
        raise ValueError(f"it names port {port} and offset {offset}, which no broker has")
    return (socket.inet_ntoa(raw[:4]), port), offset


def iter_sizes(sizes: Sequence[int], start: int) -> list[int]:
    """Physical offsets of consecutive records of ``sizes`` starting at ``start``."""
    offsets = []
    at = start
    for size in sizes:
        offsets.append(at)
        at += size
    return offsets
