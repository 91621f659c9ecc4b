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


PROPERTIES = {
    "haListenPort": rocketmq.integer_alias("listen_port", "a TCP port"),
    "haMasterAddress": rocketmq.PropertyAlias(
        "master_address", rocketmq.text, "the master's host:haListenPort"
    ),
    "haTransferBatchSize": rocketmq.integer_alias("transfer_batch_size", "bytes"),
    "haSendHeartbeatInterval": rocketmq.milliseconds_alias("heartbeat_interval"),
    "haHousekeepingInterval": rocketmq.milliseconds_alias("housekeeping_interval"),
    "haMaxGapNotInSync": rocketmq.integer_alias("max_gap_not_in_sync", "bytes"),
    "haSlaveFallbehindMax": rocketmq.integer_alias("max_gap_not_in_sync", "bytes"),
    "syncFlushTimeout": rocketmq.milliseconds_alias("sync_timeout"),
}
"""The RocketMQ ``broker.properties`` keys of ``[ha]`` (``syncFlushTimeout`` also bounds a
SYNC_MASTER's wait for its slave, as in RocketMQ)."""
