"""QueryRoute, QueryAssignment, Heartbeat, NotifyClientTermination and the Telemetry stream.

Routes name the proxy itself as every broker's endpoint: a client dials the proxy for every
broker, and the proxy forwards to the broker named in the request (RocketMQ proxy's cluster
mode, used in-process as well).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import grpc

from plugins.proxy.auth import authorize
from plugins.proxy.core import ProxyCore, Route
from plugins.proxy.grpc_host import RpcAbort
from plugins.proxy.status import Code, ProxyProblem, ok
from plugins.proxy.telemetry import DEFAULT_RETRY_MAX_TIMES, ClientSession, settings_reply
from wire.grpc_v2 import definition_pb2 as pb
from wire.grpc_v2 import service_pb2 as spb

log = logging.getLogger(__name__)

PERM_READ, PERM_WRITE = 4, 2
MESSAGE_TYPE_ATTRIBUTE = "message.type"
_ACCEPTED: dict[str, list[pb.MessageType]] = {
    "NORMAL": [pb.NORMAL],
    "FIFO": [pb.FIFO],
    "DELAY": [pb.DELAY],
    "TRANSACTION": [pb.TRANSACTION],
    "MIXED": [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION],
}


def accepted_types(attributes: Mapping[str, str]) -> list[pb.MessageType]:
    """The message types a topic takes (its ``message.type`` attribute; NORMAL without one)."""
    return list(_ACCEPTED.get(attributes.get(MESSAGE_TYPE_ATTRIBUTE, "NORMAL").upper(), [pb.NORMAL]))


def message_queues(
    core: ProxyCore, route: Route, namespace: str, accepted: list[pb.MessageType]
) -> list[pb.MessageQueue]:
    """One queue per queue id of every broker with a live master, as RocketMQ's proxy numbers
    them: read-only ids first, then write-only, then read-write."""
    out = []
    topic = pb.Resource(name=route.topic, resource_namespace=namespace)
    for data in route.queue_data:
        name = data["brokerName"]
        if name not in route.masters:
            continue
        perm = int(data.get("perm", PERM_READ | PERM_WRITE))
        reads, writes = int(data.get("readQueueNums", 0)), int(data.get("writeQueueNums", 0))
        readable, writable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
        both = min(reads, writes) if readable and writable else 0
        only_read = reads - both if readable else 0
        only_write = writes - both if writable else 0
        broker = pb.Broker(name=name, id=0, endpoints=core.endpoints())
        queue_id = 0
        for count, permission in ((only_read, pb.READ), (only_write, pb.WRITE), (both, pb.READ_WRITE)):
            for _ in range(count):
                out.append(
                    pb.MessageQueue(
                        topic=topic,
                        id=queue_id,
                        permission=permission,
                        broker=broker,
                        accept_message_types=accepted,
                    )
                )
                queue_id += 1
    return out


async def query_route(
    core: ProxyCore, request: spb.QueryRouteRequest, metadata: Mapping[str, str], peer: str
) -> Any:
    core.client_id(metadata)
    topic = request.topic.name
    route = await core.route(topic)
    accepted = accepted_types(await core.topic_attributes(topic, route))
    queues = message_queues(core, route, request.topic.resource_namespace, accepted)
    return spb.QueryRouteResponse(status=ok(), message_queues=queues)


async def query_assignment(
    core: ProxyCore, request: spb.QueryAssignmentRequest, metadata: Mapping[str, str], peer: str
) -> Any:
    """Each readable broker is assigned whole (queue id -1): POP spreads the queues."""
    core.client_id(metadata)
    route = await core.route(request.topic.name)
    readable: dict[str, pb.MessageQueue] = {}
    for queue in message_queues(core, route, request.topic.resource_namespace, [pb.NORMAL]):
        if queue.permission in (pb.READ, pb.READ_WRITE) and queue.broker.name not in readable:
            whole = pb.MessageQueue()
            whole.CopyFrom(queue)
            whole.id = -1
            readable[queue.broker.name] = whole
    assignments = [pb.Assignment(message_queue=queue) for queue in readable.values()]
    if not assignments:
        raise ProxyProblem(Code.FORBIDDEN, f"topic {request.topic.name!r} has no readable queue")
    return spb.QueryAssignmentResponse(status=ok(), assignments=assignments)


async def heartbeat(
    core: ProxyCore, request: spb.HeartbeatRequest, metadata: Mapping[str, str], peer: str
) -> Any:
    session = core.clients.touch(core.client_id(metadata))
    if session.settings is None:
        raise ProxyProblem(
            Code.UNRECOGNIZED_CLIENT_TYPE,
            "no settings from this client yet: open Telemetry and send them first",
        )
    return spb.HeartbeatResponse(status=ok())


async def notify_client_termination(
    core: ProxyCore, request: spb.NotifyClientTerminationRequest, metadata: Mapping[str, str], peer: str
) -> Any:
    client_id = core.client_id(metadata)
    core.forget_client(client_id)
    return spb.NotifyClientTerminationResponse(status=ok())


# --- Telemetry --------------------------------------------------------------------------------


@attrs.define(eq=False)
class TelemetryCall:
    session: ClientSession
    push: Callable[[spb.TelemetryCommand], None]


async def telemetry_open(
    core: ProxyCore, metadata: Mapping[str, str], peer: str, push: Callable[[spb.TelemetryCommand], None]
) -> TelemetryCall:
    client_id = metadata.get("x-mq-client-id", "")
    if not client_id:
        raise RpcAbort(grpc.StatusCode.INVALID_ARGUMENT, "the x-mq-client-id header is required")
    try:
        authorize(core.access_control(), metadata, peer)
    except ProxyProblem as problem:
        raise RpcAbort(grpc.StatusCode.UNAUTHENTICATED, problem.message) from None
    session = core.clients.touch(client_id, metadata)
    session.push = push
    return TelemetryCall(session, push)


async def telemetry_receive(core: ProxyCore, call: TelemetryCall, command: spb.TelemetryCommand) -> None:
    call.session.last_seen = time.monotonic()
    kind = command.WhichOneof("command")
    if kind == "settings":
        settings = command.settings
        if settings.WhichOneof("pub_sub") is None:
            raise RpcAbort(
                grpc.StatusCode.INVALID_ARGUMENT, "settings name neither publishing nor subscription"
            )
        call.session.settings = settings
        group, topics = (
            call.session.consumer_group,
            [e.topic.name for e in settings.subscription.subscriptions],
        )
        retry_max_times, fifo = DEFAULT_RETRY_MAX_TIMES, False
        if group and topics:
            retry_max_times = await core.retry_max_times(group, topics[0])
            fifo = await core.fifo(group, topics[0])
        reply = settings_reply(
            settings,
            max_body_size=core.config.max_body_size,
            long_polling_ms=int(core.config.max_long_polling * 1000),
            retry_max_times=retry_max_times,
        )
        if reply.HasField("subscription"):
            reply.subscription.fifo = fifo
        call.push(spb.TelemetryCommand(status=ok(), settings=reply))
        if settings.HasField("publishing"):
            await core.producers_changed()
    elif kind in ("thread_stack_trace", "verify_message_result"):
        pass  # answers to commands this proxy never sends
    else:
        log.debug("telemetry from %s: %s ignored", call.session.client_id, kind)


async def telemetry_close(core: ProxyCore, call: TelemetryCall) -> None:
    if call.session.push is call.push:
        call.session.push = None
