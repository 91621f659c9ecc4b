"""The consume-queue pool: small queues' entries in memory, journaled together in one file set.

Why: a queue with its own files pays a 4 KiB disk block and a file descriptor from its first
entry on, so 100,000 queues holding one message each took 391 MiB of consume-queue disk and,
past the open-files bound, an ``open`` per write to a cold queue (RocketMQ 5.3 moved consume
queues into RocksDB for the same reason). A queue's first entries instead live in memory (20
bytes each, RocketMQ's entry) and are journaled with those of every other small queue in
``consumequeue_pool/``. A queue that grows past ``pooled_queue_entries``, and the largest ones
while the pool holds more than ``queue_pool_memory``, are *promoted*: their entries are written
to their own files in RocketMQ's layout and they continue there (see
:class:`~plugins.store_mmap.consume_queue.ConsumeQueues`). Like every consume queue the pool is
derived from the commit log: recovery re-dispatches whatever the journal lost.

The journal is a sequence of SEGMENT_SIZE-byte sparse files named by offset, allocated ahead
of writes at put time (:meth:`QueuePool.promise`), so a full disk refuses the put that needed
the room and never fails the dispatch of an acknowledged one. A record::

    u32 length (the whole record)  u32 CRC-32 of the bytes after it  u8 kind
    u16 topic length  topic (UTF-8)  i32 queue id  i64 queue offset  [20-byte entries]

Kinds: ENTRIES (entries from the queue offset on: a replay skips those the queue holds, and a
queue offset past its end restarts it there, as retention does), END (the queue ends at the
offset: the log was truncated), DROP (the queue left the pool). A length of FILE_END says the
records go on in the next file; replay stops at anything else that is not a valid record (a
zero length, a length or CRC that is wrong: a torn tail, or a page a power cut lost) and the
journal is cut there. Compaction writes the live state again at the tail once the journal has
grown COMPACT_FACTOR times past it (and past COMPACT_MIN); the segments before the rewrite are
deleted at the next persist that flushed it.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import attrs
import numpy as np

from kernel.model import QueueEntry
from kernel.queue_entries import QueueEntries
from plugins.store_mmap.config import CQ_ENTRY_SIZE
from plugins.store_mmap.mapped_file import MappedFile
from plugins.store_mmap.mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

SEGMENT_SIZE = 64 << 20
"""Bytes per journal file."""
ALLOCATE_STEP = 1 << 20
"""Journal space is allocated this far ahead of what puts have promised (one ``fallocate``
per MiB of entries, not one per put)."""
COMPACT_MIN = 32 << 20
"""The journal is never compacted below this size (a restart replays at most about this)."""
COMPACT_FACTOR = 4
"""... and is compacted once it is this many times the size of the live state."""

ENTRIES, END, DROP = 1, 2, 3
FILE_END = 0xFFFFFFFF
"""In place of a record's length: the next record did not fit, it is in the next file."""
_LENGTH = struct.Struct(">I")
_LENGTH_CRC = struct.Struct(">II")
_KIND_TOPIC = struct.Struct(">BH")
_QUEUE = struct.Struct(">iq")
_FIXED = _LENGTH_CRC.size + _KIND_TOPIC.size + _QUEUE.size
_ENTRY_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8")])
_BLANK_SIZE = 0x7FFFFFFF


def record_size(topic: str, entry_count: int) -> int:
    """Bytes of a journal record carrying ``entry_count`` entries of a queue of ``topic``."""
    return _FIXED + len(topic.encode()) + entry_count * CQ_ENTRY_SIZE


def encode_record(kind: int, topic: str, queue_id: int, queue_offset: int, entries: bytes = b"") -> bytes:
    name = topic.encode()
    body = _KIND_TOPIC.pack(kind, len(name)) + name + _QUEUE.pack(queue_id, queue_offset) + entries
    return _LENGTH_CRC.pack(_LENGTH_CRC.size + len(body), zlib.crc32(body)) + body


