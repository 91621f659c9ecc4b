"""The POP service: pops, acks, invisibility changes and the rebuild of in-flight state.

**Pop.** A pop of a group reads up to N messages from one queue of a topic, or from all of
them (queue id -1, starting at a random queue), and from the group's POP retry topic
(``%RETRY%<group>_<topic>``: first in ``pop_from_retry_probability`` percent of pops, else
when the topic had too few). Each queue read becomes a checkpoint, written to the revive log
*before* the messages are answered and the group's offset moves past them. A pop that finds
nothing waits up to its poll time for arrivals of the topic or its retry topic.

**Ack / change invisible time.** An ack strikes the message off its checkpoint after writing
an ack record; a change writes a new one-message checkpoint and an ack of the old one in one
append. A handle whose message is no longer in flight (acked, or its invisible time passed
and it was revived) is answered NO_MESSAGE with a remark, never SUCCESS: the client learns
that the message was or will be delivered again.

**Revive** (:mod:`plugins.pop.revive`) re-delivers what a checkpoint still holds at its
deadline. Only a master pops and revives; a replica promoted to master, or a restarted
broker, first rebuilds the table from the revive log (:meth:`PopService.rebuild`).

Guarantee: at least once. A crash re-delivers what was in flight (and perhaps what was popped
just before it); a message acked with SUCCESS is never delivered again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import attrs
import trio

from kernel import pull
from kernel.consumer_progress import CONSUMER_OFFSETS, ConsumerOffsets
from kernel.context import BrokerContext, BrokerRuntime, StashKey
from kernel.gathered_puts import GatheredPuts
from kernel.model import BrokerRole, GetStatus, Message, MessageBatch, PutResult
from kernel.outcomes import PUT_STATUS_CODES
from kernel.topics import TOPIC_DIRECTORY, TopicDirectory
from plugins.pop import revive_log
from plugins.pop.config import PopConfig
from plugins.pop.inflight import AckOutcome, Checkpoint, InFlightTable
from plugins.pop.orderly import OrderBatch, OrderlyQueues
from plugins.pop.refusal import PopRefused as PopRefused  # re-exported for the handlers
from plugins.pop.refusal import now_ms
from plugins.pop.revive import revive_forever
from wire import record
from wire.names import PROPERTY_RETRY_TOPIC, PROPERTY_TAGS, RETRY_PREFIX
from wire.pop_receipt import (
    ORDER_REVIVE_QUEUE,
    PROPERTY_POP_CK,
    QueueRead,
    ReceiptHandle,
    real_topic,
    retry_topic,
)
from wire.remoting import ResponseCode
from wire.subscription import Subscription

log = logging.getLogger(__name__)

POP_SERVICE = StashKey["PopService"]("pop.service")

INIT_MIN, INIT_MAX = 0, 1
"""RocketMQ's ``ConsumeInitMode``: where a group without an offset starts."""
READ_BATCH = 256
IN_MEMORY_RATIO = 0.4
"""RocketMQ's ``accessMessageInMemoryMaxRatio`` default: what counts as still in memory when
a new group decides whether to start at the queue's first message."""


async def _arrival_or_release(arrival: trio.Event, lock: trio.Lock) -> None:
    """Wait until a message arrives or ``lock`` is free. A pop that skipped a queue another
    pop of its group was reading waits for both: that read may leave messages in the queue,
    and none may ever arrive to wake it (a backlog read by more receivers than it has
    queues)."""

    async def released() -> None:
        async with lock:
            pass
        nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(released)
        await arrival.wait()
        nursery.cancel_scope.cancel()


@attrs.frozen
class PopRequest:
    group: str
    topic: str
    queue_id: int
    max_count: int
    invisible_ms: int
    poll_ms: int
    subscription: Subscription
    init_mode: int = INIT_MAX
    orderly: bool = False


@attrs.frozen
class PopAnswer:
    records: list[bytes]
    reads: list[QueueRead]
    pop_time: int
    invisible_ms: int
    revive_qid: int
    rest: int

    @property
    def found(self) -> bool:
        return bool(self.records)


@attrs.define
class PopStatistics:
    pops: int = 0
    popped: int = 0
    empty_pops: int = 0
    acks: int = 0
    stale_acks: int = 0
    changes: int = 0
    revived: int = 0
    dead_lettered: int = 0
    revive_failures: int = 0
    replayed_records: int = 0
    unreadable_records: int = 0


