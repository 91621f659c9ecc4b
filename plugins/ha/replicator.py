"""The ``ha`` replicator: one object per broker, acting by ``brokerRole``.

- ASYNC_MASTER: serves slaves; a put never waits for them.
- SYNC_MASTER: serves slaves; a put that asked to wait (``WAIT`` not false) waits until a slave
  acknowledged its end offset, up to ``sync_timeout``: ``FLUSH_SLAVE_TIMEOUT`` past it, and
  ``SLAVE_NOT_AVAILABLE`` at once when no slave is within ``max_gap_not_in_sync`` (RocketMQ's
  ``handleHA``).
- SLAVE: copies the master's log; takes no puts (the kernel refuses them).
"""

from __future__ import annotations

from typing import Any

import attrs
import trio

from kernel.context import BrokerContext
from kernel.errors import ConfigError
from kernel.latency import LatencyHistogram, LatencySnapshot
from kernel.model import AppendResult, BrokerRole, Replication
from kernel.protocols import MessageStore, ReplicableStore
from kernel.tls_config import client_tls, server_tls
from plugins.ha.config import HaConfig
from plugins.ha.master import HaServer, SlaveStatistics
from plugins.ha.slave import HaClient, SlaveSideStatistics


@attrs.frozen
class HaStatistics:
    role: str
    address: str
    """Where this master listens for slaves ("" on a slave)."""
    slaves: list[SlaveStatistics]
    acked_offset: int
    """The highest offset a slave acknowledged (masters)."""
    slave_side: SlaveSideStatistics | None
    replication_latency: LatencySnapshot | None = None
    """How long a SYNC_MASTER's puts waited for a slave's acknowledgement (puts answered at
    once for want of an in-sync slave are not waits and are left out)."""


@attrs.define(eq=False)
class HaReplicator:
    """See the module docstring."""

    role: BrokerRole
    config: HaConfig
    server: HaServer | None = None
    client: HaClient | None = None
    name: str = "ha"
    _latency: LatencyHistogram = attrs.field(factory=LatencyHistogram, init=False)

    @classmethod
    def make(cls, ctx: BrokerContext, store: MessageStore) -> HaReplicator:
        config = ctx.plugin_config(HaConfig)
        if not isinstance(store, ReplicableStore):
            raise ConfigError(
                ctx.config.source,
                "broker.replicator",
                f"the ha replicator needs a store that can copy its log byte for byte; store "
                f"{ctx.broker.store!r} cannot",
            )
        role = ctx.broker.broker_role
        if role is BrokerRole.SLAVE:
            return cls(role, config, client=HaClient(store, config, tls=client_tls(ctx.config)))
        port = config.listen_port if config.listen_port is not None else ctx.broker.listen_port + 1
        server = HaServer(store, store, config, ctx.broker.listen_host, port, tls=server_tls(ctx.config))
        return cls(role, config, server=server)

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        service = self.server if self.server is not None else self.client
        assert service is not None
        await service.run(task_status=task_status)

    async def wait_replicated(self, result: AppendResult, *, wait: bool) -> Replication:
        server = self.server
        if self.role is not BrokerRole.SYNC_MASTER or not wait or server is None:
            return Replication.NOT_REQUIRED
        if not server.slave_in_sync(result.end_offset):
            return Replication.NO_REPLICA
        started = trio.current_time()
        acked = await server.wait_acked(result.end_offset, self.config.sync_timeout)
        self._latency.observe(trio.current_time() - started)
        return Replication.REPLICATED if acked else Replication.TIMEOUT

    def ha_address(self) -> str:
        return self.server.address if self.server is not None else ""

    def master_learned(self, broker_addr: str, ha_addr: str) -> None:
        if self.client is not None:
            self.client.set_master(ha_addr)

    def runtime_info(self) -> dict[str, Any]:
        """RocketMQ 5's ``HARuntimeInfo`` (``GET_BROKER_HA_STATUS``, mqadmin ``haStatus``)."""
        if self.server is not None:
            end = self.server.store.positions.wrote.value
            slaves = self.server.statistics()
            return {
                "master": True,
                "masterCommitLogMaxOffset": end,
                "inSyncSlaveNums": sum(1 for s in slaves if s.in_sync),
                "haConnectionInfo": [
                    {
                        "addr": s.address,
                        "slaveAckOffset": s.ack_offset,
                        "diff": s.behind_bytes,
                        "inSync": s.in_sync,
                        "transferredBytes": s.transferred_bytes,
                    }
                    for s in slaves
                ],
            }
        assert self.client is not None
        side = self.client.statistics()
        return {
            "master": False,
            "haClientRuntimeInfo": {
                "masterAddr": side.master_address,
                "connected": side.connected,
                "maxOffset": side.received_end,
                "receivedBytes": side.received_bytes,
                "lastError": side.last_error,
            },
        }

    def statistics(self) -> HaStatistics:
        server = self.server
        return HaStatistics(
            self.role.value,
            self.ha_address(),
            server.statistics() if server is not None else [],
            server.acked.value if server is not None else 0,
            self.client.statistics() if self.client is not None else None,
            self._latency.snapshot(),
        )
