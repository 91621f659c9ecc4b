"""RocketMQ's index files: a hash index from ``topic#key`` to commit-log offsets.

File layout (RocketMQ 4.x ``IndexFile``), named by creation time ``yyyyMMddHHmmssSSS``::

    header 40 bytes: beginTimestamp q, endTimestamp q, beginPhyOffset q, endPhyOffset q,
                     hashSlotCount i, indexCount i
    slots:   hashSlotNum x 4 bytes, the newest entry number for that slot (0 = empty)
    entries: indexNum x 20 bytes: keyHash i, phyOffset q, timeDiff i (seconds since
             beginTimestamp), prevIndex i (the previous entry of the same slot, 0 = none)

Entry numbers start at 1. Keys are ``topic#UNIQ_KEY`` and ``topic#k`` for each token of
``KEYS``; the hash is Java's ``String.hashCode`` made non-negative. A full file is followed by
a new one. The index is a derived view: :class:`IndexService` is fed by the dispatch loop and
rebuilt from the log after a crash.
"""

from __future__ import annotations

import functools
import logging
import mmap
import struct
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

import attrs
import numpy as np
import trio

from kernel.model import SYSFLAG_TRANSACTION_ROLLBACK, DispatchRecord
from plugins.store_mmap.mapped_file import MappedFile
from plugins.store_mmap.view_failure import TracksDispatchFailure
from wire import batch_codec
from wire.dispatch_batch import DispatchBatch
from wire.java_hash import as_signed, unsigned_hash

log = logging.getLogger(__name__)

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = 40
SLOT = struct.Struct(">i")
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = 20
ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("offset", ">i8"), ("diff", ">i4"), ("previous", ">i4")])
_TRANSACTION_TYPE = 0xC
SMALL_PUT_KEYS = 32
"""With the pure codec, up to this many keys a dispatch batch's keys are written one by one
(about 1 µs each, :meth:`IndexFile.put_few`) rather than by array operations (40-60 µs of
set-up whatever the count): the bulk write pays from about 40 keys."""
FEW_KEYS = 2
"""With the compiled codec, keys in lists (records one by one) are written by the pure loop up
to this many (a single send's one or two keys: 1.7 µs a key where making three arrays for the
compiled loop costs 5 µs); more go to the compiled loop (32 keys: 10 µs against 55 µs)."""


def key_hash(key: str) -> int:
    """RocketMQ's index hash of a key: Java's hash made non-negative (``Math.abs``, whose
    result for ``Integer.MIN_VALUE`` is negative and is stored as 0)."""
    value = abs(batch_codec.string_hash(key))
    return value if value >= 0 and value < 2**31 else 0


MANY_KEYS_CHARS = 512
"""A ``KEYS`` property longer than this (ASCII) is split and hashed with arrays, not key by key:
a trace message carries the ids and keys of hundreds of messages, and indexing them one by one
took 44 % of a broker's time for trace messages."""
_SPLIT_WHITESPACE = np.zeros(256, dtype=bool)
_SPLIT_WHITESPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True
"""The ASCII characters ``str.split()`` splits on."""


def _many_key_hashes(topic: str, keys: str) -> np.ndarray | None:
    """:func:`key_hash` of ``topic#key`` for every key of ASCII ``keys`` as ``str.split()``
    finds them, hashed in place by the compiled codec (``int64``); None when a control
    character that is not whitespace makes the split uncertain (the caller goes key by key)."""
    data = keys.encode()
    codes = np.frombuffer(data, dtype=np.uint8)
    separators = np.flatnonzero(codes <= 32)
    if not _SPLIT_WHITESPACE[codes[separators]].all():
        return None
    starts = np.concatenate(([0], separators + 1))
    ends = np.concatenate((separators, [len(codes)]))
    kept = ends > starts
    return key_hashes(batch_codec.java_hashes_at(data, starts[kept], ends[kept], _prefix_hash(topic)))


