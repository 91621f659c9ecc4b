"""QUERY_ASSIGNMENT (400) and SET_MESSAGE_REQUEST_MODE (401): RocketMQ 5's server-side
rebalance, which its remoting push consumers ask for instead of computing one themselves.

A (topic, group) consumes in PULL mode (the default: queues split among the group's online
clients by the strategy the client names, as a 4.x client would split them) or POP mode (each
client pops every broker's queues, shown as queue id -1 per broker; plugins/pop serves them).
The mode is set with SET_MESSAGE_REQUEST_MODE and kept in ``config/messageRequestMode.json``.
The queues are the topic's readable queues on every broker, from the NameServers' route.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from kernel.errors import RemotingError
from kernel.model import MessageQueue, flatten
from plugins.remoting.handlers.common import RequestProblem, parse_json_body, valid_group, valid_topic
from plugins.remoting.request_modes import RequestModes
from trocket.client.errors import ClientError
from trocket.client.routes import RouteCache, subscribe_queues
from wire.names import RETRY_PREFIX
from wire.remoting import Connection, RemotingCommand, ResponseCode

if TYPE_CHECKING:
    from plugins.remoting.service import BrokerNetwork

log = logging.getLogger(__name__)

PULL, POP = "PULL", "POP"
JAVA_STRATEGY_NAMES = {
    "AVG": "averagely",
    "AVG_BY_CIRCLE": "averagely_by_circle",
    "CONSISTENT_HASH": "consistent_hash",
    "CONFIG": "by_config",
    "MACHINE_ROOM": "by_machine_room",
    "MACHINE_ROOM_NEARBY": "machine_room_nearby",
}
"""RocketMQ's strategy names (``AllocateMessageQueueStrategy.getName()``) → the allocate plugin's."""


async def query_assignment(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    body = parse_json_body(request)
    if not isinstance(body, dict):
        raise RequestProblem(ResponseCode.SYSTEM_ERROR, "the QUERY_ASSIGNMENT body must be a JSON object")
    topic = valid_topic(body.get("topic"), "topic")
    group = valid_group(body.get("consumerGroup"), "consumerGroup")
    client_id = str(body.get("clientId") or "")
    modes = _modes(net)
    mode, share = modes.mode(topic, group)
    queues = await _queues(net, topic)
    if str(body.get("messageModel") or "CLUSTERING").upper() == "BROADCASTING":
        assigned = queues
    elif mode == POP and share <= 0:
        brokers = sorted({q.broker_name for q in queues})
        assigned = [MessageQueue(topic, name, -1) for name in brokers]
    else:
        assigned = _allocate(net, group, client_id, queues, str(body.get("strategyName") or "AVG"))
    assignments = [
        {
            "messageQueue": {"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id},
            "mode": mode,
            "attachments": {},
        }
        for q in assigned
    ]
    return request.response(body=json.dumps({"messageQueueAssignments": assignments}).encode())


async def set_message_request_mode(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    body = parse_json_body(request)
    if not isinstance(body, dict):
        raise RequestProblem(
            ResponseCode.SYSTEM_ERROR, "the SET_MESSAGE_REQUEST_MODE body must be a JSON object"
        )
    topic = valid_topic(body.get("topic"), "topic")
    group = valid_group(body.get("consumerGroup"), "consumerGroup")
    mode = str(body.get("mode") or PULL).upper()
    if mode not in (PULL, POP):
        raise RequestProblem(ResponseCode.SYSTEM_ERROR, f"mode must be PULL or POP, not {mode!r}")
    if topic.startswith(RETRY_PREFIX):
        raise RequestProblem(ResponseCode.NO_PERMISSION, "retry topics are consumed in PULL mode only")
    modes = _modes(net)
    modes.set(topic, group, mode, int(body.get("popShareQueueNum") or 0))
    await modes.persist()
    return request.response()


def _modes(net: BrokerNetwork) -> RequestModes:
    if net.request_modes is None:
        raise RequestProblem(ResponseCode.SYSTEM_ERROR, "this broker keeps no message request modes")
    return net.request_modes


async def _queues(net: BrokerNetwork, topic: str) -> list[MessageQueue]:
    """The topic's readable queues on every broker (the NameServers' route), or this broker's
    own when no NameServer answers."""
    namesrv = list(net.runtime.ctx.broker.namesrv_addr)
    route: dict[str, Any] | None = None
    if namesrv:
        try:
            async with net.outgoing.open() as client:
                route = await RouteCache(client, namesrv).route(topic)
        except (ClientError, RemotingError) as error:
            log.warning(
                "QUERY_ASSIGNMENT for %s: no route from the NameServers (%s); using this broker's",
                topic,
                error,
            )
    if route is not None:
        return sorted(subscribe_queues(topic, route), key=lambda q: (q.broker_name, q.queue_id))
    config = net.topics.get(topic)
    if config is None:
        raise RequestProblem(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
    name = net.runtime.ctx.broker.broker_name
    return [MessageQueue(topic, name, q) for q in range(config.read_queue_nums)]


def _allocate(
    net: BrokerNetwork, group: str, client_id: str, queues: list[MessageQueue], strategy_name: str
) -> list[MessageQueue]:
    consumer = net.clients.online(group)
    clients = consumer.client_ids() if consumer is not None else []
    if client_id and client_id not in clients:
        clients = sorted({*clients, client_id})
    if not clients or not queues:
        return []
    ctx = net.runtime.ctx
    wanted = JAVA_STRATEGY_NAMES.get(strategy_name, strategy_name)
    strategies = {s.name: s for s in flatten(ctx.hook.trocket_register_allocate_strategies())}
    strategy = strategies.get(wanted) or strategies.get("averagely")
    if strategy is None:
        raise RequestProblem(
            ResponseCode.SYSTEM_ERROR,
            "no allocation strategy is loaded: add the allocate plugin to [broker] plugins",
        )
    return strategy.allocate(group, client_id, queues, clients)
