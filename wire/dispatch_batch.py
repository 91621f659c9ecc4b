"""A dispatch batch as columns: what derived views need from a run of stored records.

The dispatch loop feeds every record of the log to the consume queues and the index. Decoding
each record into a Python object (properties into a dict, tags hashed character by character)
cost about 5 µs per message, almost half of the broker's time under a pipelined producer. Here a
run of records becomes arrays instead: one gather reads every header, one codec call
(:func:`wire.batch_codec.dispatch_properties`) walks the properties of all records for the
few keys views need (``TAGS``, ``KEYS``, ``UNIQ_KEY``, ``TIMER_OUT_MS``), hashing tags as it
goes and leaving index keys as spans of the properties (no object per key). Views that know
the columns write their entries column-wise; everything else (plugins' dispatchers, the
``trocket_records_dispatched`` hook) sees a ``Sequence[DispatchRecord]`` whose records are built
only when touched.
"""

from __future__ import annotations

import functools
import mmap
from collections.abc import Iterator, Sequence
from typing import NamedTuple, overload

import attrs
import numpy as np

from wire import batch_codec
from wire.dispatch_record import DispatchRecord, host_text, pack_host
from wire.message import decode_properties, encode_properties
from wire.names import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6
from wire.property_scan import JoinedProperties
from wire.record_layout import HEADER_SIZE, header_rows
from wire.record_run import RecordRun
from wire.wire_batch import WireBatch

_HOST_MASK = ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)


class AppendedWire(NamedTuple):
    """What the put path keeps of a batch it stored column-wise, for the dispatch loop: the
    request's columns and where its records went (see :meth:`DispatchBatch.from_wires`)."""

    batch: WireBatch
    physical_offsets: np.ndarray
    sizes: np.ndarray
    first_queue_offset: int
    store_timestamp: int
    store_host: int = 0
    """The broker's address as records store it (:func:`~wire.dispatch_record.pack_host`)."""


def _host(host: tuple[str, int]) -> str:
    return f"{host[0]}:{host[1]}"


@functools.lru_cache(maxsize=4096)
def _packed_host(host: tuple[str, int]) -> int:
    """A request's born host packed as records store it (a connection's host repeats: parsed
    once, not per batch)."""
    return pack_host(_host(host))


def _empty() -> np.ndarray:
    return np.zeros(0, dtype=np.int64)


