"""ha: RocketMQ 4.x master/slave replication on its own HA protocol.

- the ``"ha"`` replicator (``[broker] replicator = "ha"``): a master (ASYNC_MASTER or
  SYNC_MASTER) listens on ``haListenPort`` and streams its commit log to every slave; a SYNC_MASTER
  acknowledges a send only once a slave holds it. A SLAVE copies its master's log byte for byte
  and builds its own consume queues and index by dispatch.
- ``trocket_configure``: brokerId rules (0 for masters, > 0 for slaves).
- ``trocket_runtime_figures``: the HA figures ``brokerStatus`` shows.

Controller mode (``[ha] controller_mode = true``, RocketMQ's ``enableControllerMode``): the
same provider builds an :class:`~plugins.ha.auto_switch.AutoSwitchReplicator`, a
:class:`~plugins.ha.controller_agent.ControllerAgent` service takes the role the controller
gives, and ``GET_BROKER_EPOCH_CACHE`` answers the epoch history; see docs/failover.md.

Settings: ``[broker] broker_role`` / ``broker_id`` and ``[ha]``; see docs/ha.md.
"""

from __future__ import annotations

from typing import Any

import orjson

from kernel import ConfigSection, Phase, ServiceSpec, hookimpl
from kernel.config import BrokerConfig
from kernel.context import BrokerContext, StashKey
from kernel.errors import ConfigError
from kernel.model import BrokerRole, MessageBatch, PutStatus, Rejection, ReplicatorProvider
from kernel.providers import RequestHandlerSpec
from plugins.ha.auto_switch import AutoSwitchReplicator
from plugins.ha.config import PROPERTIES, HaConfig
from plugins.ha.controller_agent import ControllerAgent
from plugins.ha.epoch_file import EpochFile
from plugins.ha.replicator import HaReplicator
from wire.remoting import Connection, RemotingCommand, RequestCode, ResponseCode

__all__ = ["HaConfig", "HaReplicator"]

REPLICATOR = StashKey[HaReplicator | AutoSwitchReplicator]("ha.replicator")
AGENT = StashKey[ControllerAgent]("ha.controller_agent")


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("ha", HaConfig, PROPERTIES)]


@hookimpl
def trocket_before_append(batch: MessageBatch, ctx: BrokerContext) -> Rejection | None:
    """``minInSyncReplicas`` (controller mode, SYNC_MASTER): refuse a put that waits for the store
    while the SyncStateSet is smaller, before anything is written (RocketMQ's CommitLog does the
    same); puts with ``WAIT=false`` and ASYNC_MASTER puts go on."""
    replicator = ctx.stash.get(REPLICATOR, None)
    if not isinstance(replicator, AutoSwitchReplicator) or not replicator.is_master:
        return None
    minimum = ctx.plugin_config(HaConfig).min_in_sync_replicas
    if minimum <= 1 or ctx.broker.broker_role is not BrokerRole.SYNC_MASTER:
        return None
    members = replicator.sync_state_set | {replicator.broker_id}
    if len(members) >= minimum or not batch.wait_store_ok:
        return None
    return Rejection(
        PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH,
        f"in-sync replicas not enough: the SyncStateSet {sorted(members)} has {len(members)} of the "
        f"{minimum} minInSyncReplicas requires",
    )


@hookimpl
def trocket_configure(config: BrokerConfig, ctx: BrokerContext) -> None:
    """A slave has ``broker_id`` > 0 and a master 0, as RocketMQ requires; both name the same
    ``broker_name`` so the NameServer pairs them."""
    if "broker" not in config.roles or config.replicator != "ha":
        return
    ha = ctx.plugin_config(HaConfig)
    if ha.controller_mode:
        if config.broker_id <= 0:
            raise ConfigError(
                ctx.config.source,
                "broker.broker_id",
                "in controller mode every replica has its own broker_id > 0 (the master registers as 0)",
            )
        if config.broker_role is BrokerRole.SLAVE:
            raise ConfigError(
                ctx.config.source,
                "broker.broker_role",
                "in controller mode broker_role says how a master acknowledges: SYNC_MASTER or ASYNC_MASTER "
                "(the controller decides who is master)",
            )
        if not ha.controller_addr:
            raise ConfigError(ctx.config.source, "ha.controller_addr", "controller mode needs controllerAddr")
        return
    slave = config.broker_role is BrokerRole.SLAVE
    if slave and config.broker_id == 0:
        raise ConfigError(ctx.config.source, "broker.broker_id", "a SLAVE needs broker_id > 0 (brokerId)")
    if not slave and config.broker_id != 0:
        raise ConfigError(
            ctx.config.source,
            "broker.broker_id",
            f"a {config.broker_role.value} has broker_id 0, got {config.broker_id} "
            '(brokerId > 0 is a slave: set broker_role = "SLAVE")',
        )


