"""A producer's heartbeats to the brokers it sends to (RocketMQ's ``sendHeartbeatToAllBroker``
for producers): ``HEART_BEAT`` with the producer group, so the broker lists the producer
(mqadmin ``producerConnection``) and can call it back (transaction check-backs).

Off the send path: a background task looks every second for brokers the producer has routes to
and has not told yet, and tells every one again each ``interval`` (30 s, as RocketMQ).
"""

from __future__ import annotations

import json
import logging

import attrs
import trio

from kernel.errors import RemotingError
from trocket.client.routes import RouteCache
from wire.remoting import Connection, RemotingClient, RemotingCommand, RequestCode, ResponseCode

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL = 30.0
NEW_BROKER_POLL = 1.0


def heartbeat_body(client_id: str, group: str) -> bytes:
    """A producer's ``HEART_BEAT`` body (``HeartbeatData`` with one producer group)."""
    return json.dumps(
        {"clientID": client_id, "producerDataSet": [{"groupName": group}], "consumerDataSet": []}
    ).encode()


@attrs.define(eq=False)
class ProducerHeartbeats:
    remoting: RemotingClient
    routes: RouteCache
    group: str
    client_id: str
    interval: float = HEARTBEAT_INTERVAL
    sent: dict[str, Connection] = attrs.field(factory=dict)
    """Broker address → the connection last told (a new connection is told again)."""

    async def run(self) -> None:
        """Until cancelled."""
        last_round = trio.current_time()
        while True:
            await trio.sleep(NEW_BROKER_POLL)
            every = trio.current_time() - last_round >= self.interval
            if every:
                last_round = trio.current_time()
            for address in self.routes.known_addresses() | set(self.sent):
                await self.tell(address, only_if_new=not every)

    async def tell(self, address: str, *, only_if_new: bool) -> None:
        """Heartbeat ``address`` (``only_if_new``: unless this connection was told already)."""
        try:
            connection = await self.remoting.connection(address)
            if only_if_new and self.sent.get(address) is connection:
                return
            body = heartbeat_body(self.client_id, self.group)
            response = await connection.request(
                self.remoting.signed(RemotingCommand.request(RequestCode.HEART_BEAT, {}, body)), 3.0
            )
        except RemotingError as error:
            log.warning("heartbeat of producer group %s to %s failed: %s", self.group, address, error)
            self.sent.pop(address, None)
            return
        if response.code != ResponseCode.SUCCESS:
            log.warning("heartbeat to %s refused: %s %s", address, response.code, response.remark)
            return
        self.sent[address] = connection
