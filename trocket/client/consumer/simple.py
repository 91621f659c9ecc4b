"""The simple consumer (RocketMQ 5's ``SimpleConsumer``): the application receives, then acks.

    async with SimpleConsumer("CG_jobs", "127.0.0.1:9876", {"Jobs": "*"}) as consumer:
        for message in await consumer.receive(max_messages=16, invisible_duration=30):
            handle(message)
            await consumer.ack(message)

It consumes by POP: the broker hands out messages of the group and keeps each one invisible to
the group's other receives for ``invisible_duration`` seconds. A message not acked by then is
delivered again (``delivery_attempt`` + 1), to this consumer or another; after the group's
``retryMaxTimes`` it goes to ``%DLQ%<group>``. ``change_invisible_duration`` extends the time or,
with a short duration, gives a message back early; it replaces the message's receipt handle.
No queues are owned and no offsets are kept here: any number of simple consumers of a group
share its topics without a rebalance.
"""

from __future__ import annotations

import itertools
import ssl
import time
import zlib
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any

import attrs

from kernel.errors import RemotingError
from trocket.client.credentials import resolve_credentials
from trocket.client.errors import ClientError
from trocket.client.routes import RouteCache
from trocket.client.sending import split_addresses
from trocket.client.tls import resolve_tls
from wire import record
from wire.names import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
from wire.pop_receipt import BadReceipt, ReceiptHandle, receipt_handles
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from wire.remoting.signature import SessionCredentials

DEFAULT_AWAIT_DURATION = 20.0
"""Seconds a receive waits on a broker for messages to arrive (RocketMQ 5's long polling)."""
MAX_RECEIVE = 32
ROUTE_TTL = 30.0
"""Seconds a topic's brokers are used before the NameServers are asked again (RocketMQ 5
clients refresh routes every 30 s)."""
INIT_MAX = 1


