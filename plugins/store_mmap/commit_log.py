"""The commit log: every message of every topic, appended as RocketMQ v1 records.

A batch is encoded into one buffer and written with one call per file it touches. A record
never straddles files: when the next record (plus the 8-byte end marker) does not fit, the
file is closed with a BLANK record and the record goes to the next file.

With staged writes (``write_path = "buffered"``) appended bytes wait in memory until
:meth:`CommitLog.take_commit` / :meth:`CommitLog.commit_blocking` write them; ``positions.wrote``
is then the committed end (what readers and dispatch may see) and :attr:`CommitLog.append_end`
the end of everything appended.
"""

from __future__ import annotations

import collections
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple

import attrs
import numpy as np

from kernel.errors import CorruptRecord, FlushError, OffsetOutOfRange, ReplicaMismatch, StoreNotWritable
from kernel.model import AppendResult, DispatchRecord, Message
from kernel.queue_entries import QueueEntries
from kernel.sync import LogPositions
from plugins.store_mmap.mapped_file import MappedFile
from plugins.store_mmap.mapped_file_queue import MappedFileQueue
from plugins.store_mmap.ring_sync import Ring
from wire import record
from wire.dispatch_batch import AppendedWire, DispatchBatch, as_batch
from wire.dispatch_record import pack_host
from wire.record_run import check_run
from wire.stored_records import StoredRecords
from wire.wire_batch import WireBatch

log = logging.getLogger(__name__)

END_FILE_MIN_BLANK_LENGTH = 8
SMALL_RUN_BYTES = 4096
"""Below this many log bytes a scan decodes record by record (see ``_scan_small``)."""
MAX_HANDED_BATCHES = 4096
MAX_HANDED_BYTES = 64 << 20
"""Appended batches whose columns or messages wait for the dispatch loop (each holds its
request body or message objects, where the properties are), at most this many and spanning at
most this much of the log; more means dispatch is far behind, and it reads the oldest back from
the log instead."""
HAND_OVER_MESSAGES = 64
"""Appends of message objects up to this many messages (single sends, and the groups of single
sends one connection's read delivers at once) hand their messages to the dispatch loop; larger
ones are read back, where the bulk check of a long run costs less per record than building
records from objects one by one. 16 made most groups of 64 sends in flight read back: 13 % of
the broker's time went to checking records it had just written (broker CPU 37 -> 28 µs a
message at 64 in flight async, 71 -> 65 sync)."""


class AppendedMessages(NamedTuple):
    """What the put path keeps of messages it encoded one by one (single sends, the broker's
    own puts), for the dispatch loop: the messages, unchanged after their append (the put
    pipeline owns them), and where their records went."""

    messages: Sequence[Message]
    run: record.EncodedRun
    store_timestamp: int