@functools.lru_cache(maxsize=4096)
def _prefix_hash(topic: str) -> int:
    """The unsigned Java hash of ``topic#``, which every key of the topic's index entries
    starts with (hashed once per topic, not per batch)."""
    return unsigned_hash(f"{topic}#")


def key_hashes(hashes: np.ndarray) -> np.ndarray:
    """:func:`key_hash` for unsigned Java hashes as an array (``int64``)."""
    signed = as_signed(hashes)
    magnitude = np.abs(signed)
    return np.where(magnitude < 2**31, magnitude, 0)


@attrs.define(eq=False)
class IndexFile:
    path: Path
    slots: int
    max_entries: int
    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_offset: int = 0
    end_offset: int = 0
    count: int = 1
    _file: MappedFile | None = None

    @property
    def size(self) -> int:
        return self.size_for(self.slots, self.max_entries)

    @staticmethod
    def size_for(slots: int, max_entries: int) -> int:
        """Bytes of an index file with ``slots`` hash slots and room for ``max_entries``."""
        return HEADER_SIZE + slots * 4 + max_entries * ENTRY_SIZE

    @classmethod
    def open(cls, path: Path, slots: int, max_entries: int, *, create: bool) -> IndexFile:
        """Open an index file, or create one (really allocated; see :class:`MappedFile`).

        :raises ValueError: an existing file of another size (slot/entry settings changed).
        :raises OSError: the file cannot be allocated (disk full).
        """
        index = cls(path, slots, max_entries)
        if not create and path.stat().st_size != index.size:
            raise ValueError(f"{path} is not a {index.size}-byte index file (slots/entries changed?)")
        index._file = MappedFile.open(path, index.size, create=create, start=0)
        if not create:
            (
                index.begin_timestamp,
                index.end_timestamp,
                index.begin_offset,
                index.end_offset,
                _slot_count,
                index.count,
            ) = HEADER.unpack_from(index._file.buffer, 0)
            index.count = max(index.count, 1)
        return index

    @property
    def _map(self) -> mmap.mmap:
        assert self._file is not None, f"{self.path} is closed"
        return self._file.buffer

    @property
    def full(self) -> bool:
        return self.count >= self.max_entries

    def put(self, key: str, physical_offset: int, store_timestamp: int) -> bool:
        """Add one key; False when the file is full."""
        return self.put_hashed(key_hash(key), physical_offset, store_timestamp)

    def put_hashed(self, hashed: int, physical_offset: int, store_timestamp: int) -> bool:
        """Add one key already hashed by :func:`key_hash`; False when the file is full."""
        return self.put_few([hashed], [physical_offset], [store_timestamp]) == 1

    def put_few(self, hashed: Sequence[int], offsets: Sequence[int], timestamps: Sequence[int]) -> int:
        """Add keys already hashed by :func:`key_hash`, in order, one by one, as many as fit;
        returns how many. The header is written once at the end: a single send's keys are
        indexed between two requests of a waiting client, where each write of it was a
        fifth of a key's cost."""
        room = self.max_entries - self.count
        if room <= 0 or not hashed:
            return 0
        if self.count <= 1:
            self.begin_timestamp = timestamps[0]
            self.begin_offset = offsets[0]
        taken = batch_codec.pure.index_entries(
            self._map, self.slots, self.count, room, self.begin_timestamp, hashed, offsets, timestamps
        )
        if taken:
            self.count += taken
            self.end_timestamp, self.end_offset = timestamps[taken - 1], offsets[taken - 1]
            self._write_header()
        return taken

    def put_many(self, hashed: np.ndarray, offsets: np.ndarray, timestamps: np.ndarray) -> int:
        """Add keys already hashed by :func:`key_hashes`, in order, as many as fit; returns how
        many: the entries :meth:`put_few` writes, by the compiled codec's loop (a fraction of a
        µs a key) or, with the pure codec, by array operations."""
        count = min(self.max_entries - self.count, len(hashed))
        if count <= 0:
            return 0
        hashed, offsets, timestamps = hashed[:count], offsets[:count], timestamps[:count]
        if self.count <= 1:
            self.begin_timestamp = int(timestamps[0])
            self.begin_offset = int(offsets[0])
        if batch_codec.ACCELERATED:
            written = batch_codec.index_entries(
                self._map, self.slots, self.count, count, self.begin_timestamp, hashed, offsets, timestamps
            )
            assert written == count
        else:
            self._link_entries(hashed, offsets, timestamps)
        self.count += count
        self.end_timestamp = int(timestamps[count - 1])
        self.end_offset = int(offsets[count - 1])
        self._write_header()
        return count

    def _link_entries(self, hashed: np.ndarray, offsets: np.ndarray, timestamps: np.ndarray) -> None:
        """:func:`wire.batch_codec.pure.index_entries` with arrays (the pure codec's bulk write,
        tens of µs of set-up whatever the count): each entry links to the last earlier key of
        its slot within the batch (a stable sort on the slot), or to the slot's entry."""
        count = len(hashed)
        slot = hashed % self.slots
        numbers = np.arange(self.count, self.count + count, dtype=np.int64)
        order = np.argsort(slot, kind="stable")
        sorted_slot = slot[order]
        first_of_slot = np.ones(count, dtype=bool)
        first_of_slot[1:] = sorted_slot[1:] != sorted_slot[:-1]
        table = np.ndarray((self.slots,), dtype=">i4", buffer=self._map, offset=HEADER_SIZE)
        current = table[sorted_slot].astype(np.int64)
        current[(current <= 0) | (current > self.count)] = 0
        previous_sorted = np.empty(count, dtype=np.int64)
        previous_sorted[0] = 0
        previous_sorted[1:] = numbers[order][:-1]
        previous_sorted = np.where(first_of_slot, current, previous_sorted)
        previous = np.empty(count, dtype=np.int64)
        previous[order] = previous_sorted
        diff = np.clip((timestamps - self.begin_timestamp) // 1000, 0, 2**31 - 1)
        at = HEADER_SIZE + self.slots * 4 + self.count * ENTRY_SIZE
        entries = np.ndarray((count,), dtype=ENTRY_DTYPE, buffer=self._map, offset=at)
        entries["hash"] = hashed
        entries["offset"] = offsets
        entries["diff"] = diff
        entries["previous"] = previous
        last_of_slot = np.ones(count, dtype=bool)
        last_of_slot[:-1] = sorted_slot[:-1] != sorted_slot[1:]
        table[sorted_slot[last_of_slot]] = numbers[order][last_of_slot]
        del table, entries

    def _write_header(self) -> None:
        HEADER.pack_into(
            self._map,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_offset,
            self.end_offset,
            self.slots,
            self.count,
        )

    def overlaps(self, begin: int, end: int) -> bool:
        return self.count > 1 and self.begin_timestamp <= end and self.end_timestamp >= begin

    def lookup(self, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Commit-log offsets whose key hashes like ``key``, stored within [begin, end] ms,
        newest first (the caller checks the real key: hashes collide)."""
        hashed = key_hash(key)
        slot_at = HEADER_SIZE + (hashed % self.slots) * 4
        number = SLOT.unpack_from(self._map, slot_at)[0]
        found: list[int] = []
        seen = 0
        while 0 < number < self.count and len(found) < max_num and seen < self.count:
            seen += 1
            entry_at = HEADER_SIZE + self.slots * 4 + number * ENTRY_SIZE
            entry_hash, offset, diff, previous = ENTRY.unpack_from(self._map, entry_at)
            stored = self.begin_timestamp + diff * 1000
            if entry_hash == hashed and begin - 999 <= stored <= end:
                found.append(offset)
            if previous <= 0 or previous >= number:
                break
            number = previous
        return found

    def flush_blocking(self) -> None:
        if self._file is not None:
            self._file.buffer.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _file_name(now_ms: int) -> str:
    stamp = datetime.fromtimestamp(now_ms / 1000)
    return stamp.strftime("%Y%m%d%H%M%S") + f"{now_ms % 1000:03d}"


@attrs.define(eq=False)
class IndexService(TracksDispatchFailure):
    """All index files of a store; the ``index`` dispatcher."""

    directory: Path
    slots: int
    max_entries: int
    files: list[IndexFile] = attrs.field(factory=list)
    name: str = "index"
    _dispatched: int = 0
    _newest_timestamp: int = 0
    flushed_timestamp: int = 0
    """Store time of the newest record whose keys are durable (checkpoint's index field)."""
    degraded: str = ""
    failing: str = ""
    """Why the last dispatch failed ("" once one succeeds)."""
    """Why keys are currently not being indexed (a new index file could not be allocated)."""

    @classmethod
    def load(cls, directory: Path, slots: int, max_entries: int) -> IndexService:
        directory.mkdir(parents=True, exist_ok=True)
        service = cls(directory, slots, max_entries)
        paths = sorted(p for p in directory.iterdir() if p.name.isdigit())
        expected = IndexFile(Path(), slots, max_entries).size
        for position, path in enumerate(paths):
            if position == len(paths) - 1 and path.stat().st_size < expected:
                # Interrupted allocation of the newest file: it is rebuilt from the log.
                log.warning("removing %s: an index file left by an interrupted allocation", path)
                path.unlink()
                continue
            service.files.append(IndexFile.open(path, slots, max_entries, create=False))
        return service

    def _drop(self, doomed: Callable[[IndexFile], bool]) -> int:
        """Close and delete the files ``doomed`` selects; returns how many."""
        keep = [index for index in self.files if not doomed(index)]
        for index in self.files:
            if index not in keep:
                index.close()
                index.path.unlink(missing_ok=True)
        dropped = len(self.files) - len(keep)
        self.files = keep
        return dropped

    def drop_newer_than(self, timestamp: int) -> int:
        """Abnormal recovery: files written after the checkpoint may be torn; delete them so
        the dispatch loop rebuilds them. Returns how many were dropped."""
        return self._drop(lambda index: index.end_timestamp > timestamp)

    def drop_beyond(self, log_end: int) -> None:
        """Files indexing offsets the log no longer has are rebuilt from the log."""
        self._drop(lambda index: index.end_offset >= log_end and index.count > 1)

    def delete_files_below(self, log_min: int) -> None:
        """Retention: drop index files (never the newest) whose entries all precede ``log_min``."""
        newest = self.files[-1] if self.files else None
        self._drop(lambda index: index is not newest and index.end_offset < log_min)

    def resume_offset(self, log_min: int) -> int:
        """Where dispatch must resume for the index (the last indexed record is skipped)."""
        if not self.files or self.files[-1].count <= 1:
            return log_min
        return max(self.files[-1].end_offset, log_min)

    def set_dispatched(self, offset: int) -> None:
        self._dispatched = offset

    # --- Dispatcher protocol --------------------------------------------------------------

    def dispatched_offset(self) -> int:
        return self._dispatched

    def _dispatch(self, records: Sequence[DispatchRecord], end_offset: int) -> None:
        """Index the batch's keys: hashed as arrays (:mod:`wire.java_hash`), written in bulk
        (:meth:`IndexFile.put_many`), byte for byte what one :meth:`IndexFile.put` per key in
        log order writes. Records that come one by one (single sends) are indexed one by one."""
        if not isinstance(records, DispatchBatch):
            self._dispatch_each(records)
            self._dispatched = end_offset
            return
        batch = records
        if len(batch):
            last = self.files[-1].end_offset if self.files and self.files[-1].count > 1 else -1
            rolled_back = batch.sys_flag & _TRANSACTION_TYPE == SYSFLAG_TRANSACTION_ROLLBACK
            if int(batch.physical_offset[0]) > last and not rolled_back.any():
                # What a running broker dispatches: nothing indexed yet, nothing rolled back.
                if len(batch.key_rows):
                    self._put_keys(batch, None)
                self._newest_timestamp = int(batch.store_timestamp[-1])
            else:
                self._dispatch_some(batch, last, ~rolled_back)
        self._dispatched = end_offset

    def _dispatch_some(self, batch: DispatchBatch, last: int, indexed: np.ndarray) -> None:
        """A batch partly indexed before (a replay after a restart) or holding rolled-back
        half messages: only the ``indexed`` records past ``last``."""
        fresh = (batch.physical_offset > last) & indexed
        keep = fresh[batch.key_rows]
        if keep.any():
            self._put_keys(batch, np.flatnonzero(keep))
        if fresh.any():
            self._newest_timestamp = int(batch.store_timestamp[np.flatnonzero(fresh)[-1]])

    def _dispatch_each(self, records: Sequence[DispatchRecord]) -> None:
        """Records as objects (single sends, an idle broker's few): each ``topic#key`` hashed
        by :func:`key_hash` (the compiled codec's, a fraction of a µs), the same entries
        :meth:`IndexFile.put` per key writes."""
        last = self.files[-1].end_offset if self.files and self.files[-1].count > 1 else -1
        hashed: list[int] = []
        offsets: list[int] = []
        timestamps: list[int] = []
        # The three appends are written out at each key below: a helper call per key cost
        # 0.2 µs of the 1.4 µs a single send's key takes here.
        newest = None
        for r in records:
            if r.sys_flag & _TRANSACTION_TYPE == SYSFLAG_TRANSACTION_ROLLBACK:
                continue
            offset = r.physical_offset
            if offset <= last:
                continue  # indexed before a restart
            newest = timestamp = r.store_timestamp
            topic, keys, unique = r.topic, r.keys, r.unique_key
            bulk = keys and len(keys) > MANY_KEYS_CHARS and keys.isascii()
            many = _many_key_hashes(topic, keys) if bulk else None
            if many is not None:
                # A trace message: the ids and keys of hundreds of messages, hashed as arrays
                # after the keys before it (entries stay in log order).
                if unique:
                    hashed.append(key_hash(f"{topic}#{unique}"))
                    offsets.append(offset)
                    timestamps.append(timestamp)
                if hashed:
                    self._write_keys(hashed, offsets, timestamps)
                    hashed.clear()
                    offsets.clear()
                    timestamps.clear()
                self._write_keys(many, np.full(len(many), offset), np.full(len(many), timestamp))
                continue
            if unique:
                hashed.append(key_hash(f"{topic}#{unique}"))
                offsets.append(offset)
                timestamps.append(timestamp)
            if keys:
                for key in keys.split():
                    hashed.append(key_hash(f"{topic}#{key}"))
                    offsets.append(offset)
                    timestamps.append(timestamp)
        if newest is not None:
            self._newest_timestamp = newest
        if hashed:
            self._write_keys(hashed, offsets, timestamps)

    def _put_keys(self, batch: DispatchBatch, chosen: np.ndarray | None) -> None:
        """Index keys ``chosen`` (positions among the batch's keys, in order; None: all of
        them) as ``topic#key``: hashed where they lie in the batch's properties, one pass per
        topic (:func:`wire.batch_codec.java_hashes_at` over the key spans), written in bulk,
        or one by one when there are so few that the bulk set-up would cost more (an idle
        broker's lone put)."""
        if chosen is None:
            rows, starts, ends = batch.key_rows, batch.key_start, batch.key_end
        else:
            rows, starts, ends = batch.key_rows[chosen], batch.key_start[chosen], batch.key_end[chosen]
        blob = batch.properties_blob
        if len(batch.topics) == 1:
            hashes = batch_codec.java_hashes_at(blob, starts, ends, _prefix_hash(batch.topics[0]))
        else:
            topic_of = batch.topic_index[rows]
            hashes = np.empty(len(rows), dtype=np.uint32)
            for topic in np.unique(topic_of).tolist():
                mine = np.flatnonzero(topic_of == topic)
                hashes[mine] = batch_codec.java_hashes_at(
                    blob, starts[mine], ends[mine], _prefix_hash(batch.topics[topic])
                )
        self._write_keys(key_hashes(hashes), batch.physical_offset[rows], batch.store_timestamp[rows])

    def _write_keys(
        self,
        hashed: Sequence[int] | np.ndarray,
        offsets: Sequence[int] | np.ndarray,
        timestamps: Sequence[int] | np.ndarray,
    ) -> None:
        """Write hashed keys in order, starting new files as they fill: one by one when there
        are so few that the bulk set-up would cost more, else by :meth:`IndexFile.put_many`."""
        few = FEW_KEYS if batch_codec.ACCELERATED else SMALL_PUT_KEYS
        if len(hashed) <= few:
            # Python ints for the struct packing (numpy scalars would reach the header fields).
            hashed, offsets, timestamps = (
                column.tolist() if isinstance(column, np.ndarray) else column
                for column in (hashed, offsets, timestamps)
            )
            done = 0
            while done < len(hashed):
                if (not self.files or self.files[-1].full) and not self._new_file():
                    return
                done += self.files[-1].put_few(hashed[done:], offsets[done:], timestamps[done:])
            return
        hashed = np.asarray(hashed, dtype=np.int64)
        offsets = np.asarray(offsets, dtype=np.int64)
        timestamps = np.asarray(timestamps, dtype=np.int64)
        done = 0
        while done < len(hashed):
            if not self.files or self.files[-1].full:
                if not self._new_file():
                    return
            done += self.files[-1].put_many(hashed[done:], offsets[done:], timestamps[done:])

    def _new_file(self) -> bool:
        """Start a new index file; on an allocation failure (disk full) indexing pauses, the
        reason is kept in ``degraded`` and the messages stay readable by queue and offset."""
        now = int(time.time() * 1000)
        name = _file_name(now)
        while (self.directory / name).exists() or (self.files and name <= self.files[-1].path.name):
            now += 1
            name = _file_name(now)
        try:
            index = IndexFile.open(self.directory / name, self.slots, self.max_entries, create=True)
        except OSError as error:
            if not self.degraded:
                log.error(
                    "cannot allocate index file %s (%s): keys are not indexed until space returns",
                    name,
                    error,
                )
            self.degraded = f"index file allocation failed: {error}"
            return False
        if self.degraded:
            log.warning("index files can be allocated again; indexing resumes")
            self.degraded = ""
        self.files.append(index)
        log.info("created index file %s", name)
        return True

    async def persist(self, *, thorough: bool) -> None:
        """Flush the index files, only when ``thorough``: index files take random writes all
        over a large mapping, so they are flushed with the checkpoint (RocketMQ flushes them
        when full and at shutdown); recovery rebuilds entries newer than the checkpoint."""
        if not thorough:
            await trio.lowlevel.checkpoint()
            return
        files, newest = list(self.files), self._newest_timestamp
        await trio.to_thread.run_sync(lambda: [f.flush_blocking() for f in files])
        self.flushed_timestamp = max(self.flushed_timestamp, newest)

    @property
    def newest_timestamp(self) -> int:
        return self._newest_timestamp

    def query(self, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Offsets for ``key`` (``topic#k``) newest first, across files overlapping the range."""
        found: list[int] = []
        for index in reversed(self.files):
            if len(found) >= max_num:
                break
            if index.overlaps(begin, end):
                found.extend(index.lookup(key, max_num - len(found), begin, end))
        return found

    def close(self) -> None:
        for index in self.files:
            index.close()
