"""ReceiveMessage, AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue, over
the broker's POP (plugins/pop).

A gRPC receipt handle is the broker's ``extraInfo`` with the message's commit-log offset
appended (forwarding to the DLQ sends the message back by that offset). A handle past its
invisible time is refused with INVALID_RECEIPT_HANDLE before the broker is asked: the message
is being delivered again.

Push consumers receive with ``auto_renew``: the proxy gives them ``default_invisible_time``
and extends it while the client lives (:class:`Renewals`), so a slow listener does not get its
message delivered twice; their acks and changes use the newest handle of the message.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import attrs
from google.protobuf.timestamp_pb2 import Timestamp

from plugins.proxy.core import ProxyCore, now_ms
from plugins.proxy.status import Code, ProxyProblem, from_remoting, ok
from plugins.proxy.translate import incoming
from wire.grpc_v2 import definition_pb2 as pb
from wire.grpc_v2 import service_pb2 as spb
from wire.pop_receipt import BadReceipt, ReceiptHandle, parse_offset_info, receipt_handles
from wire.record import decode_records
from wire.remoting import RemotingCommand, RequestCode, ResponseCode

log = logging.getLogger(__name__)

MAX_RENEW_MS = 3 * 3600 * 1000
"""A push consumer's message is renewed for at most this long (then it is delivered again)."""
RENEW_AHEAD_MS = 10_000


@attrs.frozen
class GrpcHandle:
    """A gRPC receipt handle: the broker's handle and the message's commit-log offset."""

    broker: ReceiptHandle
    commit_log_offset: int

    def format(self) -> str:
        return f"{self.broker.format()} {self.commit_log_offset}"

    @classmethod
    def parse(cls, text: str) -> GrpcHandle:
        """:raises ProxyProblem: INVALID_RECEIPT_HANDLE for anything else."""
        fields = text.split(" ")
        try:
            if len(fields) != 9:
                raise BadReceipt(f"receipt handle {text!r} is not this proxy's")
            return cls(ReceiptHandle.parse(" ".join(fields[:8])), int(fields[8]))
        except (BadReceipt, ValueError) as error:
            raise ProxyProblem(Code.INVALID_RECEIPT_HANDLE, str(error)) from None


@attrs.define(eq=False)
class Renewal:
    client_id: str
    group: str
    topic: str
    handle: GrpcHandle
    started_ms: int


@attrs.define(eq=False)
class Renewals:
    """The newest handle of every auto-renewed message, by (group, message id)."""

    items: dict[tuple[str, str], Renewal] = attrs.field(factory=dict)

    def newest(self, group: str, message_id: str, given: GrpcHandle) -> GrpcHandle:
        renewal = self.items.get((group, message_id))
        return renewal.handle if renewal is not None else given

    def stop(self, group: str, message_id: str) -> None:
        self.items.pop((group, message_id), None)

    def forget_client(self, client_id: str) -> None:
        for key in [k for k, r in self.items.items() if r.client_id == client_id]:
            del self.items[key]


def _timestamp_now() -> Timestamp:
    stamp = Timestamp()
    stamp.FromMilliseconds(now_ms())
    return stamp


