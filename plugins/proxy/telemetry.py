"""The clients the proxy knows, and the Telemetry stream: each client's settings, and the only
path on which the proxy calls a client (a transaction check-back).

A client opens Telemetry and writes its settings first; the proxy keeps them under the
client's ``x-mq-client-id`` and writes back the settings the client must run with, merged as
RocketMQ's proxy does: the retry policy (an exponential backoff for producers, RocketMQ's
retry schedule for consumers, which Node's producer asserts on), the largest body the broker
takes (Python's producer refuses every send without it), the receive batch size and long
polling time, metrics off. Heartbeats and every call refresh the client's liveness; a client
silent for ``client_expiry`` is forgotten.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

import attrs
from google.protobuf.duration_pb2 import Duration

from wire.grpc_v2 import definition_pb2 as pb
from wire.grpc_v2 import service_pb2 as spb

log = logging.getLogger(__name__)

CONSUMER_BACKOFF_MS = (
    1000, 5000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000, 480_000,
    540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
)  # fmt: skip
"""RocketMQ's retry schedule (``messageDelayLevel`` from 1 s): the push consumer's backoff."""
DEFAULT_RETRY_MAX_TIMES = 16


def _duration(ms: int) -> Duration:
    duration = Duration()
    duration.FromMilliseconds(ms)
    return duration


@attrs.define(eq=False)
class ClientSession:
    client_id: str
    language: str = ""
    version: str = ""
    settings: pb.Settings | None = None
    push: Callable[[spb.TelemetryCommand], None] | None = None
    """Writes a command to the client's open Telemetry stream (from any thread)."""
    last_seen: float = attrs.field(factory=time.monotonic)

    @property
    def publishing_topics(self) -> frozenset[str]:
        if self.settings is None or not self.settings.HasField("publishing"):
            return frozenset()
        return frozenset(topic.name for topic in self.settings.publishing.topics)

    @property
    def consumer_group(self) -> str:
        if self.settings is None or not self.settings.HasField("subscription"):
            return ""
        return str(self.settings.subscription.group.name)


@attrs.define(eq=False)
class ClientRegistry:
    sessions: dict[str, ClientSession] = attrs.field(factory=dict)

    def touch(self, client_id: str, metadata: Mapping[str, str] | None = None) -> ClientSession:
        session = self.sessions.get(client_id)
        if session is None:
            session = self.sessions[client_id] = ClientSession(client_id)
            if metadata:
                session.language = metadata.get("x-mq-language", "")
                session.version = metadata.get("x-mq-client-version", "")
        session.last_seen = time.monotonic()
        return session

    def forget(self, client_id: str) -> None:
        self.sessions.pop(client_id, None)

    def expire(self, older_than: float) -> list[str]:
        cutoff = time.monotonic() - older_than
        gone = [cid for cid, s in self.sessions.items() if s.last_seen < cutoff and s.push is None]
        for client_id in gone:
            del self.sessions[client_id]
        return gone

    def publishers_of(self, topic: str) -> list[ClientSession]:
        """Clients with an open Telemetry stream that publish ``topic``, freshest first."""
        found = [s for s in self.sessions.values() if s.push is not None and topic in s.publishing_topics]
        return sorted(found, key=lambda s: s.last_seen, reverse=True)

    def producer_topics(self) -> set[str]:
        return {topic for s in self.sessions.values() for topic in s.publishing_topics}


def settings_reply(
    client: pb.Settings,
    *,
    max_body_size: int,
    long_polling_ms: int,
    retry_max_times: int = DEFAULT_RETRY_MAX_TIMES,
) -> pb.Settings:
    """The settings a client runs with (see the module docstring)."""
    reply = pb.Settings()
    reply.CopyFrom(client)
    reply.metric.CopyFrom(pb.Metric(on=False))
    if client.HasField("publishing"):
        reply.backoff_policy.CopyFrom(
            pb.RetryPolicy(
                max_attempts=3,
                exponential_backoff=pb.ExponentialBackoff(
                    initial=_duration(10), max=_duration(1000), multiplier=2.0
                ),
            )
        )
        reply.publishing.max_body_size = max_body_size
    elif client.HasField("subscription"):
        reply.backoff_policy.CopyFrom(
            pb.RetryPolicy(
                max_attempts=retry_max_times + 1,
                customized_backoff=pb.CustomizedBackoff(next=[_duration(ms) for ms in CONSUMER_BACKOFF_MS]),
            )
        )
        reply.subscription.receive_batch_size = 32
        reply.subscription.long_polling_timeout.CopyFrom(_duration(long_polling_ms))
        if not reply.subscription.HasField("fifo"):
            reply.subscription.fifo = False
    return reply
