"""Stored records (PULL_MESSAGE answer bodies) to Arrow record batches, decoded in bulk.

Decoding is where a Python source spends its time (the Spark notes measured the per-record
loop as the bottleneck), so no step here is a Python loop over records: the record walk,
the gathering of bodies and properties into Arrow buffers and the split of each properties
text into map entries are :mod:`wire.batch_codec` loops (compiled when built); header fields
are numpy columns, and tags, keys and the unique key are looked up by Arrow compute kernels.
"""

from __future__ import annotations

import socket
import zlib
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kernel.errors import CorruptRecord
from kernel.model import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_COMPRESSED,
    SYSFLAG_STOREHOST_V6,
)
from plugins.spark_export.schema import ARROW_SCHEMA, KEYS_TYPE, TIMESTAMP
from wire import batch_codec
from wire.record_columns import RecordColumns

UNIQ_KEY = "UNIQ_KEY"

_STORE_HOST_AT = 64
_PHYSICAL_OFFSET_AT = 28


def empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)


def to_record_batch(
    bodies: Sequence[bytes],
    topic: str,
    broker_name: str,
    *,
    start: int = 0,
    end: int | None = None,
    tags: frozenset[str] | None = None,
) -> pa.RecordBatch:
    """The records of one queue's pull answers as a batch of :data:`ARROW_SCHEMA` rows.

    Records whose queue offset falls outside ``[start, end)`` are dropped (a pull may run past
    a range's end when the broker filters by tag), and with ``tags`` only records carrying one
    of them are kept (the broker filters by tag hash; this is the exact check).

    :raises CorruptRecord: a record is damaged (a damaged record is never returned as a row).
    """
    data = bodies[0] if len(bodies) == 1 else b"".join(bodies)
    records = RecordColumns.read(data)
    if len(records) == 0:
        return empty_batch()
    queue_offset = records.header["queue_offset"].astype(np.int64)
    keep = queue_offset >= start
    if end is not None:
        keep &= queue_offset < end
    if not keep.all():
        records, queue_offset = records.select(keep), queue_offset[keep]
        if len(records) == 0:
            return empty_batch()
    n = len(records)
    header = records.header
    header_bytes = header.view(np.uint8).reshape(n, -1)
    sys_flag = header["sys_flag"].astype(np.int32)
    if np.any(sys_flag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)):
        at = int(records.starts[np.argmax(sys_flag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6) != 0)])
        raise CorruptRecord(at, "record with IPv6 hosts: not a RocketMQ 4.x v1 record this reader decodes")
    body_start, body_len = records.body_start, records.body_len
    props_start, props_len = records.props_start, records.props_len

    view = memoryview(data)
    body = _binary(view, body_start, body_len, sys_flag, topic, queue_offset)
    properties = _properties(view, props_start, props_len)
    tags_column = pc.map_lookup(properties, pa.scalar(PROPERTY_TAGS), "first")
    keys_raw = pc.map_lookup(properties, pa.scalar(PROPERTY_KEYS), "first")
    keys = pc.split_pattern(keys_raw, " ").cast(KEYS_TYPE)
    msg_id_bytes = np.concatenate(
        [
            header_bytes[:, _STORE_HOST_AT : _STORE_HOST_AT + 8],
            header_bytes[:, _PHYSICAL_OFFSET_AT : _PHYSICAL_OFFSET_AT + 8],
        ],
        axis=1,
    )
    columns = [
        _constant_string(topic, n),
        _constant_string(broker_name, n),
        _fixed(pa.int32(), header["queue_id"].astype(np.int32)),
        _fixed(pa.int64(), queue_offset),
        _fixed(pa.int64(), header["physical_offset"].astype(np.int64)),
        _fixed_width_string(msg_id_bytes.tobytes().hex().upper().encode(), 32, n),
        pc.map_lookup(properties, pa.scalar(UNIQ_KEY), "first"),
        tags_column,
        keys,
        body,
        properties,
        _fixed(TIMESTAMP, header["born_timestamp"].astype(np.int64) * 1000),
        _fixed(TIMESTAMP, header["store_timestamp"].astype(np.int64) * 1000),
        _hosts(header["born_host"].astype(np.uint64)),
        _hosts(header["store_host"].astype(np.uint64)),
        _fixed(pa.int32(), header["reconsume_times"].astype(np.int32)),
        _fixed(pa.int32(), sys_flag),
    ]
    batch = pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
    if tags is not None:
        batch = batch.filter(pc.fill_null(pc.is_in(tags_column, pa.array(sorted(tags), pa.string())), False))
    return batch


