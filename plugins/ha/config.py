"""``[ha]``: RocketMQ's master/slave replication settings (``haListenPort`` and friends)."""

from __future__ import annotations

import attrs

from kernel.config import fields
from kernel.config import property_aliases as rocketmq


def _optional_address(value: object) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"expected 'host:port', got {value!r}")
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected 'host:port', got {value!r}")
    return value


@attrs.frozen(kw_only=True)
class HaConfig:
    listen_port: int | None = fields.optional_integer(minimum=0, maximum=65535)
    """``haListenPort``: where a master waits for its slaves; default ``[broker] listen_port``
    + 1 (10912), 0 picks a free port. Listens on ``[broker] listen_host``."""
    master_address: str | None = attrs.field(default=None, converter=_optional_address)
    """``haMasterAddress``: the master's HA address for a slave. Default: learned from the
    NameServer's answer to the slave's registration (the master's ``haServerAddr``)."""
    transfer_batch_size: int = fields.size("32KiB", minimum=1024)
    """``haTransferBatchSize``: commit-log bytes per transfer frame at most."""
    heartbeat_interval: float = fields.duration("5s")
    """``haSendHeartbeatInterval``: a slave reports its offset at least this often, and a
    master with nothing to send sends an empty frame this often."""
    housekeeping_interval: float = fields.duration("20s")
    """``haHousekeepingInterval``: a connection that heard nothing for this long is closed
    (a slave then reconnects)."""
    max_gap_not_in_sync: int = fields.size("256MiB", minimum=0)
    """``haMaxGapNotInSync`` (4.x ``haSlaveFallbehindMax``): a slave further behind than this
    does not count as in sync; a SYNC_MASTER with no slave in sync answers
    ``SLAVE_NOT_AVAILABLE`` at once instead of waiting."""
    sync_timeout: float = fields.duration("5s")
    """``syncFlushTimeout`` for the slave wait of a SYNC_MASTER; past it the send is answered
    ``FLUSH_SLAVE_TIMEOUT`` (the message is stored on the master)."""
    reconnect_interval: float = fields.duration("5s")
    """How long a slave waits before connecting again after a failure."""

    # --- controller mode (automatic failover, docs/failover.md) ---------------------------
    controller_mode: bool = fields.boolean(False)
    """``enableControllerMode``: the controller decides which replica is master. Every replica
    has a distinct ``broker_id`` > 0 (the master registers with the NameServers as 0) and its
    ``broker_role`` says how a put is acknowledged while it is master (SYNC_MASTER: once every
    SyncStateSet member holds it; ASYNC_MASTER: at once)."""
    controller_addr: tuple[str, ...] = fields.string_list(())
    """``controllerAddr``: the controllers (``host:port``, ``;``-separated); any may answer."""
    controller_heartbeat_interval: float = fields.duration("1s")
    """``brokerHeartbeatInterval``: how often a replica heartbeats (renewing its lease)."""
    fence_margin: float = fields.duration("1s")
    """A master stops acknowledging writes this long before its lease can expire, counted
    from when it sent the last heartbeat the controller answered (so clock rates may differ a
    little between hosts without two masters acknowledging at once)."""
    max_time_slave_not_catchup: float = fields.duration("15s")
    """``haMaxTimeSlaveNotCatchup``: a SyncStateSet member not caught up for this long is
    removed from the set (puts stop waiting for it); it rejoins once caught up."""
    sync_state_set_check_interval: float = fields.duration("1s")
    """How often a master checks whether to shrink or grow its SyncStateSet."""
    async_learner: bool = fields.boolean(False)
    """``asyncLearner``: this replica copies the log but never joins the SyncStateSet, so puts
    never wait for it and it is never elected (a read replica, a far-away copy)."""
    min_in_sync_replicas: int = fields.integer(1, minimum=1)
    """``minInSyncReplicas`` (controller mode): a SYNC_MASTER refuses a put that waits for the
    store (``IN_SYNC_REPLICAS_NOT_ENOUGH``, answered SYSTEM_ERROR "in-sync replicas not enough")
    while its SyncStateSet has fewer members, itself included: with 2, a master left alone in its
    set stops acknowledging what only its own disk holds."""
    election_priority: int = fields.integer(0, minimum=0)
    """``electionPriority``: among equally up-to-date candidates, lower is elected first."""


PROPERTIES = {
    "haListenPort": rocketmq.integer_alias("listen_port", "a TCP port"),
    "haMasterAddress": rocketmq.PropertyAlias(
        "master_address", rocketmq.text, "the master's host:haListenPort"
    ),
    "haTransferBatchSize": rocketmq.integer_alias("transfer_batch_size", "bytes"),
    "haSendHeartbeatInterval": rocketmq.milliseconds_alias("heartbeat_interval"),
    "haHousekeepingInterval": rocketmq.milliseconds_alias("housekeeping_interval"),
    "haMaxGapNotInSync": rocketmq.integer_alias("max_gap_not_in_sync", "bytes"),
    "minInSyncReplicas": rocketmq.integer_alias("min_in_sync_replicas", "a whole number"),
    "haSlaveFallbehindMax": rocketmq.integer_alias("max_gap_not_in_sync", "bytes"),
    "syncFlushTimeout": rocketmq.milliseconds_alias("sync_timeout"),
    "enableControllerMode": rocketmq.boolean_alias("controller_mode"),
    "controllerAddr": rocketmq.PropertyAlias("controller_addr", rocketmq.text, "host:port;host:port"),
    "brokerHeartbeatInterval": rocketmq.milliseconds_alias("controller_heartbeat_interval"),
    "haMaxTimeSlaveNotCatchup": rocketmq.milliseconds_alias("max_time_slave_not_catchup"),
    "electionPriority": rocketmq.integer_alias("election_priority", "an integer"),
    "asyncLearner": rocketmq.boolean_alias("async_learner"),
}
"""The RocketMQ ``broker.properties`` keys of ``[ha]`` (``syncFlushTimeout`` also bounds a
SYNC_MASTER's wait for its slave, as in RocketMQ)."""
