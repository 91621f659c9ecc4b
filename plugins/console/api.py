"""What the console shows and does, as JSON-ready values, through the admin client only.

The console talks to a cluster the way ``trocket admin`` does (NameServer first, then the
brokers it names), so it can watch a cluster it does not run in. Every method returns plain
dicts and lists; errors are :class:`~trocket.admin.AdminError` or :class:`ConsoleError` with a
sentence for the page, never a traceback.
"""

from __future__ import annotations

import base64
import time
import zlib
from collections.abc import Callable
from typing import Any

import attrs

from trocket import Message, Producer
from trocket.admin import AdminClient, AdminError
from trocket.admin import retries as dlq
from trocket.admin.message_trace import query_trace
from wire import record
from wire.record import StoredMessage
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from wire.remoting.signature import SessionCredentials
from wire.trace_data import TRACE_TOPIC

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SYSTEM_TOPICS = frozenset(
    {
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "rmq_sys_wheel_timer",
        "OFFSET_MOVED_EVENT",
        "TBW102",
        "SELF_TEST_TOPIC",
        "BenchmarkTest",
        "RMQ_SYS_TRACE_TOPIC",
    }
)
"""RocketMQ's system topics (clients may not send to them), shown under the "system" filter."""
TOPIC_KINDS = ("normal", "retry", "dlq", "system")
TRACE_STEPS = {"normal": "sent", "retry": "retry", "dlq": "dead letter"}
TIMELINE_STEPS = {"Pub": "sent", "EndTransaction": "transaction ended", "SubAfter": "consumed"}
PERMS = {"6": "read and write", "4": "read only", "2": "write only"}
MAX_TIME_RANGE_MESSAGES = 2000
"""Messages a time-range query returns at most (the page paginates them)."""
BODY_PREVIEW = 4096
"""Bytes of a body the console shows as text; longer bodies are cut (the page says so)."""


class ConsoleError(ValueError):
    """A request the console refuses before asking the cluster (a missing or bad field)."""


def topic_kind(topic: str) -> str:
    if topic.startswith(RETRY_PREFIX):
        return "retry"
    if topic.startswith(DLQ_PREFIX):
        return "dlq"
    if topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_") or topic.startswith("RMQ_SYS_"):
        return "system"
    return "normal"


def message_view(message: StoredMessage) -> dict[str, Any]:
    """A stored message as the message page shows it: headers, properties and the body as
    text when it is UTF-8 (base64 otherwise)."""
    try:
        payload = message.payload
    except zlib.error as error:  # a body flagged compressed that does not inflate: show why
        payload, problem = message.body, f"the body does not inflate: {error}"
    else:
        problem = ""
    shown = payload[:BODY_PREVIEW]
    try:
        body, encoding = shown.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(shown).decode("ascii"), "base64"
    properties = dict(message.properties)
    return {
        "msgId": properties.get("UNIQ_KEY", message.offset_msg_id),
        "offsetMsgId": message.offset_msg_id,
        "topic": message.topic,
        "queueId": message.queue_id,
        "queueOffset": message.queue_offset,
        "tags": properties.get("TAGS", ""),
        "keys": properties.get("KEYS", ""),
        "bornHost": f"{message.born_host[0]}:{message.born_host[1]}",
        "storeHost": f"{message.store_host[0]}:{message.store_host[1]}",
        "bornTimestamp": message.born_timestamp,
        "storeTimestamp": message.store_timestamp,
        "reconsumeTimes": message.reconsume_times,
        "size": message.size,
        "bodySize": len(payload),
        "body": body,
        "bodyEncoding": encoding,
        "bodyCut": len(payload) > BODY_PREVIEW,
        "bodyProblem": problem,
        "properties": properties,
    }


ADMIN_CHECK_TIMEOUT = 5.0
"""Seconds a sign-in's admin check waits for each master."""


