"""The narrow contracts providers implement; the kernel calls them directly on the data path.

Why Protocols and not hooks: a pluggy call costs about a microsecond and cannot be awaited.
Hooks select and configure providers at assembly time; after that the put and pull pipelines
call these methods directly, once per batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import trio
from attrs import AttrsInstance

from kernel.model import (
    AppendResult,
    DispatchRecord,
    Durability,
    Message,
    MessageQueue,
    QueueEntry,
    RecoveryReport,
    Replication,
    Watermarks,
)
from kernel.sync import Watermark


class LogPositions(Protocol):
    """Waitable positions of the commit log, shared with flush policies and dispatch."""

    wrote: Watermark
    """Bytes visible to readers of the log: advanced after every append, or after each commit
    for a store that stages writes (:class:`BufferedStore`)."""
    flushed: Watermark
    """Advanced only after a successful flush (bytes durable on disk)."""


class MessageStore(Protocol):
    """A commit log plus its queue index, as the kernel needs it.

    Offsets are *physical* (bytes in the commit log) unless named ``queue_offset`` (entries in a
    consume queue).
    """

    @property
    def positions(self) -> LogPositions:
        """The log's waitable positions (the same object for the store's lifetime)."""

    async def recover(self, *, clean_shutdown: bool) -> RecoveryReport:
        """Bring files to a consistent state; called once, before anything else."""

    async def append(self, messages: Sequence[Message]) -> AppendResult:
        """Append a batch as consecutive records, assigning consecutive queue offsets.

        :raises kernel.errors.StoreNotWritable: when the store refuses writes.
        """

    async def flush(self, *, least_pages: int = 0) -> int:
        """Make written bytes durable; return the new flushed position.

        Flushes only if at least ``least_pages`` dirty pages are pending (0 = whatever is
        pending). The flushed position only moves on success.

        :raises kernel.errors.FlushError: when the OS reports a failure.
        """

    def watermarks(self) -> Watermarks: ...

    def writable(self) -> tuple[bool, str]:
        """Whether appends are accepted, and why not."""

    # --- reads ------------------------------------------------------------------------------
    def lookup(self, topic: str, queue_id: int, queue_offset: int, max_entries: int) -> list[QueueEntry]:
        """Consume-queue entries from ``queue_offset`` (fewer near the end); in memory, sync."""

    def min_queue_offset(self, topic: str, queue_id: int) -> int: ...

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        """One past the last dispatched entry (0 for an unknown queue)."""

    async def read_records(self, entries: Sequence[QueueEntry]) -> Sequence[bytes]:
        """The stored records for ``entries``, each verified and copied out of the log (a list,
        or a :class:`~wire.stored_records.StoredRecords` read in one piece)."""

    async def read_log(
        self, offset: int, *, end: int, max_bytes: int
    ) -> tuple[Sequence[DispatchRecord], int]:
        """Decode whole records from ``offset``, none reaching past ``end``, stopping once about
        ``max_bytes`` were read (at least one record if one fits); return them and the offset
        after them (past any end-of-file filler). Used by the dispatch loop."""

    def dispatchers(self) -> Sequence[Dispatcher]:
        """The store's own derived views (consume queues, index), fed by the dispatch loop."""

    def services(self) -> Sequence[Service]:
        """The store's own background services (retention, disk checks), started in the
        DERIVED phase whenever this store is the broker's store."""

    def statistics(self) -> AttrsInstance:
        """A snapshot of counters as an attrs instance of the plugin's own class (admin tools
        show it with ``attrs.asdict``; tests read its fields)."""


@runtime_checkable
class BufferedStore(Protocol):
    """A store that may stage appends in memory before writing them to its files (RocketMQ's
    transient store pool). Staged bytes are acknowledged under an async policy but invisible to
    readers and lost by a process crash until committed; :meth:`MessageStore.flush` always
    commits first. A flush policy that supports it runs the commit loop."""

    @property
    def stages_writes(self) -> bool:
        """Whether staging is on (a store may support it and have it switched off)."""

    def uncommitted_bytes(self) -> int: ...

    async def commit(self, *, least_pages: int = 0) -> int:
        """Write staged bytes into the files if at least ``least_pages`` pages are staged
        (0 = whatever is staged); return the committed (visible) end.

        :raises kernel.errors.FlushError: the store turns read-only, as for a failed flush.
        """


