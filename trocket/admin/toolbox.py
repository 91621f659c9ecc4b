"""mqadmin's operator commands that compose the admin client's requests: topic permissions,
which clusters hold a topic, reading a topic or a queue over a time range, how a group's queues
would be allocated, copying or skipping a group's offsets, and the NameServer's KV config.

Each function takes an open :class:`~trocket.admin.client.AdminClient` and returns plain data
(rows, lines) for the CLI to print; none keeps state.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any

import attrs

from kernel.model import MessageQueue
from trocket.admin.client import AdminClient, AdminError
from trocket.client.consumer.allocation import resolve_strategy
from trocket.client.errors import ClientError
from wire.record import StoredMessage
from wire.remoting import RequestCode, ResponseCode
from wire.remoting.admin_json import loads as loads_admin_json
from wire.remoting.admin_json import split_queue_key

PERMS = {2: "write", 4: "read", 6: "read and write"}


async def topic_config(client: AdminClient, broker_addr: str, topic: str) -> dict[str, Any]:
    """One broker's configuration of ``topic`` (``GET_TOPIC_CONFIG``).

    :raises AdminError: the broker does not have the topic.
    """
    response = await client.call(
        broker_addr, RequestCode.GET_TOPIC_CONFIG, {"topic": topic}, ok=(0, ResponseCode.TOPIC_NOT_EXIST)
    )
    if response.code == ResponseCode.TOPIC_NOT_EXIST:
        raise AdminError(f"topic {topic!r} does not exist on broker {broker_addr}")
    return dict(json.loads(response.body))


async def update_topic_perm(client: AdminClient, topic: str, perm: int, brokers: Sequence[str]) -> list[str]:
    """Set ``topic``'s permission on each broker, keeping its queues, order and attributes;
    one line per broker (mqadmin ``updateTopicPerm``)."""
    if perm not in PERMS:
        raise AdminError(f"perm must be 2 (write), 4 (read) or 6 (read and write), got {perm}")
    lines = []
    for address in brokers:
        config = await topic_config(client, address, topic)
        old = int(config.get("perm", 6))
        if old == perm:
            lines.append(f"new perm equals to the old one on {address}: {perm}")
            continue
        attributes = ",".join(f"+{k}={v}" for k, v in sorted((config.get("attributes") or {}).items()))
        await client.update_topic(
            address,
            topic,
            read=int(config["readQueueNums"]),
            write=int(config["writeQueueNums"]),
            perm=perm,
            order=bool(config.get("order", False)),
            attributes=attributes,
        )
        lines.append(f"update topic perm from {old} to {perm} in {address} success.")
    return lines


async def topic_clusters(client: AdminClient, topic: str) -> list[str]:
    """The clusters whose brokers serve ``topic`` (mqadmin ``topicClusterList``)."""
    route = await client.route(topic)
    info = await client.cluster_info()
    names = {b["brokerName"] for b in route["brokerDatas"]}
    return sorted(cluster for cluster, brokers in info["clusterAddrTable"].items() if names & set(brokers))


@attrs.frozen
class QueueRange:
    broker_name: str
    address: str
    queue_id: int
    begin: int
    end: int


async def queue_ranges(
    client: AdminClient,
    topic: str,
    *,
    broker_name: str | None = None,
    queue_id: int | None = None,
    begin_ms: int | None = None,
    end_ms: int | None = None,
) -> list[QueueRange]:
    """The offsets of each queue of ``topic`` (or of one) stored within [begin_ms, end_ms)
    (the whole queue when not given), found with ``SEARCH_OFFSET_BY_TIMESTAMP``."""
    masters = await client.master_addrs()
    ranges = []
    for row in await client.topic_status(topic):
        if broker_name is not None and row["brokerName"] != broker_name:
            continue
        if queue_id is not None and row["queueId"] != queue_id:
            continue
        address = masters.get(row["brokerName"])
        if address is None:
            continue
        begin, end = int(row["minOffset"]), int(row["maxOffset"])
        if begin_ms is not None:
            begin = max(begin, await client.offset_by_time(address, topic, row["queueId"], begin_ms))
        if end_ms is not None:
            end = min(end, await client.offset_by_time(address, topic, row["queueId"], end_ms))
        ranges.append(QueueRange(row["brokerName"], address, row["queueId"], begin, max(begin, end)))
    if broker_name is not None and not ranges:
        raise AdminError(f"topic {topic!r} has no queue {queue_id} on broker {broker_name!r}")
    return ranges


async def read_range(
    client: AdminClient, topic: str, queue: QueueRange, tags: frozenset[str] | None = None
) -> AsyncIterator[StoredMessage]:
    """The messages of one queue range, in offset order; ``tags``: only these (None: all)."""
    offset = queue.begin
    while offset < queue.end:
        messages, next_offset = await client.pull(queue.address, topic, queue.queue_id, offset, 32)
        for message in messages:
            if message.queue_offset >= queue.end:
                return
            if tags is None or message.tags in tags:
                yield message
        if next_offset <= offset:
            return
        offset = next_offset


def parse_tags(expression: str) -> frozenset[str] | None:
    """mqadmin's ``-s`` sub-expression: ``*`` (every message) or ``TagA || TagB``."""
    expression = expression.strip()
    if expression in ("", "*"):
        return None
    return frozenset(tag.strip() for tag in expression.split("||") if tag.strip())


