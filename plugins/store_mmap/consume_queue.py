"""Consume queues: per (topic, queue id), 20-byte entries (commit-log offset, size, tag hash).

Entry *n* sits at byte ``n * 20`` of the queue's logical sequence, split into files of
``consume_queue_file_size`` bytes under ``consumequeue/<topic>/<queueId>/``. A queue's first
``pooled_queue_entries`` entries are held by the pool instead (:mod:`.queue_pool`: in memory,
journaled with every other small queue's), and it gets its own files once it grows past them.
Queues are a derived view: :class:`ConsumeQueues` is fed by the kernel's dispatch loop and can
always be rebuilt from the commit log. Re-dispatching an entry that exists is a no-op
(idempotent).
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import numpy as np
import trio

from kernel.errors import StoreError
from kernel.model import DispatchRecord, QueueEntry
from kernel.open_files import explain_open_failure
from kernel.queue_entries import QueueEntries
from plugins.store_mmap.config import CQ_ENTRY_SIZE
from plugins.store_mmap.mapped_file import PAGE_SIZE, MappedFile
from plugins.store_mmap.mapped_file_queue import MappedFileQueue
from plugins.store_mmap.open_files import OpenFileBudget
from plugins.store_mmap.queue_pool import PooledQueue, QueuePool, flush_segments
from plugins.store_mmap.view_failure import TracksDispatchFailure
from wire.dispatch_batch import DispatchBatch

log = logging.getLogger(__name__)

ENTRY = struct.Struct(">qiq")
ENTRY_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8")])
"""An entry as a numpy row (the same 20 bytes as :data:`ENTRY`)."""
BLANK_ENTRY = ENTRY.pack(0, 0x7FFFFFFF, 0)
NAME_MAX = 255
"""The longest file name Linux file systems take, in bytes."""


class StorePathError(StoreError):
    """A topic or queue id that would put a consume queue outside the store's root."""


def _valid_entries(path: Path) -> int:
    """How many entries from the file's start are valid (up to the first all-zero or invalid
    one), read without mapping the file: only up to its first hole (``SEEK_HOLE``), since a
    sparse queue file holds zeros past its data, and checked as one array."""
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            end = os.lseek(fd, 0, os.SEEK_HOLE)
        except OSError:  # a file system without SEEK_HOLE: the whole file
            end = os.fstat(fd).st_size
        data = os.pread(fd, end - end % CQ_ENTRY_SIZE, 0)
    finally:
        os.close(fd)
    rows = np.frombuffer(data, dtype=ENTRY_DTYPE)
    invalid = np.flatnonzero((rows["offset"] < 0) | (rows["size"] <= 0))
    return int(invalid[0]) if len(invalid) else len(rows)


