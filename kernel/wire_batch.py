"""A batch of messages kept as the client encoded it, turned into commit-log records column-wise.

A ``SEND_BATCH_MESSAGE`` body holds each message as ``totalSize magic bodyCRC flag bodyLen
body propertiesLen properties`` (RocketMQ's ``MessageDecoder.encodeMessage``). Decoding that into
one Python object per message, checking each, then packing a record header per message cost
several microseconds per message in the broker. Here the body stays one buffer:

- :meth:`WireBatch.decode` follows the entry sizes (the only per-message Python step) and reads
  every entry header with one numpy gather, so positions, lengths and flags are arrays;
- limits are checked on the arrays, and the few properties the put path must act on (delays,
  transactions) are searched in all messages at once (:mod:`kernel.property_scan`);
- :meth:`WireBatch.encode_records` fills the 88-byte record headers column-wise in a
  big-endian structured array, computes the body CRCs through ``map(zlib.crc32, ...)`` over
  views of the request body, and joins headers, bodies, topic and properties with one
  ``bytes.join`` into the buffer the store writes with one call.

The bytes are the ones :class:`kernel.record.RecordEncoder` writes for the same messages (a
property test holds the two to the same answer). Code that wants message objects (a plugin's
hook, another store) iterates the batch and gets :class:`~kernel.model.Message` objects built
on access; :class:`~kernel.model.MessageBatch` then keeps those, as hooks may rewrite them.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import overload

import attrs
import numpy as np

from kernel.model import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_WAIT_STORE_MSG_OK,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    TIMER_PROPERTIES,
    Message,
    decode_properties,
)
from kernel.property_scan import JoinedProperties, pattern_for
from kernel.record_layout import HEADER_DTYPE, HEADER_SIZE, MAGIC_V1

ENTRY_HEADER = 20
"""totalSize, magic, bodyCRC, flag, bodyLen: the fixed part of a batch entry."""
_TOTAL = struct.Struct(">i")
_ENTRY = np.dtype(
    {
        "names": ["total", "flag", "body_len"],
        "formats": [">i4", ">i4", ">i4"],
        "offsets": [0, 12, 16],
        "itemsize": ENTRY_HEADER,
    }
)
_SHARED = struct.Struct(">4xi4xi4x8x8xiq4siq4sii8x4x")
assert _SHARED.size == HEADER_SIZE
"""An 88-byte record header with only the fields a batch shares filled (magic, queue id,
sysFlag, born time and host, store time and host, reconsume times; zeros elsewhere)."""
_HOST_MASK = ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)

_ATTENTION = pattern_for([PROPERTY_DELAY_TIME_LEVEL, PROPERTY_TRANSACTION_PREPARED, *TIMER_PROPERTIES])
"""Properties that ask the put path for more than storing: a delay or a transaction."""
_NO_WAIT = pattern_for([PROPERTY_WAIT_STORE_MSG_OK])


class MalformedBatch(ValueError):
    """A batch body whose entries do not add up; the message says where."""


@attrs.define(eq=False)
class WireBatch:
    """Messages of one topic and queue, as positions into the request body that carried them.

    A ``Sequence[Message]`` to readers that want objects (built on access); the put path uses
    the columns. Fields shared by every message of a request (born host and time, sysFlag,
    reconsume times) are scalars, as in the request header.
    """

    topic: str
    queue_id: int
    data: bytes
    """The request body."""
    body_at: np.ndarray
    body_len: np.ndarray
    props_at: np.ndarray
    """Where each message's properties text begins (after its 2-byte length)."""
    props_len: np.ndarray
    flag: np.ndarray
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    _joined: JoinedProperties | None = attrs.field(default=None, init=False)
    _attention: bool | None = attrs.field(default=None, init=False)

    @classmethod
    def decode(
        cls,
        data: bytes,
        *,
        topic: str,
        queue_id: int,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: tuple[str, int] = ("127.0.0.1", 0),
        reconsume_times: int = 0,
    ) -> WireBatch:
        """Read an encoded batch body.

        :raises MalformedBatch: an entry's sizes run past the body or each other.
        """
        positions = _entry_positions(data)
        at = np.fromiter(positions, dtype=np.int64, count=len(positions))
        if len(at):
            view = np.ndarray((len(data) - ENTRY_HEADER + 1,), dtype=_ENTRY, buffer=data, strides=(1,))
            entry = view[at]
            del view
            total = entry["total"].astype(np.int64)
            body_len = entry["body_len"].astype(np.int64)
            body_at = at + ENTRY_HEADER
            length_at = body_at + body_len
            bad = (body_len < 0) | (length_at + 2 > at + total)
            if bad.any():
                first = int(at[np.argmax(bad)])
                raise MalformedBatch(f"batch entry at byte {first} is malformed")
            raw = np.frombuffer(data, dtype=np.uint8)
            props_len = (raw[length_at].astype(np.int64) << 8) | raw[length_at + 1]
            props_len = np.where(props_len >= 0x8000, props_len - 0x10000, props_len)
            props_at = length_at + 2
            bad = (props_len < 0) | (props_at + props_len > at + total)
            if bad.any():
                first = int(at[np.argmax(bad)])
                raise MalformedBatch(f"batch entry at byte {first} is malformed")
            flag = entry["flag"].astype(np.int64)
        else:
            body_at = body_len = props_at = props_len = flag = np.zeros(0, dtype=np.int64)
        return cls(
            topic,
            queue_id,
            data,
            body_at,
            body_len,
            props_at,
            props_len,
            flag,
            sys_flag,
            born_timestamp,
            born_host,
            reconsume_times,
        )

    # --- what the put path asks -----------------------------------------------------------

    @property
    def joined_properties(self) -> JoinedProperties:
        if self._joined is None:
            self._joined = JoinedProperties.join(self.data, self.props_at, self.props_at + self.props_len)
        return self._joined

    def needs_attention(self) -> bool:
        """Whether a message asks for a delay or a transaction (the put path then handles the
        batch as message objects). Asked by the kernel and by delay plugins; searched once."""
        if self._attention is None:
            self._attention = self.joined_properties.contains(_ATTENTION)
        return self._attention

    def wait_store_ok(self) -> bool:
        """False only if every message says ``WAIT=false`` (see :class:`MessageBatch`)."""
        if self.joined_properties.blob.count(b"\x02WAIT\x01false\x02") < len(self):
            return True  # some message does not say so (the usual case, one C search)
        rows, _, values = self.joined_properties.find(_NO_WAIT)
        not_waiting = {r for r, v in zip(rows.tolist(), values, strict=True) if v == b"false"}
        return len(not_waiting) < len(self)

    def has_nul_in_properties(self) -> bool:
        return b"\0" in self.joined_properties.blob

    def largest_body(self) -> int:
        return int(self.body_len.max(initial=0))

    def smallest_body(self) -> int:
        return int(self.body_len.min()) if len(self.body_len) else 0

    # --- encoding ---------------------------------------------------------------------------

    def encode_records(
        self,
        *,
        physical_offset: int,
        first_queue_offset: int,
        store_timestamp: int,
        topic_prefix: bytes,
        born_ip: bytes,
        store_ip: bytes,
        store_port: int,
    ) -> tuple[bytes, np.ndarray, np.ndarray]:
        """The batch as consecutive commit-log records from ``physical_offset``, with queue
        offsets from ``first_queue_offset``; returns (bytes, record offsets, record sizes).
        ``topic_prefix`` is the stored topic (length byte, then UTF-8)."""
        count = len(self)
        sizes = HEADER_SIZE + self.body_len + len(topic_prefix) + 2 + self.props_len
        offsets = np.empty(count, dtype=np.int64)
        offsets[0] = physical_offset
        np.cumsum(sizes[:-1], out=offsets[1:])
        offsets[1:] += physical_offset
        data = memoryview(self.data)
        getitem = data.__getitem__
        body_end = self.body_at + self.body_len
        bodies = list(map(getitem, map(slice, self.body_at.tolist(), body_end.tolist())))
        # Fields shared by the batch come from one packed row repeated; the six that differ
        # per message are then written column by column.
        template = _SHARED.pack(
            MAGIC_V1,
            self.queue_id,
            self.sys_flag & _HOST_MASK,
            self.born_timestamp,
            born_ip,
            self.born_host[1],
            store_timestamp,
            store_ip,
            store_port,
            self.reconsume_times,
        )
        header = np.frombuffer(template * count, dtype=HEADER_DTYPE).copy()
        header["size"] = sizes
        header["body_crc"] = np.fromiter(map(zlib.crc32, bodies), dtype=np.int64, count=count) & 0x7FFFFFFF
        header["flag"] = self.flag
        header["queue_offset"] = np.arange(first_queue_offset, first_queue_offset + count, dtype=np.int64)
        header["physical_offset"] = offsets
        header["body_len"] = self.body_len
        headers = memoryview(header.tobytes())
        parts: list[object] = [topic_prefix] * (4 * count)
        header_slices = map(
            slice,
            range(0, HEADER_SIZE * count, HEADER_SIZE),
            range(HEADER_SIZE, HEADER_SIZE * count + 1, HEADER_SIZE),
        )
        parts[0::4] = map(headers.__getitem__, header_slices)
        parts[1::4] = bodies
        # The 2-byte properties length and the properties follow the body in the request.
        parts[3::4] = map(getitem, map(slice, body_end.tolist(), (self.props_at + self.props_len).tolist()))
        return b"".join(parts), offsets, sizes  # type: ignore[arg-type]

    # --- Sequence[Message] ------------------------------------------------------------------

    def message(self, row: int) -> Message:
        body_at, props_at = int(self.body_at[row]), int(self.props_at[row])
        return Message(
            self.topic,
            self.data[body_at : body_at + int(self.body_len[row])],
            self.queue_id,
            int(self.flag[row]),
            decode_properties(self.data[props_at : props_at + int(self.props_len[row])]),
            self.sys_flag,
            self.born_timestamp,
            self.born_host,
            self.reconsume_times,
        )

    def __len__(self) -> int:
        return len(self.body_at)

    @overload
    def __getitem__(self, row: int) -> Message: ...

    @overload
    def __getitem__(self, row: slice) -> WireBatch: ...

    def __getitem__(self, row: int | slice) -> Message | WireBatch:
        if isinstance(row, slice):
            rows = slice(*row.indices(len(self)))
            return attrs.evolve(
                self,
                body_at=self.body_at[rows],
                body_len=self.body_len[rows],
                props_at=self.props_at[rows],
                props_len=self.props_len[rows],
                flag=self.flag[rows],
            )
        if row < 0:
            row += len(self)
        if not 0 <= row < len(self):
            raise IndexError(row)
        return self.message(row)

    def __iter__(self) -> Iterator[Message]:
        return map(self.message, range(len(self)))


def _entry_positions(data: bytes) -> list[int]:
    """Entry starts along the size chain (the one per-message Python loop of a batch).

    :raises MalformedBatch: a size too small for an entry or running past the body.
    """
    unpack = _TOTAL.unpack_from
    positions: list[int] = []
    append = positions.append
    at, end = 0, len(data)
    minimum = ENTRY_HEADER + 2
    while at < end:
        if end - at < ENTRY_HEADER + 2:
            raise MalformedBatch(f"batch body is truncated at byte {at}")
        total = unpack(data, at)[0]
        if total < minimum or at + total > end:
            raise MalformedBatch(f"batch entry at byte {at} is malformed")
        append(at)
        at += total
    return positions