@attrs.define(eq=False)
class DispatchBatch(Sequence[DispatchRecord]):
    """Records of one dispatch batch, in log order, as columns (``int64`` arrays)."""

    topics: list[str]
    """Distinct topics of the batch; :attr:`topic_index` points into it."""
    topic_index: np.ndarray
    queue_id: np.ndarray
    queue_offset: np.ndarray
    physical_offset: np.ndarray
    size: np.ndarray
    sys_flag: np.ndarray
    store_timestamp: np.ndarray
    prepared_offset: np.ndarray
    tags_code: np.ndarray
    key_rows: np.ndarray
    """Per index key, the record it belongs to (records in order; a record's unique key
    first, then its ``KEYS`` tokens)."""
    key_start: np.ndarray
    """Where each index key's UTF-8 text (without the ``topic#`` prefix) begins in
    :attr:`properties_blob`: keys are spans, not objects, so the index hashes them in place."""
    key_end: np.ndarray
    properties_blob: bytes
    """A buffer holding every record's properties (the request body of a batch put, or the
    regions joined when read from the log)."""
    properties_start: np.ndarray
    """Where each record's properties begin in :attr:`properties_blob`."""
    properties_end: np.ndarray
    body_length: np.ndarray
    """Each record's body as stored (compressed when its sysFlag's bit 0 is set)."""
    born_host: np.ndarray
    """Each record's born host, packed as the log stores an IPv4 host (IP << 32 | port;
    :func:`~wire.dispatch_record.host_text` gives ``ip:port``)."""
    store_host: np.ndarray
    """Each record's store host, packed likewise."""

    @classmethod
    def empty(cls) -> DispatchBatch:
        e = _empty()
        return cls([], e, e, e, e, e, e, e, e, e, e, e, e, b"", e, e, e, e, e)

    @classmethod
    def from_run(
        cls, buffer: bytes | bytearray | mmap.mmap, run: RecordRun, parking: frozenset[str] = frozenset()
    ) -> DispatchBatch:
        """Columns of the valid records of ``run`` (checked by
        :func:`~wire.record_run.check_run` in ``buffer``); ``parking``: see :meth:`gather`."""
        groups, inverse = np.unique(run.representative, return_inverse=True)
        distinct: dict[str, int] = {}
        remap = np.array([distinct.setdefault(run.topics[g], len(distinct)) for g in groups.tolist()])
        topic_index = remap[inverse.ravel()] if len(groups) else _empty()
        return cls.gather(buffer, run.positions, topic_index, list(distinct), parking)

    @classmethod
    def from_wire(
        cls,
        batch: WireBatch,
        physical_offsets: np.ndarray,
        sizes: np.ndarray,
        first_queue_offset: int,
        store_timestamp: int,
        parking: frozenset[str] = frozenset(),
        store_host: int = 0,
    ) -> DispatchBatch:
        """The columns of records just encoded from ``batch``, without reading them back (see
        :meth:`from_wires`); ``store_host`` packed (:func:`~wire.dispatch_record.pack_host`)."""
        appended = AppendedWire(
            batch, physical_offsets, sizes, first_queue_offset, store_timestamp, store_host
        )
        return cls.from_wires([appended], parking)

    @classmethod
    def from_wires(
        cls, appended: Sequence[AppendedWire], parking: frozenset[str] = frozenset()
    ) -> DispatchBatch:
        """The columns of consecutive batches just encoded from requests, without reading the
        records back: the put path keeps each batch's arrays and the dispatch loop turns a
        whole run of them into columns with one pass (one set of array operations and one
        property search per run, not per request). The same values :meth:`gather` reads from
        the stored bytes (a property test holds them equal)."""
        topics: dict[str, int] = {}
        counts: list[int] = []
        table: list[tuple[int, ...]] = []
        rows_before = blob_before = 0
        for a in appended:
            batch = a.batch
            table.append(
                (
                    topics.setdefault(batch.topic, len(topics)),
                    batch.queue_id,
                    a.first_queue_offset - rows_before,
                    batch.sys_flag & _HOST_MASK,
                    a.store_timestamp,
                    blob_before,
                    _packed_host(batch.born_host),
                    a.store_host,
                )
            )
            counts.append(len(batch))
            rows_before += len(batch)
            blob_before += len(batch.data)
        # Each per-batch value repeated for its rows, all columns in one call (each row of
        # the result a contiguous column).
        per_row = np.repeat(np.array(table, dtype=np.int64).T, counts, axis=1)
        blob_shift = per_row[5]
        made = cls(
            list(topics),
            per_row[0],
            per_row[1],
            per_row[2] + np.arange(rows_before, dtype=np.int64),
            np.concatenate([a.physical_offsets for a in appended]).astype(np.int64, copy=False),
            np.concatenate([a.sizes for a in appended]).astype(np.int64, copy=False),
            per_row[3],
            per_row[4],
            np.zeros(rows_before, dtype=np.int64),
            np.zeros(rows_before, dtype=np.int64),
            _empty(),
            _empty(),
            _empty(),
            b"".join([a.batch.data for a in appended]),
            np.concatenate([a.batch.props_at for a in appended]) + blob_shift,
            np.concatenate([a.batch.props_end for a in appended]) + blob_shift,
            np.concatenate([a.batch.body_len for a in appended]).astype(np.int64, copy=False),
            per_row[6],
            per_row[7],
        )
        made._read_properties(parking)
        return made

    @classmethod
    def gather(
        cls,
        buffer: bytes | bytearray | mmap.mmap,
        positions: np.ndarray,
        topic_index: np.ndarray,
        topics: list[str],
        parking: frozenset[str] = frozenset(),
    ) -> DispatchBatch:
        """Columns of the records starting at ``positions`` in ``buffer`` (already checked:
        lengths consistent, topic UTF-8); record ``i``'s topic is ``topics[topic_index[i]]``.
        In the ``parking`` topics (:attr:`kernel.context.BrokerContext.parking_topics`) the tag
        code is the due time, not the tag's hash."""
        count = len(positions)
        if not count:
            return cls.empty()
        header = header_rows(buffer, positions)
        size = header["size"].astype(np.int64)
        body_len = header["body_len"].astype(np.int64)
        topic_bytes = np.array([len(t.encode()) for t in topics], dtype=np.int64)
        props_begin = positions + HEADER_SIZE + body_len + 1 + topic_bytes[topic_index] + 2
        props_end = positions + size
        joined = JoinedProperties.join(buffer, props_begin, props_end)
        batch = cls(
            topics,
            topic_index.astype(np.int64, copy=False),
            header["queue_id"].astype(np.int64),
            header["queue_offset"].astype(np.int64),
            header["physical_offset"].astype(np.int64),
            size,
            header["sys_flag"].astype(np.int64),
            header["store_timestamp"].astype(np.int64),
            header["prepared_offset"].astype(np.int64),
            np.zeros(count, dtype=np.int64),
            _empty(),
            _empty(),
            _empty(),
            joined.blob,
            joined.starts,
            joined.ends,
            body_len,
            header["born_host"].astype(np.int64),
            header["store_host"].astype(np.int64),
        )
        batch._read_properties(parking)
        return batch

    def _read_properties(self, parking: frozenset[str]) -> None:
        """Fill :attr:`tags_code` and the index keys from the records' properties, all records
        at once (:func:`wire.batch_codec.dispatch_properties`)."""
        parked_topics = [i for i, topic in enumerate(self.topics) if topic in parking]
        parked = np.isin(self.topic_index, parked_topics) if parked_topics else None
        self.tags_code, self.key_rows, self.key_start, self.key_end = batch_codec.dispatch_properties(
            self.properties_blob, self.properties_start, self.properties_end, parked
        )

    def key_texts(self) -> list[bytes]:
        """The index keys as bytes (for tests and plugins; the index hashes the spans)."""
        blob = self.properties_blob
        return [blob[a:b] for a, b in zip(self.key_start.tolist(), self.key_end.tolist(), strict=True)]

    # --- slicing and joining ----------------------------------------------------------------

    def since(self, physical_offset: int) -> DispatchBatch:
        """The records at or after ``physical_offset``."""
        first = int(np.searchsorted(self.physical_offset, physical_offset, side="left"))
        return self if first == 0 else self._rows(slice(first, None))

    def _rows(self, rows: slice) -> DispatchBatch:
        start, stop, _ = rows.indices(len(self))
        keep = (self.key_rows >= start) & (self.key_rows < stop)
        kept = np.flatnonzero(keep)
        return DispatchBatch(
            self.topics,
            self.topic_index[rows],
            self.queue_id[rows],
            self.queue_offset[rows],
            self.physical_offset[rows],
            self.size[rows],
            self.sys_flag[rows],
            self.store_timestamp[rows],
            self.prepared_offset[rows],
            self.tags_code[rows],
            self.key_rows[kept] - start,
            self.key_start[kept],
            self.key_end[kept],
            self.properties_blob,
            self.properties_start[rows],
            self.properties_end[rows],
            self.body_length[rows],
            self.born_host[rows],
            self.store_host[rows],
        )

    @classmethod
    def concat(cls, batches: Sequence[DispatchBatch]) -> DispatchBatch:
        """One batch of ``batches`` in order (a scan that crossed a file boundary)."""
        batches = [b for b in batches if len(b)]
        if not batches:
            return cls.empty()
        if len(batches) == 1:
            return batches[0]
        topics: dict[str, int] = {}
        topic_index, key_rows, key_start, key_end, starts, ends, blobs = [], [], [], [], [], [], []
        rows_before = blob_before = 0
        for batch in batches:
            remap = np.array([topics.setdefault(t, len(topics)) for t in batch.topics], dtype=np.int64)
            topic_index.append(remap[batch.topic_index])
            key_rows.append(batch.key_rows + rows_before)
            key_start.append(batch.key_start + blob_before)
            key_end.append(batch.key_end + blob_before)
            starts.append(batch.properties_start + blob_before)
            ends.append(batch.properties_end + blob_before)
            blobs.append(batch.properties_blob)
            rows_before += len(batch)
            blob_before += len(batch.properties_blob)

        def joined(name: str) -> np.ndarray:
            return np.concatenate([getattr(b, name) for b in batches])

        return cls(
            list(topics),
            np.concatenate(topic_index),
            joined("queue_id"),
            joined("queue_offset"),
            joined("physical_offset"),
            joined("size"),
            joined("sys_flag"),
            joined("store_timestamp"),
            joined("prepared_offset"),
            joined("tags_code"),
            np.concatenate(key_rows),
            np.concatenate(key_start),
            np.concatenate(key_end),
            b"".join(blobs),
            np.concatenate(starts),
            np.concatenate(ends),
            joined("body_length"),
            joined("born_host"),
            joined("store_host"),
        )

    # --- per-record access (plugins and hooks) ----------------------------------------------

    def queue_keys(self) -> set[tuple[str, int]]:
        """The (topic, queue id) pairs the batch touches, without building records."""
        if not len(self):
            return set()
        pairs = np.unique(self.topic_index * (1 << 32) + self.queue_id).tolist()
        return {(self.topics[pair >> 32], pair & 0xFFFFFFFF) for pair in pairs}

    def properties(self, row: int) -> dict[str, str]:
        start, end = int(self.properties_start[row]), int(self.properties_end[row])
        return decode_properties(self.properties_blob[start:end])

    def record(self, row: int) -> DispatchRecord:
        props = self.properties(row)
        return DispatchRecord(
            topic=self.topics[int(self.topic_index[row])],
            queue_id=int(self.queue_id[row]),
            queue_offset=int(self.queue_offset[row]),
            physical_offset=int(self.physical_offset[row]),
            size=int(self.size[row]),
            tags_code=int(self.tags_code[row]),
            store_timestamp=int(self.store_timestamp[row]),
            sys_flag=int(self.sys_flag[row]),
            keys=props.get("KEYS", ""),
            unique_key=props.get("UNIQ_KEY"),
            properties=props,
            prepared_transaction_offset=int(self.prepared_offset[row]),
            body_length=int(self.body_length[row]),
            born_host=host_text(int(self.born_host[row])),
            store_host=host_text(int(self.store_host[row])),
        )

    def __len__(self) -> int:
        return len(self.physical_offset)

    @overload
    def __getitem__(self, row: int) -> DispatchRecord: ...

    @overload
    def __getitem__(self, row: slice) -> DispatchBatch: ...

    def __getitem__(self, row: int | slice) -> DispatchRecord | DispatchBatch:
        if isinstance(row, slice):
            if row.step not in (None, 1):
                raise ValueError("a dispatch batch slices with step 1 only")
            return self._rows(row)
        if row < 0:
            row += len(self)
        if not 0 <= row < len(self):
            raise IndexError(row)
        return self.record(row)

    def __iter__(self) -> Iterator[DispatchRecord]:
        return map(self.record, range(len(self)))