@attrs.define(eq=False)
class ConsumeQueue:
    topic: str
    queue_id: int
    files: MappedFileQueue
    min_queue_offset: int = 0

    @property
    def max_queue_offset(self) -> int:
        return self.files.max_offset // CQ_ENTRY_SIZE

    def recover(self) -> int:
        """Find the end of the valid entries (the first all-zero or invalid entry) and set
        positions there; returns the number of entries."""
        for mapped in reversed(self.files.files):
            valid = _valid_entries(mapped.path)
            if valid:
                self.files.truncate(mapped.start + valid * CQ_ENTRY_SIZE)
                break
        else:
            self.files.truncate(self.files.min_offset)
        if self.files.files:
            self.min_queue_offset = max(self.min_queue_offset, self.files.min_offset // CQ_ENTRY_SIZE)
        return self.max_queue_offset

    def truncate_beyond(self, log_end: int) -> int:
        """Drop entries pointing at or past ``log_end`` (the log lost its tail); returns how many."""
        dropped = 0
        while self.max_queue_offset > self.min_queue_offset:
            last = self.lookup(self.max_queue_offset - 1, 1)[0]
            if last.size == 0x7FFFFFFF or last.physical_offset + last.size <= log_end:
                break
            self.files.truncate((self.max_queue_offset - 1) * CQ_ENTRY_SIZE)
            dropped += 1
        return dropped

    def correct_min_offset(self, log_min: int) -> None:
        """Skip leading entries whose records were deleted from the log (RocketMQ's
        ``correctMinOffset``)."""
        while self.min_queue_offset < self.max_queue_offset:
            batch = self.lookup(self.min_queue_offset, 1024)
            for entry in batch:
                if entry.physical_offset >= log_min and entry.size != 0x7FFFFFFF:
                    self.min_queue_offset = entry.queue_offset
                    return
            self.min_queue_offset = batch[-1].queue_offset + 1

    def delete_files_below(self, log_min: int) -> None:
        """Remove leading files whose entries all point below ``log_min``; move the minimum."""
        count = 0
        for mapped in self.files.files[:-1]:
            last_entry = (mapped.start + mapped.wrote) // CQ_ENTRY_SIZE - 1
            entry = self.lookup(last_entry, 1)
            if not entry or entry[0].physical_offset + entry[0].size > log_min:
                break
            count += 1
        if count:
            self.files.delete_leading(count)
            self.min_queue_offset = max(self.min_queue_offset, self.files.min_offset // CQ_ENTRY_SIZE)
        self.correct_min_offset(log_min)

    def has_room(self, next_queue_offset: int, count: int) -> bool:
        """Whether entries ``next_queue_offset`` .. ``+ count`` have files and disk space (the
        file of the last one is allocated that far; earlier ranges are allocated first)."""
        needed = (next_queue_offset + count) * CQ_ENTRY_SIZE
        files = self.files.files
        if not files or files[-1].end < needed or needed <= files[0].start:
            return False
        last = self.files.find(needed - 1)
        return last.allocated >= needed - last.start

    def reserve(self, next_queue_offset: int, count: int) -> None:
        """Make sure the files that entries ``next_queue_offset`` .. ``+ count`` go to exist and
        have disk space for them, so dispatching them opens no file and cannot meet a full disk
        (a put calls this before its append).

        :raises OSError: a file could not be created or allocated (EMFILE, ENOSPC, EACCES ...).
        """
        begin, end = next_queue_offset * CQ_ENTRY_SIZE, (next_queue_offset + count) * CQ_ENTRY_SIZE
        self.files.extend_to(end, begin)
        for mapped in self.files.files:
            if mapped.end > begin and mapped.start < end:
                mapped.allocate_to(min(end, mapped.end) - mapped.start)

    def append(self, entries: bytes, first_queue_offset: int) -> None:
        """Write encoded entries starting at ``first_queue_offset`` (the queue's end)."""
        if first_queue_offset * CQ_ENTRY_SIZE != self.files.max_offset and self.files.files:
            raise AssertionError("append at the wrong queue offset")
        at = 0
        start = first_queue_offset * CQ_ENTRY_SIZE
        while at < len(entries):
            mapped = self.files.writable_file(start)
            room = mapped.size - mapped.wrote
            chunk = entries[at : at + room]
            mapped.write(chunk)
            at += len(chunk)

    def lookup(self, queue_offset: int, max_entries: int) -> list[QueueEntry]:
        return list(self.lookup_columns(queue_offset, max_entries))

    def lookup_columns(self, queue_offset: int, max_entries: int) -> QueueEntries:
        """:meth:`lookup` as columns: each file's entries copied out with one ``frombuffer``."""
        parts: list[np.ndarray] = []
        firsts: list[int] = []
        end = min(self.max_queue_offset, queue_offset + max_entries)
        at = max(queue_offset, self.min_queue_offset)
        while at < end:
            byte_offset = at * CQ_ENTRY_SIZE
            mapped = self.files.find(byte_offset)
            first = (byte_offset - mapped.start) // CQ_ENTRY_SIZE
            last = min(mapped.wrote // CQ_ENTRY_SIZE, first + (end - at))
            if last == first:
                break
            view = mapped.read(first * CQ_ENTRY_SIZE, (last - first) * CQ_ENTRY_SIZE)
            parts.append(np.frombuffer(view, dtype=ENTRY_DTYPE))
            firsts.append(at)
            at += last - first
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return QueueEntries(empty, empty, empty, empty)
        entries = parts[0] if len(parts) == 1 else np.concatenate(parts)
        queue_offsets = np.concatenate(
            [np.arange(f, f + len(p), dtype=np.int64) for f, p in zip(firsts, parts, strict=True)]
        )
        return QueueEntries(
            queue_offsets,
            entries["offset"].astype(np.int64),
            entries["size"].astype(np.int64),
            entries["tags"].astype(np.int64),
        )

    def start_at(self, queue_offset: int, file_size: int) -> None:
        """Begin an empty queue at ``queue_offset``: the file holding it is created and the
        entries before it are RocketMQ's blank entries (offset 0, size MAX_INT), which readers
        skip as removed."""
        self.files.destroy_all()
        start = (queue_offset * CQ_ENTRY_SIZE // file_size) * file_size
        self.files.writable_file(start)
        blanks = queue_offset - start // CQ_ENTRY_SIZE
        self.append(BLANK_ENTRY * blanks, start // CQ_ENTRY_SIZE)
        self.min_queue_offset = queue_offset

    def flush_blocking(self, least_pages: int = 0) -> None:
        """Flush files with unflushed entries: a full file always, the others once at least
        ``least_pages`` pages are dirty (0 = any)."""
        for mapped in self.files.files:
            dirty = mapped.wrote - mapped.flushed
            worth = mapped.wrote == mapped.size or dirty >= least_pages * PAGE_SIZE
            if dirty > 0 and worth and mapped.hold():
                try:
                    mapped.flush_blocking()
                finally:
                    mapped.release()


AnyQueue = ConsumeQueue | PooledQueue
"""A queue with its own files, or one held by the pool: the same reads and maintenance calls."""


@attrs.define(eq=False)
class ConsumeQueues(TracksDispatchFailure):
    """All consume queues of a store, and the dispatcher that builds them."""

    root: Path
    file_size: int
    on_persist: Callable[[int, int], None] | None = None
    """Called after a thorough flush with (dispatched log offset, newest store timestamp)."""
    least_pages: int = 2
    """``flushConsumeQueueLeastPages``: a periodic (not thorough) persist flushes a queue file
    only once this many pages are dirty."""
    budget: OpenFileBudget | None = None
    """The bound on open queue files (None: every file stays open)."""
    pool: QueuePool | None = None
    """Holds small queues (None: every queue has its own files from its first entry)."""
    log_end: Callable[[], int] | None = None
    """Where the commit log's appends end (a dispatch that reached it settles the pool's
    promises)."""
    queues: dict[tuple[str, int], AnyQueue] = attrs.field(factory=dict)
    name: str = "consume_queue"
    failing: str = ""
    """Why the last dispatch failed ("" once one succeeds)."""
    promotions_failed: int = 0
    """Pooled queues that could not get their own files (they stay pooled; logged)."""
    _dispatched: int = 0
    _newest_timestamp: int = 0

    @classmethod
    def load(
        cls,
        root: Path,
        file_size: int,
        *,
        least_pages: int = 2,
        budget: OpenFileBudget | None = None,
        pooled_entries: int = 0,
        pool_memory: int = 64 << 20,
    ) -> ConsumeQueues:
        """Name every queue's files (opened on first use with a ``budget``) and replay the
        pool's journal (``<root>_pool``) when ``pooled_entries`` is set."""
        root.mkdir(parents=True, exist_ok=True)
        pool = None
        retiring = not pooled_entries and any(pool_directory(root).glob("0*"))
        if pooled_entries or retiring:
            pool = QueuePool.load(pool_directory(root), pooled_entries or 1, pool_memory)
        queues = cls(root, file_size, least_pages=least_pages, budget=budget, pool=pool)
        for topic_dir in sorted(p for p in root.iterdir() if p.is_dir()):
            for queue_dir in sorted(p for p in topic_dir.iterdir() if p.is_dir() and p.name.isdigit()):
                key = (topic_dir.name, int(queue_dir.name))
                files = MappedFileQueue.load(queue_dir, file_size, sparse=True, budget=budget)
                queue = ConsumeQueue(key[0], key[1], files)
                queue.recover()
                queues.queues[key] = queue
        if pool is not None:
            for key, pooled in list(pool.members.items()):
                own = queues.queues.get(key)
                if isinstance(own, ConsumeQueue):
                    queues._settle_twice_held(own, pooled)
                else:
                    queues.queues[key] = pooled
            pool.write()
            if retiring:
                queues._retire_pool()
        return queues

    def _retire_pool(self) -> None:
        """The pool was turned off (``pooled_queue_entries = 0``) with queues in it: each moves
        to its own files, then the journal is deleted.

        :raises StoreError: a queue's files could not be created (the journal is kept).
        """
        pool = self.pool
        assert pool is not None
        for pooled in list(pool.members.values()):
            if self._promote(pooled) is None:
                raise OSError(
                    f"cannot move the pooled consume queue {pooled.topic}/{pooled.queue_id} to its own files"
                )
        for queue in self.queues.values():
            queue.flush_blocking()
        log.info("consume-queue pool turned off: every queue moved to its own files")
        pool.destroy_all()
        pool.close()
        self.pool = None

    def _settle_twice_held(self, own: ConsumeQueue, pooled: PooledQueue) -> None:
        """A queue with files and pool entries (a stop between its promotion and the journal
        record saying so): the files win, completed from the pool if it holds more."""
        assert self.pool is not None
        if pooled.max_queue_offset > own.max_queue_offset >= pooled.min_queue_offset:
            rest = pooled.lookup_columns(own.max_queue_offset, pooled.max_queue_offset)
            own.reserve(own.max_queue_offset, len(rest))
            own.append(_encode(rest.physical_offset, rest.size, rest.tags_code), own.max_queue_offset)
        self.pool.drop(pooled)

    def queue(self, topic: str, queue_id: int, *, create: bool = False) -> AnyQueue | None:
        """The queue, or a new one when ``create`` (held by the pool if there is one)."""
        key = (topic, queue_id)
        queue = self.queues.get(key)
        if queue is None and create:
            self._queue_directory(topic, queue_id)  # the name is checked even while pooled
            queue = (
                self.pool.add(topic, queue_id) if self.pool is not None else self._own_files(topic, queue_id)
            )
            self.queues[key] = queue
        return queue

    def _own_files(self, topic: str, queue_id: int) -> ConsumeQueue:
        directory = self._queue_directory(topic, queue_id)
        return ConsumeQueue(
            topic,
            queue_id,
            MappedFileQueue.load(directory, self.file_size, sparse=True, budget=self.budget),
        )

    def _queue_directory(self, topic: str, queue_id: int) -> Path:
        """``root/<topic>/<queueId>``, or :class:`StorePathError` for a name that is not one plain
        directory name (the put pipeline refuses such topics; this is the store's own guard)."""
        if (
            not topic
            or topic in (".", "..")
            or "/" in topic
            or "\0" in topic
            or len(topic.encode()) > NAME_MAX
            or queue_id < 0
        ):
            raise StorePathError(
                f"consume queue {topic!r}/{queue_id} would not be a directory inside {self.root}"
            )
        return self.root / topic / str(queue_id)

    def reserve(self, topic: str, queue_id: int, next_queue_offset: int, count: int) -> None:
        """Make sure ``count`` new entries of a queue, the first at ``next_queue_offset``, can be
        indexed without opening or allocating anything at dispatch: their files exist and have
        disk space, or the pool's journal has room (a put calls this before its append). A
        pooled queue that would grow past ``pooled_queue_entries`` gets its own files here.

        :raises OSError: a file could not be created or allocated (EMFILE, ENOSPC, EACCES ...).
        :raises StorePathError: a name that cannot be a directory.
        """
        queue = self.queue(topic, queue_id, create=True)  # a lookup when it exists
        if isinstance(queue, PooledQueue):
            assert self.pool is not None
            start = queue.min_queue_offset if queue.entries else next_queue_offset
            outgrown = next_queue_offset + count - start > self.pool.max_entries
            own = self._promote(queue) if outgrown else None
            if own is None:  # pooled still (a failed move is logged): the journal takes them
                self.pool.make_room(topic, count)
                return
            queue = own
        assert queue is not None
        if not queue.has_room(next_queue_offset, count):
            queue.reserve(next_queue_offset, count)

    def _promote(self, pooled: PooledQueue) -> ConsumeQueue | None:
        """Give a pooled queue its own files, holding its entries; None (logged, it stays
        pooled) when they cannot be created now."""
        assert self.pool is not None
        try:
            own = self._own_files(pooled.topic, pooled.queue_id)
            if pooled.entries:
                if pooled.min_queue_offset:
                    own.start_at(pooled.min_queue_offset, self.file_size)
                count = len(pooled.entries) // CQ_ENTRY_SIZE
                own.reserve(pooled.min_queue_offset, count)
                own.append(bytes(pooled.entries), pooled.min_queue_offset)
            elif pooled.min_queue_offset:
                own.start_at(pooled.min_queue_offset, self.file_size)
        except OSError as error:
            self.promotions_failed += 1
            log.warning(
                "consume queue %s/%d stays in the pool: its own files could not be created (%s)",
                pooled.topic,
                pooled.queue_id,
                explain_open_failure(error),
            )
            return None
        own.min_queue_offset = pooled.min_queue_offset
        self.pool.drop(pooled)
        self.queues[pooled.key] = own
        return own

    def destroy(self, key: tuple[str, int]) -> None:
        """Delete a queue's files or pooled entries (it is rebuilt from the log by the dispatch
        loop)."""
        queue = self.queues.pop(key, None)
        if isinstance(queue, ConsumeQueue):
            queue.files.destroy_all()
        elif isinstance(queue, PooledQueue):
            assert self.pool is not None
            self.pool.drop(queue)
            self.pool.write()

    def destroy_all(self) -> None:
        """Delete every queue (the commit log is gone)."""
        self.close()
        for topic_dir in list(self.root.iterdir()):
            shutil.rmtree(topic_dir, ignore_errors=True)
        self.queues.clear()
        if self.pool is not None:
            self.pool.destroy_all()

    def truncate_beyond(self, log_end: int) -> int:
        """Drop every entry pointing at or past ``log_end`` (the log was cut there); returns how
        many."""
        dropped = sum(queue.truncate_beyond(log_end) for queue in self.queues.values())
        if self.pool is not None:
            self.pool.write()
        return dropped

    def set_dispatched(self, offset: int) -> None:
        self._dispatched = offset

    # --- Dispatcher protocol --------------------------------------------------------------

    def dispatched_offset(self) -> int:
        return self._dispatched

    def _dispatch(self, records: Sequence[DispatchRecord], end_offset: int) -> None:
        """Append the batch's entries, queue by queue, each queue's entries packed column-wise
        into one buffer (20-byte big-endian rows) and written at once; the pool's journal
        records of the batch are written together at the end."""
        if not isinstance(records, DispatchBatch):
            self._append_each(records)
        elif len(records):
            self._append_batch(records)
            self._newest_timestamp = int(records.store_timestamp[-1])
        if self.pool is not None:
            self._after_pooled_appends(end_offset)
        self._dispatched = end_offset

    def _after_pooled_appends(self, end_offset: int) -> None:
        """Write the batch's journal records; promote the largest pooled queues while the pool
        holds more than its memory bound; compact the journal when due."""
        pool = self.pool
        assert pool is not None
        pool.write()
        if pool.held_bytes > pool.memory_bound:
            for pooled in pool.largest():
                if pool.held_bytes <= pool.memory_bound * 3 // 4 or self._promote(pooled) is None:
                    break
            pool.write()
        pool.compact_if_due()
        if self.log_end is not None and self.log_end() <= end_offset:
            pool.settle()

    def _append_each(self, records: Sequence[DispatchRecord]) -> None:
        """Records as objects (single sends, an idle broker's few): entries packed one by one,
        gathered per queue in log order and written once per queue, with no numpy set-up."""
        runs: dict[tuple[str, int], tuple[int, list[bytes]]] = {}
        pack = ENTRY.pack
        for r in records:
            key = (r.topic, r.queue_id)
            run = runs.get(key)
            if run is None:
                runs[key] = (r.queue_offset, [pack(r.physical_offset, r.size, r.tags_code)])
            else:
                run[1].append(pack(r.physical_offset, r.size, r.tags_code))
        for (topic, queue_id), (first, entries) in runs.items():
            self._append_entries(topic, queue_id, first, b"".join(entries), len(entries))
        if records:
            self._newest_timestamp = records[-1].store_timestamp

    def _append_batch(self, batch: DispatchBatch) -> None:
        """Append a batch's entries queue by queue: every entry encoded at once in queue order
        (a batch spread over a thousand queues costs no numpy call per queue), then each
        queue's run written as one slice."""
        queue_ids = batch.queue_id
        if len(batch.topics) == 1 and (queue_ids == queue_ids[0]).all():
            # One queue (a batch put, or what a producer sent to it meanwhile): no grouping.
            self._append_entries(
                batch.topics[0],
                int(queue_ids[0]),
                int(batch.queue_offset[0]),
                _encode(batch.physical_offset, batch.size, batch.tags_code),
                len(batch),
            )
            return
        # Stable sort by (topic, queue id): each queue's records stay in log order.
        group_key = batch.topic_index * (1 << 32) + batch.queue_id
        order = np.argsort(group_key, kind="stable")
        grouped = group_key[order]
        cuts = np.flatnonzero(grouped[1:] != grouped[:-1]) + 1
        data = _encode(batch.physical_offset[order], batch.size[order], batch.tags_code[order])
        starts = np.concatenate(([0], cuts))
        ends = np.concatenate((cuts, [len(order)]))
        firsts = order[starts]
        topics = batch.topics
        for start, end, topic_index, queue_id, queue_offset in zip(
            starts.tolist(),
            ends.tolist(),
            batch.topic_index[firsts].tolist(),
            batch.queue_id[firsts].tolist(),
            batch.queue_offset[firsts].tolist(),
            strict=True,
        ):
            self._append_entries(
                topics[topic_index],
                queue_id,
                queue_offset,
                data[start * CQ_ENTRY_SIZE : end * CQ_ENTRY_SIZE],
                end - start,
            )

    def _append_entries(self, topic: str, queue_id: int, first: int, entries: bytes, count: int) -> None:
        """Append ``count`` encoded entries of one queue whose first has queue offset
        ``first``; entries the queue already has (a replay after a restart) are skipped."""
        queue = self.queue(topic, queue_id, create=True)
        assert queue is not None
        expected = queue.max_queue_offset
        if first + count <= expected:
            return
        if first < expected:
            entries = entries[(expected - first) * CQ_ENTRY_SIZE :]
            count -= expected - first
            first = expected
        if first != expected:
            if queue.max_queue_offset == queue.min_queue_offset:
                # The queue's first entries are in log files already deleted (retention).
                self._start_at(queue, first)
            else:
                log.error(
                    "consume queue %s/%d expects offset %d but the log has %d; skipping the gap",
                    topic,
                    queue_id,
                    expected,
                    first,
                )
                return
        if isinstance(queue, PooledQueue):
            assert self.pool is not None
            if first + count - queue.min_queue_offset > self.pool.max_entries:
                queue = self._promote(queue) or queue
        queue.append(entries, first)

    def _start_at(self, queue: AnyQueue, queue_offset: int) -> None:
        if isinstance(queue, PooledQueue):
            queue.start_at(queue_offset)
        else:
            queue.start_at(queue_offset, self.file_size)

    async def persist(self, *, thorough: bool) -> None:
        """Flush queue files with at least ``least_pages`` dirty pages and the pool's journal;
        when ``thorough``, flush every queue and then (same worker thread) record the dispatched
        offset in the checkpoint, so the checkpoint never claims entries that are not durable."""
        dispatched, newest = self._dispatched, self._newest_timestamp
        queues = [q for q in self.queues.values() if isinstance(q, ConsumeQueue)]
        on_persist = self.on_persist if thorough else None
        least_pages = 0 if thorough else self.least_pages
        pool_segments: list[MappedFile] = []
        durable = 0
        if self.pool is not None:
            self.pool.write()
            pool_segments, durable = self.pool.flush_plan()

        def flush_all() -> None:
            for queue in queues:
                queue.flush_blocking(least_pages)
            flush_segments(pool_segments)
            if on_persist is not None:
                on_persist(dispatched, newest)

        await trio.to_thread.run_sync(flush_all)
        if self.pool is not None:
            self.pool.drop_obsolete(durable)

    # --- reads ------------------------------------------------------------------------------

    def lookup(self, topic: str, queue_id: int, queue_offset: int, max_entries: int) -> list[QueueEntry]:
        queue = self.queues.get((topic, queue_id))
        return [] if queue is None else queue.lookup(queue_offset, max_entries)

    def lookup_columns(self, topic: str, queue_id: int, queue_offset: int, max_entries: int) -> QueueEntries:
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            return QueueEntries.of([])
        return queue.lookup_columns(queue_offset, max_entries)

    def min_offset(self, topic: str, queue_id: int) -> int:
        queue = self.queues.get((topic, queue_id))
        return 0 if queue is None else queue.min_queue_offset

    def max_offset(self, topic: str, queue_id: int) -> int:
        queue = self.queues.get((topic, queue_id))
        return 0 if queue is None else queue.max_queue_offset

    def close(self) -> None:
        for queue in self.queues.values():
            if isinstance(queue, ConsumeQueue):
                queue.files.close()
        if self.pool is not None:
            self.pool.close()


def pool_directory(root: Path) -> Path:
    """Where the pool's journal of the queues under ``root`` lives (beside it, so that
    ``consumequeue/`` holds only topics, as in RocketMQ)."""
    return root.with_name(root.name + "_pool")


def _encode(physical_offset: np.ndarray, size: np.ndarray, tags_code: np.ndarray) -> bytes:
    """Entries as RocketMQ's 20-byte big-endian rows, from columns."""
    rows = np.empty(len(physical_offset), dtype=ENTRY_DTYPE)
    rows["offset"] = physical_offset
    rows["size"] = size
    rows["tags"] = tags_code
    return rows.tobytes()
