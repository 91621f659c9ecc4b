"""ha: RocketMQ 4.x master/slave replication on its own HA protocol.

- the ``"ha"`` replicator (``[broker] replicator = "ha"``): a master (ASYNC_MASTER or
  SYNC_MASTER) listens on ``haListenPort`` and streams its commit log to every slave; a SYNC_MASTER
  acknowledges a send only once a slave holds it. A SLAVE copies its master's log byte for byte
  and builds its own consume queues and index by dispatch.
- ``trocket_configure``: brokerId rules (0 for masters, > 0 for slaves).
- ``trocket_runtime_figures``: the HA figures ``brokerStatus`` shows.

Settings: ``[broker] broker_role`` / ``broker_id`` and ``[ha]``; see docs/ha.md.
"""

from __future__ import annotations

from kernel import ConfigSection, hookimpl
from kernel.config import BrokerConfig
from kernel.context import BrokerContext, StashKey
from kernel.errors import ConfigError
from kernel.model import BrokerRole, ReplicatorProvider
from plugins.ha.config import PROPERTIES, HaConfig
from plugins.ha.replicator import HaReplicator

__all__ = ["HaConfig", "HaReplicator"]

REPLICATOR = StashKey[HaReplicator]("ha.replicator")


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("ha", HaConfig, PROPERTIES)]


@hookimpl
def trocket_configure(config: BrokerConfig, ctx: BrokerContext) -> None:
    """A slave has ``broker_id`` > 0 and a master 0, as RocketMQ requires; both name the same
    ``broker_name`` so the NameServer pairs them."""
    if "broker" not in config.roles or config.replicator != "ha":
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
    def make(ctx: BrokerContext, store: object) -> HaReplicator:
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
def trocket_runtime_figures(ctx: BrokerContext) -> dict[str, str]:
    """The HA figures ``brokerStatus`` shows: on a master its ``haAddress``, the slaves'
    connections, the highest acknowledged offset, slaves in sync and the largest lag in bytes;
    on a slave its master's HA address, whether it is connected, and the end it holds."""
    replicator = ctx.stash.get(REPLICATOR, None)
    if replicator is None:
        return {}
    stats = replicator.statistics()
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
    return figures
