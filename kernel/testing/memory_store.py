"""An in-memory reference :class:`~kernel.protocols.MessageStore`, registered as store ``"memory"``.

It keeps records in the RocketMQ v1 layout in one ``bytearray`` and its consume queues in
lists, so pipelines, lifecycle and plugins can be tested without files. It is also the
reference implementation the conformance suite (:mod:`kernel.testing.contracts`) is checked
against. Nothing survives the process. Load it by dotted path:
``plugins = ["kernel.testing.memory_store", ...]`` with ``store = "memory"``.

Test knobs: ``flush_delay`` (seconds a flush takes) and ``fail_next_flush`` (the next flush
raises :class:`~kernel.errors.FlushError` and the store turns read-only).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import attrs
import trio

from kernel.context import BrokerContext
from kernel.errors import FlushError, OffsetOutOfRange, StoreNotWritable
from kernel.model import (
    AppendResult,
    DispatchRecord,
    Message,
    QueueEntry,
    RecoveryReport,
    StoreProvider,
    Watermarks,
)
from kernel.plugin import hookimpl
from kernel.protocols import Service
from kernel.sync import LogPositions
from wire import record


@attrs.define(eq=False)
class MemoryQueueIndex:
    """Consume queues as lists of entries; the store's own dispatcher."""

    name: str = "memory_consume_queue"
    queues: dict[tuple[str, int], list[QueueEntry]] = attrs.field(factory=dict)
    _reached: int = 0

    def dispatched_offset(self) -> int:
        return self._reached

    def dispatch(self, records: Sequence[DispatchRecord], end_offset: int) -> None:
        for r in records:
            queue = self.queues.setdefault((r.topic, r.queue_id), [])
            if r.queue_offset == len(queue):
                queue.append(QueueEntry(r.queue_offset, r.physical_offset, r.size, r.tags_code))
        self._reached = end_offset

    async def persist(self, *, thorough: bool) -> None:
        await trio.lowlevel.checkpoint()


@attrs.frozen
class MemoryStoreStatistics:
    wrote: int
    flushed: int
    queues: int
    flushes: int