@hookimpl
def trocket_register_replicators() -> list[ReplicatorProvider]:
    def make(ctx: BrokerContext, store: object) -> HaReplicator | AutoSwitchReplicator:
        replicator: HaReplicator | AutoSwitchReplicator
        if ctx.plugin_config(HaConfig).controller_mode:
            replicator = AutoSwitchReplicator.make(ctx, store)  # type: ignore[arg-type]
        else:
            replicator = HaReplicator.make(ctx, store)  # type: ignore[arg-type]
        ctx.stash[REPLICATOR] = replicator
        return replicator

    return [
        ReplicatorProvider(
            "ha",
            make,
            "RocketMQ master/slave replication (ASYNC_MASTER, SYNC_MASTER or SLAVE by broker_role)",
        )
    ]


@hookimpl
def trocket_register_services(ctx: BrokerContext) -> list[ServiceSpec]:
    """Controller mode: the agent that registers, heartbeats and switches roles."""
    config = ctx.plugin_config(HaConfig)
    if not config.controller_mode or ctx.broker.replicator != "ha":
        return []

    def make(runtime: Any) -> ControllerAgent:
        replicator = ctx.stash[REPLICATOR]
        assert isinstance(replicator, AutoSwitchReplicator)
        agent = ControllerAgent(runtime, replicator, EpochFile.load(ctx.data_dir), config.controller_addr)
        ctx.stash[AGENT] = agent
        return agent

    return [ServiceSpec("ha.controller_agent", Phase.INGRESS, make, roles=frozenset({"broker"}))]


@hookimpl
def trocket_register_request_handlers(ctx: BrokerContext) -> list[RequestHandlerSpec]:
    async def epoch_cache(runtime: Any, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        """``GET_BROKER_EPOCH_CACHE``: this replica's epoch history, each epoch's end included."""
        agent = ctx.stash.get(AGENT, None)
        end = runtime.store.positions.wrote.value
        entries = agent.epochs.entries(end) if agent is not None else []
        broker = ctx.broker
        body = {
            "clusterName": broker.cluster_name,
            "brokerName": broker.broker_name,
            "brokerId": broker.broker_id,
            "epochList": [entry.to_json() for entry in entries],
            "maxOffset": end,
        }
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    return [RequestHandlerSpec(RequestCode.GET_BROKER_EPOCH_CACHE, "ha", epoch_cache)]


@hookimpl
def trocket_runtime_figures(ctx: BrokerContext) -> dict[str, str]:
    """The HA figures ``brokerStatus`` shows: on a master its ``haAddress``, the slaves'
    connections, the highest acknowledged offset, slaves in sync and the largest lag in bytes;
    on a slave its master's HA address, whether it is connected, and the end it holds."""
    replicator = ctx.stash.get(REPLICATOR, None)
    if replicator is None:
        return {}
    stats = replicator.statistics()
    extra = {}
    if isinstance(replicator, AutoSwitchReplicator):
        extra = {
            "haMasterEpoch": str(replicator.master_epoch),
            "haConfirmOffset": str(replicator.confirmed.value),
            "haSyncStateSet": ",".join(str(i) for i in sorted(replicator.sync_state_set)),
            "haFencedPuts": str(replicator.fenced_puts),
            "haDeposedPuts": str(replicator.deposed_puts),
        }
    figures = {"haConnections": str(len(stats.slaves))}
    if stats.address:
        figures["haAddress"] = stats.address
        figures["haSlaveAckOffset"] = str(stats.acked_offset)
        figures["haInSyncSlaves"] = str(sum(1 for s in stats.slaves if s.in_sync))
        behind = max((s.behind_bytes for s in stats.slaves), default=0)
        figures["haSlaveBehindBytes"] = str(behind)
    if stats.slave_side is not None:
        side = stats.slave_side
        figures["haMasterAddress"] = side.master_address
        figures["haConnected"] = str(side.connected).lower()
        figures["haReceivedEnd"] = str(side.received_end)
    return {**figures, **extra}
