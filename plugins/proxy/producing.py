"""SendMessage and EndTransaction, and transaction check-backs relayed to gRPC producers.

The server picks the queue (RocketMQ 5 clients send none): a message group always lands on
the same queue (a stable hash over the topic's writable queues), other messages go round
robin. A message whose type the topic does not accept (its ``message.type`` attribute), or
that is inconsistent with its own type, gets MESSAGE_PROPERTY_CONFLICT_WITH_TYPE in its entry.

A transactional message's ``transaction_id`` names where its half message is
(``brokerName offsetMsgId queueOffset``), so EndTransaction needs no state in the proxy. A
broker's check-back (CHECK_TRANSACTION_STATE, on the proxy's heartbeat connection as producer
of the topic) goes to a client publishing the topic, as a RecoverOrphanedTransactionCommand on
its Telemetry stream; its checker answers with EndTransaction(SOURCE_SERVER_CHECK).
"""

from __future__ import annotations

import itertools
import logging
import time
import zlib
from collections.abc import Mapping
from typing import Any

import orjson

from kernel.model import Message, MessageBatch
from kernel.outcomes import PUT_STATUS_CODES
from plugins.proxy.auth import peer_ip, peer_port
from plugins.proxy.core import ProxyCore, Route
from plugins.proxy.routing import accepted_types
from plugins.proxy.status import Code, ProxyProblem, from_remoting, ok
from plugins.proxy.translate import Outgoing, incoming, outgoing
from wire.grpc_v2 import definition_pb2 as pb
from wire.grpc_v2 import service_pb2 as spb
from wire.message import encode_properties
from wire.names import send_forbidden_topic
from wire.record import decode_record, parse_offset_msg_id
from wire.remoting import Connection, RemotingCommand, RequestCode, ResponseCode

log = logging.getLogger(__name__)

PERM_WRITE = 2
COMMIT, ROLLBACK = 0x8, 0xC
_TYPE_NAMES: dict[pb.MessageType, str] = {
    pb.NORMAL: "NORMAL",
    pb.FIFO: "FIFO",
    pb.DELAY: "DELAY",
    pb.TRANSACTION: "TRANSACTION",
}
_turns = itertools.count()


def writable_queues(route: Route) -> list[tuple[str, int]]:
    out = []
    for data in sorted(route.queue_data, key=lambda d: d["brokerName"]):
        if data["brokerName"] in route.masters and int(data.get("perm", 6)) & PERM_WRITE:
            out += [(data["brokerName"], q) for q in range(int(data.get("writeQueueNums", 0)))]
    return out


def pick_queue(queues: list[tuple[str, int]], message_group: str) -> tuple[str, int]:
    if message_group:
        return queues[zlib.crc32(message_group.encode()) % len(queues)]
    return queues[next(_turns) % len(queues)]


async def send_message(
    core: ProxyCore, request: spb.SendMessageRequest, metadata: Mapping[str, str], peer: str
) -> Any:
    core.client_id(metadata)
    born_host = (peer_ip(peer) or "127.0.0.1", peer_port(peer))
    if not request.messages:
        raise ProxyProblem(Code.BAD_REQUEST, "no message to send")
    topic = request.messages[0].topic.name
    if any(m.topic.name != topic for m in request.messages):
        raise ProxyProblem(Code.MESSAGE_CORRUPTED, "the messages of one send must share a topic")
    prepared = [outgoing(m, max_body_size=core.config.max_body_size) for m in request.messages]
    route = await core.route(topic)
    accepted = accepted_types(await core.topic_attributes(topic, route))
    queues = writable_queues(route)
    if not queues:
        raise ProxyProblem(Code.FORBIDDEN, f"topic {topic!r} has no writable queue on a live master")
    entries = []
    for message in prepared:
        if message.message_type not in accepted:
            entries.append(
                spb.SendResultEntry(
                    status=pb.Status(
                        code=Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                        message=f"topic {topic!r} does not take {_TYPE_NAMES.get(message.message_type)} "
                        f"messages (its message.type accepts {[_TYPE_NAMES.get(t) for t in accepted]})",
                    ),
                    message_id=message.message_id,
                )
            )
            continue
        entries.append(await _send_one(core, route, queues, message, born_host))
    codes = {entry.status.code for entry in entries}
    top = entries[0].status if len(entries) == 1 or len(codes) == 1 else pb.Status(code=Code.MULTIPLE_RESULTS)
    return spb.SendMessageResponse(status=top, entries=entries)


async def _send_one(
    core: ProxyCore,
    route: Route,
    queues: list[tuple[str, int]],
    message: Outgoing,
    born_host: tuple[str, int],
) -> Any:
    broker_name, queue_id = pick_queue(queues, message.message_group)
    if core.is_local_master(broker_name):
        return await _put_locally(core, broker_name, queue_id, message, born_host)
    header = {
        "a": message.topic if message.message_type == pb.TRANSACTION else core.producer_group,
        "b": message.topic,
        "c": "TBW102",
        "d": 4,
        "e": queue_id,
        "f": message.sys_flag,
        "g": message.born_timestamp or int(time.time() * 1000),
        "h": 0,
        "i": encode_properties(message.properties).decode(),
        "j": 0,
        "k": False,
        "m": False,
    }
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, message.body)
    try:
        response = await core.invoke(route.masters[broker_name], request, "send")
    except ProxyProblem as problem:
        core.forget_route(message.topic)  # the broker may be gone: ask the NameServers next time
        return spb.SendResultEntry(status=problem.status(), message_id=message.message_id)
    if response.code != ResponseCode.SUCCESS:
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            core.forget_route(message.topic)
        return spb.SendResultEntry(
            status=pb.Status(code=from_remoting(response.code), message=response.remark or "send refused"),
            message_id=message.message_id,
        )
    offset_msg_id = str(response.ext.get("msgId", ""))
    queue_offset = int(response.ext.get("queueOffset", -1))
    transaction_id = ""
    if message.message_type == pb.TRANSACTION:
        transaction_id = f"{broker_name} {offset_msg_id} {queue_offset}"
    return spb.SendResultEntry(
        status=ok(), message_id=message.message_id, transaction_id=transaction_id, offset=queue_offset
    )