@runtime_checkable
class EarlyFlushStore(Protocol):
    """A store that can start a flush without waiting for it, so the disk begins while the
    caller walks to :meth:`MessageStore.flush`, which then waits for the started work rather
    than starting its own. A flush policy's put that is about to flush alone starts it first
    (flush_sync's leader: docs/performance.md, thirty-fifth step)."""

    def start_flush(self) -> bool:
        """Start making what is written so far durable; return at once. True when something
        was started: the next :meth:`MessageStore.flush`, if called before anything else
        yields, waits for it and for nothing a deadline could abandon (no lock, no queue:
        only the disk, which is waited for in any case), and flushes whatever was written
        after it began; False when the store cannot start one now (a flush is
        under way, it has nothing to start, its way of syncing cannot be started early): the
        next flush does everything, as without this call. Never raises: a failure belongs
        to the flush that waits."""


@runtime_checkable
class HandedLogStore(Protocol):
    """A store that keeps what its put path appended for the dispatch loop, so the records are
    not read back, and can hand them over without waiting: the dispatch then runs while the
    store's own sync runs in the kernel (:mod:`kernel.sync_overlap`)."""

    def read_handed(
        self, offset: int, *, end: int, max_bytes: int
    ) -> tuple[Sequence[DispatchRecord], int] | None:
        """The records appended in this process from ``offset`` on, as whole appends ending
        at or before ``end`` and of at most ``max_bytes`` together, and the offset after them;
        no read, no wait. None when the append at ``offset`` is not held (already dropped, or
        written before a restart), ends past ``end`` or alone exceeds ``max_bytes``: the
        dispatch loop reads it as usual."""


