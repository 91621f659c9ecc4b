"""Producer and consumer groups and their connections (RocketMQ's Producer/ConsumerManager).

Heartbeats register a connection in its groups; a consumer group's membership change is
pushed to the group's other connections as ``NOTIFY_CONSUMER_IDS_CHANGED`` so they rebalance
at once. Connections silent for ``channel_expiry`` are dropped, as are closed ones.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import attrs

from wire.remoting import Connection, RemotingCommand, RequestCode
from wire.subscription import Subscription

log = logging.getLogger(__name__)

CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)


def enum_name(value: Any, names: tuple[str, ...], default: str) -> str:
    """Java clients send enum names, the C++ client ordinals; both map to the name."""
    if isinstance(value, int) and 0 <= value < len(names):
        return names[value]
    if isinstance(value, str) and value in names:
        return value
    if isinstance(value, str) and value.isdigit() and int(value) < len(names):
        return names[int(value)]
    return default


@attrs.define(eq=False)
class ClientChannel:
    client_id: str
    connection: Connection
    language: str
    version: int
    last_update: float

    def to_json(self) -> dict[str, Any]:
        return {
            "clientAddr": self.connection.peer,
            "clientId": self.client_id,
            "language": self.language,
            "version": self.version,
        }


@attrs.define(eq=False)
class ConsumerGroup:
    name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: dict[str, Subscription] = attrs.field(factory=dict)
    channels: dict[Connection, ClientChannel] = attrs.field(factory=dict)

    def client_ids(self) -> list[str]:
        return sorted({c.client_id for c in self.channels.values()})


@attrs.define(eq=False)
class ClientManager:
    consumers: dict[str, ConsumerGroup] = attrs.field(factory=dict)
    producers: dict[str, dict[Connection, ClientChannel]] = attrs.field(factory=dict)
    notify_enabled: bool = True

    def heartbeat(
        self, connection: Connection, request: RemotingCommand, data: dict[str, Any], now: float
    ) -> list[str]:
        """Apply one HEART_BEAT body; returns the consumer groups the connection is in."""
        client_id = str(data.get("clientID", ""))
        for producer in data.get("producerDataSet") or ():
            group = str(producer.get("groupName", ""))
            channels = self.producers.setdefault(group, {})
            channels[connection] = ClientChannel(
                client_id, connection, request.language, request.version, now
            )
        groups = []
        for consumer in data.get("consumerDataSet") or ():
            name = str(consumer.get("groupName", ""))
            groups.append(name)
            group = self.consumers.setdefault(name, ConsumerGroup(name))
            group.consume_type = enum_name(consumer.get("consumeType"), CONSUME_TYPES, group.consume_type)
            group.message_model = enum_name(consumer.get("messageModel"), MESSAGE_MODELS, group.message_model)
            group.consume_from_where = enum_name(
                consumer.get("consumeFromWhere"), CONSUME_FROM, group.consume_from_where
            )
            subscriptions = {}
            for item in consumer.get("subscriptionDataSet") or ():
                topic = str(item.get("topic", ""))
                version = item.get("subVersion", 0)
                subscriptions[topic] = Subscription.parse(
                    topic,
                    item.get("subString"),
                    int(version) if str(version).lstrip("-").isdigit() else 0,
                    str(item.get("expressionType") or "TAG"),
                )
            group.subscriptions = subscriptions
            known = group.channels.get(connection)
            group.channels[connection] = ClientChannel(
                client_id, connection, request.language, request.version, now
            )
            if known is None or known.client_id != client_id:
                log.info("consumer %s joined group %s from %s", client_id, name, connection.peer)
                self.notify(group)
        return groups

    def unregister(self, connection: Connection, producer_group: str, consumer_group: str) -> None:
        if producer_group:
            self.producers.get(producer_group, {}).pop(connection, None)
        if consumer_group:
            self._leave(consumer_group, [connection], "unregistered")

    def connection_closed(self, connection: Connection) -> None:
        for channels in self.producers.values():
            channels.pop(connection, None)
        for name in [n for n, g in self.consumers.items() if connection in g.channels]:
            self._leave(name, [connection], f"connection closed ({connection.close_reason})")

    def expire(self, now: float, expiry: float) -> list[str]:
        """Drop channels silent for ``expiry`` seconds; returns their client ids."""
        dropped = []
        for channels in self.producers.values():
            for connection, channel in list(channels.items()):
                if now - channel.last_update > expiry:
                    del channels[connection]
                    dropped.append(channel.client_id)
        for name, group in list(self.consumers.items()):
            stale = [c for c, ch in group.channels.items() if now - ch.last_update > expiry]
            if stale:
                dropped += [group.channels[c].client_id for c in stale]
                self._leave(name, stale, f"no heartbeat for {expiry:.0f}s")
                for connection in stale:
                    connection.close(f"no heartbeat for {expiry:.0f}s")
        return dropped

    def _leave(self, name: str, connections: Iterable[Connection], reason: str) -> None:
        group = self.consumers.get(name)
        if group is None:
            return
        for connection in connections:
            channel = group.channels.pop(connection, None)
            if channel is not None:
                log.info("consumer %s left group %s: %s", channel.client_id, name, reason)
        if group.channels:
            self.notify(group)
        else:
            del self.consumers[name]

    def notify(self, group: ConsumerGroup) -> None:
        """Tell every member of ``group`` to rebalance (oneway, flag 2: clients do not reply)."""
        if not self.notify_enabled:
            return
        for connection in list(group.channels):
            if not connection.closed:
                connection.send_oneway(
                    RemotingCommand.request(
                        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group.name}
                    )
                )

    def producer_connections(self, group: str) -> list[Connection]:
        """:class:`kernel.clients.ClientDirectory`: the group's open producer connections, the
        most recently heard from first."""
        channels = sorted(self.producers.get(group, {}).values(), key=lambda c: -c.last_update)
        return [c.connection for c in channels if not c.connection.closed]

    def online(self, group: str) -> ConsumerGroup | None:
        """The group if at least one of its clients is connected."""
        consumer = self.consumers.get(group)
        return consumer if consumer is not None and consumer.channels else None

    def subscription(self, group: str, topic: str) -> Subscription | None:
        consumer = self.consumers.get(group)
        return consumer.subscriptions.get(topic) if consumer else None