@attrs.define(eq=False)
class CommitLog:
    """Appends, reads and flushes; recovery lives in :mod:`plugins.store_mmap.recovery`."""

    files: MappedFileQueue
    store_host: tuple[str, int]
    positions: LogPositions = attrs.field(factory=LogPositions)
    queue_offsets: dict[tuple[str, int], int] = attrs.field(factory=dict)
    """Next queue offset per (topic, queue id), assigned at append time."""
    parking_topics: frozenset[str] = frozenset()
    """Topics whose tag code is the due time (:attr:`kernel.context.BrokerContext.parking_topics`)."""
    read_only_reason: str = ""
    """Set after a write or flush error: writes stay refused until restart."""
    disk_full_reason: str = ""
    """Set by the retention service above the disk warning level; cleared when space returns."""
    last_append_timestamp: int = 0
    flushed_timestamp: int = 0
    """Store time of the newest message covered by the last flush (checkpoint field)."""
    _encoder: record.RecordEncoder = attrs.field(init=False)
    _host: str = attrs.field(default="", init=False)
    """The store host as records' dispatch fields give it (``ip:port``), and packed."""
    _packed_host: int = attrs.field(default=0, init=False)
    _append_end: int = attrs.field(default=0, init=False)
    _handed: collections.deque[tuple[int, int, AppendedWire | AppendedMessages]] = attrs.field(
        factory=collections.deque, init=False
    )
    """Appended batches, (start, end, what became of them) in log order, waiting for the
    dispatch loop, which takes them instead of reading the records back (see :meth:`scan`)."""

    def __attrs_post_init__(self) -> None:
        self._encoder = record.RecordEncoder(self.store_host)
        self._host = f"{self.store_host[0]}:{self.store_host[1]}"
        self._packed_host = pack_host(self._host)

    @property
    def stages_writes(self) -> bool:
        return self.files.stage_writes

    @property
    def append_end(self) -> int:
        """End of every appended byte: staged ones, and on a slave the tail of a record whose
        rest has not arrived from the master yet (``positions.wrote`` stops before it)."""
        return max(self._append_end, self.positions.wrote.value)

    def reset_end(self, end: int) -> None:
        """Recovery: ``end`` is where the log ends, durably."""
        self._handed.clear()
        self._append_end = end
        self.positions.wrote.reset(end)
        self.positions.flushed.reset(end)

    @property
    def file_size(self) -> int:
        return self.files.file_size

    def append(self, messages: Sequence[Message]) -> AppendResult:
        """Append a batch; blocking only for page-cache writes (no fsync).

        :raises StoreNotWritable: read-only store, a record larger than a file, or a write
            error (which also makes the store read-only). Positions never move past bytes that
            were not written.
        """
        if self.read_only_reason or self.disk_full_reason:
            raise StoreNotWritable(self.read_only_reason or self.disk_full_reason)
        now = int(time.time() * 1000)
        try:
            active = self.files.writable_file(self.append_end)
        except OSError as error:
            raise StoreNotWritable(
                f"cannot create the next commit-log file ({error}); disk full? nothing was written"
            ) from error
        try:
            run = self._encoder.encode_run(messages, active.start + active.wrote, self.queue_offsets, now)
        except ValueError as error:
            raise StoreNotWritable(f"message refused: {error}") from None
        limit = self.file_size - END_FILE_MIN_BLANK_LENGTH
        if active.wrote + len(run.data) > limit:
            # The batch rolls into the next file(s): each record must fit a file, and the
            # files it rolls into are created before anything is written.
            largest = max(run.sizes)
            if largest > limit:
                raise StoreNotWritable(
                    f"a {largest}-byte record cannot fit in a {self.file_size}-byte commit-log file"
                )
            try:
                self.files.ensure_room(active, len(run.data), len(messages), largest)
            except OSError as error:
                raise StoreNotWritable(
                    f"cannot create the next commit-log file ({error}); disk full? nothing was written"
                ) from error
        handed = False
        try:
            if active.wrote + len(run.data) <= limit:
                active.write(run.data)  # the common case: the batch fits the active file
                handed = run.arrays is not None or (
                    run.properties_as_given and len(messages) <= HAND_OVER_MESSAGES
                )
            else:
                run, active = self._append_across_files(messages, active, limit, now)
        except OSError as error:
            self.read_only_reason = f"commit log write failed ({error}); the store is read-only"
            log.error("%s", self.read_only_reason)
            raise StoreNotWritable(self.read_only_reason) from error
        self.queue_offsets.update(run.next_queue_offsets)
        end = active.start + active.wrote
        if handed:
            self._hand_over(messages, run, now)
        self.last_append_timestamp = now
        if self.stages_writes:
            self._append_end = end
        else:
            self.positions.wrote.advance(end)
        return AppendResult(run.offsets, run.sizes, run.queue_offsets, now, end, self.store_host)

    def _hand_over(self, messages: Sequence[Message] | WireBatch, run: record.EncodedRun, now: int) -> None:
        """Keep what the dispatch loop needs of an appended batch (an encoded batch's columns,
        or the messages encoded one by one), so it does not read the records back. Bounded:
        when dispatch falls this far behind it reads the log."""
        handed = self._handed
        end = run.offsets[-1] + run.sizes[-1]
        # Dispatch this far behind reads the oldest batches back from the log; the newer ones
        # stay, so it takes them again once past the gap (dropping them all made a loop that
        # fell behind under a burst read everything back and stay behind).
        while handed and (len(handed) >= MAX_HANDED_BATCHES or end - handed[0][0] > MAX_HANDED_BYTES):
            handed.popleft()
        if run.arrays is not None:
            assert isinstance(messages, WireBatch)
            offsets, sizes = run.arrays
            kept: AppendedWire | AppendedMessages = AppendedWire(
                messages, offsets, sizes, run.queue_offsets[0], now, self._packed_host
            )
        else:
            kept = AppendedMessages(messages, run, now)
        handed.append((run.offsets[0], end, kept))

    def _append_across_files(
        self, messages: Sequence[Message], active: MappedFile, limit: int, now: int
    ) -> tuple[record.EncodedRun, MappedFile]:
        """A batch that does not fit the active file: records go one by one, and the file is
        closed with a BLANK record where the next one would not fit (once per file)."""
        offsets: list[int] = []
        sizes: list[int] = []
        queue_offsets: list[int] = []
        known = dict(self.queue_offsets)
        encode = self._encoder.encode_run
        for message in messages:
            one = encode([message], active.start + active.wrote, known, now)
            if active.wrote + len(one.data) > limit:
                self._close_file(active)
                active = self.files.roll(active)
                one = encode([message], active.start, known, now)
            active.write(one.data)
            known.update(one.next_queue_offsets)
            offsets += one.offsets
            sizes += one.sizes
            queue_offsets += one.queue_offsets
        touched = {(m.topic, m.queue_id) for m in messages}
        run = record.EncodedRun(b"", offsets, sizes, queue_offsets, {k: known[k] for k in touched})
        return run, active

    def _close_file(self, mapped: MappedFile) -> None:
        """End ``mapped`` with the BLANK record covering the rest of the file."""
        remaining = mapped.size - mapped.wrote
        mapped.write(record.blank_record(remaining))
        mapped.fill_to_end()

    # --- flushing ---------------------------------------------------------------------------

    def dirty_bytes(self) -> int:
        """Appended but not yet flushed (staged bytes included)."""
        return self.append_end - self.positions.flushed.value

    def uncommitted_bytes(self) -> int:
        return self.append_end - self.positions.wrote.value

    def take_commit(self) -> list[tuple[MappedFile, int, bytearray, int]]:
        """Staged bytes of every file, oldest first, with each file held (event loop).
        Pass the result to :meth:`commit_blocking`, then :meth:`end_commit`."""
        work = []
        for mapped in self.files.files:
            if mapped.committed < mapped.wrote and mapped.hold():
                taken = mapped.take_staged()
                if taken is None:
                    mapped.release()
                    continue
                work.append((mapped, *taken))
        return work

    @staticmethod
    def commit_blocking(work: Sequence[tuple[MappedFile, int, bytearray, int]]) -> None:
        """Write taken bytes into their files (worker thread).

        :raises FlushError: on an OS error; the caller makes the store read-only.
        """
        for mapped, position, data, _ in work:
            try:
                mapped.commit_blocking(position, data)
            except OSError as error:
                raise FlushError(f"commit to {mapped.path} failed: {error}") from error

    def end_commit(self, work: Sequence[tuple[MappedFile, int, bytearray, int]], *, ok: bool) -> None:
        """Release the files; on success advance the committed (visible) end."""
        for mapped, _, _, end in work:
            if ok:
                mapped.end_commit(end)
            mapped.release()
        if ok and work:
            last = work[-1][0]
            self.positions.wrote.advance(last.start + last.committed)

    def start_sync(self, ring: Ring) -> bool:
        """Start the sync of the unflushed bytes on ``ring`` when they lie in one file
        (:meth:`MappedFile.start_sync`); the next :meth:`flush` waits for it. False when
        nothing was started (nothing unflushed, bytes in two files at a roll, a busy ring)."""
        flushed = self.positions.flushed.value
        unsynced = None
        for mapped in reversed(self.files.files):
            if mapped.end <= flushed:
                break
            if mapped.flushed < mapped.committed:
                if unsynced is not None:
                    return False
                unsynced = mapped
        return unsynced is not None and unsynced.start_sync(ring)

    async def flush(self, sync_file: Callable[[MappedFile], Awaitable[object]]) -> tuple[int, int]:
        """Flush every file with unflushed bytes, each through ``sync_file`` (the store's: its
        io_uring's ``fdatasync``, or :meth:`MappedFile.flush_blocking` on its flush thread).
        Returns (flushed offset, the store timestamp it covers). Files are held while synced,
        so they cannot be unmapped.

        :raises FlushError: on an OS error; the flushed position stays where it was.
        """
        covered_ts = self.last_append_timestamp
        flushed = self.positions.flushed.value
        for mapped in list(self.files.files):
            if mapped.end <= flushed:
                continue
            if mapped.flushed < mapped.committed:
                if not mapped.hold():
                    break
                try:
                    await sync_file(mapped)
                except OSError as error:
                    raise FlushError(f"flush of {mapped.path} failed: {error}") from error
                finally:
                    mapped.release()
            flushed = max(flushed, mapped.start + mapped.flushed)
            if mapped.flushed < mapped.size:
                # The log is flushed contiguously: files after a partly written one are
                # pre-allocated and empty, and must not move the position past unsynced bytes.
                break
        return flushed, covered_ts

    # --- replication -----------------------------------------------------------------------

    def read_raw(self, offset: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` of the log from ``offset``, never past the file holding it nor
        the visible end (a master's transfer: a file's BLANK record and zero tail included, so
        the copy is byte-identical). Empty at the end of the log.

        :raises OffsetOutOfRange: ``offset`` is before the oldest file or past the end.
        """
        end = self.positions.wrote.value
        if offset == end:
            return b""
        oldest = self.files.min_offset if self.files.files else end
        if offset < oldest or offset > end:
            raise OffsetOutOfRange(f"commit-log offset {offset} is outside [{oldest}, {end}]")
        mapped = self.files.find(offset)
        position = offset - mapped.start
        available = min(mapped.committed, end - mapped.start) - position
        return mapped.read(position, min(max_bytes, available))

    def replica_pieces(self, offset: int, data: bytes | memoryview) -> list[tuple[MappedFile, memoryview]]:
        """Where a master's bytes for ``offset`` (the end of what this replica holds) go: one
        piece per file, the next files created now. The bytes may span files only at file
        ends, as the master's frames do when both use the same file size. Write the pieces
        with :meth:`write_pieces` (any thread), then call :meth:`replica_written`.

        :raises ReplicaMismatch: ``offset`` is not this log's end, or the log does not start at
            a file boundary of this log's file size.
        :raises StoreNotWritable: the store refuses writes, or a file cannot be created.
        """
        held = self.append_end
        empty = not self.files.files  # starts wherever the master's oldest file does
        if offset != held and not empty:
            raise ReplicaMismatch(f"the master sent bytes for offset {offset}; this log ends at {held}")
        if self.read_only_reason or self.disk_full_reason:
            raise StoreNotWritable(self.read_only_reason or self.disk_full_reason)
        if empty and offset % self.file_size:
            raise ReplicaMismatch(
                f"the master's log starts at {offset}, not at a multiple of this log's file size "
                f"{self.file_size}: commit_log_file_size must be the same on master and slave"
            )
        if empty and offset != held:
            self.reset_end(offset)  # this log begins where the master's oldest file does
        view = memoryview(data)
        pieces: list[tuple[MappedFile, memoryview]] = []
        try:
            active = self.files.writable_file(start_if_empty=offset)
            while view:
                room = active.size - active.wrote
                pieces.append((active, view[:room]))
                view = view[room:]
                if view:
                    active = self.files.roll(active)
        except OSError as error:
            raise StoreNotWritable(f"cannot create the next commit-log file ({error})") from error
        return pieces

    def write_pieces(self, pieces: Sequence[tuple[MappedFile, memoryview]]) -> None:
        """Write :meth:`replica_pieces` (blocking; safe in a worker thread: only the replica's
        single writer touches these files' write positions).

        :raises StoreNotWritable: a write error (the store turns read-only).
        """
        try:
            for mapped, piece in pieces:
                mapped.write(piece)
        except OSError as error:
            self.read_only_reason = f"commit log write failed ({error}); the store is read-only"
            raise StoreNotWritable(self.read_only_reason) from error

    def replica_written(self, end: int) -> None:
        """Bytes up to ``end`` are written: readers may now see every whole record below it.

        :raises ReplicaMismatch: an end-of-file record does not end where this log's file does
            (the master uses another file size); nothing past it becomes visible.
        """
        self._append_end = end
        self.last_append_timestamp = int(time.time() * 1000)
        self.positions.wrote.advance(self._whole_records_end(self.positions.wrote.value, end))

    def _whole_records_end(self, start: int, received: int) -> int:
        """Walk record sizes from ``start`` (a record boundary); the end of the last record, or
        end-of-file filler, that lies wholly below ``received``. One file lookup per file and
        one ``unpack`` per record (a catching-up slave walks hundreds of thousands).

        :raises ReplicaMismatch: a record or end-of-file filler does not end where this log's
            files do (the master uses another file size).
        """
        at = start
        size_magic = record.SIZE_MAGIC.unpack_from
        while at < received:
            mapped = self.files.find(at)
            buffer, base, file_size = mapped.buffer, mapped.start, mapped.size
            limit = min(received - base, file_size)  # bytes of this file received
            position = at - base
            file_done = False
            while True:
                if file_size - position < END_FILE_MIN_BLANK_LENGTH:
                    file_done = limit == file_size
                    break
                if position + END_FILE_MIN_BLANK_LENGTH > limit:
                    break
                size, magic = size_magic(buffer, position)
                if magic == record.MAGIC_BLANK:
                    if position + size != file_size:
                        raise ReplicaMismatch(
                            f"the master's file ends at {base + position + size}, this log's file "
                            f"{mapped.path.name} at {mapped.end}: commit_log_file_size must be the "
                            "same on master and slave"
                        )
                    file_done = limit == file_size
                    break
                if size <= 0 or position + size > file_size:
                    raise ReplicaMismatch(
                        f"a {size}-byte record at {base + position} does not fit this log's file "
                        f"{mapped.path.name}: commit_log_file_size must be the same on master and slave"
                    )
                if position + size > limit:
                    break
                position += size
            if not file_done:
                return base + position
            at = base + file_size
        return at

    # --- reading ----------------------------------------------------------------------------

    def read_entries(self, entries: QueueEntries) -> StoredRecords:
        """Stored records for consume-queue entries, each checked (magic, lengths, its stored
        offset and size, body CRC, NUL-free text) in bulk, file by file
        (:meth:`~wire.stored_records.StoredRecords.read_checked`: the checks of
        :func:`~wire.record_run.check_at`) and copied out of the mapping in one piece.

        :raises CorruptRecord: a record fails its check; it is never served.
        """
        physical, sizes = entries.physical_offset, entries.size
        files = self.files.files
        starts = np.fromiter((f.start for f in files), dtype=np.int64, count=len(files))
        which = np.searchsorted(starts, physical, side="right") - 1
        out: list[StoredRecords] = []
        cuts = np.flatnonzero(which[1:] != which[:-1]) + 1
        for rows in np.split(np.arange(len(physical)), cuts):
            if not len(rows):
                continue
            mapped = self.files.find(int(physical[rows[0]]))
            positions = physical[rows] - mapped.start
            limit = min(mapped.committed, self.positions.wrote.value - mapped.start)
            buffer, base = mapped.buffer, mapped.start
            try:
                read = StoredRecords.read_checked(buffer, positions, sizes[rows], limit, base=base)
            except CorruptRecord as problem:
                raise CorruptRecord(mapped.start + problem.offset, problem.reason, str(mapped.path)) from None
            out.append(read)
        return StoredRecords.concat(out)

    def read_at(self, offset: int) -> bytes:
        """The record starting at commit-log ``offset`` (lookup by offset message id)."""
        mapped = self.files.find(offset)
        position = offset - mapped.start
        limit = min(mapped.committed, self.positions.wrote.value - mapped.start)
        size = record.check_record(mapped.buffer, position, limit=limit)
        return mapped.read(position, size)

    def scan(self, offset: int, *, end: int, max_bytes: int) -> tuple[Sequence[DispatchRecord], int]:
        """Checked records from ``offset`` up to ``end`` (about ``max_bytes`` of them, at least
        one), skipping end-of-file fillers: as columns, or as a list of records when all of
        them are a few records or messages appended one by one.

        What this process appended comes from what the put path kept (see
        :meth:`_hand_over`): an encoded batch's columns, or the messages of single sends,
        which views take one by one at less cost than any bulk set-up. Anything else (a
        slave's replicated bytes, the log after a restart) is read back: each file's run is
        validated in bulk (:func:`~wire.record_run.check_run`, no CRC: the put path computed
        it and recovery checks it) and gathered into a
        :class:`~wire.dispatch_batch.DispatchBatch`.

        :raises CorruptRecord: a record between ``offset`` and ``end`` fails its check.
        """
        parts: list[Sequence[DispatchRecord]] = []
        taken: list[AppendedWire | AppendedMessages] = []
        at = offset
        handed = self._handed
        while at < end and (at - offset < max_bytes or not (parts or taken)):
            while handed and handed[0][0] < at:
                handed.popleft()  # dispatched by a scan already (or before a restart point)
            if handed and handed[0][0] == at and handed[0][1] <= end:
                _, at, kept = handed.popleft()
                taken.append(kept)
                continue
            parts += self._records_of(taken)
            taken = []
            stop = handed[0][0] if handed and at < handed[0][0] < end else end
            at = self._scan_file_run(at, stop, max_bytes - (at - offset), parts)
        parts += self._records_of(taken)
        if not parts:
            return [], at
        if all(isinstance(part, list) for part in parts):
            # Records one by one (single sends, an idle broker's few): views take them as a
            # list, no columns.
            return (parts[0] if len(parts) == 1 else [r for part in parts for r in part]), at
        return DispatchBatch.concat([as_batch(part) for part in parts]), at

    def take_handed(
        self, offset: int, *, end: int, max_bytes: int
    ) -> tuple[Sequence[DispatchRecord], int] | None:
        """:meth:`scan` limited to the message objects the put path kept (see
        :meth:`_hand_over`): whole appends from ``offset`` that end by ``end`` and
        ``max_bytes`` after ``offset``; None when the first one is not held, is an encoded
        batch or does not fit. Never reads the log. Encoded batches are left to the dispatch
        loop: their columns have a fixed set-up (tens of µs) that the loop's rounds share
        across batches, and during a sync one batch of 32 took longer than the sync itself
        (every batch's answer waited for it)."""
        handed = self._handed
        while handed and handed[0][0] < offset:
            handed.popleft()  # dispatched by a scan already
        stop = offset
        for start, finish, kept in handed:
            if start != stop or finish > end or finish - offset > max_bytes or isinstance(kept, AppendedWire):
                break
            stop = finish
        if stop == offset:
            return None
        return self.scan(offset, end=stop, max_bytes=stop - offset)

    def _records_of(self, taken: list[AppendedWire | AppendedMessages]) -> list[Sequence[DispatchRecord]]:
        """Parts for consecutive handed batches: each run of encoded batches as one
        :class:`~wire.dispatch_batch.DispatchBatch`, each run of message appends as one list
        of records (:func:`wire.record.dispatch_records`)."""
        parts: list[Sequence[DispatchRecord]] = []
        for encoded, group in itertools.groupby(taken, key=lambda kept: isinstance(kept, AppendedWire)):
            if encoded:
                parts.append(DispatchBatch.from_wires(list(group), self.parking_topics))  # type: ignore[arg-type]
            else:
                parts.append(
                    [
                        r
                        for kept in group
                        for r in record.dispatch_records(*kept, self.parking_topics, self._host)
                    ]
                )
        return parts

    def _scan_small(
        self, mapped: MappedFile, position: int, limit: int, parts: list[Sequence[DispatchRecord]]
    ) -> int:
        """A few records (an idle broker's lone put): checked and decoded one by one into a
        list, which costs less than the fixed set-up of the bulk path."""
        records = []
        buffer = mapped.buffer
        while position + END_FILE_MIN_BLANK_LENGTH <= limit:
            if record.read_size_magic(buffer, position)[1] == record.MAGIC_BLANK:
                position = mapped.size
                break
            try:
                size = record.check_record(buffer, position, limit=limit, check_crc=False)
            except CorruptRecord as error:
                raise CorruptRecord(mapped.start + position, error.reason, str(mapped.path)) from None
            records.append(record.decode_dispatch(buffer, position, self.parking_topics))
            position += size
        parts.append(records)
        return mapped.start + position

    def _scan_file_run(self, at: int, end: int, max_bytes: int, parts: list[Sequence[DispatchRecord]]) -> int:
        """Scan one run of checked records from ``at`` (within its file, not past ``end``, about
        ``max_bytes``) into ``parts``; returns where it stopped. At an end-of-file filler that
        is the next file's start.

        :raises CorruptRecord: a record fails its check.
        """
        mapped = self.files.find(at)
        position = at - mapped.start
        if position + END_FILE_MIN_BLANK_LENGTH > mapped.size:
            return mapped.end
        if record.read_size_magic(mapped.buffer, position)[1] == record.MAGIC_BLANK:
            return mapped.end
        limit = min(mapped.size, end - mapped.start)
        if limit - position <= SMALL_RUN_BYTES:
            return self._scan_small(mapped, position, limit, parts)
        run = check_run(
            mapped.buffer, position, limit, base=mapped.start, check_crc=False, max_bytes=max(1, max_bytes)
        )
        if run.count:
            parts.append(DispatchBatch.from_run(mapped.buffer, run, self.parking_topics))
            if run.error is None:
                return mapped.start + run.end
        if run.error is None:
            raise CorruptRecord(at, f"only {limit - position} bytes left for a record", str(mapped.path))
        stopped = run.end
        if (
            stopped + END_FILE_MIN_BLANK_LENGTH <= mapped.size
            and record.read_size_magic(mapped.buffer, stopped)[1] == record.MAGIC_BLANK
        ):
            return mapped.end
        raise CorruptRecord(mapped.start + stopped, run.error.reason, str(mapped.path))
