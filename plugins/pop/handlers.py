"""RocketMQ 5's POP requests on the broker's remoting port: POP_MESSAGE (200050), ACK_MESSAGE
(200051), BATCH_ACK_MESSAGE (200151) and CHANGE_MESSAGE_INVISIBLETIME (200053), with
RocketMQ's header fields and answers, so RocketMQ 5 remoting clients and the gRPC proxy use
them alike."""

from __future__ import annotations

import base64
import json
from typing import Any

import attrs

from kernel.context import BrokerRuntime
from plugins.pop.service import INIT_MAX, POP_SERVICE, PopRefused, PopRequest, PopService
from wire.pop_receipt import (
    BadReceipt,
    ReceiptHandle,
    msg_offset_info,
    order_count_info,
    real_topic,
    start_offset_info,
)
from wire.remoting import RemotingCommand, ResponseCode, parse_bool
from wire.remoting.headers import RequestProblem, int_field, required, valid_group, valid_topic
from wire.subscription import Subscription

FOUND, NO_MESSAGE = "FOUND", "NO_MESSAGE_IN_QUEUE"
"""The remark of a POP answer: RocketMQ's ``GetMessageStatus`` name."""


def _service(runtime: BrokerRuntime) -> PopService:
    service = runtime.ctx.stash.get(POP_SERVICE, None)
    if service is None:
        raise RequestProblem(ResponseCode.SYSTEM_ERROR, "the pop service is not running")
    return service


async def _answer(request: RemotingCommand, work: Any) -> RemotingCommand:
    try:
        return await work
    except RequestProblem as problem:
        return problem.response_to(request)
    except PopRefused as refused:
        return request.response(refused.code, remark=refused.remark)


def _checked_names(request: RemotingCommand) -> tuple[str, str]:
    group, topic = required(request, "consumerGroup", "topic")
    return valid_group(group, "consumerGroup"), valid_topic(topic, "topic")


