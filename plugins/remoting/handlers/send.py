"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320).

A batch is recognised by code 320 or by ``batch`` = ``"true"``/``"1"`` (the C++ 1.2 client
marks batches only with ``"1"`` on code 10). Every success code (0, 10, 11, 12) carries
``msgId``, ``queueId`` and ``queueOffset``: the C++ client crashes without them.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import trio

from kernel.model import Message, MessageBatch, PutResult, decode_properties
from plugins.remoting.config import RemotingConfig
from plugins.remoting.handlers.common import PUT_STATUS_CODES, RequestProblem
from plugins.remoting.topics import PERM_WRITE, TopicConfig, topic_problem
from wire.names import send_forbidden_topic
from wire.remoting import Connection, RemotingCommand, RequestCode, ResponseCode, parse_bool
from wire.wire_batch import MalformedBatch, WireBatch

if TYPE_CHECKING:
    from plugins.remoting.service import BrokerNetwork

log = logging.getLogger(__name__)

BORN_HOST = "send.born_host"
"""Connection attribute: the peer as a record's born host, parsed once per connection."""

V2_FIELDS = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "bname",
}


SHORT_KEYS = {long: short for short, long in V2_FIELDS.items()}
"""V2's one-letter key of each long-form field name."""
_TOPIC = SHORT_KEYS["topic"]
_QUEUE_ID = SHORT_KEYS["queueId"]
_BORN_TIMESTAMP = SHORT_KEYS["bornTimestamp"]
_SYS_FLAG = SHORT_KEYS["sysFlag"]
_RECONSUME_TIMES = SHORT_KEYS["reconsumeTimes"]
_BATCH = SHORT_KEYS["batch"]
_PRODUCER_GROUP = SHORT_KEYS["producerGroup"]
_PROPERTIES = SHORT_KEYS["properties"]
_FLAG = SHORT_KEYS["flag"]
_DEFAULT_TOPIC_QUEUE_NUMS = SHORT_KEYS["defaultTopicQueueNums"]
_DEFAULT_TOPIC = SHORT_KEYS["defaultTopic"]


def send_header(request: RemotingCommand) -> dict[str, str]:
    """The header of any send code keyed as V2 keys it (one letter, :data:`V2_FIELDS`). A V2
    header (every V2 header carries the topic, ``b``) is read as it came, without a dict of
    expanded names built per send; long names (SEND_MESSAGE, and batches some clients send
    with them) are mapped to the letters."""
    ext = request.ext
    if _TOPIC in ext:
        return ext
    return dict(zip(map(SHORT_KEYS.get, ext, ext), ext.values(), strict=True))