async def _put_locally(
    core: ProxyCore, broker_name: str, queue_id: int, message: Outgoing, born_host: tuple[str, int]
) -> Any:
    """The proxy's own broker takes the message through its put pipeline directly (RocketMQ
    proxy's local mode): no remoting round trip over loopback. The same checks apply: the put
    pipeline's, and the proxy's own before it (the topic is in the route and writable)."""
    puts = core.local_puts
    assert puts is not None
    if problem := send_forbidden_topic(message.topic):
        return spb.SendResultEntry(
            status=pb.Status(code=Code.FORBIDDEN, message=problem), message_id=message.message_id
        )
    stored = Message(
        message.topic,
        message.body,
        queue_id,
        0,
        dict(message.properties),
        message.sys_flag,
        message.born_timestamp or int(time.time() * 1000),
        born_host,
    )
    group = message.topic if message.message_type == pb.TRANSACTION else core.producer_group
    result = await puts.put(MessageBatch([stored], group))
    if not result.status.stored or result.append is None:
        code = from_remoting(PUT_STATUS_CODES[result.status])
        return spb.SendResultEntry(
            status=pb.Status(code=code, message=result.remark or result.status.value),
            message_id=message.message_id,
        )
    appended = result.append
    transaction_id = ""
    if message.message_type == pb.TRANSACTION:
        transaction_id = f"{broker_name} {appended.msg_ids[0]} {appended.queue_offsets[0]}"
    return spb.SendResultEntry(
        status=ok(),
        message_id=message.message_id,
        transaction_id=transaction_id,
        offset=appended.queue_offsets[0],
    )


async def end_transaction(
    core: ProxyCore, request: spb.EndTransactionRequest, metadata: Mapping[str, str], peer: str
) -> Any:
    core.client_id(metadata)
    fields = request.transaction_id.split(" ")
    if len(fields) != 3:
        raise ProxyProblem(
            Code.INVALID_TRANSACTION_ID, f"transaction id {request.transaction_id!r} is not this proxy's"
        )
    broker_name, offset_msg_id, queue_offset = fields
    try:
        _, commit_log_offset = parse_offset_msg_id(offset_msg_id)
        table_offset = int(queue_offset)
    except ValueError:
        raise ProxyProblem(
            Code.INVALID_TRANSACTION_ID, f"transaction id {request.transaction_id!r} is malformed"
        ) from None
    if request.resolution == pb.TRANSACTION_RESOLUTION_UNSPECIFIED:
        return spb.EndTransactionResponse(status=ok("unknown: the broker asks again later"))
    header = {
        "producerGroup": request.topic.name,
        "tranStateTableOffset": table_offset,
        "commitLogOffset": commit_log_offset,
        "commitOrRollback": COMMIT if request.resolution == pb.COMMIT else ROLLBACK,
        "fromTransactionCheck": request.source == pb.SOURCE_SERVER_CHECK,
        "msgId": request.message_id,
        "transactionId": request.transaction_id,
    }
    address = await core.broker_address(request.topic.name, broker_name)
    await core.invoke_broker_ok(
        broker_name, address, RemotingCommand.request(RequestCode.END_TRANSACTION, header), "end transaction"
    )
    return spb.EndTransactionResponse(status=ok())


async def on_check(core: ProxyCore, connection: Connection, request: RemotingCommand) -> None:
    """A broker's CHECK_TRANSACTION_STATE (oneway): hand it to a client publishing the topic."""
    try:
        half = decode_record(request.body)
    except Exception as error:  # noqa: BLE001 - a broken body must not end the connection
        log.warning("transaction check from %s has an unreadable body: %s", connection.peer, error)
        return None
    topic = half.properties.get("REAL_TOPIC") or half.properties.get("PGROUP") or half.topic
    clients = core.clients.publishers_of(topic)
    if not clients:
        log.info("transaction check for %s: no gRPC producer of it is connected", topic)
        return None
    ext = request.ext
    offset_msg_id = ext.get("offsetMsgId") or half.offset_msg_id
    transaction_id = f"{ext.get('brokerName', '')} {offset_msg_id} {ext.get('tranStateTableOffset', '')}"
    message = incoming(
        half, topic=topic, namespace="", receipt_handle=None, invisible_ms=None, delivery_attempt=1
    )
    command = spb.TelemetryCommand(
        recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
            message=message, transaction_id=transaction_id
        )
    )
    push = clients[0].push
    if push is not None:
        push(command)
    return None


def producer_heartbeat(client_id: str, groups: list[str]) -> RemotingCommand:
    body = orjson.dumps(
        {"clientID": client_id, "producerDataSet": [{"groupName": g} for g in groups], "consumerDataSet": []}
    )
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, body)
