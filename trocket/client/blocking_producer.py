"""A producer for code without an event loop (RocketMQ's ``DefaultMQProducer.send`` as a plain
blocking call), thread-safe:

    with BlockingProducer("PG_orders", "127.0.0.1:9876") as producer:
        result = producer.send(Message("Orders", b"...", tags="paid", keys=["order-42"]))

It makes the same attempts as the trio :class:`~trocket.client.Producer` (the rules live in
:mod:`trocket.client.sending`): round robin over writable queues with latency fault tolerance,
retries on another broker, ``send_timeout`` for all attempts together, compression over
``compress_over`` bytes, a client unique id per message. What differs is the I/O: each call
writes its request on a blocking socket, polls it for the answer for a short window
(``busy_poll``) and then sleeps in ``recv`` until the answer is there, on a connection lent
to it alone (:mod:`trocket.client.blocking_connection`), so concurrent threads each have one
request in flight and none waits behind another's answer.

Heartbeats (the broker's producer list, mqadmin ``producerConnection``) ride on sends: a send
to a broker not told within ``heartbeat_interval`` tells it first, so no thread runs in the
background. Not here: message trace, ``send_async`` and transactions (the trio producer has
them).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import attrs

from kernel.errors import RemotingError
from kernel.model import MessageQueue
from trocket.client.blocking_connection import ConnectionPool
from trocket.client.consumer.session import default_instance_name, local_ip
from trocket.client.credentials import resolve_credentials
from trocket.client.errors import ClientError, SendError
from trocket.client.message import Message, SendResult
from trocket.client.producer_heartbeat import heartbeat_body
from trocket.client.producer_settings import ProducerSettings
from trocket.client.routes import (
    DEFAULT_TOPIC,
    ROUTE_TTL,
    PublishInfo,
    publish_info_from,
    route_answer,
    route_request,
)
from trocket.client.selectors import QueueSelector
from trocket.client.sending import SendAttempts, identified
from trocket.client.tls import resolve_tls
from wire.remoting import RemotingCommand, RequestCode, ResponseCode
from wire.remoting.busy_poll import BusyPollSetting, parse_busy_poll


@attrs.define(eq=False)
class BlockingProducer(ProducerSettings):
    """See the module docstring; the options are :class:`ProducerSettings`' (the trio
    producer's, less ``trace``) and ``busy_poll``. Use as ``with``; ``start()`` /
    ``shutdown()`` do the same."""

    busy_poll: BusyPollSetting = attrs.field(default="auto", converter=parse_busy_poll)
    """Whether a sending thread polls its socket for the answer before it sleeps in ``recv``:
    ``"auto"`` (the default) for 200 µs, stretched to answers a little later (at most 1 ms) and
    backed off from much later ones, at most half the cores' worth of threads at once; a
    number of seconds to always poll that long; ``0`` never (:mod:`trocket.client.answer_spin`)."""

    _pool: ConnectionPool | None = attrs.field(default=None, init=False)
    _routes: dict[str, tuple[float, PublishInfo]] = attrs.field(factory=dict, init=False)
    _told: dict[str, float] = attrs.field(factory=dict, init=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Resolve credentials and TLS (no connection is made until the first send).

        :raises ClientError: already started, or the TLS settings are unusable.
        """
        with self._lock:
            if self._pool is not None:
                raise ClientError(f"producer {self.group!r} is already started")
            self._pool = ConnectionPool(
                connect_timeout=self.send_timeout,
                tls=resolve_tls(self.tls),
                credentials=resolve_credentials(self.credentials),
                busy_poll=self.busy_poll,
            )

    def shutdown(self) -> None:
        """Close every connection (a send still running on another thread fails)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def __enter__(self) -> BlockingProducer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # --- sending ----------------------------------------------------------------------------

    def send(
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
        return self._send(message.topic, request, msg_id, queue, selector, arg, timeout)

    def send_batch(
        self, messages: Sequence[Message], *, queue: MessageQueue | None = None, timeout: float | None = None
    ) -> SendResult:
        """Send messages of one topic as one request (stored consecutively in one queue)."""
        topic, body, ids = self._rules.batch(messages)
        request = self._rules.request(topic, 0, 0, {}, body, code=RequestCode.SEND_BATCH_MESSAGE)
        return self._send(topic, request, ",".join(ids), queue, None, None, timeout)

    def send_oneway(self, message: Message, *, queue: MessageQueue | None = None) -> None:
        """Send without waiting for an answer: one attempt, no result."""
        body, sys_flag = self._rules.body(message)
        properties = identified(message)
        info = self.publish_info(message.topic)
        target = queue or self._picker.pick(info.queues, None)
        request = self._rules.request(
            message.topic, message.flag, sys_flag, properties, body, queue_id=target.queue_id
        )
        address = info.addresses.get(target.broker_name)
        if address is None:
            raise SendError(f"broker {target.broker_name!r} has no live master for topic {message.topic!r}")
        try:
            self._started().oneway(address, request)
        except RemotingError as error:
            raise SendError(f"oneway send to {target.broker_name} failed: {error}") from None

    def fetch_publish_message_queues(self, topic: str) -> tuple[MessageQueue, ...]:
        """The topic's writable queues, by broker name then queue id."""
        return self.publish_info(topic).queues

    def publish_info(self, topic: str, *, refresh: bool = False) -> PublishInfo:
        """The topic's writable queues and their masters, cached for ``ROUTE_TTL`` seconds.

        :raises ClientError: no NameServer answered, or the topic has no route and no broker
            auto-creates topics.
        """
        cached = self._routes.get(topic)
        now = time.monotonic()
        if cached and not refresh and now - cached[0] < ROUTE_TTL:
            return cached[1]
        route = self._route(topic)
        info = publish_info_from(
            topic, route, self._route(DEFAULT_TOPIC) if route is None else None, self.default_topic_queue_nums
        )
        self._routes[topic] = (now, info)
        return info

    # --- internals --------------------------------------------------------------------------

    def _started(self) -> ConnectionPool:
        pool = self._pool
        if pool is None:
            raise ClientError(f"producer {self.group!r} is not started")
        return pool

    def _send(
        self,
        topic: str,
        request: RemotingCommand,
        msg_id: str,
        fixed: MessageQueue | None,
        selector: QueueSelector | None,
        arg: object,
        timeout: float | None,
    ) -> SendResult:
        pool = self._started()
        attempts = SendAttempts.start(
            topic, request, msg_id, self._picker,
            now=time.monotonic(),
            budget=self.send_timeout if timeout is None else timeout,
            retries=self.retry_times_when_send_failed,
            retry_another_broker_when_not_store_ok=self.retry_another_broker_when_not_store_ok,
            fixed=fixed, selector=selector, arg=arg,
        )  # fmt: skip
        while left := attempts.next(time.monotonic()):
            address = attempts.target(self.publish_info(topic, refresh=attempts.refresh_route))
            started = time.monotonic()
            try:
                self._heartbeat_if_due(pool, address, started)
                response = pool.invoke(address, request, left)
            except RemotingError as error:
                attempts.failed(address, error)
                continue
            attempts.answered(response, (time.monotonic() - started) * 1000)
            if attempts.forget_route:
                self._routes.pop(topic, None)
        return attempts.outcome()

    def _route(self, topic: str) -> dict[str, object] | None:
        pool = self._started()
        errors = []
        for address in self._namesrvs:
            try:
                response = pool.invoke(address, route_request(topic), self.send_timeout)
            except RemotingError as error:
                errors.append(str(error))
                continue
            found, route = route_answer(address, response, errors)
            if found:
                return route
        raise ClientError(f"no NameServer answered for topic {topic!r}: {'; '.join(errors)}")

    def _heartbeat_if_due(self, pool: ConnectionPool, address: str, now: float) -> None:
        """Tell ``address`` about this producer when it has not heard within the interval. A
        heartbeat that gets no answer fails the attempt like the send would (the broker is not
        reachable) and is tried again by the next send; one the broker refuses is retried by
        the next send and does not hold this one."""
        if self.heartbeat_interval <= 0 or now - self._told.get(address, -1e18) < self.heartbeat_interval:
            return
        self._told[address] = now
        client_id = f"{local_ip()}@{self.instance_name or default_instance_name()}"
        heartbeat = RemotingCommand.request(RequestCode.HEART_BEAT, {}, heartbeat_body(client_id, self.group))
        try:
            response = pool.invoke(address, heartbeat, self.send_timeout)
        except RemotingError:
            self._told.pop(address, None)
            raise
        if response.code != ResponseCode.SUCCESS:
            self._told.pop(address, None)