def _topic_queue(service: PopService, topic: str, queue_id: int, *, pop: bool) -> None:
    queues = service.directory().topic_queues(topic)
    if queues is None:
        raise RequestProblem(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
    if pop and not queues.readable:
        raise RequestProblem(ResponseCode.NO_PERMISSION, f"the topic[{topic}] peeking message is forbidden")
    if queue_id >= queues.read_queue_nums or (queue_id < 0 and not pop):
        raise RequestProblem(
            ResponseCode.INVALID_PARAMETER if pop else ResponseCode.MESSAGE_ILLEGAL,
            f"queueId[{queue_id}] is illegal, topic:[{topic}] "
            f"topicConfig.readQueueNums:[{queues.read_queue_nums}]",
        )


# --- POP_MESSAGE ----------------------------------------------------------------------------


async def serve_pop(runtime: BrokerRuntime, request: RemotingCommand) -> RemotingCommand:
    """The broker's port and the proxy beside the broker (in process) both ask here."""
    return await _answer(request, _pop(runtime, request))


async def _pop(runtime: BrokerRuntime, request: RemotingCommand) -> RemotingCommand:
    service = _service(runtime)
    group, topic = _checked_names(request)
    queue_id = int_field(request, "queueId")
    max_count = int_field(request, "maxMsgNums")
    invisible_ms = int_field(request, "invisibleTime")
    poll_ms = int_field(request, "pollTime", 0)
    if not 0 < max_count <= service.config.max_pop_messages:
        raise RequestProblem(
            ResponseCode.INVALID_PARAMETER,
            f"maxMsgNums {max_count} must be between 1 and {service.config.max_pop_messages}",
        )
    if invisible_ms <= 0:
        raise RequestProblem(ResponseCode.INVALID_PARAMETER, f"invisibleTime {invisible_ms} must be positive")
    _topic_queue(service, topic, queue_id, pop=True)
    settings = service.consumer_offsets().group_settings(group)
    if settings is None:
        raise RequestProblem(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist"
        )
    if not settings.consume_enable:
        raise RequestProblem(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
    expression_type = request.ext.get("expType") or "TAG"
    if expression_type.upper() != "TAG":
        raise RequestProblem(
            ResponseCode.SUBSCRIPTION_PARSE_FAILED,
            f"expression type {expression_type} is not supported; use TAG",
        )
    answer = await service.pop(
        PopRequest(
            group,
            topic,
            queue_id,
            max_count,
            invisible_ms,
            max(0, poll_ms),
            Subscription.parse(topic, request.ext.get("exp")),
            int_field(request, "initMode", INIT_MAX),
            parse_bool(request.ext.get("order")),
        )
    )
    header: dict[str, object] = {
        "popTime": answer.pop_time,
        "invisibleTime": answer.invisible_ms,
        "reviveQid": answer.revive_qid,
        "restNum": answer.rest,
    }
    if answer.reads:
        header["startOffsetInfo"] = start_offset_info(answer.reads)
        header["msgOffsetInfo"] = msg_offset_info(answer.reads)
        if request.ext.get("order") and parse_bool(request.ext.get("order")):
            header["orderCountInfo"] = order_count_info(answer.reads)
    if not answer.found:
        return request.response(ResponseCode.POLLING_TIMEOUT, header, remark=NO_MESSAGE)
    return request.response(ResponseCode.SUCCESS, header, b"".join(answer.records), remark=FOUND)


# --- ACK_MESSAGE, BATCH_ACK_MESSAGE ----------------------------------------------------------


def _handle(request: RemotingCommand) -> ReceiptHandle:
    (extra,) = required(request, "extraInfo")
    try:
        return ReceiptHandle.parse(extra)
    except BadReceipt as error:
        raise RequestProblem(ResponseCode.INVALID_PARAMETER, str(error)) from None


async def serve_ack(runtime: BrokerRuntime, request: RemotingCommand) -> RemotingCommand:
    """The broker's port and the proxy beside the broker (in process) both ask here."""
    return await _answer(request, _ack(runtime, request))


@attrs.frozen
class _Handled:
    """The message an ACK or CHANGE_INVISIBLETIME header names."""

    group: str
    topic: str
    queue_id: int
    offset: int
    handle: ReceiptHandle


def _handled(service: PopService, request: RemotingCommand) -> _Handled:
    group, topic = _checked_names(request)
    queue_id, offset = int_field(request, "queueId"), int_field(request, "offset")
    handle = _handle(request)
    _topic_queue(service, real_topic(topic, group, handle.topic_type), queue_id, pop=False)
    return _Handled(group, topic, queue_id, offset, handle)


async def _ack(runtime: BrokerRuntime, request: RemotingCommand) -> RemotingCommand:
    service = _service(runtime)
    named = _handled(service, request)
    await service.ack(named.group, named.topic, named.queue_id, named.handle, named.offset)
    return request.response()


async def serve_batch_ack(runtime: BrokerRuntime, request: RemotingCommand) -> RemotingCommand:
    """The broker's port and the proxy beside the broker (in process) both ask here."""
    return await _answer(request, _batch_ack(runtime, request))


async def _batch_ack(runtime: BrokerRuntime, request: RemotingCommand) -> RemotingCommand:
    """RocketMQ's ``BatchAckMessageRequestBody``: ``{"brokerName", "acks": [{c, t, r, so, q, rq,
    pt, it, b}]}`` where ``b`` is a Java ``BitSet`` of offsets from ``so`` (base64, as fastjson
    writes bytes). Every entry is tried; the answer is the first refusal, or SUCCESS."""
    service = _service(runtime)
    try:
        body = json.loads(request.body)
        acks = body["acks"]
        if not isinstance(acks, list) or not acks:
            raise ValueError("no acks")
        broker_name = str(body.get("brokerName") or service.broker_name)
    except (ValueError, KeyError, TypeError) as error:
        return request.response(ResponseCode.NO_MESSAGE, remark=f"batch ack body is not usable: {error}")
    refusal: RemotingCommand | None = None
    for entry in acks:
        try:
            group = valid_group(entry.get("c", entry.get("consumerGroup")), "c")
            topic = valid_topic(entry.get("t", entry.get("topic")), "t")
            retry = str(entry.get("r", entry.get("retry", "0")))
            start = int(entry.get("so", entry.get("startOffset")))
            queue_id = int(entry.get("q", entry.get("queueId")))
            handle = ReceiptHandle(
                start,
                int(entry.get("pt", entry.get("popTime"))),
                int(entry.get("it", entry.get("invisibleTime", 0))),
                int(entry.get("rq", entry.get("reviveQueueId"))),
                int(retry) if retry.isdigit() else 0,
                broker_name,
                queue_id,
            )
            for bit in _bits(entry.get("b", entry.get("bitSet"))):
                await service.ack(group, topic, queue_id, handle, start + bit)
        except (TypeError, ValueError, AttributeError) as error:
            refusal = refusal or request.response(
                ResponseCode.INVALID_PARAMETER, remark=f"batch ack entry: {error}"
            )
        except RequestProblem as problem:
            refusal = refusal or problem.response_to(request)
        except PopRefused as refused:
            refusal = refusal or request.response(refused.code, remark=refused.remark)
    return refusal or request.response()


def _bits(value: Any) -> list[int]:
    """The set bits of a Java ``BitSet.toByteArray()`` (little-endian), base64 or a list."""
    if isinstance(value, list):
        data = bytes(value)
    elif isinstance(value, str):
        data = base64.b64decode(value, validate=True)
    else:
        raise ValueError(f"bitSet {value!r} is neither base64 nor a byte list")
    number = int.from_bytes(data, "little")
    return [i for i in range(number.bit_length()) if number >> i & 1]


# --- CHANGE_MESSAGE_INVISIBLETIME ------------------------------------------------------------


async def serve_change_invisible(runtime: BrokerRuntime, request: RemotingCommand) -> RemotingCommand:
    """The broker's port and the proxy beside the broker (in process) both ask here."""
    return await _answer(request, _change(runtime, request))


async def _change(runtime: BrokerRuntime, request: RemotingCommand) -> RemotingCommand:
    service = _service(runtime)
    invisible_ms = int_field(request, "invisibleTime")
    if invisible_ms < 0:
        raise RequestProblem(
            ResponseCode.INVALID_PARAMETER, f"invisibleTime {invisible_ms} must not be negative"
        )
    named = _handled(service, request)
    renewed = await service.change_invisible(
        named.group, named.topic, named.queue_id, named.handle, named.offset, invisible_ms
    )
    return request.response(
        ResponseCode.SUCCESS,
        {
            "popTime": renewed.pop_time,
            "invisibleTime": renewed.invisible_time,
            "reviveQid": renewed.revive_qid,
        },
    )
