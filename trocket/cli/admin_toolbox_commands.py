"""``trocket admin`` commands for operators' daily work (issue 37): updateTopicPerm,
topicClusterList, printMsg, printMsgByQueue, allocateMQ, cloneGroupOffset,
skipAccumulatedMessage, producerConnection, brokerConsumeStats, updateKvConfig, deleteKvConfig;
flags as mqadmin's."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from trocket.admin import toolbox
from trocket.admin.client import AdminClient, AdminError
from trocket.cli.admin_args import boolean_arg, timestamp_arg
from trocket.cli.admin_render import format_time, message_json, print_json, print_lines, print_table

Register = Callable[..., argparse.ArgumentParser]
"""``admin_commands``' ``command(name, help, handler, render)``."""


def register(command: Register) -> None:
    p = command(
        "updateTopicPerm",
        "change a topic's permission (2 write, 4 read, 6 both)",
        update_topic_perm,
        print_lines,
    )
    _broker_or_cluster(p, "every master of a cluster")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-p", "--perm", type=int, required=True, help="2 write, 4 read, 6 both")

    p = command(
        "topicClusterList", "the clusters whose brokers serve a topic", topic_cluster_list, print_lines
    )
    p.add_argument("-t", "--topic", required=True)

    p = command(
        "printMsg", "every message of a topic (optionally within a time range)", print_msg, print_queues
    )
    p.add_argument("-t", "--topic", required=True)
    _read_options(p)

    p = command("printMsgByQueue", "the messages of one queue of a topic", print_msg_by_queue, print_queues)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-a", "--brokerName", required=True)
    p.add_argument("-i", "--queueId", type=int, required=True)
    _read_options(p)
    p.add_argument("-p", "--calculate", action="store_true", help="count the messages of each tag")

    p = command("allocateMQ", "which queues of a topic each consumer id would take", allocate_mq, print_json)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-i", "--ipList", required=True, help="comma-separated client ids")
    p.add_argument("--strategy", default="averagely", help="an allocation strategy name (default averagely)")

    p = command(
        "cloneGroupOffset",
        "copy a group's offsets of a topic to another group",
        clone_group_offset,
        print_table,
    )
    p.add_argument("-s", "--srcGroup", required=True)
    p.add_argument("-d", "--destGroup", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument(
        "-o",
        "--offline",
        default="",
        help="accepted for mqadmin compatibility; offsets are committed either way",
    )

    p = command(
        "skipAccumulatedMessage",
        "commit the end of every queue of a topic as a group's offset",
        skip_accumulated,
        print_table,
    )
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-c", "--cluster", default=None)
    p.add_argument("-f", "--force", default="", help="accepted for mqadmin compatibility")

    p = command("producerConnection", "a producer group's online clients", producer_connection, print_table)
    p.add_argument("-g", "--producerGroup", required=True)
    p.add_argument("-t", "--topic", required=True, help="a topic the group sends to (its brokers are asked)")

    p = command(
        "brokerConsumeStats", "every group's lag on one broker", broker_consume_stats, print_consume_stats
    )
    p.add_argument("-b", "--brokerAddr", required=True)
    p.add_argument(
        "-t", "--timeoutMillis", type=int, default=50_000, help="accepted for mqadmin compatibility"
    )
    p.add_argument("-l", "--level", type=int, default=0, help="only queues with at least this lag")
    p.add_argument("-o", "--order", type=boolean_arg, default=False, help="true: orderly groups only")

    p = command(
        "consumerStatus", "a group's clients, or one client's state", consumer_status, print_consumer_status
    )
    p.add_argument("-g", "--consumerGroup", required=True)
    p.add_argument("-i", "--clientId", help="one client: its properties, subscriptions and queues")
    p.add_argument("-s", "--jstack", default="false", help="accepted for mqadmin compatibility (no stacks)")

    p = command(
        "statsAll", "per topic and group: backlog, TPS in and out, messages in 24 h", stats_all, print_table
    )
    p.add_argument("-t", "--topic", help="one topic (default: every topic but retry and DLQ topics)")
    p.add_argument("-a", "--activeTopic", action="store_true", help="only topics with traffic in 24 h")

    p = command("getBrokerConfig", "a broker's effective settings", get_broker_config, print_configs)
    _broker_or_cluster(p, "every broker of a cluster, slaves included")

    p = command(
        "updateBrokerConfig", "change a running broker's setting (kept)", update_broker_config, print_lines
    )
    _broker_or_cluster(p, "every broker of a cluster, slaves included")
    p.add_argument("-k", "--key", required=True)
    p.add_argument("-v", "--value", required=True)

    p = command("getNamesrvConfig", "each NameServer's effective settings", get_namesrv_config, print_configs)

    p = command(
        "updateNamesrvConfig",
        "change a setting of the running NameServers",
        update_namesrv_config,
        print_lines,
    )
    p.add_argument("-k", "--key", required=True)
    p.add_argument("-v", "--value", required=True)

    p = command(
        "updateKvConfig", "set a NameServer KV config item on every NameServer", update_kv, print_lines
    )
    p.add_argument("-s", "--namespace", required=True)
    p.add_argument("-k", "--key", required=True)
    p.add_argument("-v", "--value", required=True)

    p = command(
        "deleteKvConfig", "delete a NameServer KV config item on every NameServer", delete_kv, print_lines
    )
    p.add_argument("-s", "--namespace", required=True)
    p.add_argument("-k", "--key", required=True)


def _broker_or_cluster(parser: argparse.ArgumentParser, cluster_help: str) -> None:
    """mqadmin's ``-b ADDR | -c CLUSTER``."""
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("-b", "--brokerAddr", help="one broker ip:port")
    target.add_argument("-c", "--clusterName", help=cluster_help)


def _read_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-s", "--subExpression", default="*", help="'*' or 'TagA || TagB'")
    parser.add_argument(
        "-b", "--beginTimestamp", type=timestamp_arg, help="milliseconds or yyyy-MM-dd#HH:mm:ss:SSS"
    )
    parser.add_argument(
        "-e", "--endTimestamp", type=timestamp_arg, help="milliseconds or yyyy-MM-dd#HH:mm:ss:SSS"
    )
    parser.add_argument("-d", "--printBody", default="true", help="true: print each body (default)")
    parser.add_argument("-c", "--charsetName", default="utf-8", help="the bodies' charset")


async def update_topic_perm(client: AdminClient, args: argparse.Namespace) -> list[str]:
    brokers = (
        [args.brokerAddr] if args.brokerAddr else list((await client.master_addrs(args.clusterName)).values())
    )
    return await toolbox.update_topic_perm(client, args.topic, args.perm, brokers)


async def topic_cluster_list(client: AdminClient, args: argparse.Namespace) -> list[str]:
    return await toolbox.topic_clusters(client, args.topic)


async def _read(
    client: AdminClient, args: argparse.Namespace, broker: str | None, queue: int | None
) -> list[dict[str, Any]]:
    tags = toolbox.parse_tags(args.subExpression)
    ranges = await toolbox.queue_ranges(
        client,
        args.topic,
        broker_name=broker,
        queue_id=queue,
        begin_ms=args.beginTimestamp,
        end_ms=args.endTimestamp,
    )
    out = []
    for queue_range in ranges:
        messages = [m async for m in toolbox.read_range(client, args.topic, queue_range, tags)]
        entry: dict[str, Any] = {
            "brokerName": queue_range.broker_name,
            "queueId": queue_range.queue_id,
            "minOffset": queue_range.begin,
            "maxOffset": queue_range.end,
            "messages": [_with_charset(message_json(m), m, args) for m in messages],
        }
        if getattr(args, "calculate", False):
            entry["tags"] = toolbox.tag_counts(messages)
        out.append(entry)
    return out


def _with_charset(data: dict[str, Any], message: Any, args: argparse.Namespace) -> dict[str, Any]:
    if args.printBody.lower() != "true":
        data["body"] = "NOT PRINT BODY"
        return data
    try:
        data["body"] = message.payload.decode(args.charsetName, "replace")
    except LookupError:
        raise AdminError(f"unknown charset {args.charsetName!r}") from None
    return data


async def print_msg(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    return await _read(client, args, None, None)


async def print_msg_by_queue(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    return await _read(client, args, args.brokerName, args.queueId)


def print_queues(queues: list[dict[str, Any]]) -> None:
    """mqadmin's layout: a line per queue, then ``MSGID: <id> <fields> BODY: <body>`` per message."""
    for queue in queues:
        topic = queue["messages"][0]["topic"] if queue["messages"] else "-"
        where = f"topic={topic}, brokerName={queue['brokerName']}, queueId={queue['queueId']}"
        print(f"minOffset={queue['minOffset']}, maxOffset={queue['maxOffset']}, MessageQueue [{where}]")
        for m in queue["messages"]:
            fields = ", ".join(
                f"{name}={m[name]}"
                for name in (
                    "topic",
                    "queueId",
                    "queueOffset",
                    "tags",
                    "keys",
                    "uniqKey",
                    "storeTimestamp",
                    "reconsumeTimes",
                )
            )
            print(f"MSGID: {m['offsetMsgId']} Message [{fields}] BODY: {m['body']}")
        for row in queue.get("tags", []):
            print(f"Tag: {row['#Tag'] or '(none)'}  Count: {row['#Count']}")


async def allocate_mq(client: AdminClient, args: argparse.Namespace) -> dict[str, Any]:
    ids = [i.strip() for i in args.ipList.split(",") if i.strip()]
    return await toolbox.allocate(client, args.topic, ids, args.strategy)


async def clone_group_offset(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    return await toolbox.clone_group_offset(client, args.srcGroup, args.destGroup, args.topic)


async def skip_accumulated(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    return await toolbox.skip_accumulated(client, args.group, args.topic, args.cluster)


async def update_kv(client: AdminClient, args: argparse.Namespace) -> list[str]:
    await toolbox.put_kv(client, args.namespace, args.key, args.value)
    return ["update kv config in namespace success."]


async def delete_kv(client: AdminClient, args: argparse.Namespace) -> list[str]:
    await toolbox.delete_kv(client, args.namespace, args.key)
    return ["delete kv config from namespace success."]


async def producer_connection(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    return await toolbox.producer_connections(client, args.producerGroup, args.topic)


async def broker_consume_stats(client: AdminClient, args: argparse.Namespace) -> dict[str, Any]:
    return await toolbox.broker_consume_stats(
        client, args.brokerAddr, orderly_only=args.order, diff_level=args.level
    )


def print_consume_stats(stats: dict[str, Any]) -> None:
    print_table([{**row, "#LastTime": format_time(row["#LastTime"])} for row in stats["rows"]])
    print(f"\nDiff Total: {stats['totalDiff']}")


async def _brokers(client: AdminClient, args: argparse.Namespace) -> list[str]:
    """``-b`` or every broker of cluster ``-c`` (slaves too: each keeps its own settings)."""
    if args.brokerAddr:
        return [args.brokerAddr]
    info = await client.cluster_info()
    names = info["clusterAddrTable"].get(args.clusterName)
    if not names:
        raise AdminError(f"cluster {args.clusterName!r} is unknown to the NameServer")
    return [
        a for name in sorted(names) for _, a in sorted(info["brokerAddrTable"][name]["brokerAddrs"].items())
    ]


async def get_broker_config(client: AdminClient, args: argparse.Namespace) -> dict[str, dict[str, str]]:
    return {address: await toolbox.broker_config(client, address) for address in await _brokers(client, args)}


async def update_broker_config(client: AdminClient, args: argparse.Namespace) -> list[str]:
    lines = []
    for address in await _brokers(client, args):
        await toolbox.update_broker_config(client, address, {args.key: args.value})
        lines.append(f"update broker config success, {address}")
    return lines


async def get_namesrv_config(client: AdminClient, args: argparse.Namespace) -> dict[str, dict[str, str]]:
    return await toolbox.namesrv_configs(client)


async def update_namesrv_config(client: AdminClient, args: argparse.Namespace) -> list[str]:
    addresses = await toolbox.update_namesrv_config(client, {args.key: args.value})
    return [f"update name server config success!{addresses}"]


def print_configs(configs: dict[str, dict[str, str]]) -> None:
    """mqadmin's layout: a banner per server, then ``key = value`` lines."""
    for address, settings in configs.items():
        print(f"============{address}============")
        for key, value in settings.items():
            print(f"{key:<50s}=  {value}")


async def consumer_status(client: AdminClient, args: argparse.Namespace) -> dict[str, Any]:
    if args.clientId:
        return {
            "clientId": args.clientId,
            **await toolbox.consumer_running_info(client, args.consumerGroup, args.clientId),
        }
    return await toolbox.consumer_status(client, args.consumerGroup)


def print_consumer_status(status: dict[str, Any]) -> None:
    """mqadmin's sections for one client; the group's clients and the subscription check else."""
    if "rows" in status:
        print_table(status["rows"])
        print()
        print(
            "Same subscription in the same group of consumer"
            if status["sameSubscription"]
            else "WARN: Different subscription in the same group of consumer!!!"
        )
        return
    print("#Consumer Properties#")
    for key, value in sorted(status.get("properties", {}).items()):
        print(f"{key:<40s}: {value}")
    print("\n#Consumer Subscription#")
    for index, sub in enumerate(status.get("subscriptionSet", []), 1):
        print(f"{index:03d} Topic: {sub['topic']:<40s} SubExpression: {sub['subString']}")
    print("\n#Consumer MQ Detail#")
    print_table(
        [
            {
                "#Topic": q["topic"],
                "#Broker Name": q["brokerName"],
                "#QID": q["queueId"],
                "#Commit Offset": q["commitOffset"],
                "#Cached": q["cachedMsgCount"],
                "#Locked": q["locked"],
                "#Last Pull": format_time(q["lastPullTimestamp"]),
            }  # fmt: skip
            for q in status["mqTable"]
        ]
    )


async def stats_all(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    return await toolbox.stats_all(client, args.topic, active_only=args.activeTopic)