@runtime_checkable
class ReplicableStore(Protocol):
    """A store whose commit log can be copied byte for byte (RocketMQ's master/slave HA).

    The master reads raw bytes for its slaves; a slave appends them verbatim, so both logs are
    identical and each builds its own consume queues and index by dispatch.
    """

    def read_raw(self, offset: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` from ``offset``, never past the end of the file holding it nor
        the visible end; empty at the end.

        :raises kernel.errors.OffsetOutOfRange: before the oldest file or past the end.
        """

    async def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        """Append a master's bytes at ``offset`` (which must be :meth:`received_end`); return
        the new received end. ``positions.wrote`` follows at whole-record boundaries.

        :raises kernel.errors.ReplicaMismatch: ``offset`` or the file layout does not match.
        :raises kernel.errors.StoreNotWritable: the store refuses writes.
        """

    def received_end(self) -> int:
        """End of every byte this log holds, a partly received record included (what a slave
        reports to its master)."""


@runtime_checkable
class TruncatableStore(ReplicableStore, Protocol):
    """A replicated store whose replicas change roles at run time (controller mode): a demoted
    master drops the tail its new master does not hold, a promoted slave starts appending."""

    def truncate(self, offset: int) -> None:
        """Drop every log byte from ``offset`` (a record boundary) on, and every consume-queue
        and index entry pointing there; durable before it returns.

        :raises kernel.errors.OffsetOutOfRange: ``offset`` is before the oldest file or past
            the received end.
        """

    def take_over(self) -> None:
        """This replica now appends: queue offsets continue from its consume queues (called
        once dispatch has reached the log end)."""


class QueryableStore(MessageStore, Protocol):
    """Lookups the network layer serves to admin tools and clients (both built-in stores
    implement them; a store without them answers those requests with an error)."""

    async def read_record_at(self, offset: int) -> bytes:
        """The verified record starting at commit-log ``offset``.

        :raises kernel.errors.OffsetOutOfRange: no record starts there (or it was deleted).
        """

    async def query_by_key(
        self, topic: str, key: str, *, max_num: int = 32, begin: int = 0, end: int = 2**62
    ) -> list[bytes]:
        """Records of ``topic`` whose ``KEYS`` contain ``key`` or whose ``UNIQ_KEY`` is ``key``,
        stored within [begin, end] (ms), newest first."""

    def store_time(self, topic: str, queue_id: int, queue_offset: int) -> int:
        """Store timestamp (ms) of the message at ``queue_offset``, or -1 if there is none."""

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset stored at or after ``timestamp`` (the max offset if none)."""


class Dispatcher(Protocol):
    """A derived view rebuilt from the commit log by the kernel's dispatch loop."""

    name: str

    def dispatched_offset(self) -> int:
        """The log offset up to which this view is complete; dispatch resumes from the minimum."""

    def dispatch(self, records: Sequence[DispatchRecord], end_offset: int) -> None:
        """Apply a batch of records (in log order). Sync and in memory; no I/O waits."""

    async def persist(self, *, thorough: bool) -> None:
        """Write the view's state durably. Called every ``view_persist_interval`` with
        ``thorough=False`` (flush what is worth flushing; a view may do nothing), and every
        ``view_persist_thorough_interval`` and at shutdown with ``thorough=True`` (flush
        everything, record progress)."""


class TruncatableView(Dispatcher, Protocol):
    """A view that can forget records (optional; the kernel looks for the method): when the log
    is cut below :meth:`Dispatcher.dispatched_offset` (recovery dropped a torn tail, a replica
    its divergent one), the kernel calls ``truncate(end)`` between two batches, before dispatch
    resumes; the view drops what it derived from records at or past ``end`` and reports at
    most ``end`` from then on."""

    def truncate(self, offset: int) -> None: ...


class FlushPolicy(Protocol):
    """Decides when written bytes are flushed, and what an acknowledgement waits for.

    A policy whose :meth:`wait_durable` never waits may say so with a class attribute
    ``acknowledges_at_once = True`` (read with ``getattr``, default false): a standalone
    broker then answers a lone send in the connection's read loop, without a task.
    """

    name: str

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        """The policy's background flushing loop; runs until cancelled."""

    async def wait_durable(self, result: AppendResult, *, wait: bool) -> Durability:
        """Wait (within the policy's timeout) until ``result`` is as durable as promised.

        ``wait`` is false when every message in the batch has ``WAIT=false``. Never raises for
        a timeout or flush failure: those are :class:`Durability` values.
        """

    async def final_flush(self) -> None:
        """Flush everything; called shielded at shutdown."""

    def statistics(self) -> AttrsInstance:
        """A snapshot of counters as an attrs instance of the plugin's own class (admin tools
        show it with ``attrs.asdict``; tests read its fields)."""


class Replicator(Protocol):
    """Master/slave replication as a second, independent durability wait.

    The network plugin meets it through this contract only: it advertises :meth:`ha_address`
    when registering with the NameServer, passes on the master the NameServer names
    (:meth:`master_learned`), and serves :meth:`runtime_info` to admin tools.
    """

    name: str

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None: ...

    async def wait_replicated(self, result: AppendResult, *, wait: bool) -> Replication:
        """Wait (within the replicator's timeout) until ``result`` is on a replica, if the role
        asks for that. Never raises for a timeout or a missing replica: those are values."""

    def ha_address(self) -> str:
        """``host:port`` where replicas connect (RocketMQ's ``haServerAddr``); "" if none."""

    def master_learned(self, broker_addr: str, ha_addr: str) -> None:
        """The NameServer named this broker's master (a slave's registration answer)."""

    def runtime_info(self) -> Mapping[str, Any]:
        """JSON-ready replication state (RocketMQ 5's ``HARuntimeInfo``)."""

    def statistics(self) -> AttrsInstance:
        """A snapshot of counters as an attrs instance of the plugin's own class (admin tools
        show it with ``attrs.asdict``; tests read its fields)."""


class Service(Protocol):
    """Anything a plugin runs in the broker's lifecycle."""

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None: ...


class AllocateStrategyFn(Protocol):
    """``allocate(group, current_id, queues, consumer_ids) -> my queues``; pure and deterministic."""

    def __call__(
        self,
        group: str,
        current_id: str,
        queues: Sequence[MessageQueue],
        consumer_ids: Sequence[str],
    ) -> list[MessageQueue]: ...