@attrs.frozen
class PoppedMessage:
    """A received message and the receipt handle that acks it."""

    topic: str
    body: bytes
    """As the producer gave it (a body the client compressed is inflated)."""
    properties: Mapping[str, str]
    message_id: str
    queue_id: int
    queue_offset: int
    reconsume_times: int
    born_timestamp: int
    store_timestamp: int
    broker_name: str
    receipt_handle: str
    """RocketMQ's ``extraInfo``; :meth:`SimpleConsumer.change_invisible_duration` replaces it."""

    @property
    def delivery_attempt(self) -> int:
        return self.reconsume_times + 1

    @property
    def tag(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        return self.properties.get(PROPERTY_KEYS, "").split()


@attrs.define(eq=False)
class SimpleConsumer:
    """See the module docstring. ``subscriptions`` maps topics to tag expressions (``"*"``,
    ``"a || b"``)."""

    group: str
    namesrv_addr: str | Sequence[str] = "127.0.0.1:9876"
    subscriptions: Mapping[str, str] = attrs.field(factory=dict)
    await_duration: float = DEFAULT_AWAIT_DURATION
    request_timeout: float = 3.0
    credentials: SessionCredentials | None = None
    tls: ssl.SSLContext | bool | None = None
    _remoting: RemotingClient | None = attrs.field(default=None, init=False)
    _routes: RouteCache | None = attrs.field(default=None, init=False)
    _stack: AsyncExitStack | None = attrs.field(default=None, init=False)
    _turn: itertools.count[int] = attrs.field(factory=itertools.count, init=False)
    _brokers_of: dict[str, tuple[float, list[tuple[str, str]]]] = attrs.field(factory=dict, init=False)

    async def start(self) -> None:
        """:raises ClientError: started already, no address, or a subscribed topic has no route."""
        if self._stack is not None:
            raise ClientError(f"simple consumer {self.group!r} is already started")
        addresses = split_addresses(self.namesrv_addr)
        if not addresses:
            raise ClientError("no NameServer address given")
        stack = AsyncExitStack()
        self._remoting = await stack.enter_async_context(
            RemotingClient.open(credentials=resolve_credentials(self.credentials), tls=resolve_tls(self.tls))
        )
        self._routes = RouteCache(self._remoting, addresses)
        self._stack = stack
        try:
            for topic in self.subscriptions:
                await self._brokers(topic)
        except BaseException:
            await self.shutdown()
            raise

    async def shutdown(self) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.aclose()

    async def __aenter__(self) -> SimpleConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def subscribe(self, topic: str, expression: str = "*") -> None:
        self.subscriptions = {**self.subscriptions, topic: expression}

    async def _brokers(self, topic: str, *, refresh: bool = False) -> list[tuple[str, str]]:
        """(broker name, address) of the topic's readable brokers, asked of the NameServers at
        most every :data:`ROUTE_TTL` seconds (and again after a broker failed a call)."""
        assert self._routes is not None
        cached = self._brokers_of.get(topic)
        if cached is not None and not refresh and time.monotonic() - cached[0] < ROUTE_TTL:
            return cached[1]
        _, addresses = await self._routes.subscribe_info(topic)
        brokers = sorted(addresses.items())
        self._brokers_of[topic] = (time.monotonic(), brokers)
        return brokers

    async def receive(self, max_messages: int = 16, invisible_duration: float = 30.0) -> list[PoppedMessage]:
        """Messages of one subscribed topic from one broker (both taken in turn), waiting up to
        ``await_duration`` for some to arrive; empty when none did.

        :raises ClientError: not started, nothing subscribed, bad arguments, or a broker's
            refusal (its code and remark).
        """
        if self._remoting is None:
            raise ClientError("the simple consumer is not started")
        if not self.subscriptions:
            raise ClientError("subscribe to a topic before receiving")
        if not 0 < max_messages <= MAX_RECEIVE:
            raise ClientError(f"max_messages must be between 1 and {MAX_RECEIVE}, not {max_messages}")
        if invisible_duration <= 0:
            raise ClientError(f"invisible_duration must be positive, not {invisible_duration}")
        turn = next(self._turn)
        topics = sorted(self.subscriptions)
        topic = topics[turn % len(topics)]
        brokers = await self._brokers(topic)
        if not brokers:
            raise ClientError(f"topic {topic!r} has no readable broker")
        broker_name, address = brokers[(turn // len(topics)) % len(brokers)]
        poll_ms = int(self.await_duration * 1000)
        request = RemotingCommand.request(
            RequestCode.POP_MESSAGE,
            {
                "consumerGroup": self.group,
                "topic": topic,
                "queueId": -1,
                "maxMsgNums": max_messages,
                "invisibleTime": int(invisible_duration * 1000),
                "pollTime": poll_ms,
                "bornTime": int(time.time() * 1000),
                "initMode": INIT_MAX,
                "expType": "TAG",
                "exp": self.subscriptions[topic],
                "order": "false",
            },
        )
        response = await self._invoke(address, request, self.request_timeout + self.await_duration)
        if response.code == ResponseCode.POLLING_TIMEOUT:
            return []
        if response.code != ResponseCode.SUCCESS:
            raise ClientError(f"receive from {broker_name}: code {response.code} {response.remark or ''}")
        return _popped(response, broker_name)

    async def ack(self, message: PoppedMessage) -> None:
        """:raises ClientError: the handle expired (the message is delivered again) or the
        broker refused (code and remark)."""
        await self._handle_request(message, RequestCode.ACK_MESSAGE, {})

    async def change_invisible_duration(self, message: PoppedMessage, duration: float) -> PoppedMessage:
        """The message with a new receipt handle, invisible ``duration`` seconds from now (the
        old handle no longer acks it).

        :raises ClientError: the handle expired, or the broker refused."""
        response = await self._handle_request(
            message, RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {"invisibleTime": int(duration * 1000)}
        )
        old = ReceiptHandle.parse(message.receipt_handle)
        new = attrs.evolve(
            old,
            ck_queue_offset=message.queue_offset,
            pop_time=int(response.ext["popTime"]),
            invisible_time=int(response.ext["invisibleTime"]),
            revive_qid=int(response.ext["reviveQid"]),
            queue_offset=message.queue_offset,
        )
        return attrs.evolve(message, receipt_handle=new.format())

    async def _handle_request(
        self, message: PoppedMessage, code: int, extra: dict[str, Any]
    ) -> RemotingCommand:
        if self._routes is None:
            raise ClientError("the simple consumer is not started")
        try:
            handle = ReceiptHandle.parse(message.receipt_handle)
        except BadReceipt as error:
            raise ClientError(str(error)) from None
        brokers = dict(await self._brokers(message.topic))
        address = brokers.get(handle.broker_name)
        if address is None:
            raise ClientError(
                f"broker {handle.broker_name!r} of the message is not in the route of {message.topic!r}"
            )
        request = RemotingCommand.request(
            code,
            {
                "consumerGroup": self.group,
                "topic": message.topic,
                "queueId": handle.queue_id,
                "extraInfo": message.receipt_handle,
                "offset": handle.queue_offset,
                **extra,
            },
        )
        response = await self._invoke(address, request, self.request_timeout)
        if response.code != ResponseCode.SUCCESS:
            raise ClientError(f"{handle.broker_name}: code {response.code} {response.remark or ''}")
        return response

    async def _invoke(self, address: str, request: RemotingCommand, timeout: float) -> RemotingCommand:
        assert self._remoting is not None
        try:
            return await self._remoting.invoke(address, request, timeout)
        except RemotingError as error:
            self._brokers_of.clear()  # the broker may be gone: ask the NameServers next time
            raise ClientError(f"{address}: {error}") from None


def _popped(response: RemotingCommand, broker_name: str) -> list[PoppedMessage]:
    stored = record.decode_records(response.body)
    try:
        handles = receipt_handles(
            response.ext, [(m.topic, m.queue_id, m.queue_offset, m.properties) for m in stored], broker_name
        )
    except (BadReceipt, KeyError, ValueError) as error:
        raise ClientError(f"the POP answer of {broker_name} is not usable: {error}") from None
    out = []
    for message, handle in zip(stored, handles, strict=True):
        try:
            body = message.payload
        except zlib.error as error:
            raise ClientError(
                f"message at {message.topic}:{message.queue_offset} does not inflate: {error}"
            ) from None
        out.append(
            PoppedMessage(
                topic=message.topic,
                body=body,
                properties=message.properties,
                message_id=message.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                or message.offset_msg_id,
                queue_id=handle.queue_id,
                queue_offset=handle.queue_offset,
                reconsume_times=message.reconsume_times,
                born_timestamp=message.born_timestamp,
                store_timestamp=message.store_timestamp,
                broker_name=broker_name,
                receipt_handle=handle.format(),
            )
        )
    return out
