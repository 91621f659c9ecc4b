"""What a request needs: the topics and groups it touches, with the permission each needs, and
whether only an admin account may send it (RocketMQ's ``PlainAccessValidator.parse`` and
``Permission.ADMIN_CODE``, plus batch sends, which RocketMQ 4.9 forgot).

A group ``g`` is the resource ``%RETRY%g``. A send to a retry topic (a consumer republishing
a message it failed) needs SUB on the group, not PUB on the topic.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from plugins.acl.plain_acl import PUB, RETRY_PREFIX, SUB
from wire.remoting import RemotingCommand, RequestCode

ADMIN_CODES = frozenset(
    {
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_AND_CREATE_TOPIC_LIST,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
        RequestCode.DELETE_ACL_CONFIG,
        RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
        RequestCode.CONTROLLER_ELECT_MASTER,
        RequestCode.CLEAN_BROKER_DATA,
    }
)
"""Requests only an ``admin: true`` account may send (RocketMQ's list, the ACL edits, and the
controller's elections and cleanups)."""


class UnreadableRequest(ValueError):
    """The request's resources cannot be told (a heartbeat body that is not JSON)."""


def group(name: str | None) -> str:
    return RETRY_PREFIX + (name or "")


def needed(request: RemotingCommand) -> dict[str, int]:
    """Resource → permission the request needs (empty: only the signature is checked)."""
    find = _NEEDS.get(request.code)
    return find(request.ext, request.body) if find is not None else {}


def _send(ext: dict[str, str], body: bytes) -> dict[str, int]:
    topic = ext.get("topic", "")
    if topic.startswith(RETRY_PREFIX):
        return {group(ext.get("producerGroup")): SUB}
    return {topic: PUB}


def _send_v2(ext: dict[str, str], body: bytes) -> dict[str, int]:
    topic = ext.get("b", "")
    if topic.startswith(RETRY_PREFIX):
        return {group(ext.get("a")): SUB}
    return {topic: PUB}


def _group_and_topic(ext: dict[str, str], body: bytes) -> dict[str, int]:
    return {group(ext.get("consumerGroup")): SUB, ext.get("topic", ""): SUB}


def _group_if_named(ext: dict[str, str], body: bytes) -> dict[str, int]:
    name = ext.get("consumerGroup")
    return {group(name): SUB} if name else {}


def _heartbeat(ext: dict[str, str], body: bytes) -> dict[str, int]:
    """A consumer's heartbeat needs SUB on its group and on every topic it subscribes."""
    try:
        data = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError as error:
        raise UnreadableRequest(f"the heartbeat body is not JSON: {error}") from None
    out: dict[str, int] = {}
    consumers = data.get("consumerDataSet") if isinstance(data, dict) else None
    for consumer in consumers if isinstance(consumers, list) else []:
        if not isinstance(consumer, dict):
            continue
        out[group(str(consumer.get("groupName", "")))] = SUB
        subscriptions = consumer.get("subscriptionDataSet")
        for subscription in subscriptions if isinstance(subscriptions, list) else []:
            if isinstance(subscription, dict) and subscription.get("topic"):
                out[str(subscription["topic"])] = SUB
    return out


def _pop(ext: dict[str, str], body: bytes) -> dict[str, int]:
    """POP, ACK and CHANGE_INVISIBLETIME: SUB on the group and on the topic (a handle of a
    message from the group's POP retry topic names that topic: the group's right covers it)."""
    topic = ext.get("topic", "")
    needs = {group(ext.get("consumerGroup")): SUB}
    if not topic.startswith(RETRY_PREFIX):
        needs[topic] = SUB
    return needs


def _batch_ack(ext: dict[str, str], body: bytes) -> dict[str, int]:
    """BATCH_ACK_MESSAGE names its groups and topics in the body (``acks[].c`` and ``.t``)."""
    try:
        data = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError as error:
        raise UnreadableRequest(f"the batch ack body is not JSON: {error}") from None
    acks = data.get("acks") if isinstance(data, dict) else None
    out: dict[str, int] = {}
    for ack in acks if isinstance(acks, list) else []:
        if isinstance(ack, dict):
            out.update(_pop({"consumerGroup": str(ack.get("c", "")), "topic": str(ack.get("t", ""))}, b""))
    return out


_NEEDS: dict[int, Callable[[dict[str, str], bytes], dict[str, int]]] = {
    RequestCode.SEND_MESSAGE: _send,
    RequestCode.SEND_MESSAGE_V2: _send_v2,
    RequestCode.SEND_BATCH_MESSAGE: _send_v2,
    RequestCode.CONSUMER_SEND_MSG_BACK: lambda ext, body: {group(ext.get("group")): SUB},
    RequestCode.PULL_MESSAGE: lambda ext, body: {
        ext.get("topic", ""): SUB,
        group(ext.get("consumerGroup")): SUB,
    },
    RequestCode.QUERY_MESSAGE: lambda ext, body: {ext.get("topic", ""): SUB},
    RequestCode.UPDATE_CONSUMER_OFFSET: _group_and_topic,
    RequestCode.QUERY_CONSUMER_OFFSET: _group_and_topic,
    RequestCode.UNREGISTER_CLIENT: _group_if_named,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _group_if_named,
    RequestCode.HEART_BEAT: _heartbeat,
    RequestCode.POP_MESSAGE: _pop,
    RequestCode.ACK_MESSAGE: _pop,
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: _pop,
    RequestCode.BATCH_ACK_MESSAGE: _batch_ack,
}
"""Request code → what it touches; a dictionary, since this runs before every request."""
