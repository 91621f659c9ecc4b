"""The lite pull consumer (RocketMQ's ``DefaultLitePullConsumer``): the application polls.

    async with LitePullConsumer("CG_etl", "127.0.0.1:9876") as consumer:
        consumer.subscribe("Orders")                # or: consumer.assign(queues)
        while True:
            for message in await consumer.poll(timeout=1.0):
                ...

Behind ``poll`` one task per owned queue pulls ahead into a buffer (up to
``pull_threshold_for_queue`` messages per queue and ``pull_threshold_for_all`` in total).
A queue's consumed offset is one past the last message ``poll`` returned from it; ``commit()``
writes consumed offsets, and with ``auto_commit`` they are written every
``auto_commit_interval`` seconds and at shutdown. ``seek`` moves a queue and throws away what was
buffered for it. ``subscribe`` shares queues with the group's other members (rebalanced every
``rebalance_interval`` seconds and on membership changes); ``assign`` takes exactly the queues
given and leaves the group's split alone.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable, Mapping
from contextlib import AsyncExitStack

import attrs
import trio

from kernel.errors import RemotingError
from kernel.model import MessageQueue
from trocket.client.consumer.common import ConsumerBase
from trocket.client.consumer.offset_store import UNKNOWN
from trocket.client.consumer.pulling import PullStatus, pull
from trocket.client.consumer.rebalance import (
    queue_offset,
    start_offset,
)
from trocket.client.consumer.received import PulledMessages, ReceivedMessage
from trocket.client.consumer.session import (
    ConsumerSession,
    new_subscription,
)
from trocket.client.errors import ClientError
from trocket.client.trace import ConsumeReturn, consume_finished
from wire.remoting import RequestCode
from wire.subscription import Subscription

log = logging.getLogger(__name__)

LONG_POLL_MS = 5_000
"""Lite pulls hold on the broker for at most this long, so a seek is never stuck behind one."""


@attrs.define(eq=False)
class _Owned:
    queue: MessageQueue
    subscription: Subscription
    next_pull: int
    consumed: int
    version: int = 0
    buffered: int = 0
    pulling: trio.CancelScope = attrs.field(factory=trio.CancelScope)


@attrs.define(eq=False)
class LitePullConsumer(ConsumerBase):
    """See the module docstring."""

    pull_threshold_for_all: int = 10_000
    auto_commit: bool = True
    auto_commit_interval: float = 5.0

    _assigned: bool = attrs.field(default=False, init=False)
    _owned: dict[MessageQueue, _Owned] = attrs.field(factory=dict, init=False)
    _buffer: collections.deque[tuple[_Owned, int, PulledMessages | list[ReceivedMessage]]] = attrs.field(
        factory=collections.deque, init=False
    )
    _buffered_total: int = attrs.field(default=0, init=False)
    _applying: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    """Assignments are applied one at a time: the start-up subscription, the rebalance loop and
    ``assign`` can overlap, and two overlapping applies would each start a pull loop for the same
    queue from its committed offset, delivering its messages twice."""
    _arrived: trio.Event = attrs.field(factory=trio.Event, init=False)
    _nursery: trio.Nursery | None = attrs.field(default=None, init=False)

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        allocate, addresses = self._check_startable()
        stack = AsyncExitStack()
        try:
            await self._join(stack, allocate, addresses, "CONSUME_ACTIVELY", self._subscriptions)
            await self._enter_tracer(stack, addresses)
            nursery = await stack.enter_async_context(trio.open_nursery())
            await nursery.start(self._run)
            assert self._nursery is not None
            self._nursery.start_soon(self._heartbeat_loop)
            self._nursery.start_soon(self._commit_loop)
            self._nursery.start_soon(self._rebalance_loop)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        if self._subscriptions:
            await self._subscribe_all(self._started())

    async def _run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Background tasks live in a nursery of their own so shutdown can cancel them without
        cancelling itself (the outer nursery's scope also covers the task that started it)."""
        async with trio.open_nursery() as services:
            self._nursery = services
            task_status.started()
            await trio.sleep_forever()

    async def shutdown(self) -> None:
        """Stop pulling; with ``auto_commit``, commit what ``poll`` returned; leave the group."""
        if self._stack is None:
            return
        stack, self._stack = self._stack, None
        try:
            assert self._nursery is not None and self._session is not None
            self._nursery.cancel_scope.cancel()
            if self.auto_commit:
                try:
                    await self.commit()
                except ClientError as error:
                    log.warning("group %s: %s", self.group, error)
            await self._session.unregister()
        finally:
            self._owned.clear()
            self._buffer.clear()
            await stack.aclose()

    async def __aenter__(self) -> LitePullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # --- what to consume --------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Share ``topic``'s queues with the group (not with :meth:`assign`)."""
        if self._assigned:
            raise ClientError("subscribe and assign cannot be mixed on one consumer")
        self._subscriptions[topic] = new_subscription(topic, expression)
        if self._stack is not None:
            assert self._nursery is not None
            self._nursery.start_soon(self._subscribe_all, self._started())

    async def assign(self, queues: Iterable[MessageQueue], expression: str = "*") -> None:
        """Consume exactly ``queues`` (replacing an earlier assignment)."""
        if self._subscriptions and not self._assigned:
            raise ClientError("subscribe and assign cannot be mixed on one consumer")
        session = self._started()
        wanted = set(queues)
        self._assigned = True
        for topic in {q.topic for q in wanted}:
            session.subscriptions[topic] = new_subscription(topic, expression)
            await session.queues_of(topic)
        await self._apply({topic: {q for q in wanted if q.topic == topic} for topic in session.subscriptions})

    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        return sorted(await self._started().queues_of(topic), key=attrs.astuple)

    @property
    def assignment(self) -> list[MessageQueue]:
        return sorted(self._owned, key=attrs.astuple)

    # --- polling and positions --------------------------------------------------------------

    async def poll(self, timeout: float = 5.0) -> list[ReceivedMessage]:
        """Messages of one pull of one queue, in queue order; ``[]`` when nothing came within
        ``timeout`` seconds."""
        self._started()
        with trio.move_on_after(timeout):
            while True:
                while self._buffer:
                    owned, version, pulled = self._buffer.popleft()
                    owned.buffered -= len(pulled)
                    self._buffered_total -= len(pulled)
                    if version != owned.version or self._owned.get(owned.queue) is not owned:
                        continue  # seeked or given up since it was pulled
                    messages = pulled.messages() if isinstance(pulled, PulledMessages) else pulled
                    owned.consumed = messages[-1].queue_offset + 1
                    if self.auto_commit:
                        assert self._offsets is not None
                        self._offsets.update(owned.queue, owned.consumed)
                    trace = self._trace_started(messages)
                    if trace is not None and self._tracer is not None:  # RocketMQ's lite pull: both at once
                        self._tracer.append(
                            consume_finished(
                                trace, success=True, cost_ms=0, context_code=ConsumeReturn.SUCCESS
                            )
                        )
                    return messages
                self._arrived = trio.Event()
                await self._arrived.wait()
        return []

    async def seek(self, queue: MessageQueue, offset: int) -> None:
        """Consume ``queue`` from ``offset`` on (buffered messages of it are dropped).

        :raises ClientError: the queue is not owned, or the offset is outside the queue.
        """
        owned = self._owned.get(queue)
        if owned is None:
            raise ClientError(f"{queue} is not assigned to this consumer")
        low, high = await self._bounds(queue)
        if not low <= offset <= high:
            raise ClientError(f"offset {offset} is outside {queue.topic}:{queue.queue_id} [{low}, {high}]")
        self._restart(owned, offset)

    async def seek_to_begin(self, queue: MessageQueue) -> None:
        await self.seek(queue, (await self._bounds(queue))[0])

    async def seek_to_end(self, queue: MessageQueue) -> None:
        await self.seek(queue, (await self._bounds(queue))[1])

    async def commit(self, queues: Iterable[MessageQueue] | None = None) -> None:
        """Write the consumed offsets of ``queues`` (default: all owned) to the offset store.

        :raises ClientError: a broker (or the local file) did not take them.
        """
        assert self._offsets is not None
        chosen = [self._owned[q] for q in queues] if queues is not None else list(self._owned.values())
        for owned in chosen:
            self._offsets.update(owned.queue, owned.consumed)
        await self._offsets.persist([o.queue for o in chosen])

    async def committed(self, queue: MessageQueue) -> int:
        """The offset stored for the group (-1: none)."""
        self._started()
        assert self._offsets is not None
        return await self._offsets.read_stored(queue)

    # --- internals --------------------------------------------------------------------------

    def _started(self) -> ConsumerSession:
        if self._session is None or self._stack is None:
            raise ClientError("the consumer is not started")
        return self._session

    async def _bounds(self, queue: MessageQueue) -> tuple[int, int]:
        session = self._started()
        low = await queue_offset(session, queue, RequestCode.GET_MIN_OFFSET, {})
        high = await queue_offset(session, queue, RequestCode.GET_MAX_OFFSET, {})
        return low, high

    def _restart(self, owned: _Owned, offset: int) -> None:
        assert self._nursery is not None
        owned.pulling.cancel()
        owned.version += 1
        owned.next_pull = owned.consumed = offset
        owned.pulling = trio.CancelScope()
        self._nursery.start_soon(self._pull_loop, self._started(), owned)

    async def _subscribe_all(self, session: ConsumerSession) -> None:
        """Takes the session from its caller: as a background task it may first run after a
        shutdown began (its nursery cancelled, the consumer no longer started), and must then
        end at its first checkpoint instead of failing the shutdown."""
        session.subscriptions.update(self._subscriptions)
        await self._announce(self._subscriptions)

    async def _rebalance(self) -> None:
        if self._assigned or not self._subscriptions:
            return
        assert self._rebalancer is not None
        await self._apply(await self._rebalancer.assignment())

    async def _apply(self, assignment: Mapping[str, set[MessageQueue] | None]) -> None:
        async with self._applying:
            if self._stack is None:
                # Shut down while this waited for the lock (acquiring it ends with a shielded
                # checkpoint, so a cancelled rebalance can resume here): nothing to apply.
                return
            await self._apply_now(assignment)

    async def _apply_now(self, assignment: Mapping[str, set[MessageQueue] | None]) -> None:
        session = self._started()
        assert self._offsets is not None and self._nursery is not None
        for topic, mine in assignment.items():
            if mine is None:
                continue
            for queue in sorted({q for q in self._owned if q.topic == topic} - mine, key=attrs.astuple):
                owned = self._owned.pop(queue)
                owned.pulling.cancel()
                if self.auto_commit:
                    self._offsets.update(queue, owned.consumed)
                    try:
                        await self._offsets.persist([queue])
                    except ClientError as error:
                        log.warning("group %s: %s", self.group, error)
                self._offsets.remove(queue)
            timestamp = self._start_timestamp_ms()
            for queue in sorted(mine - set(self._owned), key=attrs.astuple):
                try:
                    offset = await start_offset(
                        session, self._offsets, queue, self.consume_from_where, timestamp
                    )
                except ClientError as error:
                    log.warning("group %s: cannot start on %s now: %s", self.group, queue, error)
                    continue
                owned = _Owned(queue, session.subscriptions[topic], offset, offset)
                self._owned[queue] = owned
                self._nursery.start_soon(self._pull_loop, session, owned)

    async def _pull_loop(self, session: ConsumerSession, owned: _Owned) -> None:
        """Takes the session from its starter, as :meth:`_subscribe_all` does."""
        version = owned.version
        with owned.pulling:
            while True:
                if (
                    owned.buffered >= self.pull_threshold_for_queue
                    or self._buffered_total >= self.pull_threshold_for_all
                ):
                    await trio.sleep(0.05)
                    continue
                try:
                    address = await session.address_of(owned.queue.broker_name)
                    result = await pull(
                        session.remoting, address, self.group, owned.queue, owned.next_pull,
                        owned.subscription, max_nums=self.pull_batch_size, suspend_ms=LONG_POLL_MS, lazy=True,
                    )  # fmt: skip
                except (ClientError, RemotingError) as error:
                    log.warning("group %s: pull %s failed: %s", self.group, owned.queue, error)
                    if isinstance(error, RemotingError):
                        session.forget_address(owned.queue.broker_name, address)
                    await trio.sleep(3.0)
                    continue
                if version != owned.version:
                    return
                if result.status is PullStatus.OFFSET_ILLEGAL:
                    log.warning("group %s: offset %d of %s is illegal; moving to %d", self.group,
                                owned.next_pull, owned.queue, result.next_begin_offset)  # fmt: skip
                    if owned.consumed == owned.next_pull:
                        owned.consumed = result.next_begin_offset
                owned.next_pull = result.next_begin_offset
                if result.messages:
                    owned.buffered += len(result.messages)
                    self._buffered_total += len(result.messages)
                    self._buffer.append((owned, version, result.messages))
                    self._arrived.set()
                elif owned.buffered == 0 and owned.consumed < owned.next_pull:
                    owned.consumed = owned.next_pull  # everything up to here was filtered out

    async def _commit_loop(self) -> None:
        while True:
            await trio.sleep(self.auto_commit_interval)
            if self.auto_commit and self._owned:
                assert self._offsets is not None
                try:
                    await self._offsets.persist(list(self._owned))
                except ClientError as error:
                    log.warning("group %s: %s", self.group, error)


__all__ = ["UNKNOWN", "LitePullConsumer"]
