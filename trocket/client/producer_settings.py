"""The options every producer takes (RocketMQ's ``DefaultMQProducer`` settings; the table in
docs/client.md), shared by the trio :class:`~trocket.client.Producer` and the
:class:`~trocket.client.BlockingProducer` so that one send means the same in both."""

from __future__ import annotations

import ssl
from collections.abc import Sequence

import attrs

from trocket.client.errors import ClientError
from trocket.client.fault import LatencyFaultTolerance
from trocket.client.producer_heartbeat import HEARTBEAT_INTERVAL
from trocket.client.sending import QueuePicker, SendRules, split_addresses
from wire.remoting.signature import SessionCredentials


@attrs.define(eq=False)
class ProducerSettings:
    """A producer's options, and the send rules and queue picker built from them."""

    group: str
    namesrv_addr: str | Sequence[str] = "127.0.0.1:9876"
    send_timeout: float = 3.0
    retry_times_when_send_failed: int = 2
    retry_another_broker_when_not_store_ok: bool = False
    compress_over: int = 4096
    compress_level: int = attrs.field(default=5, validator=attrs.validators.in_(range(10)))
    """zlib level of compressed bodies (RocketMQ's ``compressLevel``, 5)."""
    max_message_size: int = 4 * 1024 * 1024
    default_topic_queue_nums: int = 4
    latency_fault_tolerance: bool = True
    credentials: SessionCredentials | None = None
    """ACL credentials every request is signed with (default: ``TROCKET_ACCESS_KEY`` and
    ``TROCKET_SECRET_KEY`` when set)."""
    tls: ssl.SSLContext | bool | None = None
    """TLS to NameServers and brokers: a context (:func:`trocket.client.tls_context`),
    ``True`` (the system's CAs), or ``None``: ``TROCKET_TLS``/``TROCKET_TLS_CA_FILE`` decide."""
    heartbeat_interval: float = HEARTBEAT_INTERVAL
    """Seconds between heartbeats to every broker sent to (RocketMQ's
    ``heartbeatBrokerInterval``). 0 sends none (a consumer's producer of retries is not a
    producer group of its own)."""
    instance_name: str | None = None
    """The second half of the client id brokers list (``ip@instance``; default the pid)."""
    _rules: SendRules = attrs.field(init=False)
    _picker: QueuePicker = attrs.field(init=False)
    _namesrvs: tuple[str, ...] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._namesrvs = split_addresses(self.namesrv_addr)
        if not self._namesrvs:
            raise ClientError("no NameServer address given")
        self._rules = SendRules(
            self.group, self.compress_over, self.compress_level, self.max_message_size,
            self.default_topic_queue_nums,
        )  # fmt: skip
        self._picker = QueuePicker(LatencyFaultTolerance(self.latency_fault_tolerance))
