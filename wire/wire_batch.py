"""A batch of messages kept as the client encoded it, turned into commit-log records column-wise.

A ``SEND_BATCH_MESSAGE`` body holds each message as ``totalSize magic bodyCRC flag bodyLen
body propertiesLen properties`` (RocketMQ's ``MessageDecoder.encodeMessage``). Decoding that into
one Python object per message, checking each, then packing a record header per message cost
several microseconds per message in the broker. Here the body stays one buffer:

- :meth:`WireBatch.decode` follows the entry sizes once, so positions, lengths and flags are
  arrays;
- limits are checked on the arrays, and the few properties the put path must act on (delays,
  transactions) are searched in all messages at once;
- :meth:`WireBatch.encode_records` writes the 88-byte record headers, the body CRCs, bodies,
  topic and properties into the one buffer the store writes with one call.

The loops behind those steps are :mod:`wire.batch_codec` (compiled when it was built, numpy
otherwise, same answers).

The bytes are the ones :class:`wire.record.RecordEncoder` writes for the same messages (a
property test holds the two to the same answer). Code that wants message objects (a plugin's
hook, another store) iterates the batch and gets :class:`~kernel.model.Message` objects built
on access; :class:`~kernel.model.MessageBatch` then keeps those, as hooks may rewrite them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import overload

import attrs
import numpy as np

from wire import batch_codec
from wire.errors import MalformedBatch
from wire.message import Message, decode_properties
from wire.names import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_WAIT_STORE_MSG_OK,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    TIMER_PROPERTIES,
)
from wire.record_layout import HEADER_SIZE, MAGIC_V1

__all__ = ["MalformedBatch", "WireBatch"]

_SHARED = struct.Struct(">4xi4xi4x8x8xiq4siq4sii8x4x")
assert _SHARED.size == HEADER_SIZE
"""An 88-byte record header with only the fields a batch shares filled (magic, queue id,
sysFlag, born time and host, store time and host, reconsume times; zeros elsewhere)."""
_HOST_MASK = ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)

_ATTENTION = tuple(
    name.encode() for name in (PROPERTY_DELAY_TIME_LEVEL, PROPERTY_TRANSACTION_PREPARED, *TIMER_PROPERTIES)
)
"""Properties that ask the put path for more than storing: a delay or a transaction."""
_WAIT = (PROPERTY_WAIT_STORE_MSG_OK.encode(),)


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
    _attention: bool | None = attrs.field(default=None, init=False)
    _nul: bool | None = attrs.field(default=None, init=False)
    _props_end: np.ndarray | None = attrs.field(default=None, init=False)

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
        body_at, body_len, props_at, props_len, props_end, flag, nul = batch_codec.entry_columns(data)
        batch = cls(
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
        batch._props_end = props_end
        batch._nul = nul
        return batch

    # --- what the put path asks -----------------------------------------------------------

    @property
    def props_end(self) -> np.ndarray:
        """Where each message's properties end (asked by every property search and by the
        dispatch columns: computed once)."""
        if self._props_end is None:
            self._props_end = self.props_at + self.props_len
        return self._props_end

    def find_properties(self, names: tuple[bytes, ...]) -> batch_codec.Pairs:
        """:func:`wire.batch_codec.find_pairs` over the properties of this batch."""
        return batch_codec.find_pairs(self.data, self.props_at, self.props_end, names)

    def needs_attention(self) -> bool:
        """Whether a message asks for a delay or a transaction (the put path then handles the
        batch as message objects). Asked by the kernel and by delay plugins; searched once."""
        if self._attention is None:
            self._attention = len(self.find_properties(_ATTENTION)[0]) > 0
        return self._attention

    def wait_store_ok(self) -> bool:
        """False only if every message says ``WAIT=false`` (see :class:`MessageBatch`)."""
        rows, _, start, end = self.find_properties(_WAIT)
        if len(rows) < len(self):
            return True  # some message does not say so (the usual case)
        data = self.data
        spans = zip(rows.tolist(), start.tolist(), end.tolist(), strict=True)
        not_waiting = {r for r, s, e in spans if data[s:e] == b"false"}
        return len(not_waiting) < len(self)

    def has_nul_in_properties(self) -> bool:
        if self._nul is None:
            self._nul = bool((batch_codec.find_byte(self.data, self.props_at, self.props_end, 0) >= 0).any())
        return self._nul

    def largest_body(self) -> int:
        return max(self.body_len.tolist(), default=0)

    def smallest_body(self) -> int:
        return min(self.body_len.tolist(), default=0)

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
        # Fields shared by the batch come from one packed header; the codec writes the six
        # that differ per message over it.
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
        return batch_codec.encode_records(
            self.data,
            self.body_at,
            self.body_len,
            self.props_at,
            self.props_len,
            self.flag,
            template,
            topic_prefix,
            physical_offset,
            first_queue_offset,
        )

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
