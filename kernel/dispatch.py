"""The ordered dispatch loop: replays the commit log into every derived view, in batches.

The commit log is the single source of truth. Consume queues, the index and any plugin view
(schedule queues, exports) are fed here, in log order, from the lowest offset any of them has
reached, so a deleted or new view is rebuilt from the log.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio

from kernel.context import BrokerContext
from kernel.protocols import Dispatcher, HandedLogStore, MessageStore
from kernel.sync import Watermark
from wire.dispatch_batch import DispatchBatch

log = logging.getLogger(__name__)

BATCH_BYTES = 256 * 1024
"""Log bytes per dispatch batch, at least. Small enough that a batch (a few ms of per-record
decoding) does not hold the event loop long: a catching-up slave's HA connection and the
network service get a turn between batches (a fresh slave catches up 1.6x faster than with
1 MiB of small records, bench/ha.py); large enough that per-batch costs (one hook call, one
read, a scheduler turn per view) stay negligible."""
BATCH_RECORDS = 1024
"""The cost of a batch follows its record count, not its bytes: records larger than about
256 B get ``BATCH_RECORDS`` of them per batch (up to ``MAX_BATCH_BYTES``), sized from the
previous batch's mean. With a fixed 256 KiB, a batch held 220 records of 1 KiB, and a broker
taking pipelined 1 KiB puts fell behind them for good (consumers waited on dispatch)."""
MAX_BATCH_BYTES = 4 * 1024 * 1024
LIGHT_ROUND_RECORDS = 64
"""Rounds of at most this many records (what a few ms of sends one at a time left) are light:
read as one batch with a turn for the network before each view (see
``DispatchService._dispatch_round``)."""
GATHER_BYTES = BATCH_BYTES
GATHER_INTERVAL = 0.004
"""Pacing of a busy loop: a batch has a fixed cost (tens of µs of array set-up in the views),
which a broker taking many small puts would pay once per put (dispatching 32 messages at a time
cost 4 µs a message, 16 puts of 32 at a time 1 µs). So when less than ``GATHER_BYTES`` wait and
the previous batch started less than ``GATHER_INTERVAL`` seconds ago, the loop waits until that
interval has passed and dispatches everything that came meanwhile. An idle broker dispatches a
lone message at once; under load a message becomes visible to consumers at most 4 ms after its
put (RocketMQ's reput service sleeps 1 ms per round, with a far cheaper round)."""
TURN_RECORDS = 32
"""Batches of more records give the network a turn between the log read and each view (a
request arriving meanwhile would wait for all of it: the tail of single-message latency);
smaller ones, a few single sends at a few µs each, are dispatched in one go."""
OVERLAP_RECORDS = 16
"""Most records (at the mean record size) dispatched while a disk sync runs
(:meth:`DispatchService.dispatch_while_syncing`): about one sync's worth on this project's
machines (a single send's record costs 5-7 µs to dispatch live, plus about 10 µs a call; a sync
0.1-0.15 ms), so the work rarely outlasts the sync it hides in. Larger appends (a connection's
group of many sends) are the loop's, in its rounds."""
PERSIST_INTERVAL = 1.0
THOROUGH_PERSIST_INTERVAL = 60.0
RETRY_DELAY = 1.0


@attrs.frozen
class DispatchStatistics:
    """Progress of the dispatch loop."""

    dispatched_offset: int
    """Log offset every view has reached."""
    behind_bytes: int
    """RocketMQ's ``dispatchBehindBytes``: bytes written but not yet dispatched."""
    batches: int
    records: int
    errors: int
    """Dispatch batches that failed with an I/O error and were retried."""
    overlapped: int = 0
    """Batches dispatched while the store's disk sync ran (:mod:`kernel.sync_overlap`)."""


@attrs.define(eq=False)
class DispatchService:
    """Feeds ``dispatchers`` from ``store`` and persists them periodically and at the end.

    With ``visible_after_flush`` the loop stops at the flushed position, so consumers never
    see bytes a power loss could still take away.
    """

    ctx: BrokerContext
    store: MessageStore
    dispatchers: Sequence[Dispatcher]
    visible_after_flush: bool = False
    persist_interval: float = PERSIST_INTERVAL
    thorough_persist_interval: float = THOROUGH_PERSIST_INTERVAL
    confirmed: Watermark | None = None
    """The replicator's confirm offset (controller mode): when set, dispatch stops there, so
    consumers see only what every SyncStateSet member holds."""
    dispatched: Watermark = attrs.field(factory=Watermark, init=False)
    _rewound: int | None = attrs.field(default=None, init=False)
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _idle: trio.CancelScope | None = attrs.field(default=None, init=False)
    _batches: int = attrs.field(default=0, init=False)
    _records: int = attrs.field(default=0, init=False)
    _batch_bytes: int = attrs.field(default=BATCH_BYTES, init=False)
    _record_bytes: int = attrs.field(default=BATCH_BYTES // BATCH_RECORDS, init=False)
    """Mean size of the records of the last batch."""
    _errors: int = attrs.field(default=0, init=False)
    _overlapped: int = attrs.field(default=0, init=False)
    """Batches dispatched while a disk sync ran (:meth:`dispatch_while_syncing`)."""
    _read_handed: Callable[..., tuple[Sequence[Any], int] | None] | None = attrs.field(init=False)
    """The store's :meth:`~kernel.protocols.HandedLogStore.read_handed`, when it has one
    (looked up once: a protocol check costs microseconds)."""
    _overlap_paused: bool = attrs.field(default=False, init=False)
    """A view failed during a sync; the loop's next good batch resumes the overlap."""
    _dispatched_hook: Any = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._dispatched_hook = self.ctx.implemented("trocket_records_dispatched")
        self._read_handed = self.store.read_handed if isinstance(self.store, HandedLogStore) else None

    def limit(self) -> Watermark:
        """The position dispatch may reach: the confirm offset in controller mode, flushed with
        ``visible_after_flush``, else wrote."""
        if self.confirmed is not None:
            return self.confirmed
        positions = self.store.positions
        return positions.flushed if self.visible_after_flush else positions.wrote

    def start_offset(self) -> int:
        log_min = self.store.watermarks().min_offset
        offsets = [d.dispatched_offset() for d in self.dispatchers]
        return max(log_min, min(offsets)) if offsets else self.store.positions.wrote.value

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        """Dispatch until cancelled.

        Resource handling: dispatchers are persisted every ``persist_interval`` (thoroughly
        every ``thorough_persist_interval``) by a sibling task; the final, thorough persist is
        the lifecycle's job (shielded, after :meth:`drain`).
        """
        self._cut_views(self.store.positions.wrote.value)
        offset = self.start_offset()
        self.dispatched.reset(offset)
        if offset < self.store.positions.wrote.value:
            log.info(
                "dispatch resumes at %d (%d bytes behind)", offset, self.store.positions.wrote.value - offset
            )
        overlap = self.ctx.sync_overlap
        if self._read_handed is not None:
            overlap.add(self.dispatch_while_syncing)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._persist_periodically)
                task_status.started()
                await self._loop(offset)
        finally:
            overlap.remove(self.dispatch_while_syncing)

    async def _loop(self, offset: int) -> None:
        limit = self.limit()
        last_batch = -GATHER_INTERVAL
        while True:
            if self._rewound is not None:
                offset, self._rewound = self._rewound, None
            else:
                offset = max(offset, self.dispatched.value)  # dispatched during a disk sync
            end = limit.value
            if offset >= end:
                with trio.CancelScope() as self._idle:
                    await limit.wait_reached(offset + 1)
                self._idle = None
                if self._rewound is None and self.dispatched.value >= limit.value:
                    # What woke it was dispatched during the put's disk sync (SyncOverlap)
                    # before this task ran: idle again in this step, no pass of its own.
                    continue
                # Woken by a put after idling: let the put's handler answer its client
                # first (its response is ready or nearly), then dispatch.
                await trio.lowlevel.checkpoint()
                continue
            light = end - offset < GATHER_BYTES
            if light:
                resume = last_batch + GATHER_INTERVAL
                if trio.current_time() < resume:
                    await trio.sleep_until(resume)
                    end = limit.value
            last_batch = trio.current_time()
            try:
                offset = await self._dispatch_round(offset, end, light)
            except OSError as error:
                # A view could not be written (disk full, I/O error). Dispatching is
                # idempotent, so the same batch is retried; the log itself is intact.
                self._errors += 1
                log.error("dispatch at offset %d failed: %s; retrying in %.1fs", offset, error, RETRY_DELAY)
                await trio.sleep(RETRY_DELAY)

    async def _dispatch_round(self, offset: int, end: int, light: bool) -> int:
        """Dispatch up to ``end`` in batches. A light round (at most ``LIGHT_ROUND_RECORDS``
        records: what a few ms of sends one at a time left) is one batch with a turn for the
        network between the log read and each view, so a request arriving meanwhile waits for
        one part of it (20-40 µs), not for the round. Most of a part's cost is fixed (a view
        takes 13-19 µs for one record, 18-26 µs for eight), so smaller batches would not
        shorten the wait much and would pay it more often: rounds dispatched in steps of eight
        records slowed one message in flight by 6-8 % (one send in five waited for a step)."""
        light = light and end - offset <= self._record_bytes * LIGHT_ROUND_RECORDS
        while True:
            async with self._lock:
                if self._rewound is not None:
                    return offset
                offset = max(offset, self.dispatched.value)  # dispatched during a disk sync
                if offset >= end:
                    return offset
                offset = await self.dispatch_once(offset, end, turns=True if light else None)
            if not light or offset >= end:
                return offset
            await trio.lowlevel.checkpoint()

    async def dispatch_once(
        self, offset: int, end: int, *, max_bytes: int | None = None, turns: bool | None = None
    ) -> int:
        """Dispatch one batch from ``offset`` (not past ``end``, about ``max_bytes`` of log,
        by default what ``BATCH_RECORDS`` records take); return the next offset. ``turns``:
        give the network a turn before each view (default: for batches of more than
        ``TURN_RECORDS`` records)."""
        records, next_offset = await self.store.read_log(
            offset, end=end, max_bytes=max_bytes or self._batch_bytes
        )
        if records:
            self._record_bytes = max(1, (next_offset - offset) // len(records))
            self._batch_bytes = min(MAX_BATCH_BYTES, max(BATCH_BYTES, self._record_bytes * BATCH_RECORDS))
        if turns is None:
            turns = len(records) > TURN_RECORDS
        for dispatcher in self.dispatchers:
            if turns:
                await trio.lowlevel.checkpoint()
            self._feed(dispatcher, records, offset, next_offset)
        self._dispatched(records, next_offset)
        return next_offset

    def dispatch_while_syncing(self) -> None:
        """Dispatch what the put path just appended while the store's disk sync runs (its
        :class:`~kernel.sync_overlap.SyncOverlap` work): at most ``OVERLAP_RECORDS`` records
        of whole appends the store still holds, synchronously. Skipped while the loop is in a
        batch (it holds the lock), after a rewind, or when the backlog's next append is not
        held or too large: the loop dispatches those in its rounds, as always.

        A view that cannot be written (disk full, I/O error) pauses this until the loop, which
        logs and retries the batch (dispatching is idempotent), has dispatched one again."""
        if self._rewound is not None or self._lock.locked() or self._overlap_paused:
            return
        offset, end = self.dispatched.value, self.limit().value
        if offset >= end:
            return
        if self._read_handed is None:
            return
        handed = self._read_handed(offset, end=end, max_bytes=self._record_bytes * OVERLAP_RECORDS)
        if handed is None:
            return
        records, next_offset = handed
        self._lock.acquire_nowait()
        try:
            for dispatcher in self.dispatchers:
                self._feed(dispatcher, records, offset, next_offset)
            self._dispatched(records, next_offset)
        except OSError:
            self._overlap_paused = True  # the loop meets the same error, says so and retries
            return
        finally:
            self._lock.release()
        self._overlapped += 1

    @staticmethod
    def _feed(dispatcher: Dispatcher, records: Sequence[Any], offset: int, next_offset: int) -> None:
        reached = dispatcher.dispatched_offset()
        if reached >= next_offset:
            return
        if reached <= offset:
            todo = records
        elif isinstance(records, DispatchBatch):
            todo = records.since(reached)
        else:
            todo = [r for r in records if r.physical_offset >= reached]
        dispatcher.dispatch(todo, next_offset)

    def _dispatched(self, records: Sequence[Any], next_offset: int) -> None:
        self._overlap_paused = False
        if records and self._dispatched_hook is not None:
            self._dispatched_hook(records, self.ctx)
        self._batches += 1
        self._records += len(records)
        self.dispatched.advance(next_offset)

    async def rewind(self, truncate: Callable[[], None]) -> int:
        """Run ``truncate`` (which cuts the log and the views) between two batches, then resume
        from where the views now end; returns that offset. A replica that drops its divergent
        tail calls this (through ``Broker.truncate_log``)."""
        async with self._lock:
            truncate()
            self._cut_views(self.store.positions.wrote.value)
            offset = self.start_offset()
            self.dispatched.reset(offset)
            self._rewound = offset
            if self._idle is not None:
                self._idle.cancel()
        return offset

    def _cut_views(self, end: int) -> None:
        """Views that claim records past ``end`` forget them: the log was cut there (recovery
        dropped a torn tail, or a replica its divergent one) and new records will take those
        offsets. A view does it in its optional ``truncate(offset)``; one without it is named
        in the log, since it would skip the new records."""
        for dispatcher in self.dispatchers:
            reached = dispatcher.dispatched_offset()
            if reached <= end:
                continue
            truncate = getattr(dispatcher, "truncate", None)
            if truncate is None:
                log.error(
                    "view %s covers the log up to %d but the log ends at %d, and it has no "
                    "truncate(offset): it will skip the records written there next",
                    dispatcher.name,
                    reached,
                    end,
                )
                continue
            log.warning(
                "view %s covered the log up to %d; the log ends at %d: cut", dispatcher.name, reached, end
            )
            truncate(end)

    async def drain(self) -> None:
        """Wait until everything visible has been dispatched (used by graceful shutdown)."""
        await self.dispatched.wait_reached(self.limit().value)

    async def persist(self, *, thorough: bool = True) -> None:
        """Persist every view, in registration order (the store's index before its queues, so a
        checkpoint written by the queues covers the index)."""
        for dispatcher in self.dispatchers:
            await dispatcher.persist(thorough=thorough)

    async def _persist_periodically(self) -> None:
        last_thorough = trio.current_time()
        while True:
            await trio.sleep(self.persist_interval)
            now = trio.current_time()
            thorough = now - last_thorough >= self.thorough_persist_interval
            written = await self.ctx.background_writes.attempt(
                "the derived views (consume queues, index, checkpoint)",
                functools.partial(self.persist, thorough=thorough),
            )
            if thorough and written:
                last_thorough = now

    def statistics(self) -> DispatchStatistics:
        wrote = self.store.positions.wrote.value
        return DispatchStatistics(
            dispatched_offset=self.dispatched.value,
            behind_bytes=max(0, wrote - self.dispatched.value),
            batches=self._batches,
            records=self._records,
            errors=self._errors,
            overlapped=self._overlapped,
        )