async def receive_message(
    core: ProxyCore, request: spb.ReceiveMessageRequest, metadata: Mapping[str, str], peer: str
) -> Any:
    client_id = core.client_id(metadata)
    config = core.config
    group, topic = request.group.name, request.message_queue.topic.name
    if not group:
        raise ProxyProblem(Code.ILLEGAL_CONSUMER_GROUP, "the consumer group is empty")
    if request.filter_expression.type == pb.SQL:
        raise ProxyProblem(Code.ILLEGAL_FILTER_EXPRESSION, "SQL92 filters are not supported; use TAG")
    expression = request.filter_expression.expression or "*"
    batch = request.batch_size
    if not 0 < batch <= config.max_receive_batch:
        raise ProxyProblem(
            Code.BAD_REQUEST, f"batch_size {batch} is not between 1 and {config.max_receive_batch}"
        )
    if request.auto_renew:
        invisible_ms = int(config.default_invisible_time * 1000)
    else:
        invisible_ms = request.invisible_duration.ToMilliseconds()
        low, high = int(config.min_invisible_time * 1000), int(config.max_invisible_time * 1000)
        if not low <= invisible_ms <= high:
            raise ProxyProblem(
                Code.ILLEGAL_INVISIBLE_TIME,
                f"invisible duration {invisible_ms} ms is not within [{low}, {high}] ms",
            )
    poll_ms = min(
        request.long_polling_timeout.ToMilliseconds() if request.HasField("long_polling_timeout") else 0,
        int(config.max_long_polling * 1000),
    )
    broker_name = request.message_queue.broker.name
    orderly = await core.fifo(group, topic)
    route = await core.route(topic)
    if broker_name not in route.masters:
        broker_name = sorted(route.masters)[0] if route.masters else ""
    if not broker_name:
        raise ProxyProblem(Code.NOT_FOUND, f"topic {topic!r} has no live master")
    pop = RemotingCommand.request(
        RequestCode.POP_MESSAGE,
        {
            "consumerGroup": group,
            "topic": topic,
            "queueId": -1,
            "maxMsgNums": batch,
            "invisibleTime": invisible_ms,
            "pollTime": poll_ms,
            "bornTime": now_ms(),
            "initMode": 1,
            "expType": "TAG",
            "exp": expression,
            "order": "true" if orderly else "false",
        },
    )
    response = await core.invoke_broker(
        broker_name, route.masters[broker_name], pop, "receive", poll_ms / 1000 + config.request_timeout
    )
    if response.code in (ResponseCode.POLLING_TIMEOUT, ResponseCode.NO_MESSAGE, ResponseCode.PULL_NOT_FOUND):
        return [
            spb.ReceiveMessageResponse(
                status=pb.Status(code=Code.MESSAGE_NOT_FOUND, message="no new message")
            ),
            spb.ReceiveMessageResponse(delivery_timestamp=_timestamp_now()),
        ]
    if response.code != ResponseCode.SUCCESS:
        raise ProxyProblem(from_remoting(response.code), f"receive: {response.remark or response.code}")
    stored = decode_records(response.body)
    try:
        handles = receipt_handles(
            response.ext, [(m.topic, m.queue_id, m.queue_offset, m.properties) for m in stored], broker_name
        )
    except BadReceipt as error:
        raise ProxyProblem(Code.INTERNAL_SERVER_ERROR, f"receive: {error}") from None
    out = [spb.ReceiveMessageResponse(status=ok())]
    started = now_ms()
    # An orderly pop counts deliveries per queue (orderCountInfo): a message delivered again
    # keeps its reconsume times, so its attempt is that count + 1.
    counts = parse_offset_info(response.ext.get("orderCountInfo", "")) if orderly else {}
    for message, handle in zip(stored, handles, strict=True):
        earlier = counts.get((handle.topic_type, handle.queue_id), [0])[0]
        grpc_handle = GrpcHandle(handle, message.physical_offset)
        converted = incoming(
            message,
            topic=topic,
            namespace=request.message_queue.topic.resource_namespace,
            receipt_handle=grpc_handle.format(),
            invisible_ms=invisible_ms,
            delivery_attempt=max(message.reconsume_times, earlier) + 1,
        )
        if request.auto_renew:
            message_id = converted.system_properties.message_id
            core.renewals.items[(group, message_id)] = Renewal(client_id, group, topic, grpc_handle, started)
        out.append(spb.ReceiveMessageResponse(message=converted))
    out.append(spb.ReceiveMessageResponse(delivery_timestamp=_timestamp_now()))
    return out


def _live(handle: GrpcHandle) -> None:
    if handle.broker.expired(now_ms()):
        raise ProxyProblem(
            Code.INVALID_RECEIPT_HANDLE, "the receipt handle has expired: the message is delivered again"
        )


def _handle_header(group: str, topic: str, handle: GrpcHandle) -> dict[str, object]:
    return {
        "consumerGroup": group,
        "topic": topic,
        "queueId": handle.broker.queue_id,
        "extraInfo": handle.broker.format(),
        "offset": handle.broker.queue_offset,
    }


async def _ack_one(core: ProxyCore, group: str, topic: str, entry: spb.AckMessageEntry) -> pb.Status:
    try:
        handle = core.renewals.newest(group, entry.message_id, GrpcHandle.parse(entry.receipt_handle))
        _live(handle)
        address = await core.broker_address(topic, handle.broker.broker_name)
        request = RemotingCommand.request(RequestCode.ACK_MESSAGE, _handle_header(group, topic, handle))
        response = await core.invoke_broker(handle.broker.broker_name, address, request, "ack")
    except ProxyProblem as problem:
        return problem.status()
    if response.code != ResponseCode.SUCCESS:
        return pb.Status(code=from_remoting(response.code), message=response.remark or "ack refused")
    core.renewals.stop(group, entry.message_id)
    return ok()


