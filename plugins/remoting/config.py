"""``[remoting]``: the broker's network service (RocketMQ's BrokerConfig / NettyServerConfig)."""

from __future__ import annotations

import attrs

from kernel.config import fields
from kernel.config import property_aliases as rocketmq
from kernel.config.property_aliases import PropertyAlias
from wire.names import topic_problem
from wire.remoting.busy_poll import BusyPollSetting, parse_busy_poll


def _topic_name(value: object) -> str:
    problem = topic_problem(value)
    if problem is not None:
        raise ValueError(problem)
    assert isinstance(value, str)
    return value


@attrs.frozen(kw_only=True)
class RemotingConfig:
    broker_permission: int = fields.integer(6, minimum=0, maximum=7)
    """``brokerPermission``: 6 = read and write; without the write bit (2) sends get NO_PERMISSION."""
    long_polling_enable: bool = fields.boolean(True)
    """``longPollingEnable``: hold pulls on an empty queue until a message arrives."""
    short_polling_time: float = fields.duration("1s")
    """``shortPollingTimeMills``: how long a pull waits when long polling is off."""
    max_suspend_time: float = fields.duration("15s")
    """Upper bound for a client's ``suspendTimeoutMillis`` (RocketMQ's default client value)."""
    compressed_register: bool = fields.boolean(False)
    """``compressedRegister``: send the topic table to the NameServers deflated (RocketMQ's
    length-prefixed pieces): at 12,500 topics 1.96 MiB of JSON becomes 36 KiB (43 ms to deflate,
    50 ms for the NameServer to read)."""
    register_period: float = fields.duration("30s")
    """``registerNameServerPeriod``: how often the broker registers with every NameServer."""
    channel_expiry: float = fields.duration("120s")
    """A client connection silent (no heartbeat) for this long is dropped from its groups."""
    channel_scan_interval: float = fields.duration("10s")
    offset_persist_interval: float = fields.duration("5s")
    """``flushConsumerOffsetInterval``: how often ``consumerOffset.json`` is written."""
    lock_expiry: float = fields.duration("60s")
    """Queue locks of orderly consumers expire after this long without renewal."""
    auto_create_subscription_group: bool = fields.boolean(True)
    max_frame_size: int = fields.size("16MiB", minimum=1024)
    max_connections: int = fields.integer(10000, minimum=1)
    channel_max_idle_time: float = fields.duration("120s")
    """``serverChannelMaxIdleTimeSeconds``: a connection with nothing read or written and no
    request in flight for this long is closed (a peer gone without a FIN, a stalled client)."""
    frame_read_timeout: float = fields.duration("30s")
    """A frame whose first bytes arrived must be complete within this long, or the connection
    is closed (a truncated frame or a declared 15 MiB that never comes holds no buffer)."""
    busy_poll: BusyPollSetting = attrs.field(default="auto", converter=parse_busy_poll)
    """After network activity the event loop keeps polling the sockets instead of sleeping in
    epoll, so a request arriving soon does not pay a wake-up (about half of a single-message
    round trip on a VM; ``wire.remoting.busy_poll``). ``"auto"`` (the default) polls for
    200 µs only while requests come faster than that, and backs off when polls catch nothing:
    it then costs less CPU than the wake-ups it saves. A duration (``"200us"``) always polls
    that long; ``"off"`` or ``0`` never polls."""
    read_reactor: bool = fields.boolean(True)
    """Idle plain-TCP connections wait in one reader task that answers the lone sends of many
    connections together (``wire.remoting.read_reactor``); ``false``: a task per connection
    reads its own socket."""
    max_in_flight: int = fields.integer(256, minimum=1)
    """Requests of one connection handled concurrently (held pulls included)."""
    max_pull_messages: int = fields.integer(32, minimum=1)
    """Messages per pull at most, whatever the client asks (RocketMQ's in-memory limit)."""
    max_pull_bytes: int = fields.size("256KiB", minimum=1024)
    """Bytes per pull response (about; at least one message is returned)."""
    slave_read_enable: bool = fields.boolean(False)
    """``slaveReadEnable``: a master whose consumer reads data no longer in memory (see
    ``access_message_in_memory_max_ratio``) tells it to pull from a slave (brokerId 1)."""
    access_message_in_memory_max_ratio: int = fields.ratio_percent(40, minimum=1, maximum=100)
    """``accessMessageInMemoryMaxRatio``: data within this share of RAM from the log's end
    counts as in memory (a new group's start, and the slave-read suggestion)."""
    trace_topic_enable: bool = fields.boolean(False)
    """``traceTopicEnable``: create :attr:`msg_trace_topic_name` at start (one queue), for the
    message traces clients write (``Producer(trace=True)``; ``queryMsgTraceById`` reads it)."""
    msg_trace_topic_name: str = attrs.field(default="RMQ_SYS_TRACE_TOPIC", converter=_topic_name)
    """``msgTraceTopicName``: the trace topic created with :attr:`trace_topic_enable`."""
    region_id: str = fields.string("DefaultRegion")
    """``regionId``: the region named in send answers, which traced clients record."""
    trace_on: bool = fields.boolean(True)
    """``traceOn``: false tells traced producers not to write trace records for sends here."""
    slave_sync_interval: float = fields.duration("10s")
    """How often a slave copies topics, consumer offsets and subscription groups from its
    master (RocketMQ's SlaveSynchronize), so consumers that move to it resume where they were."""


PROPERTIES = {
    "serverChannelMaxIdleTimeSeconds": rocketmq.seconds_alias("channel_max_idle_time"),
    "slaveReadEnable": rocketmq.boolean_alias("slave_read_enable"),
    "accessMessageInMemoryMaxRatio": rocketmq.integer_alias(
        "access_message_in_memory_max_ratio", "a percentage of RAM"
    ),
    "brokerPermission": rocketmq.integer_alias("broker_permission", "6 (RW), 4 (R) or 2 (W)"),
    "longPollingEnable": rocketmq.boolean_alias("long_polling_enable"),
    "shortPollingTimeMills": rocketmq.milliseconds_alias("short_polling_time"),
    "registerNameServerPeriod": rocketmq.milliseconds_alias("register_period"),
    "compressedRegister": rocketmq.boolean_alias("compressed_register"),
    "flushConsumerOffsetInterval": rocketmq.milliseconds_alias("offset_persist_interval"),
    "autoCreateSubscriptionGroup": rocketmq.boolean_alias("auto_create_subscription_group"),
    "traceTopicEnable": rocketmq.boolean_alias("trace_topic_enable"),
    "msgTraceTopicName": PropertyAlias("msg_trace_topic_name", rocketmq.text, "a topic name"),
    "regionId": PropertyAlias("region_id", rocketmq.text, "a region name"),
    "traceOn": rocketmq.boolean_alias("trace_on"),
}
"""The RocketMQ ``broker.properties`` keys of ``[remoting]``."""

RUNTIME_KEYS = (
    "brokerPermission",
    "slaveReadEnable",
    "accessMessageInMemoryMaxRatio",
    "longPollingEnable",
    "shortPollingTimeMills",
    "autoCreateSubscriptionGroup",
)
"""Keys ``updateBrokerConfig`` changes on a running broker: each is read where it is used."""
