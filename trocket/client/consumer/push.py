"""The push consumer (RocketMQ's ``DefaultMQPushConsumer``), built on long-polling pulls.

    consumer = PushConsumer("CG_orders", "127.0.0.1:9876")
    consumer.subscribe("Orders", "paid || refunded")
    consumer.register_listener(handle)          # async or sync: (messages, context) -> status
    async with consumer:
        await trio.sleep_forever()

Per owned queue one task pulls (holding the request on the broker while nothing is new) as long
as flow control allows, and hands messages to the listener: concurrently to up to
``consume_thread_max`` calls, or in order one batch at a time per queue under a broker lock
(``orderly=True``). Progress is the lowest offset still in flight, committed every
``persist_consumer_offset_interval`` seconds and at shutdown. Queues are (re)divided among the
group's members every ``rebalance_interval`` seconds and at once when the broker says the
membership changed.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import AsyncExitStack
from typing import Any

import attrs
import trio

from kernel.errors import RemotingError
from kernel.model import MessageQueue
from trocket.client.consumer.common import ConsumerBase
from trocket.client.consumer.listener import (
    ConsumeContext,
    ConsumeStatus,
    Listener,
    OrderlyStatus,
    call_listener,
)
from trocket.client.consumer.modes import MessageModel
from trocket.client.consumer.process_queue import ProcessQueue
from trocket.client.consumer.pulling import PullStatus, pull
from trocket.client.consumer.rebalance import (
    start_offset,
)
from trocket.client.consumer.received import RETRY_PREFIX, ReceivedMessage
from trocket.client.consumer.send_back import send_back
from trocket.client.consumer.session import (
    new_subscription,
)
from trocket.client.errors import ClientError
from trocket.client.producer import Producer
from trocket.client.trace import ConsumeReturn, consume_finished
from wire.remoting.admin_json import dumps_queue_keyed
from wire.subscription import Subscription

log = logging.getLogger(__name__)

FLOW_CONTROL_BACKOFF = 0.05
"""``PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL``."""
PULL_ERROR_BACKOFF = 3.0
"""``pullTimeDelayMillsWhenException``."""
RETRY_LOCALLY_AFTER = 5.0
"""A batch neither sent back nor republished is consumed again after this long."""
LOCK_RENEW_INTERVAL = 20.0
LOCK_VALID_FOR = 30.0
"""``REBALANCE_LOCK_MAX_LIVE_TIME``: an orderly queue not re-locked for this long is not consumed."""
DEFAULT_MAX_RECONSUME = 16


@attrs.define(eq=False)
class _Owned:
    """A queue this consumer owns now."""

    queue: MessageQueue
    subscription: Subscription
    next_offset: int
    pq: ProcessQueue = attrs.field(factory=ProcessQueue)
    pulling: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    wakeup: trio.Event = attrs.field(factory=trio.Event)


@attrs.frozen
class QueueStats:
    cached_messages: int
    cached_bytes: int
    offset_span: int
    next_pull_offset: int
    consumer_offset: int
    """The offset that will be committed (lowest in flight)."""


@attrs.define(eq=False)
class PushConsumer(ConsumerBase):
    """See the module docstring. Configure, ``subscribe``, ``register_listener``, then use as
    ``async with`` (or ``start()`` / ``shutdown()`` from one task)."""

    consume_thread_max: int = 20
    consume_message_batch_max_size: int = 1
    pull_threshold_size_for_queue: int = 100
    """MiB of bodies in flight per queue before pulling pauses."""
    consume_concurrently_max_span: int = 2000
    max_reconsume_times: int = -1
    """-1: 16 for concurrent listeners, unlimited for orderly ones."""
    consume_timeout: float = 15 * 60.0
    """Seconds a listener call may take; beyond, its batch is retried (``consumeTimeout``)."""
    persist_consumer_offset_interval: float = 5.0

    _listener: Listener | None = attrs.field(default=None, init=False)
    _orderly: bool = attrs.field(default=False, init=False)
    _owned: dict[MessageQueue, _Owned] = attrs.field(factory=dict, init=False)
    _producer: Producer | None = attrs.field(default=None, init=False)
    _services: trio.Nursery | None = attrs.field(default=None, init=False)
    _workers: trio.Nursery | None = attrs.field(default=None, init=False)
    _work_send: trio.MemorySendChannel[tuple[_Owned, list[ReceivedMessage]]] | None = attrs.field(
        default=None, init=False
    )
    _stopped: trio.Event = attrs.field(factory=trio.Event, init=False)
    _closing: bool = attrs.field(default=False, init=False)

    # --- configuration ----------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Consume ``topic`` messages whose tag matches ``expression`` (``*`` or ``a || b``)."""
        if self._stack is not None:
            raise ClientError("subscribe before start()")
        if not topic or topic.startswith(RETRY_PREFIX):
            raise ClientError(f"cannot subscribe to {topic!r}")
        self._subscriptions[topic] = new_subscription(topic, expression)

    def register_listener(self, listener: Listener, *, orderly: bool = False) -> None:
        """``listener(messages, context)`` returns :class:`ConsumeStatus` (concurrent) or
        :class:`OrderlyStatus` (``orderly=True``); it may be async, or sync (run in a thread)."""
        self._listener, self._orderly = listener, orderly

    @property
    def client_id(self) -> str:
        if self._session is None:
            raise ClientError("the consumer is not started")
        return self._session.client_id

    @property
    def assigned_queues(self) -> list[MessageQueue]:
        """The queues this consumer owns now (retry queues included), sorted."""
        return sorted(self._owned, key=attrs.astuple)

    def queue_stats(self) -> dict[MessageQueue, QueueStats]:
        """Per owned queue, what is pulled and not yet acknowledged (what flow control limits;
        RocketMQ's ``ProcessQueueInfo``)."""
        return {
            q: QueueStats(o.pq.count, o.pq.size_bytes, o.pq.span, o.next_offset, self._offsets.read(q))
            for q, o in sorted(self._owned.items(), key=lambda item: attrs.astuple(item[0]))
            if self._offsets is not None
        }

    def _running_info(self, addresses: tuple[str, ...], started_ms: int) -> bytes:
        """RocketMQ's ``ConsumerRunningInfo`` (mqadmin ``consumerStatus``): settings, subscriptions
        and each owned queue's ProcessQueueInfo. Trocket keeps no per-topic RT/TPS figures, so
        ``statusTable`` is empty."""
        from trocket import __version__

        assert self._session is not None
        properties = {
            "PROP_NAMESERVER_ADDR": ";".join(addresses),
            "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
            "PROP_CONSUMEORDERLY": str(self._orderly).lower(),
            "PROP_THREADPOOL_CORE_SIZE": str(self.consume_thread_max),
            "PROP_CONSUMER_START_TIMESTAMP": str(started_ms),
            "PROP_CLIENT_VERSION": f"trocket {__version__}",
            "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from_where.value,
            "consumeMessageBatchMaxSize": str(self.consume_message_batch_max_size),
            "pullBatchSize": str(self.pull_batch_size),
            "pullThresholdForQueue": str(self.pull_threshold_for_queue),
            "maxReconsumeTimes": str(self.max_reconsume_times),
        }
        committed = self._offsets.read if self._offsets is not None else (lambda queue: -1)
        entries = [
            ({"brokerName": q.broker_name, "queueId": q.queue_id, "topic": q.topic}, o.pq.info(committed(q)))
            for q, o in sorted(self._owned.items(), key=lambda item: attrs.astuple(item[0]))
        ]
        fields = {
            "jstack": "",
            "properties": properties,
            "statusTable": {},
            "subscriptionSet": [s.to_json() for s in self._session.subscriptions.values()],
            "userConsumerInfo": {},
        }
        return dumps_queue_keyed(fields, "mqTable", entries)

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, join the group and take its first share of queues.

        :raises ClientError: nothing subscribed, no listener, a bad allocate strategy, or already
            started.
        """
        allocate, addresses = self._check_startable()
        if not self._subscriptions or self._listener is None:
            raise ClientError("subscribe() to a topic and register_listener() before start()")
        subscriptions = dict(self._subscriptions)
        if self.message_model is MessageModel.CLUSTERING:
            retry = RETRY_PREFIX + self.group
            subscriptions[retry] = new_subscription(retry, "*")
        stack = AsyncExitStack()
        try:
            session = await self._join(stack, allocate, addresses, "CONSUME_PASSIVELY", subscriptions)
            started_ms = int(time.time() * 1000)
            session.running_info = lambda: self._running_info(addresses, started_ms)
            self._producer = await stack.enter_async_context(
                Producer(self.group, addresses, heartbeat_interval=0)
            )
            await self._enter_tracer(stack, addresses)
            nursery = await stack.enter_async_context(trio.open_nursery())
            self._stopped = trio.Event()
            await nursery.start(self._run)
            await self._announce(subscriptions)
            for task in (self._heartbeat_loop, self._rebalance_loop, self._persist_loop):
                assert self._services is not None
                self._services.start_soon(task)
            if self._orderly and self.message_model is MessageModel.CLUSTERING:
                assert self._services is not None
                self._services.start_soon(self._lock_loop)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack

    async def shutdown(self) -> None:
        """Stop pulling, let running listener calls finish, commit offsets (the lowest in
        flight), release queue locks and leave the group."""
        if self._stack is None:
            return
        stack, self._stack = self._stack, None
        try:
            self._closing = True
            if self._services is not None:
                self._services.cancel_scope.cancel()
            if self._work_send is not None:
                await self._work_send.aclose()
            for owned in self._owned.values():
                owned.wakeup.set()
            await self._stopped.wait()
            queues = list(self._owned)
            try:
                assert self._offsets is not None
                await self._offsets.persist(queues)
            except ClientError as error:
                log.warning("group %s: %s", self.group, error)
            assert self._session is not None
            if self._orderly and self.message_model is MessageModel.CLUSTERING and queues:
                await self._session.unlock(queues)
            await self._session.unregister()
        finally:
            self._owned.clear()
            await stack.aclose()

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # --- tasks ------------------------------------------------------------------------------

    async def _run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Workers outlive the pulling services so a shutdown lets running batches finish."""
        send, receive = trio.open_memory_channel[tuple[_Owned, list[ReceivedMessage]]](math.inf)
        self._work_send = send
        try:
            async with trio.open_nursery() as workers:
                self._workers = workers
                if not self._orderly:
                    for _ in range(max(1, self.consume_thread_max)):
                        workers.start_soon(self._consume_concurrently, receive.clone())
                async with trio.open_nursery() as services:
                    self._services = services
                    task_status.started()
                    await trio.sleep_forever()
        finally:
            self._stopped.set()

    async def _persist_loop(self) -> None:
        assert self._offsets is not None
        while True:
            await trio.sleep(self.persist_consumer_offset_interval)
            try:
                await self._offsets.persist(list(self._owned))
            except ClientError as error:
                log.warning("group %s: %s", self.group, error)

    async def _lock_loop(self) -> None:
        """Orderly: renew the broker locks of owned queues; a queue whose lock is lost stops."""
        assert self._session is not None
        while True:
            await trio.sleep(LOCK_RENEW_INTERVAL)
            owned = list(self._owned.values())
            held = await self._session.lock(o.queue for o in owned)
            now = trio.current_time()
            for item in owned:
                item.pq.locked = item.queue in held
                if item.pq.locked:
                    item.pq.last_lock_time = now

    # --- rebalance --------------------------------------------------------------------------

    async def _rebalance(self) -> None:
        assert self._rebalancer is not None
        assignment = await self._rebalancer.assignment()
        self._retry_soon = any(mine is None for mine in assignment.values())
        for topic, mine in assignment.items():
            if mine is None:
                continue
            current = {q for q in self._owned if q.topic == topic}
            for queue in sorted(current - mine, key=attrs.astuple):
                await self._drop(queue)
            for queue in sorted(mine - current, key=attrs.astuple):
                await self._add(queue)

    async def _add(self, queue: MessageQueue) -> None:
        assert self._session is not None and self._offsets is not None and self._services is not None
        orderly_locks = self._orderly and self.message_model is MessageModel.CLUSTERING
        if orderly_locks and queue not in await self._session.lock([queue]):
            log.info("group %s: %s is still locked by another consumer; next rebalance", self.group, queue)
            self._retry_soon = True
            return
        timestamp = self._start_timestamp_ms()
        try:
            offset = await start_offset(
                self._session, self._offsets, queue, self.consume_from_where, timestamp
            )
        except ClientError as error:
            log.warning("group %s: cannot start on %s now: %s", self.group, queue, error)
            self._retry_soon = True
            return
        self._offsets.update(queue, offset)
        owned = _Owned(queue, self._session.subscriptions[queue.topic], offset)
        owned.pq.locked, owned.pq.last_lock_time = True, trio.current_time()
        self._owned[queue] = owned
        log.info("group %s: %s now consumes %s from offset %d", self.group, self.client_id, queue, offset)
        self._services.start_soon(self._pull_loop, owned)
        if self._orderly:
            assert self._workers is not None
            self._workers.start_soon(self._consume_orderly, owned)

    async def _drop(self, queue: MessageQueue) -> None:
        """Give ``queue`` up: stop pulling, commit its offset, release its lock. An orderly
        queue is given up only between batches, so the next owner starts after the last one."""
        assert self._offsets is not None and self._session is not None
        owned = self._owned[queue]
        orderly_locks = self._orderly and self.message_model is MessageModel.CLUSTERING
        acquired = False
        if self._orderly:
            with trio.move_on_after(1.0):
                await owned.pq.consume_lock.acquire()
                acquired = True
            if not acquired:
                log.info("group %s: %s is busy; it is given up at the next rebalance", self.group, queue)
                self._retry_soon = True
                return
        try:
            owned.pq.dropped = True
            owned.pulling.cancel()
            owned.wakeup.set()
            del self._owned[queue]
            try:
                await self._offsets.persist([queue])
            except ClientError as error:
                log.warning("group %s: %s", self.group, error)
            self._offsets.remove(queue)
            if orderly_locks:
                await self._session.unlock([queue])
            log.info("group %s: %s gave up %s", self.group, self.client_id, queue)
        finally:
            if acquired:
                owned.pq.consume_lock.release()

    # --- pulling ----------------------------------------------------------------------------

    async def _pull_loop(self, owned: _Owned) -> None:
        assert self._session is not None and self._offsets is not None
        pq, queue = owned.pq, owned.queue
        clustering = self.message_model is MessageModel.CLUSTERING
        size_limit = self.pull_threshold_size_for_queue * 1024 * 1024
        with owned.pulling:
            while not pq.dropped:
                if (
                    pq.count >= self.pull_threshold_for_queue
                    or pq.size_bytes >= size_limit
                    or (not self._orderly and pq.span > self.consume_concurrently_max_span)
                ):
                    await trio.sleep(FLOW_CONTROL_BACKOFF)
                    continue
                if self._orderly and not pq.locked:
                    await trio.sleep(1.0)
                    continue
                try:
                    address = await self._session.address_of(queue.broker_name)
                    result = await pull(
                        self._session.remoting,
                        address,
                        self.group,
                        queue,
                        owned.next_offset,
                        owned.subscription,
                        max_nums=self.pull_batch_size,
                        commit_offset=self._offsets.read(queue) if clustering else -1,
                    )
                except (ClientError, RemotingError) as error:
                    log.warning("group %s: pull %s failed: %s", self.group, queue, error)
                    if isinstance(error, RemotingError):
                        self._session.forget_address(queue.broker_name, address)
                    await trio.sleep(PULL_ERROR_BACKOFF)
                    continue
                if pq.dropped:
                    return
                pq.last_pull_time = trio.current_time()
                if result.status is PullStatus.OFFSET_ILLEGAL:
                    log.warning(
                        "group %s: offset %d of %s is illegal (queue holds %d..%d); moving to %d",
                        self.group, owned.next_offset, queue, result.min_offset, result.max_offset,
                        result.next_begin_offset,
                    )  # fmt: skip
                    self._offsets.update(queue, result.next_begin_offset)
                owned.next_offset = result.next_begin_offset
                if result.messages:
                    messages = result.messages
                    assert isinstance(messages, list)  # pull() without lazy: the messages are made
                    pq.put(messages)
                    self._submit(owned, messages)
                elif pq.count == 0 and result.status is not PullStatus.OFFSET_ILLEGAL:
                    self._offsets.update(queue, result.next_begin_offset, increase_only=True)

    def _submit(self, owned: _Owned, messages: list[ReceivedMessage]) -> None:
        if self._orderly:
            owned.wakeup.set()
            return
        assert self._work_send is not None
        size = max(1, self.consume_message_batch_max_size)
        for i in range(0, len(messages), size):
            try:
                self._work_send.send_nowait((owned, messages[i : i + size]))
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return

    # --- consuming --------------------------------------------------------------------------

    async def _consume_concurrently(
        self, receive: trio.MemoryReceiveChannel[tuple[_Owned, list[ReceivedMessage]]]
    ) -> None:
        async with receive:
            async for owned, batch in receive:
                if self._closing or owned.pq.dropped:
                    continue
                await self._consume_batch(owned, batch)

    async def _consume_batch(self, owned: _Owned, batch: list[ReceivedMessage]) -> None:
        assert self._listener is not None and self._offsets is not None
        context = ConsumeContext(owned.queue)
        status = await self._call_listener(batch, context)
        if owned.pq.dropped:
            return  # the queue's new owner consumes these again (at-least-once)
        acked = len(batch)
        if status is not ConsumeStatus.CONSUME_SUCCESS:
            acked = 0
        elif 0 <= context.ack_index < len(batch) - 1:
            acked = context.ack_index + 1
        failed = batch[acked:]
        kept: list[ReceivedMessage] = []
        if failed and self.message_model is MessageModel.CLUSTERING:
            assert self._session is not None and self._producer is not None
            max_times = self.max_reconsume_times if self.max_reconsume_times >= 0 else DEFAULT_MAX_RECONSUME
            for message in failed:
                if not await send_back(
                    self._session, self._producer, message, context.delay_level_when_next_consume, max_times
                ):
                    kept.append(message)
        elif failed:
            log.warning(
                "group %s (broadcasting): %d message(s) failed and are not retried", self.group, len(failed)
            )
        done = [m for m in batch if m not in kept]
        offset = owned.pq.remove(done)
        if offset >= 0:
            self._offsets.update(owned.queue, offset, increase_only=True)
        if kept and self._services is not None and not self._closing:  # else: redelivered after restart
            retried = [m.with_reconsume_times(m.reconsume_times + 1) for m in kept]
            self._services.start_soon(self._consume_later, owned, retried)

    async def _call_listener(self, batch: list[ReceivedMessage], context: ConsumeContext) -> Any:
        """The listener's answer (:func:`call_listener`), traced when :attr:`trace` is on."""
        assert self._listener is not None
        trace = self._trace_started(batch)
        began = time.monotonic()
        status = await call_listener(self._listener, batch, context, self.consume_timeout)
        if trace is not None and self._tracer is not None:
            cost = time.monotonic() - began
            success = status is ConsumeStatus.CONSUME_SUCCESS or status is OrderlyStatus.SUCCESS
            if success:
                code = ConsumeReturn.SUCCESS
            elif status is not None:
                code = ConsumeReturn.FAILED
            else:
                code = ConsumeReturn.TIME_OUT if cost >= self.consume_timeout else ConsumeReturn.EXCEPTION
            self._tracer.append(
                consume_finished(trace, success=success, cost_ms=int(cost * 1000), context_code=code)
            )
        return status

    async def _consume_later(self, owned: _Owned, batch: list[ReceivedMessage]) -> None:
        await trio.sleep(RETRY_LOCALLY_AFTER)
        if not owned.pq.dropped and self._work_send is not None:
            try:
                self._work_send.send_nowait((owned, batch))
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                pass

    async def _consume_orderly(self, owned: _Owned) -> None:
        assert self._listener is not None and self._offsets is not None
        pq = owned.pq
        attempts: dict[int, int] = {}
        locks_needed = self.message_model is MessageModel.CLUSTERING
        while not self._closing and not pq.dropped:
            if pq.count == 0:
                owned.wakeup = trio.Event()
                await owned.wakeup.wait()
                continue
            if locks_needed and (not pq.locked or trio.current_time() - pq.last_lock_time > LOCK_VALID_FOR):
                await trio.sleep(0.1)
                continue
            suspend = 0.0
            async with pq.consume_lock:
                if pq.dropped or self._closing:
                    return
                batch = [
                    m.with_reconsume_times(attempts.get(m.queue_offset, m.reconsume_times))
                    for m in pq.take_in_order(max(1, self.consume_message_batch_max_size))
                ]
                context = ConsumeContext(owned.queue)
                status = await self._call_listener(batch, context)
                if status is OrderlyStatus.SUCCESS or status is ConsumeStatus.CONSUME_SUCCESS:
                    done = batch
                else:
                    done = await self._exhausted(batch, attempts)
                    suspend = context.suspend_current_queue_time
                for message in done:
                    attempts.pop(message.queue_offset, None)
                if done:
                    offset = pq.remove(done)
                    if offset >= 0:
                        self._offsets.update(owned.queue, offset)
            if suspend:
                await trio.sleep(suspend)

    async def _exhausted(
        self, batch: list[ReceivedMessage], attempts: dict[int, int]
    ) -> list[ReceivedMessage]:
        """Orderly: count a failed attempt; messages out of attempts go to the dead-letter
        queue (returned as done when the broker took them)."""
        assert self._session is not None and self._producer is not None
        done = []
        dead_letter = self.max_reconsume_times >= 0 and self.message_model is MessageModel.CLUSTERING
        for message in batch:
            if dead_letter and message.reconsume_times >= self.max_reconsume_times:
                if await send_back(self._session, self._producer, message, -1, self.max_reconsume_times):
                    done.append(message)
                    continue
            attempts[message.queue_offset] = message.reconsume_times + 1
        return done