async def handle_send(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    prepared = await _prepare(net, connection, request)
    if isinstance(prepared, RemotingCommand):
        return prepared
    batch, queue_id = prepared
    result = await net.lone_sends.put_from(connection, batch, sender_idle=connection.requests_in_flight == 1)
    _count(net, request, batch, result, trio.current_time())
    return _answer(net.config, request, queue_id, result)


async def handle_send_group(
    net: BrokerNetwork, connection: Connection, requests: Sequence[RemotingCommand]
) -> list[RemotingCommand]:
    """Sends read from one connection at once (a client with many in flight): each is checked
    and answered on its own, and the broker appends the accepted ones with one store call
    (``Broker.put_group``)."""
    return await handle_sends_across(net, [(connection, request) for request in requests])


async def handle_sends_across(
    net: BrokerNetwork, sends: Sequence[tuple[Connection, RemotingCommand]]
) -> list[RemotingCommand]:
    """Sends with the connections they came on (one connection's sends read together, or the
    lone sends of many connections read in one pass of the server's read reactor): each is
    checked and answered on its own, and the accepted ones are appended with one store call
    (``Broker.put_group``)."""
    answers: list[RemotingCommand | None] = []
    batches: list[MessageBatch] = []
    queue_ids: list[int] = []
    for connection, request in sends:
        try:
            prepared = await _prepare(net, connection, request)
        except RequestProblem as problem:
            prepared = problem.response_to(request)
        except trio.Cancelled:
            raise
        except Exception as error:  # as the router answers a lone request: its neighbours live on
            log.exception("send from %s failed", connection.peer)
            prepared = request.response(ResponseCode.SYSTEM_ERROR, remark=f"{type(error).__name__}: {error}")
        if isinstance(prepared, RemotingCommand):
            answers.append(prepared)
            continue
        answers.append(None)
        batches.append(prepared[0])
        queue_ids.append(prepared[1])
    put = await net.runtime.put_group(batches) if batches else []
    now = trio.current_time()
    accepted = (request for (_, request), answer in zip(sends, answers, strict=True) if answer is None)
    for batch, result, request in zip(batches, put, accepted, strict=True):
        _count(net, request, batch, result, now)
    results = iter(put)
    ids = iter(queue_ids)
    return [
        answer if answer is not None else _answer(net.config, request, next(ids), next(results))
        for (_, request), answer in zip(sends, answers, strict=True)
    ]


async def _prepare(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> tuple[MessageBatch, int] | RemotingCommand:
    """The request as a batch and its queue id, or the answer refusing it."""
    header = send_header(request)
    if net.is_slave:
        # The kernel refuses a slave's puts too; refusing here first keeps a send from
        # auto-creating its topic on the slave (topics are the master's, copied every 10 s).
        broker = net.runtime.ctx.broker
        return request.response(
            ResponseCode.SERVICE_NOT_AVAILABLE,
            remark=f"the broker[{net.broker_addr}] is a SLAVE (broker {broker.broker_name} id "
            f"{broker.broker_id}): it takes no messages; send to its master",
        )
    if not net.writable:
        return request.response(
            ResponseCode.NO_PERMISSION,
            remark=f"the broker[{net.broker_addr}] sending message is forbidden (brokerPermission "
            f"{net.config.broker_permission})",
        )
    topic = header.get(_TOPIC, "")
    problem = topic_problem(topic)
    if problem:
        return request.response(ResponseCode.MESSAGE_ILLEGAL, remark=problem)
    forbidden = send_forbidden_topic(topic)
    if forbidden:
        return request.response(ResponseCode.NO_PERMISSION, remark=forbidden)
    config = await _topic_for_send(net, topic, header)
    if not config.perm & PERM_WRITE:
        return request.response(
            ResponseCode.NO_PERMISSION, remark=f"the topic[{topic}] sending message is forbidden"
        )
    queue_id = _int(header, _QUEUE_ID, -1)
    if queue_id < 0:
        queue_id = random.randrange(config.write_queue_nums)
    elif queue_id >= max(config.write_queue_nums, config.read_queue_nums):
        return request.response(
            ResponseCode.SYSTEM_ERROR,
            remark=f"request queueId[{queue_id}] is illegal, topic [{topic}] has "
            f"writeQueueNums {config.write_queue_nums} readQueueNums {config.read_queue_nums}",
        )
    born_host = connection.attributes.get(BORN_HOST)
    if born_host is None:
        host, _, port = connection.peer.rpartition(":")
        born_host = connection.attributes[BORN_HOST] = (host, int(port))
    born = _int(header, _BORN_TIMESTAMP, 0)
    sys_flag = _int(header, _SYS_FLAG, 0)
    reconsume = _int(header, _RECONSUME_TIMES, 0)
    is_batch = request.code == RequestCode.SEND_BATCH_MESSAGE or parse_bool(header.get(_BATCH))
    if is_batch:
        try:
            encoded = WireBatch.decode(
                request.body,
                topic=topic,
                queue_id=queue_id,
                sys_flag=sys_flag,
                born_timestamp=born,
                born_host=born_host,
                reconsume_times=reconsume,
            )
        except MalformedBatch as error:
            return request.response(ResponseCode.MESSAGE_ILLEGAL, remark=str(error))
        if not len(encoded):
            return request.response(ResponseCode.MESSAGE_ILLEGAL, remark="the batch is empty")
        if encoded.smallest_body() == 0:
            empty = int(np.argmax(encoded.body_len == 0))
            return request.response(
                ResponseCode.MESSAGE_ILLEGAL, remark=f"the body of batch message {empty} is empty"
            )
        batch = MessageBatch(encoded, header.get(_PRODUCER_GROUP, ""))
    else:
        if not request.body:
            return request.response(ResponseCode.MESSAGE_ILLEGAL, remark="the message body is empty")
        properties = decode_properties(header.get(_PROPERTIES, "").encode())
        messages = [
            Message(
                topic,
                request.body,
                queue_id,
                _int(header, _FLAG, 0),
                properties,
                sys_flag,
                born,
                born_host,
                reconsume,
            )
        ]
        batch = MessageBatch(messages, header.get(_PRODUCER_GROUP, ""))
    return batch, queue_id


def _count(
    net: BrokerNetwork, request: RemotingCommand, batch: MessageBatch, result: PutResult, now: float
) -> None:
    """``TOPIC_PUT_NUMS``/``SIZE`` for statsAll: once per request, the body's length as its size
    (``now``: read once for a group of sends)."""
    if result.status.stored:
        payload = batch.payload
        topic = getattr(payload, "topic", None) or payload[0].topic
        net.stats.put(topic, len(batch), len(request.body), now)


def _answer(
    config: RemotingConfig, request: RemotingCommand, queue_id: int, result: PutResult
) -> RemotingCommand:
    code = PUT_STATUS_CODES[result.status]
    if not result.status.stored or result.append is None:
        return request.response(code, remark=result.remark or result.status.value)
    appended = result.append
    return request.response(
        code,
        {
            "msgId": ",".join(appended.msg_ids),
            "queueId": str(queue_id),  # strings already: the header's fast path (string_fields)
            "queueOffset": str(appended.queue_offsets[0]),
            "MSG_REGION": config.region_id,
            "TRACE_ON": "true" if config.trace_on else "false",
        },
        remark=result.remark or None,
    )


async def _topic_for_send(net: BrokerNetwork, topic: str, header: dict[str, str]) -> TopicConfig:
    config = net.topics.get(topic)
    if config is not None:
        return config
    broker = net.runtime.ctx.broker
    if broker.auto_create_topic_enable:
        queue_nums = _int(header, _DEFAULT_TOPIC_QUEUE_NUMS, 0) or broker.default_topic_queue_nums
        created = net.topics.create_from_default(topic, header.get(_DEFAULT_TOPIC, "TBW102"), queue_nums)
        if created is not None:
            await net.topics_changed()
            return created
    raise RequestProblem(
        ResponseCode.TOPIC_NOT_EXIST,
        f"topic[{topic}] not exist, apply first please! (autoCreateTopicEnable="
        f"{str(broker.auto_create_topic_enable).lower()})",
    )


def _int(header: dict[str, str], key: str, default: int) -> int:
    """The integer under V2 key ``key`` (an error names the field by its long name)."""
    value = header.get(key)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise RequestProblem(
            ResponseCode.MESSAGE_ILLEGAL, f"header field {V2_FIELDS[key]!r} must be an integer, got {value!r}"
        ) from None
