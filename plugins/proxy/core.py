"""What every RPC of the proxy shares: its settings, the remoting client it reaches brokers
and NameServers with, the clients it knows, and the request rules common to all calls."""

from __future__ import annotations

import ipaddress
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import trio

from kernel.access import AccessControl
from kernel.context import BrokerRuntime
from kernel.errors import RemotingError
from kernel.gathered_puts import GatheredPuts
from kernel.model import BrokerRole
from plugins.proxy.config import ProxyConfig
from plugins.proxy.status import Code, ProxyProblem, problem_of
from plugins.proxy.telemetry import DEFAULT_RETRY_MAX_TIMES, ClientRegistry
from trocket.client.errors import ClientError
from trocket.client.routes import RouteCache
from wire.grpc_v2 import definition_pb2 as pb
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

if TYPE_CHECKING:
    from plugins.proxy.consuming import Renewals

log = logging.getLogger(__name__)

CLIENT_ID = "x-mq-client-id"
PRODUCER_GROUP = "TROCKET_PROXY_PRODUCER"
"""The producer group of sends that are not transactional (a transactional one's is its topic,
so the broker's check-back finds the proxy's connection for it)."""
ATTRIBUTES_TTL = 10.0
ROUTE_TTL = 5.0
"""Seconds a topic's route is used before the NameServers are asked again (clients refresh
theirs every 30 s; a broker that stops answering is dropped from it at once)."""


@attrs.frozen
class Route:
    """A topic's route as the proxy uses it: brokers by name, and their queue data."""

    topic: str
    masters: dict[str, str]
    """Broker name → master address (brokers without a live master are absent)."""
    queue_data: list[dict[str, Any]]


