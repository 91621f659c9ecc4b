"""MmapStore: the commit log, consume queues, checkpoint and lock behind the kernel's
:class:`~kernel.protocols.MessageStore` Protocol.

Directory layout (RocketMQ's): ``<root>/commitlog/<20-digit offset>``,
``<root>/consumequeue/<topic>/<queueId>/<20-digit offset>``, ``<root>/checkpoint``,
``<root>/lock`` (the kernel keeps ``<root>/abort``).
"""

from __future__ import annotations

import logging
import resource
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

from kernel.context import BrokerContext
from kernel.errors import ConfigError, FlushError, OffsetOutOfRange, StoreError, StoreNotWritable
from kernel.model import AppendResult, DispatchRecord, Message, QueueEntry, RecoveryReport, Watermarks
from kernel.open_files import explain_open_failure
from kernel.queue_entries import QueueEntries
from kernel.sync import LogPositions
from kernel.sync_overlap import SyncOverlap
from plugins.store_mmap.checkpoint import Checkpoint
from plugins.store_mmap.commit_log import CommitLog
from plugins.store_mmap.config import StoreMmapConfig
from plugins.store_mmap.consume_queue import ConsumeQueues
from plugins.store_mmap.flush_thread import FlushThread
from plugins.store_mmap.index_file import IndexService
from plugins.store_mmap.lock import StoreLock
from plugins.store_mmap.mapped_file import PAGE_SIZE, MappedFile
from plugins.store_mmap.mapped_file_queue import MappedFileQueue
from plugins.store_mmap.open_files import OpenFileBudget
from plugins.store_mmap.recovery import recover_store
from plugins.store_mmap.retention import RetentionService
from plugins.store_mmap.ring_sync import SYNC_RING, Ring, RingUnavailable, open_ring
from plugins.store_mmap.warm import MARGIN, WARMER, FileWarmer
from wire import record
from wire.wire_batch import WireBatch

log = logging.getLogger(__name__)


REPLICA_THREAD_WRITE_BYTES = 256 * 1024
"""A replica write at least this large runs in a worker thread."""


@attrs.frozen
class MmapStoreStatistics:
    min_offset: int
    wrote: int
    """Appended, staged bytes included."""
    committed: int
    """In the files, visible to readers (equals ``wrote`` unless writes are staged)."""
    flushed: int
    commit_log_files: int
    consume_queues: int
    read_only: str
    """Why writes are refused, or empty."""


