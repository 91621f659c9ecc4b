"""MmapStore: the commit log, consume queues, checkpoint and lock behind the kernel's
:class:`~kernel.abc.MessageStore` Protocol.

Directory layout (RocketMQ's): ``<root>/commitlog/<20-digit offset>``,
``<root>/consumequeue/<topic>/<queueId>/<20-digit offset>``, ``<root>/checkpoint``,
``<root>/lock`` (the kernel keeps ``<root>/abort``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

from kernel.context import BrokerContext
from kernel.errors import FlushError
from kernel.model import AppendResult, DispatchRecord, Message, QueueEntry, RecoveryReport, Watermarks
from kernel.sync import LogPositions
from plugins.store_mmap.checkpoint import Checkpoint
from plugins.store_mmap.commit_log import CommitLog
from plugins.store_mmap.config import StoreMmapConfig
from plugins.store_mmap.consume_queue import ConsumeQueues
from plugins.store_mmap.lock import StoreLock
from plugins.store_mmap.mapped_file import PAGE_SIZE
from plugins.store_mmap.mapped_file_queue import MappedFileQueue
from plugins.store_mmap.recovery import recover_store

log = logging.getLogger(__name__)


@attrs.frozen
class MmapStoreStatistics:
    min_offset: int
    wrote: int
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
    _flush_lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)

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
            )
        )
        for note in report.notes:
            log.info("recovery: %s", note)
        return report

    async def append(self, messages: Sequence[Message]) -> AppendResult:
        await trio.lowlevel.checkpoint()
        return self.commit_log.append(messages)

    async def flush(self, *, least_pages: int = 0) -> int:
        """Flush the commit log (fdatasync or msync in a worker thread).

        :raises FlushError: the flushed position stays, the store turns read-only and every
            waiter on ``positions.flushed`` is failed.
        """
        if least_pages and self.commit_log.dirty_bytes() < least_pages * PAGE_SIZE:
            await trio.lowlevel.checkpoint()
            return self.positions.flushed.value
        async with self._flush_lock:
            try:
                flushed, covered_ts = await trio.to_thread.run_sync(self.commit_log.flush_blocking)
            except FlushError as error:
                self.commit_log.read_only_reason = f"store is read-only after a flush failure: {error}"
                log.error("%s", self.commit_log.read_only_reason)
                self.positions.flushed.fail(error)
                raise
            self.positions.flushed.advance(flushed)
            self.checkpoint.physic_timestamp = max(self.checkpoint.physic_timestamp, covered_ts)
            return self.positions.flushed.value

    def watermarks(self) -> Watermarks:
        wrote = self.positions.wrote.value
        return Watermarks(self.commit_log.files.min_offset, wrote, wrote, self.positions.flushed.value)

    def writable(self) -> tuple[bool, str]:
        reason = self.commit_log.read_only_reason
        return (not reason, reason)

    def lookup(self, topic: str, queue_id: int, queue_offset: int, max_entries: int) -> list[QueueEntry]:
        return self.queues.lookup(topic, queue_id, queue_offset, max_entries)

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        return self.queues.min_offset(topic, queue_id)

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        return self.queues.max_offset(topic, queue_id)

    async def read_records(self, entries: Sequence[QueueEntry]) -> list[bytes]:
        await trio.lowlevel.checkpoint()
        return self.commit_log.read_entries(entries)

    async def read_record_at(self, offset: int) -> bytes:
        await trio.lowlevel.checkpoint()
        return self.commit_log.read_at(offset)

    async def read_log(self, offset: int, *, end: int, max_bytes: int) -> tuple[list[DispatchRecord], int]:
        await trio.lowlevel.checkpoint()
        return self.commit_log.scan(offset, end=end, max_bytes=max_bytes)

    def dispatchers(self) -> Sequence[ConsumeQueues]:
        return [self.queues]

    def _on_queues_persisted(self, dispatched: int, newest_timestamp: int) -> None:
        """Runs in the persist worker thread after the consume queues were flushed."""
        self.checkpoint.logics_timestamp = max(self.checkpoint.logics_timestamp, newest_timestamp)
        self.checkpoint.dispatched_offset = dispatched
        self.checkpoint.save(self.checkpoint_path)

    def statistics(self) -> MmapStoreStatistics:
        return MmapStoreStatistics(
            min_offset=self.commit_log.files.min_offset,
            wrote=self.positions.wrote.value,
            flushed=self.positions.flushed.value,
            commit_log_files=len(self.commit_log.files.files),
            consume_queues=len(self.queues.queues),
            read_only=self.commit_log.read_only_reason,
        )

    def close(self) -> None:
        self.commit_log.files.close()
        self.queues.close()


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
            commit_dir, config.commit_log_file_size, use_mmap_writes=config.write_path == "mmap"
        )
        try:
            queues = ConsumeQueues.load(root / "consumequeue", config.consume_queue_file_size)
        except BaseException:
            files.close()
            raise
        commit_log = CommitLog(files, (ctx.broker.listen_host, ctx.broker.listen_port))
        store = MmapStore(root, config, commit_log, queues, Checkpoint.load(root / "checkpoint"))
        queues.on_persist = store._on_queues_persisted
        try:
            yield store
        finally:
            store.close()
    finally:
        lock.release()
