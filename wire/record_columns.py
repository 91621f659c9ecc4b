"""Positions and header fields of every record in a PULL_MESSAGE body, read in bulk.

A pull answer is stored records back to back. Consumers (the SDK and the Spark reader) used to
unpack them one at a time into objects; here the walk from one record to the next is a batch
codec loop, and every header field and every body, topic and properties position is an array
gathered with numpy. The SDK builds message objects from these columns when a listener
touches one; the Spark reader turns them into Arrow columns. One decoder, two views.
"""

from __future__ import annotations

import struct
from typing import NoReturn

import attrs
import numpy as np

from wire import batch_codec
from wire.errors import CorruptRecord
from wire.record_layout import HEADER_DTYPE, HEADER_SIZE, MAGIC_V1, MIN_RECORD_SIZE, header_rows

__all__ = ["HEADER_DTYPE", "RecordColumns", "record_starts"]

_SIZE_MAGIC = struct.Struct(">ii")


def record_starts(data: bytes | memoryview) -> np.ndarray:
    """Where each record of ``data`` begins, checking sizes and magic on the way (the size
    chain is followed by :func:`wire.batch_codec.size_chain`, the magics checked as a column).

    :raises CorruptRecord: a record's size or magic is wrong, or it runs past the end.
    """
    return _walk(data)[0]


def _walk(data: bytes | memoryview) -> tuple[np.ndarray, np.ndarray]:
    """:func:`record_starts` and the header rows it read to check the magics (one gather
    serves the check and :class:`RecordColumns`)."""
    end = len(data)
    starts, stopped = batch_codec.size_chain(data, 0, end, MIN_RECORD_SIZE)
    room = end - starts
    magic = np.zeros(len(starts), dtype=np.int64)
    whole = np.flatnonzero(room >= MIN_RECORD_SIZE)  # all of them unless the last is cut short
    header = header_rows(data, starts[whole]) if len(whole) else np.zeros(0, dtype=HEADER_DTYPE)
    magic[whole] = header["magic"]
    size = np.diff(starts, append=stopped)  # the chain stepped from each start by its size
    bad = (room < MIN_RECORD_SIZE) | (magic != MAGIC_V1) | (size > room)
    if bad.any():
        _refuse(data, int(starts[np.argmax(bad)]))
    if stopped != end:
        _refuse(data, stopped)
    return starts, header


def _refuse(data: bytes | memoryview, at: int) -> NoReturn:
    """Say what is wrong with the record at ``at`` (the first one that failed a check)."""
    end = len(data)
    if end - at < MIN_RECORD_SIZE:
        raise CorruptRecord(at, f"{end - at} trailing bytes are not a record")
    size, magic = _SIZE_MAGIC.unpack_from(data, at)
    raise CorruptRecord(at, f"record of {size} bytes with magic {magic & 0xFFFFFFFF:#010x}")


@attrs.frozen(eq=False)
class RecordColumns:
    """The records of one buffer as columns (``int64`` positions into :attr:`data`)."""

    data: bytes
    starts: np.ndarray
    header: np.ndarray
    """One :data:`HEADER_DTYPE` row per record."""
    body_start: np.ndarray
    body_len: np.ndarray
    topic_start: np.ndarray
    topic_len: np.ndarray
    props_start: np.ndarray
    props_len: np.ndarray

    @classmethod
    def read(cls, data: bytes) -> RecordColumns:
        """Columns of the records of ``data``, every length checked against its record.

        :raises CorruptRecord: a record is damaged (it is never decoded).
        """
        starts, header = _walk(data)
        count = len(starts)
        if not count:
            empty = np.zeros(0, dtype=np.int64)
            return cls(data, empty, header, *([empty] * 6))
        raw = np.frombuffer(data, dtype=np.uint8)
        body_start = starts + HEADER_SIZE
        body_len = header["body_len"].astype(np.int64)
        record_end = starts + header["size"].astype(np.int64)
        bad = (body_len < 0) | (body_start + body_len + 3 > record_end)
        if bad.any():
            raise CorruptRecord(int(starts[np.argmax(bad)]), "a record's body length runs past the record")
        topic_len_at = body_start + body_len
        topic_len = raw[topic_len_at].astype(np.int64)
        props_len_at = topic_len_at + 1 + topic_len
        bad = props_len_at + 2 > record_end
        if bad.any():
            raise CorruptRecord(int(starts[np.argmax(bad)]), "a record's topic runs past the record")
        props_len = (raw[props_len_at].astype(np.int64) << 8) | raw[props_len_at + 1]
        props_start = props_len_at + 2
        bad = (props_len >= 0x8000) | (props_start + props_len > record_end)
        if bad.any():
            raise CorruptRecord(int(starts[np.argmax(bad)]), "a record's properties run past the record")
        return cls(
            data, starts, header, body_start, body_len, topic_len_at + 1, topic_len, props_start, props_len
        )

    def __len__(self) -> int:
        return len(self.starts)

    def select(self, keep: np.ndarray) -> RecordColumns:
        """The records where ``keep`` is true (a boolean mask or indices)."""
        return RecordColumns(
            self.data,
            self.starts[keep],
            self.header[keep],
            self.body_start[keep],
            self.body_len[keep],
            self.topic_start[keep],
            self.topic_len[keep],
            self.props_start[keep],
            self.props_len[keep],
        )