@attrs.define(eq=False)
class MmapStore:
    root: Path
    config: StoreMmapConfig
    commit_log: CommitLog
    queues: ConsumeQueues
    checkpoint: Checkpoint
    index: IndexService | None = None
    retention: RetentionService = attrs.field(init=False)
    _flush_lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _flusher: FlushThread | None = attrs.field(default=None, init=False)
    """The thread that commits and flushes the log (started on first use)."""
    ring: Ring | None = attrs.field(default=None, init=False)
    """The commit log's ``fdatasync`` goes through this io_uring when set (``sync_with``)."""
    sync_overlap: SyncOverlap | None = attrs.field(default=None, init=False)
    """Work the loop does while a sync through :attr:`ring` runs (the broker's dispatch of
    what was just appended; :mod:`kernel.sync_overlap`)."""
    warmer: FileWarmer | None = attrs.field(default=None, init=False)
    """Writes zeros into log files ahead of the appends from recovery on; set by
    :func:`open_mmap_store` when ``warm_mapped_file`` is on."""

    def __attrs_post_init__(self) -> None:
        self.retention = RetentionService(self, self.config)

    @property
    def positions(self) -> LogPositions:
        return self.commit_log.positions

    @property
    def checkpoint_path(self) -> Path:
        return self.root / "checkpoint"

    async def recover(self, *, clean_shutdown: bool) -> RecoveryReport:
        report = await trio.to_thread.run_sync(
            lambda: recover_store(
                self.commit_log,
                self.queues,
                self.checkpoint,
                clean_shutdown=clean_shutdown,
                check_crc=self.config.check_crc_on_recover,
                index=self.index,
            )
        )
        for note in report.notes:
            log.info("recovery: %s", note)
        if self.warmer is not None:
            await self._start_warming(self.warmer)
        return report

    async def _start_warming(self, warmer: FileWarmer) -> None:
        """Warm the active file from a chunk past its end now (the broker does not serve yet),
        files ahead of it in the background (one is made now if there is none), and from now on
        every file the log creates, keeping one ahead of the appends
        (``plugins.store_mmap.warm``)."""
        files = self.commit_log.files
        end = self.commit_log.append_end
        active = next((mapped for mapped in files.files if mapped.start <= end < mapped.end), None)
        if active is not None:
            files.prepare_after(active)  # a file ahead, warmed in the background below
        files.on_created = lambda mapped, appends_now: warmer.warm(mapped, MARGIN if appends_now else 0)
        files.prepare_ahead = True
        for mapped in files.files:
            if mapped.end <= end:
                continue  # full
            if mapped.start > end:
                warmer.warm(mapped)
                continue
            started = trio.current_time()
            warmed = await trio.to_thread.run_sync(warmer.warm_now, mapped, end - mapped.start + MARGIN)
            if warmed:
                log.info(
                    "warmed %.0f MiB of %s in %.2fs (warm_mapped_file)",
                    warmed / (1 << 20),
                    mapped.path.name,
                    trio.current_time() - started,
                )

    async def append(self, messages: Sequence[Message]) -> AppendResult:
        # No checkpoint: the append is synchronous, and a yield here let the dispatch loop
        # (woken by the previous append) run before this put's answer went out.
        self._check_views_can_take(messages)
        return self.commit_log.append(messages)

    def _check_views_can_take(self, messages: Sequence[Message]) -> None:
        """Refuse a put its consume queue could not index (DESIGN: nothing is acknowledged
        that cannot be delivered): while the dispatch of earlier records fails (no file
        descriptors, no permission, no space), and when the files its entries go to cannot be
        created now. They are created here, before the append, not by the dispatch loop after
        the client heard SEND_OK; when they exist this is a lookup and a comparison per queue.

        :raises StoreNotWritable: with the reason and what to change.
        """
        failing = self.queues.failing or (self.index.failing if self.index is not None else "")
        if failing:
            raise StoreNotWritable(f"the store cannot index new messages: {failing}")
        if isinstance(messages, WireBatch):
            self._reserve(messages.topic, messages.queue_id, len(messages))
        elif len(messages) == 1:
            self._reserve(messages[0].topic, messages[0].queue_id, 1)
        else:
            for (topic, queue_id), count in Counter((m.topic, m.queue_id) for m in messages).items():
                self._reserve(topic, queue_id, count)

    def _reserve(self, topic: str, queue_id: int, count: int) -> None:
        """The files (or pool journal space) ``count`` new entries of one queue go to exist and
        have disk space, or StoreNotWritable."""
        key = (topic, queue_id)
        next_offset = self.commit_log.queue_offsets.get(key, 0)
        try:
            self.queues.reserve(topic, queue_id, next_offset, count)
        except (OSError, StoreError) as error:
            raise StoreNotWritable(
                f"cannot open the consume queue {topic}/{queue_id}: {explain_open_failure(error)}"
            ) from error

    @property
    def stages_writes(self) -> bool:
        return self.commit_log.stages_writes

    def uncommitted_bytes(self) -> int:
        return self.commit_log.uncommitted_bytes()

    async def commit(self, *, least_pages: int = 0) -> int:
        """Write staged appends into the files (``write_path = "buffered"``), making them
        visible to dispatch; a no-op for the other write paths.

        :raises FlushError: the store turns read-only and flush waiters are failed.
        """
        if least_pages and self.commit_log.uncommitted_bytes() < least_pages * PAGE_SIZE:
            await trio.lowlevel.checkpoint()
            return self.positions.wrote.value
        async with self._flush_lock:
            await self._commit_locked()
        return self.positions.wrote.value

    async def _commit_locked(self, *, pass_when_empty: bool = True) -> None:
        work = self.commit_log.take_commit()
        if not work:
            if pass_when_empty:  # a commit loop calling with nothing staged must not spin
                await trio.lowlevel.checkpoint()
            return
        ok = False
        try:
            await self._flush_thread().run(self.commit_log.commit_blocking, work)
            ok = True
        except FlushError as error:
            self._fail(error)
            raise
        finally:
            self.commit_log.end_commit(work, ok=ok)

    async def _sync_file(self, mapped: MappedFile) -> None:
        """One commit-log file made durable: through the io_uring, or on the flush thread
        (``sync_with``; ``msync`` for ``write_path = "mmap"`` always takes the thread)."""
        if self.ring is not None:
            overlap = self.sync_overlap
            meanwhile = overlap.run if overlap is not None and overlap.wanted else None
            await mapped.flush_through(self.ring, meanwhile)
        else:
            await self._flush_thread().run(mapped.flush_blocking)

    def _flush_thread(self) -> FlushThread:
        if self._flusher is None:
            self._flusher = FlushThread()
        return self._flusher

    def _fail(self, error: FlushError) -> None:
        self.commit_log.read_only_reason = f"store is read-only after a flush failure: {error}"
        log.error("%s", self.commit_log.read_only_reason)
        self.positions.flushed.fail(error)

    def start_flush(self) -> bool:
        """:class:`~kernel.protocols.EarlyFlushStore`: the commit log's sync submitted to the
        io_uring now, waited for by the next :meth:`flush`. Only when nothing is staged and no
        flush runs (that flush's own sync follows), and only through the ring (the flush
        thread's sync cannot be started without a hand-over costing what it saves)."""
        if self.ring is None or self._flush_lock.locked() or self.commit_log.uncommitted_bytes():
            return False
        return self.commit_log.start_sync(self.ring)

    async def flush(self, *, least_pages: int = 0) -> int:
        """Commit staged bytes, then flush the commit log (fdatasync or msync on the flush thread).

        :raises FlushError: the flushed position stays, the store turns read-only and every
            waiter on ``positions.flushed`` is failed.
        """
        if least_pages and self.commit_log.dirty_bytes() < least_pages * PAGE_SIZE:
            await trio.lowlevel.checkpoint()
            return self.positions.flushed.value
        lock = self._flush_lock
        if lock.locked():
            await lock.acquire()
        else:
            # No scheduler pass on the way to the disk: a lone sync put flushes on its own
            # task (flush_sync's leader), and every pass runs the connections' busy poller.
            lock.acquire_nowait()
        try:
            await self._commit_locked(pass_when_empty=False)
            try:
                flushed, covered_ts = await self.commit_log.flush(self._sync_file)
            except FlushError as error:
                self._fail(error)
                raise
            # A slave may hold (and flush) the head of a record whose rest has not arrived:
            # the flushed position never passes the end of whole records.
            self.positions.flushed.advance(min(flushed, self.positions.wrote.value))
            self.checkpoint.physic_timestamp = max(self.checkpoint.physic_timestamp, covered_ts)
            return self.positions.flushed.value
        finally:
            lock.release()

    # --- replication (kernel.protocols.ReplicableStore) ----------------------------------------------

    def read_raw(self, offset: int, max_bytes: int) -> bytes:
        return self.commit_log.read_raw(offset, max_bytes)

    async def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        if self.stages_writes:
            raise StoreNotWritable(
                "a slave writes the master's bytes directly: [store_mmap] write_path = "
                '"buffered" (transientStorePoolEnable) is for masters'
            )
        pieces = self.commit_log.replica_pieces(offset, data)
        if len(data) >= REPLICA_THREAD_WRITE_BYTES:
            # Large writes (a catching-up slave) leave the event loop free for dispatch and
            # the HA connection while the kernel copies them into the page cache.
            await trio.to_thread.run_sync(self.commit_log.write_pieces, pieces)
        else:
            await trio.lowlevel.checkpoint()
            self.commit_log.write_pieces(pieces)
        self.commit_log.replica_written(offset + len(data))
        return self.commit_log.append_end

    def received_end(self) -> int:
        return self.commit_log.append_end

    # --- role changes (kernel.protocols.TruncatableStore) -------------------------------------

    def truncate(self, offset: int) -> None:
        """Drop the log from ``offset`` on (a demoted master's divergent tail), with the consume
        queue and index entries pointing there. The cut bytes of the file holding ``offset`` are
        zeroed and flushed first: recovery scans to the first invalid record, and must not find
        the dropped records again after a crash."""
        commit_log = self.commit_log
        files = commit_log.files
        end = commit_log.append_end
        oldest = files.min_offset if files.files else 0
        if offset > end or offset < oldest:
            raise OffsetOutOfRange(f"cannot truncate the log at {offset}: it holds [{oldest}, {end})")
        if offset == end:
            return
        for mapped in files.files:
            position = offset - mapped.start
            if 0 <= position < mapped.wrote:
                mapped.buffer[position : mapped.wrote] = bytes(mapped.wrote - position)
                mapped.buffer.flush()
        files.truncate(offset)
        commit_log.reset_end(offset)
        dropped = self.queues.truncate_beyond(offset)
        self.queues.set_dispatched(min(self.queues.dispatched_offset(), offset))
        if self.index is not None:
            self.index.drop_beyond(offset)
            self.index.set_dispatched(min(self.index.dispatched_offset(), offset))
        self.checkpoint.dispatched_offset = min(self.checkpoint.dispatched_offset, offset)
        self.checkpoint.save(self.checkpoint_path)
        log.warning(
            "log truncated at %d: %d bytes and %d consume-queue entries dropped",
            offset,
            end - offset,
            dropped,
        )

    def take_over(self) -> None:
        """Appends continue each queue where its consume queue ends (dispatch reached the end)."""
        self.commit_log.queue_offsets = {key: q.max_queue_offset for key, q in self.queues.queues.items()}

    def watermarks(self) -> Watermarks:
        committed = self.positions.wrote.value
        return Watermarks(
            self.commit_log.files.min_offset,
            self.commit_log.append_end,
            committed,
            self.positions.flushed.value,
        )

    def writable(self) -> tuple[bool, str]:
        reason = self.commit_log.read_only_reason or self.commit_log.disk_full_reason
        return (not reason, reason)

    def delete_log_head(self, count: int) -> None:
        """Delete the first ``count`` commit-log files and every derived file wholly below the
        new log minimum (retention)."""
        self.commit_log.files.delete_leading(count)
        log_min = self.commit_log.files.min_offset
        for queue in self.queues.queues.values():
            queue.delete_files_below(log_min)
        if self.index is not None:
            self.index.delete_files_below(log_min)

    def lookup(self, topic: str, queue_id: int, queue_offset: int, max_entries: int) -> list[QueueEntry]:
        return self.queues.lookup(topic, queue_id, queue_offset, max_entries)

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        return self.queues.min_offset(topic, queue_id)

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        return self.queues.max_offset(topic, queue_id)

    def lookup_columns(self, topic: str, queue_id: int, queue_offset: int, max_entries: int) -> QueueEntries:
        """:meth:`lookup` as columns (the pull path's form, see :mod:`kernel.queue_entries`)."""
        return self.queues.lookup_columns(topic, queue_id, queue_offset, max_entries)

    async def read_records(self, entries: Sequence[QueueEntry]) -> Sequence[bytes]:
        await trio.lowlevel.checkpoint()
        return self.commit_log.read_entries(QueueEntries.of(entries))

    async def read_record_at(self, offset: int) -> bytes:
        await trio.lowlevel.checkpoint()
        return self.commit_log.read_at(offset)

    async def read_log(
        self, offset: int, *, end: int, max_bytes: int
    ) -> tuple[Sequence[DispatchRecord], int]:
        await trio.lowlevel.checkpoint()
        return self.commit_log.scan(offset, end=end, max_bytes=max_bytes)

    def read_handed(
        self, offset: int, *, end: int, max_bytes: int
    ) -> tuple[Sequence[DispatchRecord], int] | None:
        return self.commit_log.take_handed(offset, end=end, max_bytes=max_bytes)

    def dispatchers(self) -> Sequence[ConsumeQueues | IndexService]:
        # The index persists first, so the checkpoint written by the queues' persist covers it.
        return [self.queues] if self.index is None else [self.index, self.queues]

    # --- queries ----------------------------------------------------------------------------

    async def query_by_key(
        self, topic: str, key: str, *, max_num: int = 32, begin: int = 0, end: int = 2**62
    ) -> list[bytes]:
        """Records of ``topic`` whose ``KEYS`` contain ``key`` or whose ``UNIQ_KEY`` is ``key``,
        stored within [begin, end] (ms), newest first. Empty if the index is disabled."""
        await trio.lowlevel.checkpoint()
        if self.index is None:
            return []
        out = []
        for offset in self.index.query(f"{topic}#{key}", max_num * 2, begin, end):
            if offset < self.commit_log.files.min_offset or offset >= self.positions.wrote.value:
                continue
            data = self.commit_log.read_at(offset)
            message = record.decode_record(data)
            if message.topic == topic and (key in message.keys or message.unique_key == key):
                out.append(data)
                if len(out) >= max_num:
                    break
        return out

    def store_time(self, topic: str, queue_id: int, queue_offset: int) -> int:
        """Store timestamp (ms) of the message at ``queue_offset``, or -1 if there is none."""
        entries = self.queues.lookup(topic, queue_id, queue_offset, 1)
        if not entries or entries[0].physical_offset < self.commit_log.files.min_offset:
            return -1
        return self._store_time_at(entries[0].physical_offset)

    def _store_time_at(self, physical_offset: int) -> int:
        mapped = self.commit_log.files.find(physical_offset)
        return record.read_store_timestamp(mapped.buffer, physical_offset - mapped.start)

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset whose message was stored at or after ``timestamp`` (ms);
        the max offset if all are older; 0 for an unknown queue (binary search)."""
        low = self.queues.min_offset(topic, queue_id)
        high = self.queues.max_offset(topic, queue_id)
        while low < high:
            middle = (low + high) // 2
            stored = self.store_time(topic, queue_id, middle)
            if stored == -1 or stored < timestamp:
                low = middle + 1
            else:
                high = middle
        return low

    def services(self) -> Sequence[RetentionService]:
        return [self.retention]

    def _on_queues_persisted(self, dispatched: int, newest_timestamp: int) -> None:
        """Runs in the persist worker thread after the consume queues (and, before them in the
        same persist round, the index) were flushed."""
        self.checkpoint.logics_timestamp = max(self.checkpoint.logics_timestamp, newest_timestamp)
        if self.index is not None:
            self.checkpoint.index_timestamp = max(
                self.checkpoint.index_timestamp, self.index.flushed_timestamp
            )
        self.checkpoint.dispatched_offset = dispatched
        self.checkpoint.save(self.checkpoint_path)

    def statistics(self) -> MmapStoreStatistics:
        return MmapStoreStatistics(
            min_offset=self.commit_log.files.min_offset,
            wrote=self.commit_log.append_end,
            committed=self.positions.wrote.value,
            flushed=self.positions.flushed.value,
            commit_log_files=len(self.commit_log.files.files),
            consume_queues=len(self.queues.queues),
            read_only=self.commit_log.read_only_reason or self.commit_log.disk_full_reason,
        )

    def close(self) -> None:
        if self.warmer is not None:
            self.warmer.close()
            self.warmer = None
        if self._flusher is not None:
            self._flusher.close()
            self._flusher = None
        if self.ring is not None:
            self.ring.close()
            self.ring = None
        self.commit_log.files.close()
        self.queues.close()
        if self.index is not None:
            self.index.close()


DEFAULT_QUEUE_FILE_BOUND = 1024
"""Queue files open at once by default, at most: a cold queue's next use costs one ``open``
(queue files are not mapped), so a small bound costs spread produce nothing measurable
(8,000 queues, bench/scale.py: 0.71x of 8 queues with 1,024 open, 0.69x with all 5,000 the
limit allowed) and keeps a broker's descriptors near a thousand whatever its queue count."""