@attrs.define(eq=False)
class _Read:
    """What one queue read added to a pop; its checkpoint is written with the pop's others."""

    read: QueueRead
    records: list[bytes]
    next_offset: int
    checkpoint: Checkpoint | None = None


@attrs.define(eq=False)
class PopService:
    runtime: BrokerRuntime
    config: PopConfig
    table: InFlightTable = attrs.field(factory=InFlightTable)
    orderly: OrderlyQueues = attrs.field(factory=OrderlyQueues)
    stats: PopStatistics = attrs.field(factory=PopStatistics)
    loaded: bool = False
    _locks: dict[tuple[str, str, int], trio.Lock] = attrs.field(factory=dict)
    _arrivals: dict[str, set[trio.Event]] = attrs.field(factory=dict)
    """Per topic, the events of the pops waiting for it (one event per waiting pop)."""
    _rebuilding: trio.Lock = attrs.field(factory=trio.Lock)
    _random: random.Random = attrs.field(factory=random.Random)
    writes: GatheredPuts = attrs.field(init=False)
    """Checkpoints and acks that arrive together share one put."""

    def __attrs_post_init__(self) -> None:
        self.writes = GatheredPuts(self.runtime.put_group)

    @property
    def ctx(self) -> BrokerContext:
        return self.runtime.ctx

    @property
    def revive_topic(self) -> str:
        return revive_log.revive_topic(self.ctx.broker.cluster_name)

    @property
    def broker_name(self) -> str:
        return str(self.ctx.broker.broker_name)

    def directory(self) -> TopicDirectory:
        directory = self.ctx.stash.get(TOPIC_DIRECTORY, None)
        if directory is None:
            raise PopRefused(ResponseCode.SYSTEM_ERROR, "POP needs the remoting plugin (no topic table)")
        return directory

    def consumer_offsets(self) -> ConsumerOffsets:
        offsets = self.ctx.stash.get(CONSUMER_OFFSETS, None)
        if offsets is None:
            raise PopRefused(ResponseCode.SYSTEM_ERROR, "POP needs the remoting plugin (no offset table)")
        return offsets

    # --- lifecycle --------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await revive_forever(self)

    def role_changed(self, role: BrokerRole) -> None:
        """A demoted broker forgets its table (its master's is the truth); a promoted one
        rebuilds from the replicated revive log before its first pop."""
        if role is BrokerRole.SLAVE:
            self.loaded = False
            self.table.clear()
            self.orderly.clear()

    async def ensure_loaded(self) -> None:
        """Rebuild the table if this master has not yet (first pop, first revive tick)."""
        if self.loaded:
            return
        if self.runtime.role is BrokerRole.SLAVE:
            raise PopRefused(
                ResponseCode.NO_PERMISSION,
                f"broker {self.broker_name} is a slave: POP, ACK and CHANGE_INVISIBLETIME go to its master",
            )
        async with self._rebuilding:
            if not self.loaded:
                await self.rebuild()

    async def rebuild(self) -> None:
        """Replay the revive log from each queue's saved floor: checkpoints, then the acks
        that struck their offsets off; then move each group's pop offset past what the
        remaining checkpoints delivered (so it is revived, not popped a second time)."""
        started = time.monotonic()
        await self.runtime.wait_dispatched()
        self.table.clear()
        self.orderly.clear()
        directory, offsets = self.directory(), self.consumer_offsets()
        topic = self.revive_topic
        await directory.create_system_topic(topic, self.config.revive_queue_num)
        store = self.runtime.store
        replayed = 0
        highest: dict[tuple[str, str, int], int] = {}
        for qid in range(self.config.revive_queue_num):
            low, high = store.min_queue_offset(topic, qid), store.max_queue_offset(topic, qid)
            saved = offsets.committed_offset(revive_log.REVIVE_GROUP, topic, qid)
            offset = low if saved is None else min(max(saved, low), high)
            while offset < high:
                entries = store.lookup(topic, qid, offset, min(READ_BATCH, high - offset))
                if not entries:
                    break
                for data in await store.read_records(entries):
                    self._replay(record.decode_record(data), offsets, highest)
                    replayed += 1
                offset = entries[-1].queue_offset + 1
        for (group, queue_topic, queue_id), last in highest.items():
            # Past everything a replayed checkpoint delivered, acked or not: the saved offset
            # may be older than the log (it is written every few seconds).
            committed = offsets.committed_offset(group, queue_topic, queue_id)
            if committed is None or committed <= last:
                offsets.commit_offset(group, queue_topic, queue_id, last + 1)
        self.stats.replayed_records += replayed
        self.loaded = True
        log.info(
            "pop: %d checkpoints in flight after replaying %d revive records in %.2fs",
            len(self.table),
            replayed,
            time.monotonic() - started,
        )

    def _replay(
        self,
        stored: record.StoredMessage,
        offsets: ConsumerOffsets,
        highest: dict[tuple[str, str, int], int],
    ) -> None:
        try:
            item = revive_log.decode(stored)
        except revive_log.UnreadableRecord as error:
            self.stats.unreadable_records += 1
            log.warning("pop: skipped %s", error)
            return
        if isinstance(item, Checkpoint):
            queue = (item.group, item.topic, item.queue_id)
            highest[queue] = max(highest.get(queue, -1), item.offsets[-1])
            if self.table.get(item.key) is None:
                self.table.add(item)
        elif isinstance(item, revive_log.AckRecord):
            self.table.ack(item.key, item.offsets)
        else:
            committed = offsets.committed_offset(item.group, item.topic, item.queue_id)
            if committed is None or committed < item.committed:
                offsets.commit_offset(item.group, item.topic, item.queue_id, item.committed)

    def save_floors(self) -> None:
        """Commit, per revive queue, where a replay must start (an in-memory commit, written
        with ``consumerOffset.json`` and copied to slaves like any group's offset)."""
        offsets = self.ctx.stash.get(CONSUMER_OFFSETS, None)
        if offsets is None or not self.loaded:
            return
        store, topic = self.runtime.store, self.revive_topic
        for qid in range(self.config.revive_queue_num):
            floor = self.table.replay_floor(qid, store.max_queue_offset(topic, qid))
            if offsets.committed_offset(revive_log.REVIVE_GROUP, topic, qid) != floor:
                offsets.commit_offset(revive_log.REVIVE_GROUP, topic, qid, floor)

    # --- arrivals ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _arrival(self, topics: Sequence[str]) -> Iterator[trio.Event]:
        """An event set when a message of one of ``topics`` is dispatched. It is registered
        under each topic for the block and removed after it, so a pop that timed out leaves
        nothing behind, and pops of other groups sharing a topic each get their own."""
        event = trio.Event()
        for topic in topics:
            self._arrivals.setdefault(topic, set()).add(event)
        try:
            yield event
        finally:
            for topic in topics:
                waiting = self._arrivals.get(topic)
                if waiting is not None:
                    waiting.discard(event)
                    if not waiting:
                        del self._arrivals[topic]

    def notify(self, topics: Iterable[str]) -> None:
        for topic in topics:
            for event in self._arrivals.pop(topic, ()):
                event.set()

    @property
    def waiting_topics(self) -> int:
        return len(self._arrivals)

    # --- pop --------------------------------------------------------------------------------

    async def pop(self, request: PopRequest) -> PopAnswer:
        """Messages for ``request``, waiting up to its poll time when there are none.

        :raises PopRefused: a slave, or a checkpoint that could not be written while nothing
            else was found.
        """
        await self.ensure_loaded()
        retry = retry_topic(request.group, request.topic)
        deadline = trio.current_time() + min(request.poll_ms / 1000, self.config.max_poll_time)
        while True:
            # Registered before reading, so a message dispatched while the queues are read
            # still wakes this pop.
            with self._arrival((request.topic, retry)) as arrival:
                busy: list[trio.Lock] = []
                answer = await self._pop_once(request, retry, busy)
                remaining = deadline - trio.current_time()
                if answer.found or remaining <= 0:
                    break
                with trio.move_on_after(remaining):
                    if busy:
                        await _arrival_or_release(arrival, busy[0])
                    else:
                        await arrival.wait()
        self.stats.pops += 1
        if answer.found:
            self.stats.popped += len(answer.records)
        else:
            self.stats.empty_pops += 1
        return answer

    async def _pop_once(self, request: PopRequest, retry: str, busy: list[trio.Lock]) -> PopAnswer:
        """Read the queues, then write every checkpoint of the pop in one grouped put, then move
        the group's offsets: the queues read stay locked until then, so no other pop of the
        group reads the same offsets. The locks of queues skipped because another pop held
        them join ``busy``."""
        pop_time = now_ms()
        revive_qid = (
            ORDER_REVIVE_QUEUE
            if request.orderly
            else revive_log.revive_queue_of(request.group, self.config.revive_queue_num)
        )
        reads: list[_Read] = []
        wanted = request.max_count
        directory = self.directory()
        retry_first = (
            not request.orderly and self._random.randrange(100) < self.config.pop_from_retry_probability
        )
        retry_queues = directory.topic_queues(retry) if not request.orderly else None
        held: list[trio.Lock] = []

        async def read_topic(topic: str, queue_ids: Sequence[int]) -> None:
            nonlocal wanted
            for queue_id in queue_ids:
                if wanted <= 0:
                    return
                got = await self._read_queue(
                    request, topic, queue_id, wanted, pop_time, revive_qid, held, busy
                )
                if got is not None:
                    reads.append(got)
                    wanted -= len(got.records)

        try:
            retry_ids = range(retry_queues.read_queue_nums) if retry_queues is not None else ()
            if retry_first:
                await read_topic(retry, retry_ids)
            await read_topic(request.topic, self._queue_order(request))
            if not retry_first:
                await read_topic(retry, retry_ids)
            reads = await self._checkpoint(request, reads)
        finally:
            for lock in held:
                lock.release()
        return PopAnswer(
            [data for item in reads for data in item.records],
            [item.read for item in reads],
            pop_time,
            request.invisible_ms,
            revive_qid,
            self._rest(request),
        )

    async def _checkpoint(self, request: PopRequest, reads: list[_Read]) -> list[_Read]:
        """Write the reads' checkpoints (one grouped put), then track them and move the offsets.

        :raises PopRefused: the checkpoints could not be written (nothing is answered, nothing
            moves: the messages are popped again by the next pop).
        """
        pending = [item for item in reads if item.checkpoint is not None]
        if pending:
            messages = [
                revive_log.checkpoint_message(self.revive_topic, item.checkpoint, self.broker_name)
                for item in pending
                if item.checkpoint is not None
            ]
            put = await self.writes.put(MessageBatch(messages))
            if not put.status.stored or put.append is None:
                raise PopRefused(
                    PUT_STATUS_CODES[put.status],
                    f"the pop's checkpoints could not be written: {put.status.value} {put.remark}".strip(),
                )
            for index, item in enumerate(pending):
                assert item.checkpoint is not None
                item.checkpoint.revive_offset = put.append.queue_offsets[index]
                self.table.add(item.checkpoint)
        offsets = self.consumer_offsets()
        for item in pending:
            offsets.commit_offset(request.group, item.read.topic, item.read.queue_id, item.next_offset)
        return reads

    def _queue_order(self, request: PopRequest) -> list[int]:
        if request.queue_id >= 0:
            return [request.queue_id]
        queues = self.directory().topic_queues(request.topic)
        count = queues.read_queue_nums if queues is not None else 0
        if count == 0:
            return []
        start = self._random.randrange(count)
        return [(start + i) % count for i in range(count)]

    def _rest(self, request: PopRequest) -> int:
        """Messages of the topic not yet popped by the group (RocketMQ's ``restNum``)."""
        offsets, store = self.consumer_offsets(), self.runtime.store
        rest = 0
        for queue_id in self._queue_order(request):
            committed = offsets.committed_offset(request.group, request.topic, queue_id) or 0
            rest += max(0, store.max_queue_offset(request.topic, queue_id) - committed)
        return rest

    def _lock(self, key: tuple[str, str, int]) -> trio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = trio.Lock()
        return lock

    async def _read_queue(
        self,
        request: PopRequest,
        topic: str,
        queue_id: int,
        wanted: int,
        pop_time: int,
        revive_qid: int,
        held: list[trio.Lock],
        busy: list[trio.Lock],
    ) -> _Read | None:
        """Read one queue for a pop; its lock joins ``held`` when something was read (the
        caller releases it once the checkpoint is written), ``busy`` when another pop held it."""
        key = (request.group, topic, queue_id)
        lock = self._lock(key)
        if lock.locked():
            busy.append(lock)
            return None  # another pop of this group reads the queue now: take the next one
        await lock.acquire()
        keep = False
        try:
            if request.orderly and self.orderly.blocked(key, pop_time):
                return None
            if self.table.in_flight(*key) >= self.config.max_in_flight_per_queue:
                return None
            offsets = self.consumer_offsets()
            offset = self._pop_offset(request, topic, queue_id, offsets)
            result = await self._read(request, topic, queue_id, offset, wanted, offsets)
            if not result.records:
                if result.next_begin_offset > offset:
                    offsets.commit_offset(request.group, topic, queue_id, result.next_begin_offset)
                return None
            queue_offsets = tuple(result.queue_offsets)
            checkpoint = None
            if request.orderly:
                before = self.orderly.deliveries_before(key, queue_offsets)
                self.orderly.delivered(
                    key, OrderBatch(queue_offsets, pop_time, request.invisible_ms, before + 1)
                )
                read = QueueRead(topic, queue_id, offset, queue_offsets, before)
            else:
                checkpoint = Checkpoint(
                    request.group,
                    topic,
                    queue_id,
                    offset,
                    pop_time,
                    request.invisible_ms,
                    revive_qid,
                    queue_offsets,
                )
                if self.table.get(checkpoint.key) is not None:
                    return None  # popped from this offset in this millisecond already
                read = QueueRead(topic, queue_id, offset, queue_offsets)
            records = result.records
            if topic.startswith(RETRY_PREFIX):
                records = [self._as_original(data, read, pop_time, request, revive_qid) for data in records]
            keep = not request.orderly
            return _Read(read, records, result.next_begin_offset, checkpoint)
        finally:
            if keep:
                held.append(lock)
            else:
                lock.release()

    async def _read(
        self,
        request: PopRequest,
        topic: str,
        queue_id: int,
        offset: int,
        wanted: int,
        offsets: ConsumerOffsets,
    ) -> Any:
        store = self.runtime.store
        subscription = request.subscription if not topic.startswith(RETRY_PREFIX) else None
        codes = subscription.codes if subscription is not None else None
        result = await pull.get_messages(store, topic, queue_id, offset, max_count=wanted, tags_codes=codes)
        if result.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
            # The saved offset is outside the queue (retention, a cut log): RocketMQ moves it.
            log.warning(
                "pop: %s offset %d of %s queue %d is outside [%d, %d]; moved to %d",
                request.group,
                offset,
                topic,
                queue_id,
                result.min_offset,
                result.max_offset,
                result.next_begin_offset,
            )
            offsets.commit_offset(request.group, topic, queue_id, result.next_begin_offset)
            result = await pull.get_messages(
                store, topic, queue_id, result.next_begin_offset, max_count=wanted, tags_codes=codes
            )
        if result.status is GetStatus.FOUND and subscription is not None and subscription.tags is not None:
            result = _exact_tags(result, subscription.tags)
        return result

    def _pop_offset(self, request: PopRequest, topic: str, queue_id: int, offsets: ConsumerOffsets) -> int:
        committed = offsets.committed_offset(request.group, topic, queue_id)
        if committed is not None:
            return committed
        store = self.runtime.store
        low = store.min_queue_offset(topic, queue_id)
        if request.init_mode == INIT_MIN or topic.startswith(RETRY_PREFIX):
            start = low
        elif low <= 0 and self._first_in_memory(topic, queue_id):
            start = 0  # RocketMQ's initPopOffsetByCheckMsgInMem: a young queue is read whole
        else:
            start = max(0, store.max_queue_offset(topic, queue_id) - 1)
        offsets.commit_offset(request.group, topic, queue_id, start)
        return start

    def _first_in_memory(self, topic: str, queue_id: int) -> bool:
        store = self.runtime.store
        if store.max_queue_offset(topic, queue_id) <= 0:
            return True
        entries = store.lookup(topic, queue_id, 0, 1)
        if not entries:
            return False
        return store.watermarks().wrote - entries[0].physical_offset < _physical_memory() * IN_MEMORY_RATIO

    def _as_original(
        self, data: bytes, read: QueueRead, pop_time: int, request: PopRequest, revive_qid: int
    ) -> bytes:
        """A retry-topic record as the client expects it: under its original topic, with its
        receipt handle in ``POP_CK`` (the answer's offset headers name the retry topic's queue)."""
        stored = record.decode_record(data)
        handle = ReceiptHandle(
            read.start_offset,
            pop_time,
            request.invisible_ms,
            revive_qid,
            1,
            self.broker_name,
            stored.queue_id,
            stored.queue_offset,
        )
        properties = dict(stored.properties)
        properties.setdefault(PROPERTY_POP_CK, handle.format())
        message = Message(
            properties.get(PROPERTY_RETRY_TOPIC, request.topic),
            stored.body,
            stored.queue_id,
            stored.flag,
            properties,
            stored.sys_flag,
            stored.born_timestamp,
            stored.born_host,
            stored.reconsume_times,
            stored.prepared_transaction_offset,
        )
        return record.encode_record(
            message,
            queue_offset=stored.queue_offset,
            physical_offset=stored.physical_offset,
            store_timestamp=stored.store_timestamp,
            store_host=stored.store_host,
        )

    async def write(self, messages: list[Message]) -> PutResult:
        return await self.runtime.put(MessageBatch(messages))

    # --- ack and change ---------------------------------------------------------------------

    async def ack(self, group: str, topic: str, queue_id: int, handle: ReceiptHandle, offset: int) -> None:
        """Acknowledge one message.

        :raises PopRefused: NO_MESSAGE for a handle no longer in flight, a put status code
            when the ack record could not be written (the message stays in flight).
        """
        await self.ensure_loaded()
        real = real_topic(topic, group, handle.topic_type)
        if handle.orderly:
            await self._ack_orderly(group, real, queue_id, handle, offset)
            return
        key = (group, real, queue_id, handle.ck_queue_offset, handle.pop_time)
        checkpoint = self.table.get(key)
        if checkpoint is None or offset not in checkpoint.offsets:
            self.stats.stale_acks += 1
            raise PopRefused(ResponseCode.NO_MESSAGE, _stale(real, queue_id, offset, handle))
        if offset in checkpoint.acked:
            return  # acked before: the same answer again
        if offset in checkpoint.reviving:
            self.stats.stale_acks += 1
            raise PopRefused(ResponseCode.NO_MESSAGE, _stale(real, queue_id, offset, handle))
        checkpoint.acking.add(offset)
        try:
            ack = revive_log.AckRecord(
                group, real, queue_id, handle.ck_queue_offset, handle.pop_time, (offset,)
            )
            put = await self.writes.put(
                MessageBatch(
                    [revive_log.ack_message(self.revive_topic, checkpoint.revive_qid, ack, self.broker_name)]
                )
            )
        finally:
            checkpoint.acking.discard(offset)
        if not put.status.stored:
            raise PopRefused(
                PUT_STATUS_CODES[put.status], f"the ack could not be written: {put.status.value} {put.remark}"
            )
        if self.table.ack(key, (offset,)) == AckOutcome.ACKED:
            self.stats.acks += 1

    async def _ack_orderly(
        self, group: str, topic: str, queue_id: int, handle: ReceiptHandle, offset: int
    ) -> None:
        key = (group, topic, queue_id)
        committed = self.orderly.ack(key, offset, handle.pop_time)
        if committed is None:
            self.stats.stale_acks += 1
            raise PopRefused(ResponseCode.NO_MESSAGE, _stale(topic, queue_id, offset, handle))
        offsets = self.consumer_offsets()
        current = offsets.committed_offset(group, topic, queue_id)
        if current is None or current < committed:
            order_ack = revive_log.OrderAckRecord(group, topic, queue_id, committed)
            qid = revive_log.revive_queue_of(group, self.config.revive_queue_num)
            put = await self.writes.put(
                MessageBatch([revive_log.order_ack_message(self.revive_topic, qid, order_ack)])
            )
            if not put.status.stored:
                raise PopRefused(
                    PUT_STATUS_CODES[put.status], f"the ack could not be written: {put.status.value}"
                )
            offsets.commit_offset(group, topic, queue_id, committed)
        self.stats.acks += 1
        self.notify((topic,))  # the queue may be unblocked now

    async def change_invisible(
        self, group: str, topic: str, queue_id: int, handle: ReceiptHandle, offset: int, invisible_ms: int
    ) -> ReceiptHandle:
        """Make one message invisible for ``invisible_ms`` from now; its new handle (the old
        one is dead).

        :raises PopRefused: NO_MESSAGE for a handle no longer in flight; a put status code.
        """
        await self.ensure_loaded()
        real = real_topic(topic, group, handle.topic_type)
        now = now_ms()
        if handle.orderly:
            if not self.orderly.extend((group, real, queue_id), offset, handle.pop_time, now, invisible_ms):
                raise PopRefused(ResponseCode.NO_MESSAGE, _stale(real, queue_id, offset, handle))
            self.stats.changes += 1
            return attrs.evolve(handle, pop_time=now, invisible_time=invisible_ms, queue_offset=offset)
        key = (group, real, queue_id, handle.ck_queue_offset, handle.pop_time)
        old = self.table.get(key)
        if old is None or offset not in old.pending() or offset in old.reviving or offset in old.acking:
            self.stats.stale_acks += 1
            raise PopRefused(ResponseCode.NO_MESSAGE, _stale(real, queue_id, offset, handle))
        pop_time = self.table.free_pop_time(group, real, queue_id, offset, now)
        new = Checkpoint(group, real, queue_id, offset, pop_time, invisible_ms, old.revive_qid, (offset,))
        ack = revive_log.AckRecord(group, real, queue_id, handle.ck_queue_offset, handle.pop_time, (offset,))
        old.acking.add(offset)
        try:
            put = await self.writes.put(
                MessageBatch(
                    [
                        revive_log.checkpoint_message(self.revive_topic, new, self.broker_name),
                        revive_log.ack_message(self.revive_topic, old.revive_qid, ack, self.broker_name),
                    ]
                )
            )
        finally:
            old.acking.discard(offset)
        if not put.status.stored or put.append is None:
            raise PopRefused(
                PUT_STATUS_CODES[put.status],
                f"the change could not be written: {put.status.value} {put.remark}",
            )
        new.revive_offset = put.append.queue_offsets[0]
        self.table.add(new)
        self.table.ack(key, (offset,))
        self.stats.changes += 1
        return ReceiptHandle(
            offset,
            pop_time,
            invisible_ms,
            old.revive_qid,
            handle.topic_type,
            self.broker_name,
            queue_id,
            offset,
        )

    # --- figures ----------------------------------------------------------------------------

    def in_flight(self, group: str, topic: str, queue_id: int) -> int:
        """:class:`kernel.consumer_progress.PopProgress`."""
        count = self.table.in_flight(group, topic, queue_id)
        batch = self.orderly.batches.get((group, topic, queue_id))
        if batch is not None:
            count += len(batch.offsets) - len(batch.acked)
        return count

    def counts(self) -> dict[str, int]:
        """:class:`kernel.consumer_progress.PopProgress`: counters since start."""
        stats = self.stats
        return {
            "popped": stats.popped,
            "acked": stats.acks,
            "revived": stats.revived,
            "dead_lettered": stats.dead_lettered,
        }

    def in_flight_by_group(self) -> dict[str, int]:
        counts = self.table.in_flight_by_group()
        for group, count in self.orderly.in_flight().items():
            counts[group] = counts.get(group, 0) + count
        return counts

    def figures(self) -> dict[str, str]:
        stats = self.stats
        return {
            "popLoaded": str(self.loaded).lower(),
            "popCheckpointsInFlight": str(len(self.table)),
            "popMessagesInFlight": str(sum(self.in_flight_by_group().values())),
            "popRequests": str(stats.pops),
            "popMessages": str(stats.popped),
            "popEmptyRequests": str(stats.empty_pops),
            "popAcks": str(stats.acks),
            "popStaleAcks": str(stats.stale_acks),
            "popInvisibleChanges": str(stats.changes),
            "popRevived": str(stats.revived),
            "popDeadLettered": str(stats.dead_lettered),
            "popReviveFailures": str(stats.revive_failures),
            "popUnreadableRecords": str(stats.unreadable_records),
        }


def _stale(topic: str, queue_id: int, offset: int, handle: ReceiptHandle) -> str:
    state = "expired" if handle.expired(now_ms()) else "not in flight"
    return (
        f"receipt handle of {topic} queue {queue_id} offset {offset} is {state}: the message was "
        "acked already, or its invisible time passed and it is delivered again"
    )


def _exact_tags(result: Any, tags: frozenset[str]) -> Any:
    """Keep records whose tag is subscribed, not just its hash (as PULL does)."""
    kept, offsets = [], []
    for data, offset in zip(result.records, result.queue_offsets, strict=True):
        if record.decode_dispatch(data, 0).properties.get(PROPERTY_TAGS) in tags:
            kept.append(data)
            offsets.append(offset)
    if len(kept) == len(result.records):
        return result
    status = GetStatus.FOUND if kept else GetStatus.NO_MATCHED_MESSAGE
    return attrs.evolve(result, status=status, records=kept, queue_offsets=offsets)


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30