@attrs.define(eq=False)
class MemoryStore:
    """See the module docstring."""

    store_host: tuple[str, int] = ("127.0.0.1", 10911)
    flush_delay: float = 0.0
    fail_next_flush: bool = False
    positions: LogPositions = attrs.field(factory=LogPositions)
    parking_topics: frozenset[str] = frozenset()
    """Topics whose tag code is the due time (:attr:`kernel.context.BrokerContext.parking_topics`)."""
    _log: bytearray = attrs.field(factory=bytearray, init=False)
    _next_queue_offset: dict[tuple[str, int], int] = attrs.field(factory=dict, init=False)
    _index: MemoryQueueIndex = attrs.field(factory=MemoryQueueIndex, init=False)
    _read_only: str = attrs.field(default="", init=False)
    _flushes: int = attrs.field(default=0, init=False)
    _encoder: record.RecordEncoder = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._encoder = record.RecordEncoder(self.store_host)

    async def recover(self, *, clean_shutdown: bool) -> RecoveryReport:
        await trio.lowlevel.checkpoint()
        return RecoveryReport(
            clean_shutdown=clean_shutdown,
            log_min_offset=0,
            log_max_offset=len(self._log),
            notes=("in-memory store: nothing to recover",),
        )

    async def append(self, messages: Sequence[Message]) -> AppendResult:
        await trio.lowlevel.checkpoint()
        if self._read_only:
            raise StoreNotWritable(self._read_only)
        now = int(time.time() * 1000)
        run = self._encoder.encode_run(messages, len(self._log), self._next_queue_offset, now)
        self._log += run.data
        self._next_queue_offset.update(run.next_queue_offsets)
        offsets, sizes, queue_offsets = run.offsets, run.sizes, run.queue_offsets
        self.positions.wrote.advance(len(self._log))
        return AppendResult(offsets, sizes, queue_offsets, now, len(self._log), self.store_host)

    async def flush(self, *, least_pages: int = 0) -> int:
        target = len(self._log)
        pending_pages = (target - self.positions.flushed.value) // 4096
        if least_pages and pending_pages < least_pages:
            await trio.lowlevel.checkpoint()
            return self.positions.flushed.value
        if self.flush_delay:
            await trio.sleep(self.flush_delay)
        else:
            await trio.lowlevel.checkpoint()
        if self.fail_next_flush:
            self.fail_next_flush = False
            error = FlushError("simulated flush failure (memory store)")
            self._read_only = f"store is read-only after a flush failure: {error}"
            self.positions.flushed.fail(error)
            raise error
        self._flushes += 1
        self.positions.flushed.advance(target)
        return self.positions.flushed.value

    def watermarks(self) -> Watermarks:
        return Watermarks(0, len(self._log), len(self._log), self.positions.flushed.value)

    def writable(self) -> tuple[bool, str]:
        return (not self._read_only, self._read_only)

    def lookup(self, topic: str, queue_id: int, queue_offset: int, max_entries: int) -> list[QueueEntry]:
        queue = self._index.queues.get((topic, queue_id), [])
        return queue[queue_offset : queue_offset + max_entries]

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        return 0

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        return len(self._index.queues.get((topic, queue_id), ()))

    async def read_records(self, entries: Sequence[QueueEntry]) -> list[bytes]:
        await trio.lowlevel.checkpoint()
        log = self._log
        out = []
        for e in entries:
            record.check_record(log, e.physical_offset, limit=e.physical_offset + e.size)
            out.append(bytes(log[e.physical_offset : e.physical_offset + e.size]))
        return out

    async def read_log(self, offset: int, *, end: int, max_bytes: int) -> tuple[list[DispatchRecord], int]:
        await trio.lowlevel.checkpoint()
        records = []
        at = offset
        while at < end and at - offset < max_bytes:
            size = record.check_record(self._log, at, limit=end)
            records.append(record.decode_dispatch(self._log, at, self.parking_topics))
            at += size
        return records, at

    async def read_record_at(self, offset: int) -> bytes:
        await trio.lowlevel.checkpoint()
        if not 0 <= offset < len(self._log):
            raise OffsetOutOfRange(f"no record at commit-log offset {offset} (log ends at {len(self._log)})")
        size = record.check_record(self._log, offset, limit=len(self._log))
        return bytes(self._log[offset : offset + size])

    async def query_by_key(
        self, topic: str, key: str, *, max_num: int = 32, begin: int = 0, end: int = 2**62
    ) -> list[bytes]:
        await trio.lowlevel.checkpoint()
        found = []
        for message in reversed(record.decode_records(bytes(self._log))):
            if message.topic != topic or not begin <= message.store_timestamp <= end:
                continue
            if key in message.keys or message.unique_key == key:
                found.append(
                    bytes(self._log[message.physical_offset : message.physical_offset + message.size])
                )
                if len(found) >= max_num:
                    break
        return found

    def store_time(self, topic: str, queue_id: int, queue_offset: int) -> int:
        entries = self.lookup(topic, queue_id, queue_offset, 1)
        return record.read_store_timestamp(self._log, entries[0].physical_offset) if entries else -1

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        queue = self._index.queues.get((topic, queue_id), [])
        for entry in queue:
            if record.read_store_timestamp(self._log, entry.physical_offset) >= timestamp:
                return entry.queue_offset
        return len(queue)

    def dispatchers(self) -> Sequence[MemoryQueueIndex]:
        return [self._index]

    def services(self) -> Sequence[Service]:
        return []

    def statistics(self) -> MemoryStoreStatistics:
        return MemoryStoreStatistics(
            len(self._log), self.positions.flushed.value, len(self._index.queues), self._flushes
        )


@asynccontextmanager
async def open_memory_store(ctx: BrokerContext) -> AsyncIterator[MemoryStore]:
    yield MemoryStore(
        store_host=(ctx.broker.listen_host, ctx.broker.listen_port), parking_topics=ctx.parking_topics
    )


@hookimpl
def trocket_register_stores() -> list[StoreProvider]:
    return [StoreProvider("memory", open_memory_store, "in-memory reference store (tests only)")]