def queue_file_bound(configured: int) -> int:
    """``max_open_queue_files``, or when 0 ``DEFAULT_QUEUE_FILE_BOUND`` or a quarter of the
    open-files limit, whichever is smaller (each open queue file holds one descriptor: the
    rest stays for the log, the index and connections)."""
    if configured:
        return configured
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    quarter = (soft if soft != resource.RLIM_INFINITY else 1 << 20) // 4
    return max(16, min(DEFAULT_QUEUE_FILE_BOUND, quarter))


def sync_ring(config: StoreMmapConfig) -> Ring | None:
    """The io_uring the commit log's syncs go through, or None for the flush thread (see
    ``sync_with``).

    :raises ConfigError: ``sync_with = "io_uring"`` where the kernel refuses it.
    """
    if config.sync_with == "thread" or config.write_path == "mmap":
        return None
    try:
        return open_ring(spin=config.sync_wait == "spin")
    except RingUnavailable as error:
        if config.sync_with == "io_uring":
            problem = f"io_uring is unavailable here: {error.strerror}"
            raise ConfigError("[store_mmap]", "sync_with", problem) from None
        log.info("commit-log syncs through the flush thread: %s", error.strerror)
        return None


@asynccontextmanager
async def open_mmap_store(ctx: BrokerContext) -> AsyncIterator[MmapStore]:
    """Lock the store directory, open its files, yield the store, close everything.

    :raises kernel.errors.StoreLocked: another broker holds the directory.
    """
    config = ctx.plugin_config(StoreMmapConfig)
    root = ctx.data_dir
    root.mkdir(parents=True, exist_ok=True)
    lock = StoreLock(root / "lock")
    lock.acquire()
    try:
        commit_dir = config.commit_log_dir or root / "commitlog"
        files = MappedFileQueue.load(
            commit_dir,
            config.commit_log_file_size,
            use_mmap_writes=config.write_path == "mmap",
            stage_writes=config.write_path == "buffered",
        )
        try:
            queues = ConsumeQueues.load(
                root / "consumequeue",
                config.consume_queue_file_size,
                least_pages=config.flush_consume_queue_least_pages,
                budget=OpenFileBudget(queue_file_bound(config.max_open_queue_files)),
                pooled_entries=config.pooled_queue_entries,
                pool_memory=config.queue_pool_memory,
            )
        except BaseException:
            files.close()
            raise
        index = None
        if config.message_index_enable:
            index = IndexService.load(root / "index", config.index_hash_slots, config.index_max_entries)
        commit_log = CommitLog(
            files, (ctx.broker.listen_host, ctx.broker.listen_port), parking_topics=ctx.parking_topics
        )
        store = MmapStore(root, config, commit_log, queues, Checkpoint.load(root / "checkpoint"), index)
        try:
            store.ring = ctx.stash[SYNC_RING] = sync_ring(config)
        except BaseException:
            store.close()
            raise
        if store.ring is not None:
            store.sync_overlap = ctx.sync_overlap
            log.info("commit-log syncs through io_uring")
        if config.warm_mapped_file:
            store.warmer = ctx.stash[WARMER] = FileWarmer(appends_at=lambda: commit_log.append_end)
        queues.on_persist = store._on_queues_persisted
        queues.log_end = lambda: commit_log.append_end
        try:
            yield store
        finally:
            store.close()
    finally:
        lock.release()
