"""``[controller]``: where a controller listens, which etcd holds its state, and its timings."""

from __future__ import annotations

import attrs

from kernel.config import fields
from kernel.config import property_aliases as rocketmq


@attrs.frozen(kw_only=True)
class ControllerConfig:
    listen_host: str = fields.string("127.0.0.1")
    listen_port: int = fields.integer(9878, minimum=0, maximum=65535)
    """RocketMQ's standalone controller port; 0 picks a free port (tests). An embedded
    controller (``enable_controller_in_namesrv``) listens here too, beside the NameServer."""
    enable_controller_in_namesrv: bool = fields.boolean(False)
    """``enableControllerInNamesrv``: run the controller in a NameServer process."""
    etcd_endpoints: tuple[str, ...] = fields.string_list(("127.0.0.1:2379",))
    """The etcd members (``host:port`` of their client URLs); any may answer."""
    etcd_prefix: str = fields.string("/trocket/controller")
    """Every key the controllers write starts with this (several clusters may share an etcd)."""
    etcd_timeout: float = fields.duration("2s")
    """Per etcd request; an unreachable member is skipped for the next."""
    heartbeat_timeout: float = fields.duration("5s")
    """``controllerHeartBeatTimeoutMills``: a replica's lease TTL. A master whose heartbeats stop
    loses its lease this long after the last one etcd saw, and is replaced then. It bounds the
    RTO (RocketMQ's default is 10 s; 5 s keeps the RTO under 10 s). Whole seconds."""
    scan_interval: float = fields.duration("500ms")
    """``scanNotActiveBrokerInterval``: how often the leading controller looks for sets whose
    master's lease is gone."""
    lease_ttl: float = fields.duration("3s")
    """TTL of each controller's own lease (its membership and, for one of them, leadership):
    a controller killed hands the scan to another within this long."""
    max_broker_sets: int = fields.integer(1024, minimum=1)
    """Broker sets the controllers register at most: the port needs no credentials unless ACL
    is on, and every set is kept (and scanned) until ``cleanBrokerMetadata`` removes it."""
    max_replicas_per_set: int = fields.integer(16, minimum=1)
    """Replicas one broker set holds at most."""
    enable_elect_unclean_master: bool = fields.boolean(False)
    """``enableElectUncleanMaster``: when no SyncStateSet member is alive, elect any alive
    replica. It may lack acknowledged messages: each such election is logged and counted."""


PROPERTIES = {
    "enableControllerInNamesrv": rocketmq.boolean_alias("enable_controller_in_namesrv"),
    "controllerHeartBeatTimeoutMills": rocketmq.milliseconds_alias("heartbeat_timeout"),
    "scanNotActiveBrokerInterval": rocketmq.milliseconds_alias("scan_interval"),
    "enableElectUncleanMaster": rocketmq.boolean_alias("enable_elect_unclean_master"),
}