async def ack_message(
    core: ProxyCore, request: spb.AckMessageRequest, metadata: Mapping[str, str], peer: str
) -> Any:
    core.client_id(metadata)
    group, topic = request.group.name, request.topic.name
    results = []
    for entry in request.entries:
        status = await _ack_one(core, group, topic, entry)
        results.append(
            spb.AckMessageResultEntry(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=status
            )
        )
    codes = {r.status.code for r in results}
    if len(results) == 1 or len(codes) == 1:
        top = results[0].status if results else ok()
    else:
        top = pb.Status(code=Code.MULTIPLE_RESULTS, message="entries have their own status")
    return spb.AckMessageResponse(status=top, entries=results)


async def change_invisible_duration(
    core: ProxyCore, request: spb.ChangeInvisibleDurationRequest, metadata: Mapping[str, str], peer: str
) -> Any:
    core.client_id(metadata)
    group, topic = request.group.name, request.topic.name
    handle = core.renewals.newest(group, request.message_id, GrpcHandle.parse(request.receipt_handle))
    _live(handle)
    invisible_ms = request.invisible_duration.ToMilliseconds()
    if not 0 <= invisible_ms <= int(core.config.max_invisible_time * 1000):
        raise ProxyProblem(
            Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible_ms} ms is out of range"
        )
    renewed = await _change(core, group, topic, handle, invisible_ms)
    core.renewals.stop(group, request.message_id)
    return spb.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=renewed.format())


async def _change(
    core: ProxyCore, group: str, topic: str, handle: GrpcHandle, invisible_ms: int
) -> GrpcHandle:
    address = await core.broker_address(topic, handle.broker.broker_name)
    header = {**_handle_header(group, topic, handle), "invisibleTime": invisible_ms}
    request = RemotingCommand.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header)
    response = await core.invoke_broker_ok(
        handle.broker.broker_name, address, request, "change invisible duration"
    )
    broker = attrs.evolve(
        handle.broker,
        ck_queue_offset=handle.broker.queue_offset,
        pop_time=int(response.ext["popTime"]),
        invisible_time=int(response.ext["invisibleTime"]),
        revive_qid=int(response.ext["reviveQid"]),
    )
    return GrpcHandle(broker, handle.commit_log_offset)


async def forward_to_dead_letter_queue(
    core: ProxyCore,
    request: spb.ForwardMessageToDeadLetterQueueRequest,
    metadata: Mapping[str, str],
    peer: str,
) -> Any:
    core.client_id(metadata)
    group, topic = request.group.name, request.topic.name
    handle = core.renewals.newest(group, request.message_id, GrpcHandle.parse(request.receipt_handle))
    _live(handle)
    address = await core.broker_address(topic, handle.broker.broker_name)
    back = RemotingCommand.request(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {
            "group": group,
            "offset": handle.commit_log_offset,
            "delayLevel": -1,
            "originMsgId": request.message_id,
            "originTopic": topic,
            "maxReconsumeTimes": request.max_delivery_attempts,
        },
    )
    await core.invoke_broker_ok(handle.broker.broker_name, address, back, "forward to the dead-letter queue")
    status = await _ack_one(
        core, group, topic, spb.AckMessageEntry(message_id=request.message_id, receipt_handle=handle.format())
    )
    return spb.ForwardMessageToDeadLetterQueueResponse(status=status if status.code != Code.OK else ok())


async def renew_due(core: ProxyCore) -> int:
    """Extend the invisible time of auto-renewed messages about to become visible, while their
    client lives; the number renewed."""
    now = now_ms()
    renewed = 0
    alive = core.clients.sessions
    for key, renewal in list(core.renewals.items.items()):
        if renewal.client_id not in alive or now - renewal.started_ms > MAX_RENEW_MS:
            core.renewals.items.pop(key, None)
            continue
        if renewal.handle.broker.next_visible_time - now > RENEW_AHEAD_MS:
            continue
        try:
            renewal.handle = await _change(
                core,
                renewal.group,
                renewal.topic,
                renewal.handle,
                int(core.config.default_invisible_time * 1000),
            )
            renewed += 1
        except ProxyProblem as problem:
            log.info("renewal of %s in %s stopped: %s", key[1], renewal.group, problem.message)
            core.renewals.items.pop(key, None)
    return renewed