def _fixed(kind: pa.DataType, values: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(np.ascontiguousarray(values))])


def _offsets(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _gather(view: memoryview, starts: np.ndarray, lengths: np.ndarray) -> bytes:
    return batch_codec.gather(view, starts, starts + lengths)


def _strings(view: memoryview, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    data = batch_codec.gather(view, starts, ends)
    return pa.Array.from_buffers(
        pa.string(), len(starts), [None, pa.py_buffer(_offsets(ends - starts)), pa.py_buffer(data)]
    )


def _binary(
    view: memoryview,
    starts: np.ndarray,
    lengths: np.ndarray,
    sys_flag: np.ndarray,
    topic: str,
    queue_offset: np.ndarray,
) -> pa.Array:
    compressed = np.flatnonzero(sys_flag & SYSFLAG_COMPRESSED)
    if len(compressed) == 0:
        data = _gather(view, starts, lengths)
        return pa.Array.from_buffers(
            pa.binary(), len(starts), [None, pa.py_buffer(_offsets(lengths)), pa.py_buffer(data)]
        )
    bodies = [bytes(view[s : s + n]) for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)]
    for index in compressed.tolist():
        try:
            bodies[index] = zlib.decompress(bodies[index])
        except zlib.error as error:
            raise CorruptRecord(
                int(starts[index]),
                f"message {topic} offset {int(queue_offset[index])} is flagged compressed but does not "
                f"inflate: {error}",
            ) from None
    return pa.array(bodies, pa.binary())


def _properties(view: memoryview, starts: np.ndarray, lengths: np.ndarray) -> pa.MapArray:
    """``name\x01value\x02...`` texts as a map, entries found by
    :func:`wire.batch_codec.property_pairs`; text that is not UTF-8 is decoded with
    replacement characters (a map of strings cannot hold it)."""
    counts, name_at, name_end, value_at, value_end = batch_codec.property_pairs(
        view, starts, starts + lengths
    )
    names, values = _strings(view, name_at, name_end), _strings(view, value_at, value_end)
    try:
        names.validate(full=True)
        values.validate(full=True)
    except pa.ArrowInvalid:
        return _properties_replacing(view, starts, lengths)
    return pa.MapArray.from_arrays(pa.array(_offsets(counts)), names, values)


def _properties_replacing(view: memoryview, starts: np.ndarray, lengths: np.ndarray) -> pa.MapArray:
    """:func:`_properties` for texts holding bytes that are not UTF-8 (rare: split per row)."""
    offsets, names, values = [0], [], []
    for start, length in zip(starts.tolist(), lengths.tolist(), strict=True):
        text = bytes(view[start : start + length]).decode("utf-8", "replace")
        pairs = [item.split("\x01", 1) for item in text.split("\x02") if "\x01" in item]
        names += [name for name, _ in pairs]
        values += [value for _, value in pairs]
        offsets.append(offsets[-1] + len(pairs))
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()), pa.array(names, pa.string()), pa.array(values, pa.string())
    )


def _constant_string(value: str, n: int) -> pa.Array:
    return _fixed_width_string(value.encode() * n, len(value.encode()), n)


def _fixed_width_string(data: bytes, width: int, n: int) -> pa.Array:
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _hosts(packed: np.ndarray) -> pa.Array:
    """``ip:port`` strings from IPv4 + port packed in 64 bits (few distinct values per batch)."""
    distinct, index = np.unique(packed, return_inverse=True)
    names = [f"{socket.inet_ntoa(int(v >> 32).to_bytes(4, 'big'))}:{int(v & 0xFFFFFFFF)}" for v in distinct]
    return pa.DictionaryArray.from_arrays(
        pa.array(index.astype(np.int32).reshape(-1)), pa.array(names, pa.string())
    ).dictionary_decode()