@attrs.define(eq=False)
class ConsoleApi:
    """One console's view of one cluster."""

    admin: AdminClient
    clock: Callable[[], float] = time.time

    # --- who the console is (ACL) --------------------------------------------------------------

    def signed_in_as(self) -> dict[str, str]:
        credentials = self.admin.remoting.credentials
        return {"accessKey": credentials.access_key if credentials is not None else ""}

    async def sign_in(self, fields: dict[str, Any]) -> dict[str, str]:
        """Sign every later request with these keys, once every master accepted them for an
        admin request. The keys are checked on a connection of their own and installed only
        after: a wrong secret or a key without admin rights is refused and changes nothing, not
        even for a moment (requests of the signed-in admin meanwhile keep their keys)."""
        access_key = _required_text(fields, "accessKey")
        secret_key = str(fields.get("secretKey") or "")
        if not secret_key:
            raise ConsoleError("secretKey is required")
        candidate = SessionCredentials(access_key, secret_key)
        masters = await self.admin.master_addrs()
        async with RemotingClient.open(credentials=candidate, tls=self.admin.remoting.tls) as probe:
            for address in masters.values():
                await _check_admin(probe, address)
        self.admin.remoting.credentials = candidate
        return self.signed_in_as()

    def sign_out(self) -> dict[str, str]:
        self.admin.remoting.credentials = None
        return self.signed_in_as()

    # --- cluster ------------------------------------------------------------------------------

    async def cluster(self) -> dict[str, Any]:
        """Every broker the NameServer knows, with its role and figures (``clusterList``)."""
        info = await self.admin.cluster_info()
        brokers = []
        for cluster, names in sorted(info.get("clusterAddrTable", {}).items()):
            for name in sorted(names):
                addresses = info["brokerAddrTable"].get(name, {}).get("brokerAddrs", {})
                for broker_id, address in sorted(addresses.items(), key=lambda item: int(item[0])):
                    row: dict[str, Any] = {
                        "cluster": cluster,
                        "brokerName": name,
                        "brokerId": int(broker_id),
                        "addr": address,
                    }
                    try:
                        runtime = await self.admin.broker_runtime_info(address)
                    except AdminError as error:
                        if error.code == ResponseCode.NO_PERMISSION:
                            raise  # ACL: the page asks for a key rather than calling it down
                        row.update(state=f"unreachable: {error}", reachable=False)
                    else:
                        row.update(_runtime_row(runtime), reachable=True)
                    brokers.append(row)
        return {"brokers": brokers, "sampledAt": int(self.clock() * 1000)}

    # --- topics -------------------------------------------------------------------------------

    async def topics(self, kind: str = "", query: str = "") -> list[dict[str, str]]:
        if kind and kind not in TOPIC_KINDS:
            raise ConsoleError(f"unknown topic kind {kind!r}: use one of {', '.join(TOPIC_KINDS)}")
        names = sorted(await self.admin.topic_list())
        info = await self.admin.cluster_info()
        # A broker registers a topic named after its cluster and one after itself (RocketMQ's
        # route probes): system topics too.
        own = set(info.get("clusterAddrTable", {})) | set(info.get("brokerAddrTable", {}))
        rows = [{"topic": t, "kind": "system" if t in own else topic_kind(t)} for t in names]
        return [
            row
            for row in rows
            if (not kind or row["kind"] == kind) and (not query or query.lower() in row["topic"].lower())
        ]

    async def topic(self, topic: str) -> dict[str, Any]:
        """Route, per-queue status and the groups that consume the topic."""
        route = await self.admin.route(topic)
        status = await self.admin.topic_status(topic)
        consuming = [
            {"group": group, "diff": sum(row["diff"] for row in rows)}
            for group, rows in (await self._consuming(topic)).items()
        ]
        return {
            "topic": topic,
            "kind": topic_kind(topic),
            "route": route,
            "status": status,
            "groups": consuming,
        }

    async def update_topic(self, fields: dict[str, Any]) -> dict[str, Any]:
        topic = _required_text(fields, "topic")
        read = _count(fields, "readQueueNums", 8)
        write = _count(fields, "writeQueueNums", 8)
        perm = str(fields.get("perm", "6"))
        if perm not in PERMS:
            raise ConsoleError(
                f"perm must be 6 (read and write), 4 (read only) or 2 (write only), not {perm!r}"
            )
        masters = await self.admin.master_addrs()
        if not masters:
            raise ConsoleError("the NameServer knows no master broker to create the topic on")
        answers = []
        for name, address in sorted(masters.items()):
            await self.admin.update_topic(address, topic, read=read, write=write, perm=int(perm), order=False)
            answers.append(f"create topic {topic} on {name} ({address}) success")
        return {"topic": topic, "answers": answers}

    async def delete_topic(self, topic: str) -> dict[str, Any]:
        brokers = await self.admin.delete_topic(topic, None)
        return {"topic": topic, "answers": [f"delete topic {topic} from {', '.join(brokers)} success"]}

    async def send_test_message(self, topic: str, fields: dict[str, Any]) -> dict[str, Any]:
        """One message through the SDK's producer, as an application would send it."""
        body = str(fields.get("body", ""))
        if not body:
            raise ConsoleError("the test message needs a body")
        key = str(fields.get("key") or "").strip()
        message = Message(
            topic, body.encode(), tags=str(fields.get("tag") or "") or None, keys=[key] if key else []
        )
        remoting = self.admin.remoting  # the console's keys (signed in or from the environment) and TLS
        async with Producer(
            "CONSOLE_PRODUCER_GROUP",
            list(self.admin.namesrv_addrs),
            credentials=remoting.credentials,
            tls=remoting.tls,
        ) as producer:
            result = await producer.send(message)
        return {
            "sendStatus": result.status.name,
            "msgId": result.msg_id,
            "offsetMsgId": result.offset_msg_id,
            "queue": f"{result.queue.broker_name}/{result.queue.queue_id}",
            "queueOffset": result.queue_offset,
        }

    # --- consumer groups ----------------------------------------------------------------------

    async def groups(self, query: str = "") -> list[dict[str, Any]]:
        """Consumer groups: every group with a retry topic (made at its first subscription)."""
        rows = []
        for group in await self._group_names():
            if query and query.lower() not in group.lower():
                continue
            try:
                progress = await self.admin.consumer_progress(group)
            except AdminError:
                progress = []
            rows.append(
                {
                    "group": group,
                    "topics": sorted({row["topic"] for row in progress}),
                    "diff": sum(row["diff"] for row in progress),
                }
            )
        return rows

    async def group(self, group: str) -> dict[str, Any]:
        try:
            progress = await self.admin.consumer_progress(group)
        except AdminError as error:
            progress, problem = [], str(error)
        else:
            problem = ""
        try:
            connection: dict[str, Any] | None = await self.admin.consumer_connection(group)
        except AdminError:
            connection = None
        return {
            "group": group,
            "progress": progress,
            "diff": sum(row["diff"] for row in progress),
            "popInFlight": sum(row.get("popInFlight", 0) for row in progress),
            "progressProblem": problem,
            "connections": connection["connectionSet"] if connection else [],
            "subscriptions": connection["subscriptionTable"] if connection else {},
        }

    async def reset_offset(self, group: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Commit the group's offsets of a topic back (or forward) to a time (``resetOffsetByTime``)."""
        topic = _required_text(fields, "topic")
        timestamp = _whole(fields, "timestamp")
        rows = await self.admin.reset_offset_by_time(group, topic, timestamp)
        answers = [
            f"{row['brokerName']}/{row['queueId']}: {row['oldOffset']} -> {row['newOffset']}" for row in rows
        ]
        return {"group": group, "topic": topic, "answers": [f"reset {group} on {topic}:", *answers]}

    async def delete_group(self, group: str) -> dict[str, Any]:
        brokers = await self.admin.delete_sub_group(group)
        return {
            "group": group,
            "answers": [f"delete subscription group {group} from {', '.join(brokers)} success"],
        }

    # --- messages and dead letters ------------------------------------------------------------

    async def messages_by_time(
        self, topic: str, begin_ms: int, end_ms: int, limit: int = MAX_TIME_RANGE_MESSAGES
    ) -> dict[str, Any]:
        """Messages of ``topic`` stored in [begin, end), queue by queue, at most ``limit`` (the
        answer says when it was cut)."""
        if not topic:
            raise ConsoleError("a time-range query needs a topic")
        if end_ms <= begin_ms:
            raise ConsoleError("the end of the time range must come after its beginning")
        masters = await self.admin.master_addrs()
        found: list[dict[str, Any]] = []
        cut = False
        for queue in await self.admin.topic_status(topic):
            address = masters.get(queue["brokerName"])
            if address is None:
                continue
            offset = await self.admin.offset_by_time(address, topic, queue["queueId"], begin_ms)
            end = await self.admin.offset_by_time(address, topic, queue["queueId"], end_ms)
            while offset < end and not cut:
                messages, next_offset = await self.admin.pull(
                    address, topic, queue["queueId"], offset, min(32, end - offset)
                )
                for message in messages:
                    if begin_ms <= message.store_timestamp < end_ms:
                        if len(found) == limit:
                            cut = True
                            break
                        found.append(message_view(message))
                if next_offset <= offset:
                    break
                offset = next_offset
        found.sort(key=lambda m: (m["storeTimestamp"], m["queueId"], m["queueOffset"]))
        return {"messages": found, "cut": cut, "limit": limit}

    async def messages_by_key(self, topic: str, key: str) -> list[dict[str, Any]]:
        if not topic or not key:
            raise ConsoleError("a key query needs a topic and a key")
        return [message_view(m) for m in await self.admin.query_by_key(topic, key)]

    async def message_by_id(self, msg_id: str, topic: str = "") -> dict[str, Any]:
        """By offset message id, or by the producer's message id (``UNIQ_KEY``) within ``topic``."""
        try:
            record.parse_offset_msg_id(msg_id)
        except ValueError as error:
            if not topic:
                raise ConsoleError(
                    f"{msg_id[:40]!r} is not an offset message id ({error}); to find a producer's "
                    "message id, give its topic too"
                ) from None
        else:
            try:
                return message_view(await self.admin.view_message(msg_id))
            except AdminError as error:
                if not topic:
                    raise AdminError(
                        f"{error}; to find a producer's message id, give its topic too"
                    ) from None
        found = await self.admin.query_by_key(topic, msg_id, unique=True)
        if not found:
            raise AdminError(f"no message of topic {topic!r} has the id {msg_id!r}")
        return message_view(found[0])

    async def trace(self, msg_id: str, topic: str) -> list[dict[str, Any]]:
        """Where a producer's message went: the original, then each copy a consumer group sent
        back (``%RETRY%<group>``, once per retry) or gave up on (``%DLQ%<group>``), by store
        time. Copies keep the producer's id (``UNIQ_KEY``), so each topic is asked for it."""
        if not msg_id or not topic:
            raise ConsoleError("a trace needs the message id and its topic")
        places = [topic]
        for group in await self._consuming(topic):
            places += [RETRY_PREFIX + group, DLQ_PREFIX + group]
        steps = []
        for place in places:
            try:
                found = await self.admin.query_by_key(place, msg_id, unique=True)
            except AdminError:
                continue  # no such retry or dead-letter topic: nothing went there
            kind = topic_kind(place)
            group = place.removeprefix(RETRY_PREFIX).removeprefix(DLQ_PREFIX) if kind != "normal" else ""
            steps += [{**message_view(m), "step": TRACE_STEPS[kind], "group": group} for m in found]
        if not steps:
            raise AdminError(f"no message of topic {topic!r} has the id {msg_id!r}")
        return sorted(steps, key=lambda step: step["storeTimestamp"])

    async def message_trace(self, msg_id: str, trace_topic: str = "") -> list[dict[str, Any]]:
        """The message's trace as a timeline (RocketMQ 4.x message trace, written by traced
        clients): its send, how its transaction ended, and each group's consumption with its
        cost, result and attempt, by time. Empty when no traced client touched it."""
        if not msg_id:
            raise ConsoleError("a message trace needs the message id")
        try:
            views = await query_trace(self.admin, msg_id, trace_topic=trace_topic or TRACE_TOPIC)
        except AdminError as error:
            raise AdminError(
                f"{error}: no message trace is kept here (a broker's traceTopicEnable makes the topic; "
                "clients write to it with trace=True)"
            ) from None
        return [
            {
                "step": TIMELINE_STEPS.get(view.type, view.type),
                "type": view.type,
                "group": view.group,
                "clientHost": view.client_host,
                "timestamp": view.timestamp,
                "costMs": view.cost_ms,
                "status": view.status,
                "retryTimes": view.retry_times,
                "storeHost": view.store_host,
            }
            for view in views
            if view.type != "SubBefore"  # its SubAfter says the same and more
        ]

    async def _consuming(self, topic: str) -> dict[str, list[dict[str, Any]]]:
        """Group → its progress rows on ``topic``, for the groups with committed offsets there."""
        consuming = {}
        for group in await self._group_names():
            try:
                progress = await self.admin.consumer_progress(group)
            except AdminError:
                continue  # no progress anywhere yet
            rows = [row for row in progress if row["topic"] == topic]
            if rows:
                consuming[group] = rows
        return consuming

    async def _group_names(self) -> list[str]:
        """Every consumer group with a retry topic (made at its first subscription)."""
        topics = await self.admin.topic_list()
        return sorted(t[len(RETRY_PREFIX) :] for t in topics if t.startswith(RETRY_PREFIX))

    async def dead_letters(self, group: str) -> list[dict[str, Any]]:
        if DLQ_PREFIX + group not in await self.admin.topic_list():
            return []  # the group never dead-lettered anything: no %DLQ% topic yet
        return [message_view(m) for m in await dlq.dlq_messages(self.admin, group)]

    async def resend_dead_letter(self, group: str, msg_id: str) -> dict[str, Any]:
        if not msg_id:
            raise ConsoleError("which dead letter: give its msgId")
        return await dlq.resend_dlq_message(self.admin, group, msg_id)

    async def schedule(self) -> list[dict[str, Any]]:
        return await dlq.schedule_progress(self.admin, list((await self.admin.master_addrs()).values()))


def _runtime_row(runtime: dict[str, str]) -> dict[str, Any]:
    def number(key: str) -> int:
        try:
            return int(runtime.get(key, "0"))
        except ValueError:
            return 0

    return {
        "role": runtime.get("brokerRole", ""),
        "version": runtime.get("brokerVersionDesc", ""),
        "state": runtime.get("state", ""),
        "putTotal": number("putMessageTimesTotal"),
        "getTotal": number("getMessageTimesTotal"),
        "storageBytes": number("commitLogMaxOffset") - number("commitLogMinOffset"),
        "diskRatio": runtime.get("commitLogDiskRatio", ""),
        "connections": number("connections"),
        "topics": number("topics"),
        "uptimeSeconds": number("uptimeSeconds"),
    }


async def _check_admin(client: RemotingClient, address: str) -> None:
    """Whether ``client``'s keys may send admin requests to the broker at ``address``: an
    admin-only request (``UPDATE_AND_CREATE_TOPIC``) whose content the broker refuses after the
    ACL check (an empty topic), so it changes nothing either way. ``NO_PERMISSION`` is the ACL's
    refusal (raised as :class:`~trocket.admin.AdminError`); the topic's refusal means the keys
    passed."""
    request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": ""})
    response = await client.invoke(address, request, ADMIN_CHECK_TIMEOUT)
    if response.code == ResponseCode.NO_PERMISSION:
        raise AdminError(response.remark, code=response.code)


def _required_text(fields: dict[str, Any], name: str) -> str:
    raw = fields.get(name)
    if raw is not None and not isinstance(raw, str):
        raise ConsoleError(f"{name} must be a string, not {type(raw).__name__}")
    value = (raw or "").strip()
    if not value:
        raise ConsoleError(f"{name} is required")
    return value


def _count(fields: dict[str, Any], name: str, default: int) -> int:
    value = whole_number(fields.get(name, default), name)
    if not 1 <= value <= 1024:
        raise ConsoleError(f"{name} must be between 1 and 1024, not {value}")
    return value


def _whole(fields: dict[str, Any], name: str) -> int:
    return whole_number(fields.get(name), name)


def whole_number(raw: object, name: str, meaning: str = "a whole number") -> int:
    """``raw`` as an int, or a :class:`ConsoleError` saying what ``name`` must be. Only a JSON
    integer or a string of digits (a query parameter) is one: ``true``, ``2.9`` and ``"2.9"``
    are refused, not read as 1, 2 or 2 (``"timestamp": false`` once reset a group to 0)."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lstrip("-").isdigit():
        return int(raw.strip())
    shown = repr(raw)
    raise ConsoleError(f"{name} must be {meaning}, not {shown if len(shown) <= 40 else shown[:40] + '...'}")
