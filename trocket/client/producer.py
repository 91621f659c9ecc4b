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

import random
import ssl
import time
import zlib
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any

import attrs
import trio

from kernel.errors import RemotingError
from kernel.model import (
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX as PROPERTY_UNIQ_KEY,
)
from kernel.model import (
    PROPERTY_WAIT_STORE_MSG_OK,
    SYSFLAG_COMPRESSED,
    MessageQueue,
    encode_properties,
)
from trocket.client.batch import encode_messages
from trocket.client.consumer.session import default_instance_name, local_ip
from trocket.client.credentials import resolve_credentials
from trocket.client.errors import ClientError, InvalidMessage, SendError
from trocket.client.fault import LatencyFaultTolerance
from trocket.client.message import Message, SendResult, SendStatus
from trocket.client.message_id import new_message_id
from trocket.client.producer_heartbeat import HEARTBEAT_INTERVAL, ProducerHeartbeats
from trocket.client.routes import RouteCache
from trocket.client.selectors import QueueSelector
from trocket.client.tls import resolve_tls
from trocket.client.trace import DEFAULT_REGION, TraceDispatcher, now_ms, published, trace_producer_group
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode, Router, code_name
from wire.remoting.busy_poll import BusyPollSetting
from wire.remoting.signature import SessionCredentials
from wire.trace_data import TRACE_TOPIC

RETRY_TOPIC_PREFIX = "%RETRY%"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
STORED = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}
RETRIED_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.NO_PERMISSION,
    }
)
"""Broker answers worth another attempt on another broker (as RocketMQ's producer)."""

SendCallback = Callable[[SendResult | None, BaseException | None], Any]


def _identified(message: Message) -> dict[str, str]:
    """The wire properties, with a new client unique id unless the caller set one."""
    properties = message.wire_properties()
    properties.setdefault(PROPERTY_UNIQ_KEY, new_message_id())
    return properties


