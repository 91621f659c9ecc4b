"""What a consumer shares with its brokers: routes, heartbeats, the group's member list, queue
locks, and the NOTIFY_CONSUMER_IDS_CHANGED push that triggers an immediate rebalance
(the consumer half of RocketMQ's ``MQClientInstance``)."""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AsyncExitStack
from typing import Any

import attrs
import trio

from kernel.errors import RemotingError
from kernel.model import MessageQueue
from trocket.client.errors import ClientError
from trocket.client.routes import RouteCache
from wire.remoting import Connection, RemotingClient, RemotingCommand, RequestCode, ResponseCode
from wire.remoting.busy_poll import BusyPollSetting
from wire.remoting.connection import Router
from wire.remoting.signature import SessionCredentials
from wire.subscription import Subscription

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL = 30.0
"""``heartbeatBrokerInterval``; brokers drop a client silent for 120 s."""
_instances = itertools.count()


def local_ip() -> str:
    """The address brokers see us by (RocketMQ's client id starts with it)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 1))
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def default_instance_name() -> str:
    """The process id plus a per-process number, so two consumers of one group in one process
    are two members (RocketMQ uses the pid alone and shares one client between them)."""
    return f"{os.getpid()}#{next(_instances)}"


def new_subscription(topic: str, expression: str = "*") -> Subscription:
    """A subscription versioned by its creation time in ms (RocketMQ's ``subVersion``)."""
    return Subscription.parse(topic, expression, version=int(time.time() * 1000))


@attrs.define(eq=False)
class ConsumerSession:
    group: str
    namesrv_addrs: Sequence[str]
    client_id: str
    message_model: str
    """``CLUSTERING`` or ``BROADCASTING``."""
    consume_type: str
    """``CONSUME_PASSIVELY`` (push) or ``CONSUME_ACTIVELY`` (pull)."""
    consume_from_where: str
    remoting: RemotingClient
    subscriptions: dict[str, Subscription] = attrs.field(factory=dict)
    routes: RouteCache = attrs.field(init=False)
    brokers: dict[str, str] = attrs.field(factory=dict, init=False)
    """Broker name → where to read (the master, or a slave while it is down), for every
    broker of every subscribed topic."""
    rebalance_wanted: trio.Event = attrs.field(factory=trio.Event, init=False)
    running_info: Callable[[], bytes] | None = attrs.field(default=None, init=False)
    """RocketMQ's ``ConsumerRunningInfo`` as JSON, asked by the broker for mqadmin
    ``consumerStatus`` (set by the consumer that owns the session)."""

    def __attrs_post_init__(self) -> None:
        self.routes = RouteCache(self.remoting, self.namesrv_addrs)

    @staticmethod
    def router() -> tuple[Router, list[ConsumerSession]]:
        """A router for the session's connections; the list receives the session once built
        (the router must exist before the remoting client, the session after it)."""
        holder: list[ConsumerSession] = []
        router = Router()

        async def ids_changed(connection: Connection, request: RemotingCommand) -> RemotingCommand | None:
            if holder:
                log.info("group %s changed on %s: rebalancing now", holder[0].group, connection.peer)
                holder[0].rebalance_wanted.set()
            return None

        async def running_info(connection: Connection, request: RemotingCommand) -> RemotingCommand | None:
            session = holder[0] if holder else None
            if session is None or session.running_info is None:
                return request.response(ResponseCode.SYSTEM_ERROR, remark="the consumer is not running")
            return request.response(body=session.running_info())

        router.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ids_changed)
        router.register(RequestCode.GET_CONSUMER_RUNNING_INFO, running_info)
        return router, holder

    # --- routes -----------------------------------------------------------------------------

    async def queues_of(self, topic: str) -> tuple[MessageQueue, ...]:
        """The topic's readable queues, refreshing the broker addresses on the way."""
        queues, addresses = await self.routes.subscribe_info(topic)
        self.brokers.update(addresses)
        return queues

    async def address_for(self, queue: MessageQueue) -> str:
        """The master address of ``queue``'s broker, asking for the queue's topic if needed."""
        if queue.broker_name not in self.brokers:
            try:
                await self.queues_of(queue.topic)
            except ClientError:
                pass
        return await self.address_of(queue.broker_name)

    async def address_of(self, broker_name: str) -> str:
        address = self.brokers.get(broker_name)
        if address is None:
            for topic in list(self.subscriptions):
                try:
                    await self.queues_of(topic)
                except ClientError:
                    continue
            address = self.brokers.get(broker_name)
        if address is None:
            raise ClientError(f"broker {broker_name!r} has no known master address")
        return address

    def forget_address(self, broker_name: str, address: str) -> None:
        """``address`` stopped answering: the next :meth:`address_of` asks the NameServers
        again, which name a slave while the master is down."""
        if self.brokers.get(broker_name) == address:
            del self.brokers[broker_name]

    async def call(
        self, broker_name: str, code: int, header: dict[str, Any], body: bytes = b"", timeout: float = 3.0
    ) -> RemotingCommand:
        address = await self.address_of(broker_name)
        try:
            return await self.remoting.invoke(address, RemotingCommand.request(code, header, body), timeout)
        except RemotingError as error:
            raise ClientError(f"broker {broker_name} ({address}) did not answer: {error}") from None

    # --- group membership -------------------------------------------------------------------

    def heartbeat_body(self) -> bytes:
        return json.dumps(
            {
                "clientID": self.client_id,
                "consumerDataSet": [
                    {
                        "groupName": self.group,
                        "consumeType": self.consume_type,
                        "messageModel": self.message_model,
                        "consumeFromWhere": self.consume_from_where,
                        "subscriptionDataSet": [s.to_json() for s in self.subscriptions.values()],
                        "unitMode": False,
                    }
                ],
                "producerDataSet": [],
            }
        ).encode()

    async def heartbeat(self) -> None:
        """Tell every known broker who we are and what we subscribe to; failures are logged
        (a broker that is down learns at the next heartbeat)."""
        body = self.heartbeat_body()
        for name, address in sorted(self.brokers.items()):
            request = RemotingCommand.request(RequestCode.HEART_BEAT, {}, body)
            try:
                response = await self.remoting.invoke(address, request, 3.0)
            except RemotingError as error:
                log.warning("heartbeat to %s (%s) failed: %s", name, address, error)
                continue
            if response.code != ResponseCode.SUCCESS:
                log.warning("heartbeat to %s refused: %s %s", name, response.code, response.remark)

    async def consumer_ids(self, queues: Sequence[MessageQueue]) -> list[str]:
        """The group's client ids, sorted, from a broker holding the topic (as RocketMQ asks
        one broker; every broker gets every member's heartbeat)."""
        errors = []
        for broker_name in sorted({q.broker_name for q in queues}):
            try:
                response = await self.call(
                    broker_name, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": self.group}
                )
            except ClientError as error:
                errors.append(str(error))
                continue
            if response.code == ResponseCode.SUCCESS:
                return sorted(json.loads(response.body).get("consumerIdList") or ())
            errors.append(f"{broker_name}: {response.code} {response.remark or ''}")
        raise ClientError(f"group {self.group}: no broker listed its consumers: {'; '.join(errors)}")

    async def unregister(self) -> None:
        for name, address in sorted(self.brokers.items()):
            request = RemotingCommand.request(
                RequestCode.UNREGISTER_CLIENT,
                {"clientID": self.client_id, "producerGroup": "", "consumerGroup": self.group},
            )
            try:
                await self.remoting.invoke(address, request, 3.0)
            except RemotingError as error:
                log.info("unregister from %s failed: %s", name, error)

    # --- queue locks (orderly consumption) ---------------------------------------------------

    async def lock(self, queues: Iterable[MessageQueue]) -> set[MessageQueue]:
        """Lock ``queues`` on their brokers for this client; returns those now held."""
        held: set[MessageQueue] = set()
        for broker_name, group in _by_broker(queues).items():
            try:
                response = await self.call(broker_name, RequestCode.LOCK_BATCH_MQ, {}, self._lock_body(group))
            except ClientError as error:
                log.warning("lock on %s failed: %s", broker_name, error)
                continue
            if response.code == ResponseCode.SUCCESS:
                for item in json.loads(response.body).get("lockOKMQSet") or ():
                    held.add(MessageQueue(item["topic"], item["brokerName"], int(item["queueId"])))
        return held

    async def unlock(self, queues: Iterable[MessageQueue]) -> None:
        for broker_name, group in _by_broker(queues).items():
            try:
                await self.call(broker_name, RequestCode.UNLOCK_BATCH_MQ, {}, self._lock_body(group))
            except ClientError as error:
                log.warning("unlock on %s failed (the lock expires in 60 s): %s", broker_name, error)

    def _lock_body(self, queues: list[MessageQueue]) -> bytes:
        return json.dumps(
            {
                "consumerGroup": self.group,
                "clientId": self.client_id,
                "mqSet": [
                    {"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id} for q in queues
                ],
            }
        ).encode()


def _by_broker(queues: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
    grouped: dict[str, list[MessageQueue]] = {}
    for queue in queues:
        grouped.setdefault(queue.broker_name, []).append(queue)
    return grouped


async def open_session(
    stack: AsyncExitStack,
    group: str,
    namesrv_addrs: Sequence[str],
    message_model: str,
    consume_type: str,
    consume_from_where: str,
    subscriptions: dict[str, Subscription],
    instance_name: str | None,
    credentials: SessionCredentials | None = None,
    tls: ssl.SSLContext | None = None,
    busy_poll: BusyPollSetting = "auto",
) -> ConsumerSession:
    """A session whose connections ``stack`` closes, listening for membership changes."""
    router, holder = ConsumerSession.router()
    remoting = await stack.enter_async_context(
        RemotingClient.open(router, credentials=credentials, tls=tls, busy_poll=busy_poll)
    )
    client_id = f"{local_ip()}@{instance_name or default_instance_name()}"
    session = ConsumerSession(
        group, namesrv_addrs, client_id, message_model, consume_type, consume_from_where, remoting,
        subscriptions,
    )  # fmt: skip
    holder.append(session)
    return session