@attrs.define(eq=False)
class ProxyCore:
    config: ProxyConfig
    remoting: RemotingClient
    routes: RouteCache
    advertised: tuple[str, int]
    renewals: Renewals
    access_control: Callable[[], AccessControl | None] = lambda: None
    """The broker's ACL when a plugin enforces one (``kernel.access``)."""
    local: BrokerRuntime | None = None
    """The broker this proxy runs beside, if any: sends to it skip the loopback round trip."""
    in_process: Mapping[int, Callable[[RemotingCommand], Awaitable[RemotingCommand | None]]] = attrs.field(
        factory=dict
    )
    """Request codes the ``local`` broker answers in process (``RequestHandlerSpec.in_process``:
    POP, acks, invisible-time changes), without a loopback remoting round trip."""
    clients: ClientRegistry = attrs.field(factory=ClientRegistry)
    served_in_process: int = 0
    """Requests the broker beside the proxy answered in process (:meth:`invoke_broker`)."""
    producer_group: str = PRODUCER_GROUP
    client_id_of_proxy: str = "trocket-proxy"
    _attributes: dict[str, tuple[float, dict[str, str]]] = attrs.field(factory=dict)
    _route_cache: dict[str, tuple[float, Route]] = attrs.field(factory=dict)
    _groups: dict[str, tuple[float, dict[str, Any]]] = attrs.field(factory=dict)
    local_puts: GatheredPuts | None = attrs.field(default=None, init=False)
    """Sends to ``local``, put together when they arrive together (``kernel.gathered_puts``)."""

    def __attrs_post_init__(self) -> None:
        if self.local is not None:
            self.local_puts = GatheredPuts(self.local.put_group)

    def client_id(self, metadata: Mapping[str, str]) -> str:
        """:raises ProxyProblem: CLIENT_ID_REQUIRED when the header is missing."""
        client_id = metadata.get(CLIENT_ID, "")
        if not client_id:
            raise ProxyProblem(Code.CLIENT_ID_REQUIRED, f"the {CLIENT_ID} header is required")
        self.clients.touch(client_id, metadata)
        return client_id

    async def route(self, topic: str) -> Route:
        """The topic's route, from the NameServers at most every :data:`ROUTE_TTL` seconds.

        :raises ProxyProblem: TOPIC_NOT_FOUND, or INTERNAL_SERVER_ERROR without a NameServer.
        """
        cached = self._route_cache.get(topic)
        if cached is not None and time.monotonic() - cached[0] < ROUTE_TTL:
            return cached[1]
        route = await self._fetch_route(topic)
        self._route_cache[topic] = (time.monotonic(), route)
        return route

    def forget_route(self, topic: str) -> None:
        self._route_cache.pop(topic, None)

    async def _fetch_route(self, topic: str) -> Route:
        try:
            data = await self.routes.route(topic)
        except ClientError as error:
            raise ProxyProblem(Code.INTERNAL_SERVER_ERROR, str(error)) from None
        if data is None:
            raise ProxyProblem(Code.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist")
        masters = {
            b["brokerName"]: b["brokerAddrs"]["0"]
            for b in data.get("brokerDatas", [])
            if "0" in b["brokerAddrs"]
        }
        return Route(topic, masters, list(data.get("queueDatas", [])))

    async def broker_address(self, topic: str, broker_name: str) -> str:
        route = await self.route(topic)
        address = route.masters.get(broker_name)
        if address is None:
            raise ProxyProblem(
                Code.NOT_FOUND, f"broker {broker_name!r} has no live master serving topic {topic!r}"
            )
        return address

    async def invoke(
        self, address: str, request: RemotingCommand, what: str, timeout: float | None = None
    ) -> Any:
        """A remoting call whose transport failure is an INTERNAL_SERVER_ERROR (never a traceback)."""
        try:
            return await self.remoting.invoke(address, request, timeout or self.config.request_timeout)
        except RemotingError as error:
            raise ProxyProblem(Code.INTERNAL_SERVER_ERROR, f"{what}: broker {address}: {error}") from None

    def is_local_master(self, broker_name: str) -> bool:
        """Whether ``broker_name``'s master is the broker beside this proxy, which then takes
        sends and POP requests in process. A slave of that name is not: it refuses puts and
        pops (they go to the master over remoting, as from a proxy of its own)."""
        local = self.local
        return (
            local is not None
            and local.role is not BrokerRole.SLAVE
            and local.ctx.broker.broker_name == broker_name
        )

    async def invoke_broker(
        self,
        broker_name: str,
        address: str,
        request: RemotingCommand,
        what: str,
        timeout: float | None = None,
    ) -> Any:
        """:meth:`invoke` on the master of ``broker_name`` at ``address``, answered in process
        when that master is the broker beside the proxy and it serves the code so."""
        serve = self.in_process.get(request.code)
        if serve is None or not self.is_local_master(broker_name):
            return await self.invoke(address, request, what, timeout)
        self.served_in_process += 1
        with trio.move_on_after(timeout or self.config.request_timeout) as waited:
            try:
                response = await serve(request)
            except Exception as error:  # noqa: BLE001 - answered as the broker's port would
                log.exception("%s: the broker beside the proxy failed", what)
                return request.response(ResponseCode.SYSTEM_ERROR, remark=f"{type(error).__name__}: {error}")
        if waited.cancelled_caught:
            raise ProxyProblem(Code.INTERNAL_SERVER_ERROR, f"{what}: broker {broker_name}: no answer in time")
        if response is None:
            raise ProxyProblem(Code.INTERNAL_SERVER_ERROR, f"{what}: broker {broker_name} gave no answer")
        return response

    async def invoke_broker_ok(
        self, broker_name: str, address: str, request: RemotingCommand, what: str
    ) -> RemotingCommand:
        """:meth:`invoke_broker`, a refusal raised as the matching :class:`ProxyProblem`."""
        response = await self.invoke_broker(broker_name, address, request, what)
        if response.code != ResponseCode.SUCCESS:
            raise problem_of(response.code, response.remark, what)
        return response

    def endpoints(self) -> pb.Endpoints:
        host, port = self.advertised
        try:
            scheme = pb.IPv4 if ipaddress.ip_address(host).version == 4 else pb.IPv6
        except ValueError:
            scheme = pb.DOMAIN_NAME
        return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])

    async def topic_attributes(self, topic: str, route: Route) -> dict[str, str]:
        """The topic's attributes as a master has them (``GET_TOPIC_CONFIG``), kept for
        :data:`ATTRIBUTES_TTL` seconds; empty when no master answers."""
        cached = self._attributes.get(topic)
        if cached is not None and time.monotonic() - cached[0] < ATTRIBUTES_TTL:
            return cached[1]
        attributes: dict[str, str] = {}
        for address in sorted(route.masters.values()):
            request = RemotingCommand.request(RequestCode.GET_TOPIC_CONFIG, {"topic": topic})
            try:
                response = await self.remoting.invoke(address, request, self.config.request_timeout)
            except RemotingError:
                continue
            if response.code == ResponseCode.SUCCESS:
                try:
                    attributes = dict(json.loads(response.body).get("attributes") or {})
                except (ValueError, AttributeError):
                    attributes = {}
                break
        self._attributes[topic] = (time.monotonic(), attributes)
        return attributes

    async def group_config(self, group: str, topic: str) -> dict[str, Any]:
        """The subscription group's configuration as the topic's first answering master has it
        (``GET_SUBSCRIPTIONGROUP_CONFIG``), kept :data:`ATTRIBUTES_TTL` seconds; empty when the
        group does not exist yet (brokers create it with defaults on first use)."""
        cached = self._groups.get(group)
        if cached is not None and time.monotonic() - cached[0] < ATTRIBUTES_TTL:
            return cached[1]
        config: dict[str, Any] = {}
        try:
            masters = (await self.route(topic)).masters
        except ProxyProblem:
            masters = {}
        for address in sorted(masters.values()):
            request = RemotingCommand.request(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": group})
            try:
                response = await self.remoting.invoke(address, request, self.config.request_timeout)
            except RemotingError:
                continue
            if response.code == ResponseCode.SUCCESS:
                try:
                    config = dict(json.loads(response.body))
                except (ValueError, TypeError):
                    config = {}
                break
            if response.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                break
        self._groups[group] = (time.monotonic(), config)
        return config

    async def retry_max_times(self, group: str, topic: str) -> int:
        """The group's ``retryMaxTimes`` (RocketMQ's default 16 for a group not created yet)."""
        return int((await self.group_config(group, topic)).get("retryMaxTimes", DEFAULT_RETRY_MAX_TIMES))

    async def fifo(self, group: str, topic: str) -> bool:
        """Whether the group consumes FIFO (``consumeMessageOrderly``): its receives pop orderly."""
        return bool((await self.group_config(group, topic)).get("consumeMessageOrderly", False))

    def forget_client(self, client_id: str) -> None:
        self.clients.forget(client_id)
        self.renewals.forget_client(client_id)

    async def producers_changed(self) -> None:
        """Tell the brokers of every topic a connected client publishes that this proxy is a
        producer of it (so transaction check-backs reach the proxy)."""
        from plugins.proxy.producing import producer_heartbeat

        topics = sorted(self.clients.producer_topics())
        if not topics:
            return
        brokers: set[str] = set()
        for topic in topics:
            try:
                brokers.update((await self.route(topic)).masters.values())
            except ProxyProblem:
                continue
        request = producer_heartbeat(self.client_id_of_proxy, topics)
        for address in sorted(brokers):
            try:
                await self.remoting.invoke(address, request, self.config.request_timeout)
            except RemotingError as error:
                log.info("proxy heartbeat to %s failed: %s", address, error)


def now_ms() -> int:
    return int(time.time() * 1000)