def _split(addresses: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(addresses, str):
        addresses = addresses.replace(",", ";").split(";")
    return tuple(a.strip() for a in addresses if a.strip())


@attrs.define(eq=False)
class Producer:
    """See the module docstring. Use as ``async with``; ``start()`` / ``shutdown()`` do the same
    and must be called from one task, in that order."""

    group: str
    namesrv_addr: str | Sequence[str] = "127.0.0.1:9876"
    send_timeout: float = 3.0
    retry_times_when_send_failed: int = 2
    retry_another_broker_when_not_store_ok: bool = False
    compress_over: int = 4096
    compress_level: int = attrs.field(default=5, validator=attrs.validators.in_(range(10)))
    """zlib level of compressed bodies (RocketMQ's ``compressLevel``, 5)."""
    max_message_size: int = 4 * 1024 * 1024
    default_topic_queue_nums: int = 4
    latency_fault_tolerance: bool = True
    credentials: SessionCredentials | None = None
    """ACL credentials every request is signed with (default: ``TROCKET_ACCESS_KEY`` and
    ``TROCKET_SECRET_KEY`` when set)."""
    tls: ssl.SSLContext | bool | None = None
    """TLS to NameServers and brokers: a context (:func:`trocket.client.tls_context`),
    ``True`` (the system's CAs), or ``None``: ``TROCKET_TLS``/``TROCKET_TLS_CA_FILE`` decide."""
    busy_poll: BusyPollSetting = "auto"
    """Whether the event loop polls instead of sleeping right after a request or a receive:
    ``"auto"`` (the default) while answers come faster than 200 µs, a number of seconds to
    always poll that long, ``0`` never (docs/performance.md, ``wire.remoting.busy_poll``)."""
    heartbeat_interval: float = HEARTBEAT_INTERVAL
    """Seconds between heartbeats to every broker sent to (RocketMQ's
    ``heartbeatBrokerInterval``); a new broker hears one within a second of its first route.
    0 sends none (a consumer's producer of retries is not a producer group of its own)."""
    instance_name: str | None = None
    """The second half of the client id brokers list (``ip@instance``; default the pid)."""
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
    _faults: LatencyFaultTolerance = attrs.field(init=False)
    _counter: int = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._faults = LatencyFaultTolerance(self.latency_fault_tolerance)
        self._counter = random.randrange(1 << 16)
        if not _split(self.namesrv_addr):
            raise ClientError("no NameServer address given")

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
        self._routes = RouteCache(self._remoting, _split(self.namesrv_addr), self.default_topic_queue_nums)
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
        body, sys_flag = self._prepare(message)
        properties = _identified(message)
        request = self._request(message.topic, message.flag, sys_flag, properties, body)
        return await self._send(
            message.topic, request, properties[PROPERTY_UNIQ_KEY], queue, selector, arg, timeout, (message,)
        )

    async def send_batch(
        self, messages: Sequence[Message], *, queue: MessageQueue | None = None, timeout: float | None = None
    ) -> SendResult:
        """Send messages of one topic as one request (stored consecutively in one queue).
        Batches are not compressed and cannot be delayed, as in RocketMQ."""
        if not messages:
            raise InvalidMessage("an empty batch")
        topics = {m.topic for m in messages}
        if len(topics) != 1:
            raise InvalidMessage(f"a batch must have one topic, got {sorted(topics)}")
        if any(m.delay_level > 0 for m in messages):
            raise InvalidMessage("batched messages cannot have a delay level")
        (topic,) = topics
        self._check(messages[0])
        lengths = [len(m.body) for m in messages]
        if min(lengths) == 0:
            raise InvalidMessage(f"the body of batch message {lengths.index(0)} is empty")
        if max(lengths) > self.max_message_size:
            raise InvalidMessage(
                f"a message body is {max(lengths)} bytes; the limit is {self.max_message_size}"
            )
        try:
            body, ids = encode_messages(messages)
        except ValueError as error:
            raise InvalidMessage(str(error)) from None
        if len(body) > self.max_message_size:
            raise InvalidMessage(f"the batch is {len(body)} bytes; the limit is {self.max_message_size}")
        request = self._request(topic, 0, 0, {}, body, code=RequestCode.SEND_BATCH_MESSAGE)
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
        body, sys_flag = self._prepare(message)
        properties = _identified(message)
        remoting, routes = self._started()
        info = await routes.publish_info(message.topic)
        target = queue or self._pick(info.queues, None)
        request = self._request(
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

    def _check(self, message: Message) -> None:
        if not message.topic or len(message.topic) > 127:
            raise InvalidMessage(f"topic {message.topic!r} is empty or longer than 127 characters")
        if not message.body:
            raise InvalidMessage("the message body is empty")
        if len(message.body) > self.max_message_size:
            raise InvalidMessage(
                f"the message body is {len(message.body)} bytes; the limit is {self.max_message_size}"
            )

    def _prepare(self, message: Message) -> tuple[bytes, int]:
        self._check(message)
        if len(message.body) > self.compress_over:
            compressed = zlib.compress(message.body, self.compress_level)
            if len(compressed) < len(message.body):  # random or already-compressed data grows
                return compressed, SYSFLAG_COMPRESSED
        return message.body, 0

    def _request(
        self,
        topic: str,
        flag: int,
        sys_flag: int,
        properties: dict[str, str],
        body: bytes,
        *,
        code: int = RequestCode.SEND_MESSAGE_V2,
        queue_id: int = 0,
    ) -> RemotingCommand:
        properties.setdefault(PROPERTY_WAIT_STORE_MSG_OK, "true")
        reconsume_times = 0
        if topic.startswith(RETRY_TOPIC_PREFIX):  # a consumer's own retry copy (see send_back)
            reconsume_times = int(properties.get(PROPERTY_RECONSUME_TIME, "0") or 0)
        header = {  # strings already: the header's fast path (string_fields)
            "a": self.group,
            "b": topic,
            "c": "TBW102",
            "d": str(self.default_topic_queue_nums),
            "e": str(queue_id),
            "f": str(sys_flag),
            "g": str(int(time.time() * 1000)),
            "h": str(flag),
            "i": encode_properties(properties).decode() if properties else "",
            "j": str(reconsume_times),
            "k": "false",
            "m": "true" if code == RequestCode.SEND_BATCH_MESSAGE else "false",
        }
        return RemotingCommand.request(code, header, body)

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

    def _pick(self, queues: Sequence[MessageQueue], avoid: str | None) -> MessageQueue:
        """Round robin, skipping isolated brokers and (on a retry) the broker that just failed."""
        self._counter += 1
        count = len(queues)
        for i in range(count):
            queue = queues[(self._counter + i) % count]
            if queue.broker_name != avoid and self._faults.available(queue.broker_name):
                return queue
        others = [q for q in queues if q.broker_name != avoid] or list(queues)
        best = self._faults.least_bad(sorted({q.broker_name for q in others}))
        candidates = [q for q in others if q.broker_name == best]
        return candidates[self._counter % len(candidates)]

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
        """One send with its retries; ``traced``: the messages it carries, for their Pub trace
        records (none for a producer without ``trace``)."""
        remoting, routes = self._started()
        budget = self.send_timeout if timeout is None else timeout
        began = trio.current_time()
        deadline = began + budget
        pinned = fixed is not None or selector is not None
        attempts = 1 if pinned else 1 + self.retry_times_when_send_failed
        last_error, last_code, avoid = "no attempt was made", None, None
        stored: SendResult | None = None
        for attempt in range(attempts):
            left = deadline - trio.current_time()
            if left <= 0:
                last_error = f"send timeout: {budget:.3g}s spent in {attempt} attempt(s); last: {last_error}"
                break
            info = await routes.publish_info(topic, refresh=attempt > 0)
            if fixed is not None:
                queue = fixed
            elif selector is not None:
                queue = selector(list(info.queues), arg)
            else:
                queue = self._pick(info.queues, avoid)
            address = info.addresses.get(queue.broker_name)
            if address is None:
                raise SendError(f"broker {queue.broker_name!r} has no live master for topic {topic!r}")
            request.ext["e"] = str(queue.queue_id)
            started = time.monotonic()
            try:
                response = await remoting.invoke(address, request, left)
            except RemotingError as error:
                self._faults.record(queue.broker_name, 0, failed=True)
                last_error, last_code = f"{queue.broker_name} ({address}): {error}", None
                avoid = queue.broker_name
                continue
            self._faults.record(queue.broker_name, (time.monotonic() - started) * 1000)
            status = STORED.get(response.code)  # type: ignore[call-overload]
            if status is None:
                answer = code_name(response.code, response=True)
                last_error = f"{queue.broker_name} answered {answer}: {response.remark or ''}"
                last_code = response.code
                if response.code in RETRIED_CODES:
                    avoid = queue.broker_name
                    if response.code == ResponseCode.TOPIC_NOT_EXIST:
                        routes.forget(topic)
                    continue
                raise SendError(f"send to {topic!r} refused: {last_error}", response.code)
            result = SendResult(
                status,
                msg_id,
                str(response.ext.get("msgId", "")),
                MessageQueue(topic, queue.broker_name, int(response.ext.get("queueId", queue.queue_id))),
                int(response.ext.get("queueOffset", -1)),
            )
            if self._tracer is not None and traced:
                self._trace_sent(traced, result, address, response, trio.current_time() - began)
            if status is SendStatus.SEND_OK or not self.retry_another_broker_when_not_store_ok:
                return result
            stored, avoid = result, queue.broker_name  # stored, not durably enough: try elsewhere
        if stored is not None:
            return stored
        raise SendError(f"send to {topic!r} failed after {attempts} attempt(s): {last_error}", last_code)


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
