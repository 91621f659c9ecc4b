"""The producer (RocketMQ's ``DefaultMQProducer``), on trio.

    async with Producer("PG_orders", "127.0.0.1:9876") as producer:
        result = await producer.send(Message("Orders", b"...", tags="paid", keys=["order-42"]))

Behaviour a RocketMQ user expects: queues chosen round robin over the topic's writable queues,
skipping brokers the latency fault tolerance isolated; a failed attempt retried
``retry_times_when_send_failed`` times on another broker when there is one; ``send_timeout`` is
the budget for all attempts together; bodies over ``compress_over`` bytes are zlib-compressed
(sysFlag bit 0); bodies over ``max_message_size`` are refused before anything is sent; every
message gets a client unique id (``UNIQ_KEY``).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any

import attrs
import trio

from kernel.errors import RemotingError
from kernel.model import MessageQueue
from trocket.client.consumer.session import default_instance_name, local_ip
from trocket.client.credentials import resolve_credentials
from trocket.client.errors import ClientError, SendError
from trocket.client.message import Message, SendResult
from trocket.client.producer_heartbeat import ProducerHeartbeats
from trocket.client.producer_settings import ProducerSettings
from trocket.client.routes import RouteCache
from trocket.client.selectors import QueueSelector
from trocket.client.sending import (
    SendAttempts,
    identified,
)
from trocket.client.tls import resolve_tls
from trocket.client.trace import DEFAULT_REGION, TraceDispatcher, now_ms, published, trace_producer_group
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, Router
from wire.remoting.busy_poll import BusyPollSetting
from wire.remoting.signature import SessionCredentials
from wire.trace_data import TRACE_TOPIC

SendCallback = Callable[[SendResult | None, BaseException | None], Any]


@attrs.define(eq=False)
class Producer(ProducerSettings):
    """See the module docstring; the options are :class:`ProducerSettings`' and these. Use as
    ``async with``; ``start()`` / ``shutdown()`` do the same and must be called from one task,
    in that order."""

    busy_poll: BusyPollSetting = "auto"
    """Whether the event loop polls instead of sleeping right after a request or a receive:
    ``"auto"`` (the default) while answers come faster than 200 µs, a number of seconds to
    always poll that long, ``0`` never (docs/performance.md, ``wire.remoting.busy_poll``)."""
    trace: bool = False
    """Message trace (RocketMQ's ``enableMsgTrace``): a Pub record of every send, written in
    the background to :attr:`trace_topic` (:mod:`trocket.client.trace`)."""
    trace_topic: str = TRACE_TOPIC
    """Where trace records go (RocketMQ's ``customizedTraceTopic``)."""
    _tracer: TraceDispatcher | None = attrs.field(default=None, init=False)
    _remoting: RemotingClient | None = attrs.field(default=None, init=False)
    _routes: RouteCache | None = attrs.field(default=None, init=False)
    _heartbeats: ProducerHeartbeats | None = attrs.field(default=None, init=False)
    _heartbeat_scope: trio.CancelScope = attrs.field(factory=trio.CancelScope, init=False)
    _nursery: trio.Nursery | None = attrs.field(default=None, init=False)
    _stack: AsyncExitStack | None = attrs.field(default=None, init=False)

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        if self._stack is not None:
            raise ClientError(f"producer {self.group!r} is already started")
        stack = AsyncExitStack()
        self._remoting = await stack.enter_async_context(
            RemotingClient.open(
                self._router(),
                credentials=resolve_credentials(self.credentials),
                tls=resolve_tls(self.tls),
                busy_poll=self.busy_poll,
            )
        )
        # Runs after the nursery below has waited for background sends, before the close.
        stack.push_async_callback(self._remoting.flush_all, self.send_timeout)
        if self.trace:
            self._tracer = await enter_trace_dispatcher(
                stack, self.group, "PRODUCE", self.namesrv_addr, self.trace_topic,
                credentials=self.credentials, tls=self.tls, busy_poll=self.busy_poll,
            )  # fmt: skip
        self._nursery = await stack.enter_async_context(trio.open_nursery())
        self._routes = RouteCache(self._remoting, self._namesrvs, self.default_topic_queue_nums)
        client_id = f"{local_ip()}@{self.instance_name or default_instance_name()}"
        self._heartbeats = ProducerHeartbeats(
            self._remoting, self._routes, self.group, client_id, self.heartbeat_interval
        )
        self._heartbeat_scope = trio.CancelScope()
        if self.heartbeat_interval > 0:
            self._nursery.start_soon(self._heartbeat, self._heartbeat_scope, self._heartbeats)
        self._stack = stack

    @staticmethod
    async def _heartbeat(scope: trio.CancelScope, heartbeats: ProducerHeartbeats) -> None:
        with scope:
            await heartbeats.run()

    async def shutdown(self) -> None:
        """Waits for ``send_async`` sends still running, writes what oneway sends queued (up to
        ``send_timeout``), then closes connections."""
        if self._stack is not None:
            self._heartbeat_scope.cancel()
            stack, self._stack = self._stack, None
            await stack.aclose()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # --- sending ----------------------------------------------------------------------------

    async def send(
        self,
        message: Message,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: object = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send and wait for the broker's answer. With ``queue`` or ``selector`` (ordered
        messages) the queue is fixed and a failure is not retried elsewhere.

        :raises InvalidMessage: before sending, for a message that cannot be sent.
        :raises SendError: when every allowed attempt failed or the timeout ran out.
        """
        request, msg_id = self._rules.single(message)
        return await self._send(message.topic, request, msg_id, queue, selector, arg, timeout, (message,))

    async def send_batch(
        self, messages: Sequence[Message], *, queue: MessageQueue | None = None, timeout: float | None = None
    ) -> SendResult:
        """Send messages of one topic as one request (stored consecutively in one queue).
        Batches are not compressed and cannot be delayed, as in RocketMQ."""
        topic, body, ids = self._rules.batch(messages)
        request = self._rules.request(topic, 0, 0, {}, body, code=RequestCode.SEND_BATCH_MESSAGE)
        return await self._send(topic, request, ",".join(ids), queue, None, None, timeout, messages)

    async def fetch_publish_message_queues(self, topic: str) -> tuple[MessageQueue, ...]:
        """The topic's writable queues, by broker name then queue id (RocketMQ's
        ``fetchPublishMessageQueues``), for callers that pick a queue themselves.

        :raises ClientError: the topic has no route and no broker auto-creates topics.
        """
        _, routes = self._started()
        return (await routes.publish_info(topic)).queues

    async def send_oneway(self, message: Message, *, queue: MessageQueue | None = None) -> None:
        """Send without waiting for an answer: one attempt, no result, fastest and least safe."""
        body, sys_flag = self._rules.body(message)
        properties = identified(message)
        remoting, routes = self._started()
        info = await routes.publish_info(message.topic)
        target = queue or self._picker.pick(info.queues, None)
        request = self._rules.request(
            message.topic, message.flag, sys_flag, properties, body, queue_id=target.queue_id
        )
        try:
            await remoting.invoke_oneway(info.addresses[target.broker_name], request)
        except RemotingError as error:
            raise SendError(f"oneway send to {target.broker_name} failed: {error}") from None

    def send_async(
        self, message: Message, callback: SendCallback | None = None, **options: Any
    ) -> PendingSend:
        """Start a send in the background and return at once. ``callback(result, error)`` is
        called when it completes; ``await pending.result()`` gives the result or raises."""
        if self._nursery is None:
            raise ClientError(f"producer {self.group!r} is not started")
        pending = PendingSend()

        async def run() -> None:
            try:
                pending.set(await self.send(message, **options), None)
            except (ClientError, RemotingError) as error:
                pending.set(None, error)
            if callback is not None:
                callback(pending.value, pending.error)

        self._nursery.start_soon(run)
        return pending

    # --- internals --------------------------------------------------------------------------

    def _router(self) -> Router | None:
        """Serves requests brokers send us (none for a plain producer; a transaction producer
        answers check-backs)."""
        return None

    def _started(self) -> tuple[RemotingClient, RouteCache]:
        if self._remoting is None or self._routes is None:
            raise ClientError(f"producer {self.group!r} is not started")
        return self._remoting, self._routes

    def _trace_sent(
        self,
        traced: Sequence[Message],
        result: SendResult,
        address: str,
        response: RemotingCommand,
        took: float,
    ) -> None:
        """Queue the Pub records of a stored send (unless the broker says ``TRACE_ON=false``)."""
        assert self._tracer is not None
        ext = response.ext
        if ext.get("TRACE_ON") == "false":
            return
        cost_ms = int(took * 1000)
        region = str(ext.get("MSG_REGION") or DEFAULT_REGION)
        self._tracer.append(
            published(self.group, traced, result, address, region, now_ms() - cost_ms, cost_ms)
        )

    async def _send(
        self,
        topic: str,
        request: RemotingCommand,
        msg_id: str,
        fixed: MessageQueue | None,
        selector: QueueSelector | None,
        arg: object,
        timeout: float | None,
        traced: Sequence[Message] = (),
    ) -> SendResult:
        """One send with its retries (:class:`SendAttempts`); ``traced``: the messages it
        carries, for their Pub trace records (none for a producer without ``trace``)."""
        remoting, routes = self._started()
        began = trio.current_time()
        attempts = SendAttempts.start(
            topic, request, msg_id, self._picker,
            now=began,
            budget=self.send_timeout if timeout is None else timeout,
            retries=self.retry_times_when_send_failed,
            retry_another_broker_when_not_store_ok=self.retry_another_broker_when_not_store_ok,
            fixed=fixed, selector=selector, arg=arg,
        )  # fmt: skip
        while left := attempts.next(trio.current_time()):
            address = attempts.target(await routes.publish_info(topic, refresh=attempts.refresh_route))
            started = time.monotonic()
            try:
                response = await remoting.invoke(address, request, left)
            except RemotingError as error:
                attempts.failed(address, error)
                continue
            stored = attempts.answered(response, (time.monotonic() - started) * 1000)
            if stored is not None and self._tracer is not None and traced:
                self._trace_sent(traced, stored, address, response, trio.current_time() - began)
            if attempts.forget_route:
                routes.forget(topic)
        return attempts.outcome()


TRACE_COMPRESS_OVER = 2**31
"""Trace bodies are not compressed: zlib at level 1 takes 0.85 µs per record (0.6 ms per
128 KiB body), about 3 % of a pipelined producer's throughput, to store 29 % of the bytes
(51 instead of 174 bytes per traced send on the trace topic)."""


async def enter_trace_dispatcher(
    stack: AsyncExitStack,
    group: str,
    kind: str,
    namesrv_addr: str | Sequence[str],
    topic: str,
    *,
    credentials: SessionCredentials | None,
    tls: ssl.SSLContext | bool | None,
    busy_poll: BusyPollSetting,
) -> TraceDispatcher:
    """A trace dispatcher for a client of ``group`` (``kind``: PRODUCE or CONSUME) and its inner
    producer, both closed by ``stack``. Enter it before the client's own nursery: leaving that
    nursery first lets the client's last records in before the dispatcher writes what is left."""
    inner = await stack.enter_async_context(
        Producer(
            trace_producer_group(group, kind),
            namesrv_addr,
            credentials=credentials,
            tls=tls,
            busy_poll=0,  # trace sends wait for nobody: polling for their answers wastes CPU
            compress_over=TRACE_COMPRESS_OVER,
        )
    )
    dispatcher = TraceDispatcher(inner.send, topic)
    nursery = await stack.enter_async_context(trio.open_nursery())
    nursery.start_soon(dispatcher.run)
    stack.push_async_callback(dispatcher.close, inner.send_timeout)
    return dispatcher


@attrs.define(eq=False)
class PendingSend:
    """The outcome of :meth:`Producer.send_async`."""

    value: SendResult | None = None
    error: BaseException | None = None
    _done: trio.Event = attrs.field(factory=trio.Event)

    def set(self, value: SendResult | None, error: BaseException | None) -> None:
        self.value, self.error = value, error
        self._done.set()

    async def result(self) -> SendResult:
        await self._done.wait()
        if self.error is not None:
            raise self.error
        assert self.value is not None
        return self.value
