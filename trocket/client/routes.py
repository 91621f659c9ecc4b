"""Topic routes as a producer uses them: the writable queues of each master, refreshed from the
NameServers (RocketMQ's ``TopicPublishInfo`` and ``pollNameServerInterval``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from kernel.errors import RemotingError
from kernel.model import MessageQueue
from trocket.client.errors import ClientError
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

PERM_READ = 4
PERM_WRITE = 2
DEFAULT_TOPIC = "TBW102"
"""The template topic brokers that auto-create topics register (RocketMQ's name)."""
ROUTE_TTL = 30.0
"""Seconds a route is used before it is asked for again (``pollNameServerInterval``)."""


@attrs.frozen
class PublishInfo:
    queues: tuple[MessageQueue, ...]
    """Writable queues, by broker name then queue id."""
    addresses: dict[str, str]
    """Broker name → master address."""
    auto_create: bool = False
    """Built from ``TBW102``: the topic does not exist yet and the broker creates it."""


def publish_info(topic: str, route: dict[str, Any], *, queue_limit: int | None = None) -> PublishInfo:
    addresses = master_addresses(route)
    queues = []
    for data in sorted(route["queueDatas"], key=lambda d: d["brokerName"]):
        if not data["perm"] & PERM_WRITE or data["brokerName"] not in addresses:
            continue
        count = data["writeQueueNums"] if queue_limit is None else min(queue_limit, data["writeQueueNums"])
        queues += [MessageQueue(topic, data["brokerName"], i) for i in range(count)]
    return PublishInfo(tuple(queues), addresses, auto_create=queue_limit is not None)


def publish_info_from(
    topic: str, route: dict[str, Any] | None, template: dict[str, Any] | None, queue_nums: int
) -> PublishInfo:
    """The topic's publish info from its route, or (``route`` ``None``: the topic does not exist
    yet) from the ``TBW102`` template of brokers that auto-create topics, ``queue_nums`` queues
    per broker.

    :raises ClientError: neither gives a writable queue.
    """
    if route is not None:
        info = publish_info(topic, route)
    elif template is not None:
        info = publish_info(topic, template, queue_limit=queue_nums)
    else:
        raise ClientError(f"topic {topic!r} has no route and no broker auto-creates topics")
    if not info.queues:
        raise ClientError(f"topic {topic!r} has no writable queue on any live master")
    return info


def route_request(topic: str) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})


def route_answer(
    address: str, response: RemotingCommand, errors: list[str]
) -> tuple[bool, dict[str, Any] | None]:
    """What a NameServer's answer to :func:`route_request` says: ``(True, route)``,
    ``(True, None)`` for a topic that does not exist, or ``(False, None)`` with the problem
    appended to ``errors`` (ask the next NameServer)."""
    if response.code == ResponseCode.TOPIC_NOT_EXIST:
        return True, None
    if response.code == ResponseCode.SUCCESS:
        return True, dict(json.loads(response.body))
    errors.append(f"{address}: code {response.code} {response.remark or ''}")
    return False, None


def subscribe_queues(topic: str, route: dict[str, Any]) -> tuple[MessageQueue, ...]:
    """The readable queues of ``topic``, sorted by broker name then queue id (what a consumer
    rebalances over, RocketMQ's ``topicSubscribeInfoTable``)."""
    queues = []
    for data in sorted(route["queueDatas"], key=lambda d: d["brokerName"]):
        if data["perm"] & PERM_READ:
            queues += [MessageQueue(topic, data["brokerName"], i) for i in range(data["readQueueNums"])]
    return tuple(queues)


def master_addresses(route: dict[str, Any]) -> dict[str, str]:
    return {b["brokerName"]: b["brokerAddrs"]["0"] for b in route["brokerDatas"] if "0" in b["brokerAddrs"]}


def reading_addresses(route: dict[str, Any]) -> dict[str, str]:
    """Broker name → where to read: the master, or while it is down the slave with the lowest
    id (RocketMQ's ``findBrokerAddressInSubscribe`` falls back to any replica of the name)."""
    out = {}
    for data in route["brokerDatas"]:
        addrs = data["brokerAddrs"]
        if addrs:
            out[data["brokerName"]] = addrs["0"] if "0" in addrs else addrs[min(addrs, key=int)]
    return out


@attrs.define(eq=False)
class RouteCache:
    remoting: RemotingClient
    namesrv_addrs: Sequence[str]
    default_topic_queue_nums: int = 4
    timeout: float = 3.0
    _cache: dict[str, tuple[float, PublishInfo]] = attrs.field(factory=dict, init=False)

    async def publish_info(self, topic: str, *, refresh: bool = False) -> PublishInfo:
        cached = self._cache.get(topic)
        if cached and not refresh and trio.current_time() - cached[0] < ROUTE_TTL:
            return cached[1]
        route = await self.route(topic)
        template = await self.route(DEFAULT_TOPIC) if route is None else None
        info = publish_info_from(topic, route, template, self.default_topic_queue_nums)
        self._cache[topic] = (trio.current_time(), info)
        return info

    def known_addresses(self) -> set[str]:
        """Every master address of the routes cached for sending."""
        return {address for _, info in self._cache.values() for address in info.addresses.values()}

    def forget(self, topic: str) -> None:
        self._cache.pop(topic, None)

    async def subscribe_info(self, topic: str) -> tuple[tuple[MessageQueue, ...], dict[str, str]]:
        """The topic's readable queues and where to read each broker's (its master, or a slave
        while the master is down), asked afresh (a consumer calls this at each rebalance,
        every 20 s, and when a broker stops answering).

        :raises ClientError: when the topic does not exist or no NameServer answers.
        """
        route = await self.route(topic)
        if route is None:
            raise ClientError(f"topic {topic!r} does not exist (no route on the NameServer)")
        return subscribe_queues(topic, route), reading_addresses(route)

    async def route(self, topic: str) -> dict[str, Any] | None:
        """The NameServers' route data of ``topic`` (``TopicRouteData`` as JSON), ``None`` when it
        does not exist.

        :raises ClientError: no NameServer answered.
        """
        errors: list[str] = []
        for address in self.namesrv_addrs:
            try:
                response = await self.remoting.invoke(address, route_request(topic), self.timeout)
            except RemotingError as error:
                errors.append(str(error))
                continue
            found, route = route_answer(address, response, errors)
            if found:
                return route
        raise ClientError(f"no NameServer answered for topic {topic!r}: {'; '.join(errors)}")
