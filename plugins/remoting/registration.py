"""Registration with every NameServer: at start, every ``register_period``, at once when the
topic configuration changes, and an unregister at shutdown (RocketMQ's BrokerOuterAPI).

A master's periodic registration first asks each NameServer whether it holds this broker's
current data version (``QUERY_DATA_VERSION``, which also refreshes the broker's liveness there)
and sends the whole topic table only to those that do not: with 12,500 topics a registration is
1.9 MiB of JSON every 30 s per NameServer, a query a few bytes (RocketMQ's ``needRegister``).
Slaves always register: the answer names their master."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable

import attrs
import orjson
import trio

from kernel.errors import RemotingError
from plugins.remoting.outgoing import OutgoingConnections
from plugins.remoting.topics import TopicConfigManager
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode, parse_bool
from wire.remoting.register_body import encode_register_body

log = logging.getLogger(__name__)
REQUEST_TIMEOUT = 3.0


async def _first(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


@attrs.define(eq=False)
class NameServerRegistration:
    namesrv_addrs: tuple[str, ...]
    cluster: str
    broker_name: str
    broker_id: int
    broker_addr: Callable[[], str]
    topics: TopicConfigManager
    period: float
    ha_address: Callable[[], str] = lambda: ""
    """This broker's HA address (``haServerAddr``), "" without a replicator."""
    on_master: Callable[[str, str], None] = lambda broker_addr, ha_addr: None
    """Called with (master address, master HA address) when the NameServer names them (slaves)."""
    master_addr: str = ""
    """The master's broker address, as the NameServer last named it (slaves)."""
    outgoing: OutgoingConnections = attrs.field(factory=OutgoingConnections)
    compressed: bool = False
    """``compressedRegister``: deflate the body (see ``wire.remoting.register_body``)."""
    permission: Callable[[], int] = lambda: 6
    """``brokerPermission``: without its write (or read) bit every topic registers without it,
    so clients route around this broker (RocketMQ does the same)."""
    registrations: int = 0
    refreshes: int = 0
    """Periodic registrations answered "unchanged" by a NameServer: the topic table was not sent."""
    failures: int = 0
    last_error: str = ""
    _client: RemotingClient | None = None
    _poked: trio.Event = attrs.field(factory=trio.Event)

    def register_now(self, broker_id: int) -> None:
        """Register again at once, as ``broker_id`` (a replica changed role in controller mode)."""
        if broker_id == 0:
            self.master_addr = ""
        self.broker_id = broker_id
        self._poked.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with self.outgoing.open() as client:
            self._client = client
            # The change event is taken before each registration, so a topic created while one
            # is under way (a retry topic on a first heartbeat) is registered right after it,
            # not a register_period later.
            changed = self.topics.changed
            await self.register_all()
            task_status.started()
            while True:
                with trio.move_on_after(self.period) as periodic:
                    async with trio.open_nursery() as wait:
                        for event in (changed, self._poked):
                            wait.start_soon(_first, event, wait.cancel_scope)
                changed = self.topics.changed
                if self._poked.is_set():
                    self._poked = trio.Event()
                await self.register_all(only_if_changed=periodic.cancelled_caught and self.broker_id == 0)

    async def register_all(self, *, only_if_changed: bool = False) -> None:
        """Register with every NameServer; ``only_if_changed``: with those that do not hold
        this broker's current data version (the others had their liveness refreshed)."""
        async with trio.open_nursery() as nursery:
            for addr in self.namesrv_addrs:
                nursery.start_soon(self._register_if_changed if only_if_changed else self._register, addr)

    async def _register_if_changed(self, namesrv: str) -> None:
        assert self._client is not None
        request = RemotingCommand.request(
            RequestCode.QUERY_DATA_VERSION,
            {
                "brokerAddr": self.broker_addr(),
                "brokerId": self.broker_id,
                "brokerName": self.broker_name,
                "clusterName": self.cluster,
            },
            orjson.dumps(self.topics.version.to_json()),
        )
        try:
            response = await self._client.invoke(namesrv, request, REQUEST_TIMEOUT)
        except RemotingError:
            response = None  # the registration says what is wrong
        if (
            response is not None
            and response.code == ResponseCode.SUCCESS
            and not parse_bool(response.ext.get("changed", "true"))
        ):
            self.refreshes += 1
            return
        await self._register(namesrv)

    async def _register(self, namesrv: str) -> None:
        assert self._client is not None
        permission = self.permission()
        topics = {n: c.to_json() for n, c in self.topics.topics.items()}
        if permission & 6 != 6:
            topics = {n: {**c, "perm": int(c.get("perm", 6)) & permission} for n, c in topics.items()}
        body = encode_register_body(self.topics.version.to_json(), topics, compressed=self.compressed)
        request = RemotingCommand.request(
            RequestCode.REGISTER_BROKER,
            {
                "brokerAddr": self.broker_addr(),
                "brokerId": self.broker_id,
                "brokerName": self.broker_name,
                "clusterName": self.cluster,
                "haServerAddr": self.ha_address(),
                "compressed": self.compressed,
                "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF,
            },
            body,
        )
        try:
            response = await self._client.invoke(namesrv, request, REQUEST_TIMEOUT)
        except RemotingError as error:
            self._failed(namesrv, str(error))
            return
        if response.code != ResponseCode.SUCCESS:
            self._failed(namesrv, f"code {response.code}: {response.remark}")
            return
        self.registrations += 1
        master = response.ext.get("masterAddr") or ""
        if master and self.broker_id != 0:
            if master != self.master_addr:
                log.info("master of %s is %s (NameServer %s)", self.broker_name, master, namesrv)
            self.master_addr = master
            self.on_master(master, response.ext.get("haServerAddr") or "")

    def _failed(self, namesrv: str, reason: str) -> None:
        self.failures += 1
        if reason != self.last_error:
            log.warning("registering with NameServer %s failed: %s", namesrv, reason)
        self.last_error = reason

    async def unregister_all(self) -> None:
        if self._client is None:
            return
        client = self._client

        async def one(namesrv: str) -> None:
            request = RemotingCommand.request(
                RequestCode.UNREGISTER_BROKER,
                {
                    "brokerAddr": self.broker_addr(),
                    "brokerId": self.broker_id,
                    "brokerName": self.broker_name,
                    "clusterName": self.cluster,
                },
            )
            try:
                await client.invoke(namesrv, request, REQUEST_TIMEOUT)
            except RemotingError as error:
                log.warning("unregistering from NameServer %s failed: %s", namesrv, error)

        async with trio.open_nursery() as nursery:
            for addr in self.namesrv_addrs:
                nursery.start_soon(one, addr)