def tag_counts(messages: Sequence[StoredMessage]) -> list[dict[str, Any]]:
    """mqadmin ``printMsgByQueue -p``: how many messages carry each tag, most first."""
    counts = Counter(message.tags or "" for message in messages)
    return [{"#Tag": tag, "#Count": count} for tag, count in counts.most_common()]


async def allocate(
    client: AdminClient, topic: str, client_ids: Sequence[str], strategy: str
) -> dict[str, Any]:
    """Which queues of ``topic`` each of ``client_ids`` would consume under ``strategy`` (mqadmin
    ``allocateMQ``, AllocateMessageQueueAveragely by default); the same code the SDK's
    consumers run, so the answer is what they will do."""
    if not client_ids:
        raise AdminError("give at least one client id (-i a,b,c)")
    route = await client.route(topic)
    queues = sorted(
        (
            MessageQueue(topic, data["brokerName"], queue_id)
            for data in route["queueDatas"]
            if data["perm"] & 4
            for queue_id in range(int(data["readQueueNums"]))
        ),
        key=lambda q: (q.topic, q.broker_name, q.queue_id),  # RocketMQ's MessageQueue order
    )
    try:
        function = resolve_strategy(strategy)
    except ClientError as error:
        raise AdminError(str(error)) from None
    ids = sorted(client_ids)
    return {
        "result": {
            cid: [
                {"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id}
                for q in function("TOOLS_ALLOCATE", cid, queues, ids)
            ]
            for cid in ids
        }
    }


async def committed_offsets(client: AdminClient, group: str, topic: str) -> dict[tuple[str, int], int]:
    """``group``'s committed offset of each queue of ``topic`` ((broker, queue) → offset)."""
    return {
        (row["brokerName"], row["queueId"]): int(row["consumerOffset"])
        for row in await client.consumer_progress(group)
        if row["topic"] == topic
    }


async def clone_group_offset(
    client: AdminClient, source: str, target: str, topic: str
) -> list[dict[str, Any]]:
    """Commit ``source``'s offsets of ``topic`` as ``target``'s, queue by queue (mqadmin
    ``cloneGroupOffset``). Stop ``target``'s consumers first: running ones commit what they hold."""
    offsets = await committed_offsets(client, source, topic)
    if not offsets:
        raise AdminError(f"group {source!r} has no offsets of topic {topic!r}")
    masters = await client.master_addrs()
    rows = []
    for (broker_name, queue_id), offset in sorted(offsets.items()):
        address = masters.get(broker_name)
        if address is None:
            continue
        await client.commit_offset(address, target, topic, queue_id, offset)
        rows.append({"#brokerName": broker_name, "#queueId": queue_id, "#offset": offset})
    return rows


async def skip_accumulated(
    client: AdminClient, group: str, topic: str, cluster: str | None
) -> list[dict[str, Any]]:
    """Commit the end of every queue of ``topic`` as ``group``'s offset (mqadmin
    ``skipAccumulatedMessage``): the backlog is skipped, new messages are consumed."""
    masters = await client.master_addrs(cluster)
    rows = []
    for row in await client.topic_status(topic):
        address = masters.get(row["brokerName"])
        if address is None:
            continue
        end = int(row["maxOffset"])
        await client.commit_offset(address, group, topic, row["queueId"], end)
        rows.append({"#brokerName": row["brokerName"], "#queueId": row["queueId"], "#offset": end})
    if not rows:
        raise AdminError(
            f"topic {topic!r} has no queue on a master" + (f" of cluster {cluster!r}" if cluster else "")
        )
    return rows


async def put_kv(client: AdminClient, namespace: str, key: str, value: str) -> None:
    """``PUT_KV_CONFIG`` on every NameServer (mqadmin ``updateKvConfig``)."""
    for address in client.namesrv_addrs:
        await client.call(
            address, RequestCode.PUT_KV_CONFIG, {"namespace": namespace, "key": key, "value": value}
        )


async def delete_kv(client: AdminClient, namespace: str, key: str) -> None:
    """``DELETE_KV_CONFIG`` on every NameServer (mqadmin ``deleteKvConfig``)."""
    for address in client.namesrv_addrs:
        await client.call(address, RequestCode.DELETE_KV_CONFIG, {"namespace": namespace, "key": key})


async def kv_list(client: AdminClient, namespace: str) -> dict[str, str]:
    """The NameServer's KV config of ``namespace`` ({} when it has none)."""
    response = await client.call_namesrv(
        RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": namespace}, ok=(0, ResponseCode.QUERY_NOT_FOUND)
    )
    if response.code != 0:
        return {}
    return dict(json.loads(response.body).get("table", {}))


async def producer_connections(client: AdminClient, group: str, topic: str) -> list[dict[str, Any]]:
    """The producers of ``group`` online at the masters serving ``topic`` (mqadmin
    ``producerConnection``), one row per connection."""
    route = await client.route(topic)
    rows: list[dict[str, Any]] = []
    errors = []
    for data in route["brokerDatas"]:
        address = data["brokerAddrs"].get("0")
        if address is None:
            continue
        response = await client.call(
            address,
            RequestCode.GET_PRODUCER_CONNECTION_LIST,
            {"producerGroup": group},
            ok=(0, ResponseCode.SYSTEM_ERROR),
        )
        if response.code != 0:
            errors.append(response.remark or "")
            continue
        for connection in json.loads(response.body)["connectionSet"]:
            rows.append(
                {
                    "#Index": len(rows) + 1,
                    "#ClientId": connection["clientId"],
                    "#ClientAddr": connection["clientAddr"],
                    "#Language": connection["language"],
                    "#Version": connection["version"],
                    "#Broker": data["brokerName"],
                }
            )
    if not rows:
        raise AdminError(f"producer group {group!r} is not online" + (f" ({errors[0]})" if errors else ""))
    return rows


async def broker_consume_stats(
    client: AdminClient, broker_addr: str, *, orderly_only: bool = False, diff_level: int = 0
) -> dict[str, Any]:
    """Every group's lag on one broker (mqadmin ``brokerConsumeStats``): rows of queues whose
    lag is at least ``diff_level``, and the broker's total lag."""
    response = await client.call(
        broker_addr, RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": orderly_only, "timeoutMillis": 10_000}
    )
    data = loads_admin_json(response.body)
    rows = []
    for groups in data["consumeStatsList"]:
        for group, stats_list in groups.items():
            for stats in stats_list:
                for key, value in stats["offsetTable"].items():
                    topic, broker_name, queue_id = split_queue_key(key)
                    diff = value["brokerOffset"] - value["consumerOffset"]
                    if diff < diff_level:
                        continue
                    rows.append(
                        {
                            "#Topic": topic,
                            "#Group": group,
                            "#Broker Name": broker_name,
                            "#QID": queue_id,
                            "#Broker Offset": value["brokerOffset"],
                            "#Consumer Offset": value["consumerOffset"],
                            "#Diff": diff,
                            "#LastTime": value.get("lastTimestamp", 0),
                        }
                    )
    rows.sort(key=lambda r: (r["#Topic"], r["#Group"], r["#Broker Name"], r["#QID"]))
    return {
        "rows": rows,
        "totalDiff": int(data.get("totalDiff", 0)),
        "brokerAddr": data.get("brokerAddr", broker_addr),
    }


def _properties(body: bytes) -> dict[str, str]:
    from kernel.config.properties_file import parse_properties

    return parse_properties(body.decode("utf-8", "replace"), source="the answer")


async def broker_config(client: AdminClient, broker_addr: str) -> dict[str, str]:
    """A broker's effective settings (``GET_BROKER_CONFIG``), RocketMQ's keys where they exist."""
    return _properties((await client.call(broker_addr, RequestCode.GET_BROKER_CONFIG)).body)


async def update_broker_config(client: AdminClient, broker_addr: str, changes: dict[str, str]) -> None:
    """``UPDATE_BROKER_CONFIG``: applied and kept across restarts, or refused with the reason."""
    body = "".join(f"{key}={value}\n" for key, value in changes.items()).encode()
    await client.call(broker_addr, RequestCode.UPDATE_BROKER_CONFIG, body=body)


async def namesrv_configs(client: AdminClient) -> dict[str, dict[str, str]]:
    """Each NameServer's effective settings (``GET_NAMESRV_CONFIG``)."""
    return {
        address: _properties((await client.call(address, RequestCode.GET_NAMESRV_CONFIG)).body)
        for address in client.namesrv_addrs
    }


async def update_namesrv_config(client: AdminClient, changes: dict[str, str]) -> list[str]:
    """``UPDATE_NAMESRV_CONFIG`` on every NameServer given; their addresses."""
    body = "".join(f"{key}={value}\n" for key, value in changes.items()).encode()
    for address in client.namesrv_addrs:
        await client.call(address, RequestCode.UPDATE_NAMESRV_CONFIG, body=body)
    return list(client.namesrv_addrs)


async def consumer_running_info(client: AdminClient, group: str, client_id: str) -> dict[str, Any]:
    """One consumer's ``ConsumerRunningInfo`` (properties, subscriptions, each queue's
    ProcessQueueInfo), asked through a broker it heartbeats to (``GET_CONSUMER_RUNNING_INFO``)."""
    errors = []
    for address in (await client.master_addrs()).values():
        response = await client.call(
            address,
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            {"consumerGroup": group, "clientId": client_id, "jstackEnable": False},
            ok=(0, ResponseCode.SYSTEM_ERROR),
        )
        if response.code == 0:
            info = loads_admin_json(response.body)
            info["mqTable"] = [
                {"topic": t, "brokerName": b, "queueId": q, **value}
                for (t, b, q), value in sorted(
                    (split_queue_key(key), value) for key, value in info.get("mqTable", {}).items()
                )
            ]
            return dict(info)
        errors.append(response.remark or "")
    raise AdminError(
        f"consumer {client_id!r} of group {group!r} did not answer: {errors[0] if errors else 'no broker'}"
    )


async def consumer_status(client: AdminClient, group: str) -> dict[str, Any]:
    """Every online consumer of ``group`` with what it consumes (mqadmin ``consumerStatus``
    without ``-i``), and whether they all subscribe the same way (a group whose members differ
    rebalances against itself)."""
    connections = await client.consumer_connection(group)
    rows = []
    subscriptions = set()
    for index, connection in enumerate(sorted(connections["connectionSet"], key=lambda c: c["clientId"]), 1):
        info = await consumer_running_info(client, group, connection["clientId"])
        mine = frozenset((s["topic"], s["subString"]) for s in info.get("subscriptionSet", []))
        subscriptions.add(mine)
        rows.append(
            {
                "#Index": index,
                "#ClientId": connection["clientId"],
                "#Version": connection.get("version", ""),
                "#Language": connection.get("language", ""),
                "#Queues": len(info["mqTable"]),
                "#CachedMessages": sum(int(q.get("cachedMsgCount", 0)) for q in info["mqTable"]),
            }
        )
    return {"rows": rows, "sameSubscription": len(subscriptions) <= 1}


async def _stats(client: AdminClient, address: str, name: str, key: str) -> dict[str, Any] | None:
    response = await client.call(
        address, RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": key},
        ok=(0, ResponseCode.SYSTEM_ERROR),
    )  # fmt: skip
    return dict(json.loads(response.body)) if response.code == 0 else None


async def stats_all(
    client: AdminClient, topic: str | None = None, *, active_only: bool = False
) -> list[dict[str, Any]]:
    """mqadmin ``statsAll``: per topic and consuming group, the backlog, sends and gets per
    second over the last minute, and messages in and out over the last day, summed over the
    topic's masters (retry and dead-letter topics left out unless named)."""
    topics = [topic] if topic else [
        t for t in await client.topic_list() if not t.startswith(("%RETRY%", "%DLQ%"))
    ]  # fmt: skip
    rows = []
    for name in sorted(topics):
        try:
            route = await client.route(name)
        except AdminError:
            continue
        masters = [d["brokerAddrs"]["0"] for d in route["brokerDatas"] if "0" in d["brokerAddrs"]]
        in_tps, in_day, groups = 0.0, 0, set()
        for address in masters:
            put = await _stats(client, address, "TOPIC_PUT_NUMS", name)
            if put is not None:
                in_tps += put["statsMinute"]["tps"]
                in_day += put["statsDay"]["sum"]
            response = await client.call(address, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": name})
            groups |= set(json.loads(response.body)["groupList"])
        if not groups:
            if not active_only or in_day:
                rows.append(_stats_row(name, "", 0, in_tps, 0.0, in_day, "NO_CONSUMER"))
            continue
        for group in sorted(groups):
            out_tps, out_day, backlog = 0.0, 0, 0
            for address in masters:
                got = await _stats(client, address, "GROUP_GET_NUMS", f"{name}@{group}")
                if got is not None:
                    out_tps += got["statsMinute"]["tps"]
                    out_day += got["statsDay"]["sum"]
                response = await client.call(
                    address, RequestCode.GET_CONSUME_STATS, {"consumerGroup": group, "topic": name},
                    ok=(0, ResponseCode.SYSTEM_ERROR),
                )  # fmt: skip
                if response.code == 0:
                    table = loads_admin_json(response.body)["offsetTable"].values()
                    backlog += sum(v["brokerOffset"] - v["consumerOffset"] for v in table)
            if active_only and not (in_day or out_day):
                continue
            rows.append(_stats_row(name, group, backlog, in_tps, out_tps, in_day, out_day))
    return rows


def _stats_row(
    topic: str, group: str, backlog: int, in_tps: float, out_tps: float, in_day: int, out_day: int | str
) -> dict[str, Any]:
    return {
        "#Topic": topic,
        "#Consumer Group": group,
        "#Accumulation": backlog,
        "#InTPS": round(in_tps, 2),
        "#OutTPS": round(out_tps, 2),
        "#InMsg24Hour": in_day,
        "#OutMsg24Hour": out_day,
    }