@attrs.define(eq=False, slots=True)
class PooledQueue:
    """A consume queue whose entries are held by the pool (the same reads and maintenance
    calls as a :class:`~plugins.store_mmap.consume_queue.ConsumeQueue`)."""

    topic: str
    queue_id: int
    pool: QueuePool
    min_queue_offset: int = 0
    """The queue offset of the first held entry (entries below it were deleted)."""
    entries: bytearray = attrs.field(factory=bytearray)

    @property
    def max_queue_offset(self) -> int:
        return self.min_queue_offset + len(self.entries) // CQ_ENTRY_SIZE

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.queue_id)

    def append(self, entries: bytes, first_queue_offset: int) -> None:
        """Hold and journal encoded entries starting at ``first_queue_offset`` (the queue's end,
        or anywhere when the queue is empty: it starts there)."""
        if not self.entries:
            self.min_queue_offset = first_queue_offset
        elif first_queue_offset != self.max_queue_offset:
            raise AssertionError("append at the wrong queue offset")
        self.entries += entries
        self.pool.held_bytes += len(entries)
        self.pool.emit(encode_record(ENTRIES, self.topic, self.queue_id, first_queue_offset, entries))

    def start_at(self, queue_offset: int) -> None:
        """Empty the queue and continue it at ``queue_offset`` (its earlier records are gone)."""
        self.pool.held_bytes -= len(self.entries)
        self.entries = bytearray()
        self.min_queue_offset = queue_offset

    def _rows(self) -> np.ndarray:
        return np.frombuffer(self.entries, dtype=_ENTRY_DTYPE)

    def lookup(self, queue_offset: int, max_entries: int) -> list[QueueEntry]:
        return list(self.lookup_columns(queue_offset, max_entries))

    def lookup_columns(self, queue_offset: int, max_entries: int) -> QueueEntries:
        first = max(queue_offset, self.min_queue_offset) - self.min_queue_offset
        last = min(len(self.entries) // CQ_ENTRY_SIZE, first + max(max_entries, 0))
        if last <= first:
            empty = np.zeros(0, dtype=np.int64)
            return QueueEntries(empty, empty, empty, empty)
        rows = np.frombuffer(self.entries, dtype=_ENTRY_DTYPE)[first:last]
        begin = self.min_queue_offset + first
        return QueueEntries(
            np.arange(begin, begin + len(rows), dtype=np.int64),
            rows["offset"].astype(np.int64),
            rows["size"].astype(np.int64),
            rows["tags"].astype(np.int64),
        )

    def truncate_beyond(self, log_end: int) -> int:
        """Drop trailing entries pointing at or past ``log_end``; returns how many."""
        if not self.entries:
            return 0
        rows = self._rows()
        beyond = (rows["size"] != _BLANK_SIZE) & (rows["offset"] + rows["size"] > log_end)
        del rows  # a view of the entries, which are resized below
        keep = len(beyond)
        while keep and beyond[keep - 1]:
            keep -= 1
        dropped = len(beyond) - keep
        if dropped:
            self.pool.held_bytes -= dropped * CQ_ENTRY_SIZE
            del self.entries[keep * CQ_ENTRY_SIZE :]
            self.pool.emit(encode_record(END, self.topic, self.queue_id, self.max_queue_offset))
        return dropped

    def correct_min_offset(self, log_min: int) -> None:
        """Let go of leading entries whose records were deleted from the log (retention)."""
        if not self.entries:
            return
        rows = self._rows()
        alive = np.flatnonzero((rows["offset"] >= log_min) & (rows["size"] != _BLANK_SIZE))
        skip = int(alive[0]) if len(alive) else len(rows)
        del rows  # a view of the entries, which are resized below
        if skip:
            self.pool.held_bytes -= skip * CQ_ENTRY_SIZE
            del self.entries[: skip * CQ_ENTRY_SIZE]
            self.min_queue_offset += skip

    def delete_files_below(self, log_min: int) -> None:
        self.correct_min_offset(log_min)

    def flush_blocking(self, least_pages: int = 0) -> None:
        """Nothing of its own to flush: the pool's journal is flushed by the queues' persist."""


@attrs.define(eq=False)
class QueuePool:
    """The journal and the in-memory entries of every pooled queue (see the module docstring)."""

    segments: MappedFileQueue
    max_entries: int
    """``pooled_queue_entries``: a queue is promoted once it would hold more."""
    memory_bound: int
    """``queue_pool_memory``: entry bytes held at most before the largest queues are promoted."""
    members: dict[tuple[str, int], PooledQueue] = attrs.field(factory=dict)
    held_bytes: int = 0
    """Bytes of entries held by the members."""
    _pending: list[bytes] = attrs.field(factory=list)
    """Records made since the last :meth:`write` (written in order, at once)."""
    _promised: int = 0
    """Journal bytes that accepted puts may still need (see :meth:`promise`)."""
    _rewrite_at: int = 0
    """Where the last compaction's rewrite starts: segments before it go once it is flushed."""
    _rewrite_end: int = 0
    """Where the last compaction's rewrite ends."""

    @classmethod
    def load(cls, directory: Path, max_entries: int, memory_bound: int) -> QueuePool:
        """Open the journal and rebuild every pooled queue by replaying it; a torn tail is cut."""
        segments = MappedFileQueue.load(directory, SEGMENT_SIZE, sparse=True)
        pool = cls(segments, max_entries, memory_bound)
        end = pool._replay()
        if segments.files:
            segments.truncate(end)
        return pool

    # --- members ------------------------------------------------------------------------------

    def add(self, topic: str, queue_id: int) -> PooledQueue:
        queue = PooledQueue(topic, queue_id, self)
        self.members[queue.key] = queue
        return queue

    def drop(self, queue: PooledQueue) -> None:
        """``queue`` left the pool (promoted to its own files, or destroyed)."""
        if self.members.pop(queue.key, None) is not None:
            self.held_bytes -= len(queue.entries)
            self.emit(encode_record(DROP, queue.topic, queue.queue_id, queue.max_queue_offset))

    def largest(self) -> Iterator[PooledQueue]:
        """Members by entries held, most first (who is promoted when memory is over its bound)."""
        return iter(sorted(self.members.values(), key=lambda q: len(q.entries), reverse=True))

    # --- journal ------------------------------------------------------------------------------

    def emit(self, record: bytes) -> None:
        self._pending.append(record)

    def make_room(self, topic: str, count: int) -> None:
        """Journal space for a put of ``count`` entries to a pooled queue of ``topic``: promised
        from what is allocated, or allocated now.

        :raises OSError: ENOSPC and the like; nothing is promised.
        """
        if not self.promise(topic, count):
            self.reserve(topic, count)

    def promise(self, topic: str, count: int) -> bool:
        """Whether the journal has disk space for a put of ``count`` entries to a pooled queue
        of ``topic`` on top of what earlier puts were promised; if so it is promised too."""
        need = self._promised + record_size(topic, count)
        if self._room() < need:
            return False
        self._promised = need
        return True

    def reserve(self, topic: str, count: int) -> None:
        """Allocate journal space for a put of ``count`` entries (ALLOCATE_STEP more when the
        disk has it), then promise it.

        :raises OSError: ENOSPC and the like; nothing is promised.
        """
        size = record_size(topic, count)
        try:
            self._allocate(self._promised + size + ALLOCATE_STEP)
        except OSError:
            self._allocate(self._promised + size)  # a nearly full disk: just what is needed
        self._promised += size

    def _allocate(self, need: int) -> None:
        """Journal space for ``need`` more bytes: in the file being written, or (with the rest
        of that file) at the start of the next one."""
        tail = self._tail()
        if tail is not None and tail.size - tail.wrote >= need:
            tail.allocate_to(tail.wrote + need)
            return
        if tail is not None:
            tail.allocate_to(tail.size)  # records that still fit go there first
        files = self.segments.files
        if tail is None or tail is files[-1]:
            start = files[-1].end if files else 0
            self.segments.extend_to(start + 1, start)
        self.segments.files[-1].allocate_to(min(need, self.segments.file_size))

    def settle(self) -> None:
        """Every accepted put is dispatched: nothing is owed (a put promised to a queue that
        was promoted meanwhile, or records merged under one header, took less than promised)."""
        if not self._pending:
            self._promised = 0

    def _room(self) -> int:
        """Journal bytes allocated and free: in the file being written, or, once it is too full
        for what is promised, in the one after it."""
        files = self.segments.files
        if not files:
            return 0
        tail = self._tail()
        if tail is None:
            return 0
        room = tail.allocated - tail.wrote
        if tail is not files[-1] and files[-1].wrote == 0:
            room = max(room, files[-1].allocated)
        return room

    def _tail(self) -> MappedFile | None:
        """The segment records go to now (None: every segment is full)."""
        files = self.segments.files
        index = len(files)
        while index and files[index - 1].wrote < files[index - 1].size:
            index -= 1
        return files[index] if index < len(files) else None

    def write(self) -> int:
        """Write the pending records in order (one ``pwrite`` per segment they go to); returns
        the bytes written.

        :raises OSError: the unwritten records stay pending for the next call.
        """
        if not self._pending:
            return 0
        written = 0
        at = 0
        records = self._pending
        try:
            while at < len(records):
                tail = self.segments.writable_file()
                free = tail.size - tail.wrote
                end, size = at, 0
                while end < len(records) and size + len(records[end]) <= free:
                    size += len(records[end])
                    end += 1
                if end == at:
                    if tail.wrote == 0:
                        raise ValueError(f"a {len(records[at])}-byte pool record exceeds a journal file")
                    if free >= _LENGTH.size:
                        tail.allocate_to(tail.wrote + _LENGTH.size)
                        tail.write(_LENGTH.pack(FILE_END))
                    tail.fill_to_end()
                    continue
                tail.allocate_to(tail.wrote + size)
                tail.write(b"".join(records[at:end]))
                written += size
                at = end
        finally:
            del records[:at]
            self._promised = max(0, self._promised - written)
        return written

    def journal_bytes(self) -> int:
        """Journal bytes since the last compaction's rewrite began."""
        return self.segments.max_offset - max(self._rewrite_at, self.segments.min_offset)

    def live_bytes(self) -> int:
        """About what a rewrite of the live state takes (entries plus a header per queue)."""
        return self.held_bytes + len(self.members) * (_FIXED + 16)

    def compact_if_due(self) -> bool:
        """Write the live state again at the journal's tail when the journal has grown past it
        (see the module docstring); the older segments are deleted by :meth:`drop_obsolete`
        once the rewrite is durable.

        :raises OSError: the rewrite could not be written (it stays pending).
        """
        if self.journal_bytes() < max(COMPACT_MIN, COMPACT_FACTOR * self.live_bytes()):
            return False
        self.write()
        rewrite_at = self.segments.max_offset
        for queue in self.members.values():
            self.emit(
                encode_record(
                    ENTRIES, queue.topic, queue.queue_id, queue.min_queue_offset, bytes(queue.entries)
                )
            )
        self.write()
        self._rewrite_at, self._rewrite_end = rewrite_at, self.segments.max_offset
        log.info(
            "consume-queue pool compacted: %d queues, %d KiB rewritten at journal offset %d",
            len(self.members),
            (self._rewrite_end - rewrite_at) >> 10,
            rewrite_at,
        )
        return True

    def flush_plan(self) -> tuple[list[MappedFile], int]:
        """(the segments to flush, the journal offset that is durable once they are), taken on
        the event loop before a worker thread runs :func:`flush_segments`."""
        return [m for m in self.segments.files if m.wrote > m.flushed], self.segments.max_offset

    def drop_obsolete(self, durable: int) -> None:
        """Delete the segments wholly before the last compaction's rewrite once the rewrite is
        durable (``durable`` from :meth:`flush_plan`, after its flush)."""
        if not self._rewrite_end or durable < self._rewrite_end:
            return
        count = sum(1 for mapped in self.segments.files[:-1] if mapped.end <= self._rewrite_at)
        if count:
            self.segments.delete_leading(count)

    def destroy_all(self) -> None:
        """Forget every pooled queue and delete the journal (the log is gone)."""
        self.members.clear()
        self._pending.clear()
        self.held_bytes = self._promised = 0
        self.segments.destroy_all()
        self._rewrite_at = self._rewrite_end = 0

    def close(self) -> None:
        self.segments.close()

    # --- replay -------------------------------------------------------------------------------

    def _replay(self) -> int:
        """Rebuild the members from the journal; returns the offset just past the last valid
        record. A file goes on in the next only where it says so (FILE_END, or no room left for
        a length): anything else that is not a valid record (zeros where a power cut lost a
        page, a torn or damaged record) ends the replay there, and the journal is cut."""
        end = self.segments.min_offset
        records = 0
        for mapped in self.segments.files:
            data = _read_written(mapped)
            position, going_on, torn = 0, False, False
            while True:
                if mapped.size - position < _LENGTH.size:
                    going_on = True
                    break
                if position + _LENGTH.size > len(data):
                    break
                (length,) = _LENGTH.unpack_from(data, position)
                if length == FILE_END:
                    going_on = True
                    break
                if length == 0:
                    break
                if length < _FIXED or position + length > len(data):
                    torn = True
                    break
                (crc,) = _LENGTH.unpack_from(data, position + _LENGTH.size)
                body = data[position + _LENGTH_CRC.size : position + length]
                if zlib.crc32(body) != crc:
                    torn = True
                    break
                self._apply(body)
                records += 1
                position += length
            if going_on:
                end = mapped.end
                continue
            end = mapped.start + position
            if torn:
                log.warning(
                    "consume-queue pool: %s ends in a torn record at %d; cut there", mapped.path, position
                )
            break
        if records:
            log.info("consume-queue pool: %d records replayed, %d queues", records, len(self.members))
        return end

    def _apply(self, body: bytes) -> None:
        kind, name_length = _KIND_TOPIC.unpack_from(body, 0)
        at = _KIND_TOPIC.size
        topic = body[at : at + name_length].decode()
        queue_id, queue_offset = _QUEUE.unpack_from(body, at + name_length)
        entries = body[at + name_length + _QUEUE.size :]
        key = (topic, queue_id)
        queue = self.members.get(key)
        if kind == DROP:
            if queue is not None:
                del self.members[key]
                self.held_bytes -= len(queue.entries)
            return
        if queue is None:
            if kind != ENTRIES:
                return
            queue = self.add(topic, queue_id)
            queue.min_queue_offset = queue_offset
        if kind == END:
            keep = max(0, queue_offset - queue.min_queue_offset)
            if keep < len(queue.entries) // CQ_ENTRY_SIZE:
                self.held_bytes -= len(queue.entries) - keep * CQ_ENTRY_SIZE
                del queue.entries[keep * CQ_ENTRY_SIZE :]
            return
        count = len(entries) // CQ_ENTRY_SIZE
        have = queue.max_queue_offset
        if queue_offset > have or (queue_offset < queue.min_queue_offset and not queue.entries):
            queue.start_at(queue_offset)
            have = queue_offset
        if queue_offset + count <= have:
            return
        skip = (have - queue_offset) * CQ_ENTRY_SIZE
        queue.entries += entries[skip:]
        self.held_bytes += len(entries) - skip


def _read_written(mapped: MappedFile) -> bytes:
    """A segment's bytes up to its first hole (a sparse file holds zeros past its records)."""
    fd = os.open(mapped.path, os.O_RDONLY)
    try:
        try:
            end = os.lseek(fd, 0, os.SEEK_HOLE)
        except OSError:
            end = os.fstat(fd).st_size
        return os.pread(fd, min(end, mapped.size), 0)
    finally:
        os.close(fd)


def flush_segments(segments: list[MappedFile]) -> None:
    """Flush journal segments (a worker thread; see :meth:`QueuePool.flush_plan`)."""
    for mapped in segments:
        if mapped.hold():
            try:
                mapped.flush_blocking()
            finally:
                mapped.release()