def queue_keys(records: Sequence[DispatchRecord]) -> set[tuple[str, int]]:
    """The (topic, queue id) pairs ``records`` touch (columns or a plain sequence)."""
    if isinstance(records, DispatchBatch):
        return records.queue_keys()
    return {(r.topic, r.queue_id) for r in records}


def as_batch(records: Sequence[DispatchRecord]) -> DispatchBatch:
    """``records`` as columns: a :class:`DispatchBatch` as it is, any other sequence of
    :class:`DispatchRecord` (a plugin's store, a test) converted once."""
    if isinstance(records, DispatchBatch):
        return records
    if not records:
        return DispatchBatch.empty()
    topics: dict[str, int] = {}
    blob = bytearray()
    starts: list[int] = []
    ends: list[int] = []
    key_rows: list[int] = []
    key_spans: list[int] = []
    for row, r in enumerate(records):
        topics.setdefault(r.topic, len(topics))
        blob += b"\x02"
        starts.append(len(blob))
        blob += encode_properties(r.properties)
        ends.append(len(blob))
        # The record's keys, as the record states them, follow its properties in the blob.
        for key in [r.unique_key] if r.unique_key else []:
            key_rows.append(row)
            key_spans += (len(blob) + 1, len(blob) + 1 + len(key.encode()))
            blob += b"\x02" + key.encode()
        for token in r.keys.split():
            key_rows.append(row)
            key_spans += (len(blob) + 1, len(blob) + 1 + len(token.encode()))
            blob += b"\x02" + token.encode()
    spans = np.array(key_spans, dtype=np.int64).reshape(-1, 2)

    def column(name: str) -> np.ndarray:
        return np.fromiter((getattr(r, name) for r in records), dtype=np.int64, count=len(records))

    return DispatchBatch(
        list(topics),
        np.fromiter((topics[r.topic] for r in records), dtype=np.int64, count=len(records)),
        column("queue_id"),
        column("queue_offset"),
        column("physical_offset"),
        column("size"),
        column("sys_flag"),
        column("store_timestamp"),
        column("prepared_transaction_offset"),
        column("tags_code"),
        np.array(key_rows, dtype=np.int64),
        spans[:, 0].copy(),
        spans[:, 1].copy(),
        bytes(blob),
        np.array(starts, dtype=np.int64),
        np.array(ends, dtype=np.int64),
        column("body_length"),
        np.fromiter((pack_host(r.born_host) for r in records), dtype=np.int64, count=len(records)),
        np.fromiter((pack_host(r.store_host) for r in records), dtype=np.int64, count=len(records)),
    )
