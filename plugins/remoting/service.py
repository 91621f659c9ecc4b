"""The broker's network service: a remoting server plus the state its handlers share.

Started in the INGRESS phase (after the store recovered and dispatch runs). At stop it
unregisters from every NameServer and writes topics, subscription groups and consumer
offsets before its connections close.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Iterable, Iterator

import attrs
import trio

from kernel import runtime_settings
from kernel.consumer_progress import GroupSettings, QueueProgress
from kernel.context import REQUEST_METERS, BrokerRuntime, StashKey
from kernel.errors import PluginError
from kernel.model import BrokerRole, flatten
from kernel.tls_config import client_tls, inner_credentials, server_tls
from kernel.topics import TopicQueues
from plugins.remoting.clients import ClientManager
from plugins.remoting.config import PROPERTIES, RUNTIME_KEYS, RemotingConfig
from plugins.remoting.locks import QueueLocks
from plugins.remoting.lone_sends import LoneSends
from plugins.remoting.long_polling import PullWaiters
from plugins.remoting.offsets import ConsumerOffsetManager
from plugins.remoting.outgoing import OutgoingConnections
from plugins.remoting.registration import NameServerRegistration
from plugins.remoting.request_modes import RequestModes
from plugins.remoting.slave_sync import SlaveSynchronizer
from plugins.remoting.stats import BrokerStats
from plugins.remoting.subscriptions import SubscriptionGroupManager
from plugins.remoting.topics import PERM_READ, PERM_WRITE, TopicConfig, TopicConfigManager
from wire.remoting import Connection, RemotingServer, Router, TransportLimits, code_name

log = logging.getLogger(__name__)


@attrs.define(eq=False)
class BrokerNetwork:
    runtime: BrokerRuntime
    config: RemotingConfig
    topics: TopicConfigManager
    offsets: ConsumerOffsetManager
    groups: SubscriptionGroupManager
    clients: ClientManager = attrs.field(factory=ClientManager)
    waiters: PullWaiters = attrs.field(factory=PullWaiters)
    locks: QueueLocks = attrs.field(factory=QueueLocks)
    request_modes: RequestModes | None = None
    """PULL or POP per (topic, group), for QUERY_ASSIGNMENT."""
    outgoing: OutgoingConnections = attrs.field(factory=OutgoingConnections)
    """How the broker's own requests travel (TLS, ACL signature)."""
    server: RemotingServer | None = None
    registration: NameServerRegistration | None = None
    started_at: float = 0.0
    boot_timestamp: int = 0
    messages_pulled: int = 0
    """Messages answered to pulls since the start (``getMessageTimesTotal``: out TPS by difference)."""
    stats: BrokerStats = attrs.field(factory=BrokerStats)
    """Put and get counts per topic and group over the last minute, hour and day (statsAll)."""
    lone_sends: LoneSends = attrs.field(
        default=attrs.Factory(
            lambda self: LoneSends(self.runtime.put_group, self.runtime.put), takes_self=True
        )
    )
    """Single sends of different connections, put together while several send."""

    @classmethod
    def make(cls, runtime: BrokerRuntime) -> BrokerNetwork:
        ctx = runtime.ctx
        broker = ctx.broker
        config = ctx.plugin_config(RemotingConfig)
        config_dir = ctx.data_dir / "config"
        topics = TopicConfigManager.load(
            config_dir / "topics.json",
            cluster=broker.cluster_name,
            broker_name=broker.broker_name,
            auto_create=broker.auto_create_topic_enable,
            trace_topic=config.msg_trace_topic_name if config.trace_topic_enable else None,
        )
        return cls(
            runtime,
            config,
            topics,
            ConsumerOffsetManager.load(config_dir / "consumerOffset.json"),
            SubscriptionGroupManager.load(config_dir / "subscriptionGroup.json"),
            locks=QueueLocks(config.lock_expiry),
            request_modes=RequestModes.load(config_dir / "messageRequestMode.json"),
            outgoing=OutgoingConnections(client_tls(ctx.config), inner_credentials(ctx.config)),
        )

    def queues(self) -> Iterator[QueueProgress]:
        """:class:`kernel.consumer_progress.ConsumerProgress`: what ``GET_CONSUME_STATS``
        reports, for every group with committed offsets."""
        for key in list(self.offsets.table):
            topic, _, group = key.partition("@")
            config = self.topics.get(topic)
            if config is None:
                continue
            committed = self.offsets.queues(group, topic)
            pulled = self.offsets.pulled_queues(group, topic)
            for queue_id in range(config.write_queue_nums):
                yield QueueProgress(
                    group, topic, queue_id, committed.get(queue_id, 0), pulled.get(queue_id, -1)
                )

    @property
    def broker_addr(self) -> str:
        broker = self.runtime.ctx.broker
        port = self.server.port if self.server is not None else broker.listen_port
        return f"{broker.listen_host}:{port}"

    @property
    def writable(self) -> bool:
        return bool(self.config.broker_permission & 2)

    @property
    def readable(self) -> bool:
        return bool(self.config.broker_permission & 4)

    def router(self) -> Router:
        from plugins.remoting.handlers import register_all

        ctx = self.runtime.ctx
        meters = ctx.stash.get(REQUEST_METERS, None)
        router = Router(name="broker", meter=meters.meter("broker") if meters is not None else None)
        register_all(router, self)
        claimed: dict[int, str] = {}
        for spec in flatten(ctx.hook.trocket_register_request_handlers(ctx=ctx)):
            if spec.code in router.handlers:
                owner = claimed.get(spec.code, "the remoting plugin")
                raise PluginError(
                    f"plugin {spec.name} registers a handler for {code_name(spec.code)}, "
                    f"which {owner} already answers"
                )
            router.register(spec.code, functools.partial(spec.handle, self.runtime))
            claimed[spec.code] = spec.name
        router.guards.extend(
            spec.check for spec in flatten(ctx.hook.trocket_register_request_guards(ctx=ctx))
        )
        return router

    async def run(self, *, task_status: trio.TaskStatus[BrokerNetwork] = trio.TASK_STATUS_IGNORED) -> None:
        broker = self.runtime.ctx.broker
        self.started_at = trio.current_time()
        self.boot_timestamp = int(time.time() * 1000)
        self.server = RemotingServer(
            "broker",
            broker.listen_host,
            broker.listen_port,
            self.router(),
            TransportLimits(
                self.config.max_frame_size,
                self.config.max_in_flight,
                self.config.max_connections,
                idle_timeout=self.config.channel_max_idle_time,
                frame_timeout=self.config.frame_read_timeout,
            ),
            on_close=[self._connection_closed],
            tls=server_tls(self.runtime.ctx.config),
            busy_poll=self.config.busy_poll,
            read_reactor=self.config.read_reactor,
        )
        await self.topics.persist()
        runtime_settings.offer(self.runtime.ctx, self._runtime_settings())
        async with trio.open_nursery() as nursery:
            await nursery.start(self.server.run)
            self.registration = NameServerRegistration(
                broker.namesrv_addr,
                broker.cluster_name,
                broker.broker_name,
                broker.broker_id,
                lambda: self.broker_addr,
                self.topics,
                self.config.register_period,
                ha_address=self._ha_address,
                on_master=self._master_learned,
                outgoing=self.outgoing,
                compressed=self.config.compressed_register,
                permission=lambda: self.config.broker_permission,
            )
            if broker.namesrv_addr:
                await nursery.start(self.registration.run)
            if self.runtime.role is BrokerRole.SLAVE or self._controller_mode():
                nursery.start_soon(SlaveSynchronizer(self).run)
            nursery.start_soon(self._persist_offsets_loop)
            nursery.start_soon(self._expire_channels_loop)
            task_status.started(self)

    def _runtime_settings(self) -> list[runtime_settings.RuntimeSetting]:
        """The ``[remoting]`` settings read where they are used, so ``updateBrokerConfig`` can
        change them in place; a new brokerPermission is registered with the NameServers at once
        (topics masked by it, as RocketMQ does, so clients stop routing writes here)."""

        def replace(config: RemotingConfig) -> None:
            self.config = config

        def permission_changed() -> None:
            self.topics.version.bump()
            if self.registration is not None:
                self.registration.register_now(self.registration.broker_id)

        return [
            runtime_settings.table_setting(
                self.runtime.ctx,
                key,
                PROPERTIES[key],
                lambda: self.config,
                replace,
                permission_changed if key == "brokerPermission" else lambda: None,
            )  # fmt: skip
            for key in RUNTIME_KEYS
        ]

    async def drain(self) -> None:
        """Graceful stop: leave the NameServers first (clients stop routing here), then write
        the state files while connections are still up."""
        if self.registration is not None:
            with trio.move_on_after(5):
                await self.registration.unregister_all()
        await self.persist_all()

    async def persist_all(self) -> None:
        self.offsets.dirty = True
        await self.offsets.persist()
        await self.topics.persist()
        await self.groups.persist()

    async def _persist_offsets_loop(self) -> None:
        writes = self.runtime.ctx.background_writes
        await writes.every(self.config.offset_persist_interval, str(self.offsets.path), self.offsets.persist)

    async def _expire_channels_loop(self) -> None:
        while True:
            await trio.sleep(self.config.channel_scan_interval)
            self.stats.sweep(trio.current_time())
            for client_id in self.clients.expire(trio.current_time(), self.config.channel_expiry):
                log.warning(
                    "client %s dropped: no heartbeat for %.0fs", client_id, self.config.channel_expiry
                )

    def _controller_mode(self) -> bool:
        """Whether this broker's role may change at run time (a replicator that confirms)."""
        return getattr(self.runtime.replicator, "confirmed", None) is not None

    def role_changed(self, role: BrokerRole) -> None:
        replicator = self.runtime.replicator
        if role is not BrokerRole.SLAVE and replicator is not None and self._controller_mode():
            # The master epoch goes out as the registration's stateVersion (RocketMQ does the
            # same): NameServers then refuse the older master's registrations as brokerId 0.
            epoch = int(replicator.runtime_info().get("masterEpoch", 0) or 0)
            self.topics.version.next_state(epoch)
        if self.registration is not None:
            broker_id = 0 if role is not BrokerRole.SLAVE else self.runtime.ctx.broker.broker_id
            self.registration.register_now(broker_id)

    def _ha_address(self) -> str:
        replicator = self.runtime.replicator
        return replicator.ha_address() if replicator is not None else ""

    def _master_learned(self, broker_addr: str, ha_addr: str) -> None:
        replicator = self.runtime.replicator
        if replicator is not None:
            replicator.master_learned(broker_addr, ha_addr)

    @property
    def is_slave(self) -> bool:
        return self.runtime.role is BrokerRole.SLAVE

    def learn_topics(self, queues: Iterable[tuple[str, int]]) -> None:
        """A slave serves every topic its log holds: one its master auto-created since the last
        metadata sync gets a readable config from the queues its records touched (replaced by
        the master's at the next sync), so consumers that moved to the slave are not told it
        does not exist."""
        unknown: dict[str, int] = {}
        topics = self.topics.topics
        for topic, queue_id in queues:
            config = topics.get(topic)
            if config is None or queue_id >= config.read_queue_nums:
                unknown[topic] = max(unknown.get(topic, 0), queue_id + 1)
        for topic, queues in unknown.items():
            known = topics.get(topic)
            count = max(queues, self.runtime.ctx.broker.default_topic_queue_nums)
            if known is not None:
                count = max(count, known.read_queue_nums)
            self.topics.update(TopicConfig(topic, count, count))

    def in_memory(self, physical_offset: int) -> bool:
        """Whether the log from ``physical_offset`` to its end fits RocketMQ's in-memory share
        of RAM (``accessMessageInMemoryMaxRatio``)."""
        return self.runtime.store.watermarks().wrote - physical_offset < _physical_memory() * (
            self.config.access_message_in_memory_max_ratio / 100
        )

    def _connection_closed(self, connection: Connection) -> None:
        self.clients.connection_closed(connection)

    async def topics_changed(self) -> None:
        await self.topics.persist()

    def topic_queues(self, topic: str) -> TopicQueues | None:
        """:class:`kernel.topics.TopicDirectory`: a topic's queue counts and permissions."""
        config = self.topics.get(topic)
        if config is None:
            return None
        return TopicQueues(
            config.read_queue_nums,
            config.write_queue_nums,
            bool(config.perm & PERM_READ),
            bool(config.perm & PERM_WRITE),
        )

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """:class:`kernel.consumer_progress.ConsumerOffsets`."""
        return self.offsets.query(group, topic, queue_id)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.offsets.commit(group, topic, queue_id, offset)

    def group_settings(self, group: str) -> GroupSettings | None:
        config = self.groups.find_or_create(group, auto_create=self.config.auto_create_subscription_group)
        if config is None:
            return None
        return GroupSettings(config.consume_enable, config.retry_max_times)

    async def create_system_topic(self, topic: str, queue_nums: int) -> None:
        """A topic the broker writes and clients read (:class:`kernel.topics.TopicDirectory`,
        for plugins): created readable and writable, persisted and, through the table's change
        event, registered with the NameServers."""
        if self.topics.get(topic) is None:
            self.topics.create_system_topic(topic, queue_nums, PERM_READ | PERM_WRITE)
            await self.topics_changed()


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 1 << 30


NETWORK = StashKey[BrokerNetwork]("remoting.network")
"""The running network service of a broker (tests and hooks find it here)."""
