"""What a request needs: the topics and groups it touches, with the permission each needs, and
whether only an admin account may send it (RocketMQ's ``PlainAccessValidator.parse`` and
``Permission.ADMIN_CODE``, plus batch sends, which RocketMQ 4.9 forgot).

A group ``g`` is the resource ``%RETRY%g``. A send to a retry topic (a consumer republishing
a message it failed) needs SUB on the group, not PUB on the topic.
"""

from __future__ import annotations

import orjson

from kernel.remoting import RemotingCommand, RequestCode
from plugins.acl.plain_acl import PUB, RETRY_PREFIX, SUB

ADMIN_CODES = frozenset(
    {
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
        RequestCode.DELETE_ACL_CONFIG,
        RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
    }
)
"""Requests only an ``admin: true`` account may send (RocketMQ's list, and the ACL edits)."""


class UnreadableRequest(ValueError):
    """The request's resources cannot be told (a heartbeat body that is not JSON)."""


def group(name: str | None) -> str:
    return RETRY_PREFIX + (name or "")


def needed(request: RemotingCommand) -> dict[str, int]:
    """Resource → permission the request needs (empty: only the signature is checked)."""
    ext = request.ext
    code = request.code
    if code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        v2 = code != RequestCode.SEND_MESSAGE
        topic = ext.get("b" if v2 else "topic", "")
        if topic.startswith(RETRY_PREFIX):
            return {group(ext.get("a" if v2 else "producerGroup")): SUB}
        return {topic: PUB}
    if code == RequestCode.CONSUMER_SEND_MSG_BACK:
        return {group(ext.get("group")): SUB}
    if code == RequestCode.PULL_MESSAGE:
        return {ext.get("topic", ""): SUB, group(ext.get("consumerGroup")): SUB}
    if code == RequestCode.QUERY_MESSAGE:
        return {ext.get("topic", ""): SUB}
    if code in (RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.QUERY_CONSUMER_OFFSET):
        return {group(ext.get("consumerGroup")): SUB, ext.get("topic", ""): SUB}
    if code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        name = ext.get("consumerGroup")
        return {group(name): SUB} if name else {}
    if code == RequestCode.HEART_BEAT:
        return _heartbeat(request.body)
    return {}


def _heartbeat(body: bytes) -> dict[str, int]:
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
