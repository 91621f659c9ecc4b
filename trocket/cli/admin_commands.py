"""``trocket admin ...``: RocketMQ's mqadmin commands (same names and flags where they exist).

Tables for people by default; ``--json`` prints one JSON document for scripts.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from trocket.admin import retries
from trocket.admin.client import AdminClient, AdminError
from trocket.cli import admin_toolbox_commands, admin_trace_commands
from trocket.cli.admin_args import boolean_arg, timestamp_arg
from trocket.cli.admin_render import (
    format_time,
    jsonable,
    print_json,
    print_lines,
    print_messages,
    print_table,
)
from trocket.cli.connection_options import add_connection_options, credentials_of, tls_of
from trocket.cli.usage import list_subcommands
from wire.record import StoredMessage

Command = Callable[[AdminClient, argparse.Namespace], Awaitable[Any]]


def add_parsers(sub: Any) -> None:
    admin = sub.add_parser("admin", help="administer a running cluster (mqadmin commands)")
    commands = admin.add_subparsers(dest="admin_command", metavar="COMMAND")
    admin.set_defaults(handler=list_subcommands(admin))

    def command(
        name: str, help_text: str, handler: Command, render: Callable[[Any], None]
    ) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=help_text)
        parser.add_argument(
            "-n",
            "--namesrvAddr",
            dest="namesrv",
            default="127.0.0.1:9876",
            help="NameServer(s), ';'-separated",
        )
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
        add_connection_options(parser)
        parser.set_defaults(handler=_runner(handler, render))
        return parser

    p = command("updateTopic", "create or update a topic", update_topic, print_lines)
    _broker_or_masters(p)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-r", "--readQueueNums", type=int, default=8)
    p.add_argument("-w", "--writeQueueNums", type=int, default=8)
    p.add_argument("-p", "--perm", type=int, default=6, help="2 write, 4 read, 6 both")
    p.add_argument("-o", "--order", type=boolean_arg, default=False)
    p.add_argument(
        "-a",
        "--attributes",
        default="",
        help="RocketMQ 5 topic attributes: +message.type=NORMAL|FIFO|DELAY|TRANSACTION|MIXED (-key removes)",
    )

    p = command(
        "updateTopicList",
        "create or update the topics of a JSON file in one request",
        update_topic_list,
        print_lines,
    )
    _broker_or_masters(p)
    p.add_argument(
        "-f", "--filename", required=True, help='a JSON list of topic configs, or {"topicConfigList": [...]}'
    )

    p = command("deleteTopic", "delete a topic from a cluster and the NameServers", delete_topic, print_lines)
    p.add_argument("-c", "--clusterName", required=True)
    p.add_argument("-t", "--topic", required=True)

    command("topicList", "every topic the NameServer knows", topic_list, print_lines)

    p = command("topicRoute", "a topic's route (brokers and queues)", topic_route, print_json)
    p.add_argument("-t", "--topic", required=True)

    p = command("topicStatus", "min/max offsets of each queue of a topic", topic_status, print_table)
    p.add_argument("-t", "--topic", required=True)

    command("clusterList", "clusters, brokers and their state", cluster_list, print_table)

    p = command("brokerStatus", "a broker's runtime figures", broker_status, print_table)
    p.add_argument("-b", "--brokerAddr", required=True)

    p = command("haStatus", "replication state of a master (its slaves) or a slave", ha_status, print_table)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("-b", "--brokerAddr", help="one broker ip:port")
    target.add_argument("-c", "--clusterName", help="every broker of a cluster")

    p = command(
        "getControllerMetaData",
        "the controllers: leader, peers (controller mode)",
        controller_metadata,
        print_table,
    )
    p.add_argument("-a", "--controllerAddress", required=True)

    p = command("getSyncStateSet", "broker sets' masters and SyncStateSets", sync_state_set, print_table)
    p.add_argument("-a", "--controllerAddress", required=True)
    p.add_argument(
        "-b", "--brokerName", action="append", default=[], help="a broker set (repeat; default all)"
    )

    p = command(
        "getBrokerEpoch", "the epoch history of each replica of a broker set", broker_epoch, print_table
    )
    p.add_argument("-b", "--brokerName", required=True)

    p = command("electMaster", "elect a broker set's master (controller mode)", elect_master, print_table)
    p.add_argument("-a", "--controllerAddress", required=True)
    p.add_argument("-c", "--clusterName", default="DefaultCluster")
    p.add_argument("-b", "--brokerName", required=True)
    p.add_argument("-i", "--brokerId", type=int, help="the replica to make master (default: any in the set)")

    p = command(
        "cleanBrokerMetadata",
        "forget a broker set, or some of its replicas, at the controller (controller mode)",
        clean_broker_metadata,
        print_table,
    )
    p.add_argument("-a", "--controllerAddress", required=True)
    p.add_argument("-c", "--clusterName", default="DefaultCluster")
    p.add_argument("-bn", "--brokerName", required=True)
    p.add_argument(
        "-b", "--brokerControllerIdsToClean", default="", help="ids separated by ';' (default: the whole set)"
    )
    p.add_argument(
        "-l", "--cleanLivingBroker", action="store_true", help="also replicas whose lease still holds"
    )

    p = command("queryMsgById", "a message by its offset message id", query_by_id, print_messages)
    p.add_argument("-i", "--msgId", required=True)

    p = command("queryMsgByKey", "messages of a topic by key", query_by_key, print_messages)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-k", "--msgKey", required=True)

    p = command(
        "queryMsgByUniqueKey", "a message by its client id (UNIQ_KEY)", query_by_unique_key, print_messages
    )
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-i", "--msgId", required=True)

    p = command("queryMsgByOffset", "a message by queue and offset", query_by_offset, print_messages)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-b", "--brokerName", required=True)
    p.add_argument("-i", "--queueId", type=int, required=True)
    p.add_argument("-o", "--offset", type=int, required=True)

    p = command(
        "consumerProgress", "a group's committed offsets and lag per queue", consumer_progress, print_table
    )
    p.add_argument("-g", "--groupName", required=True)

    p = command(
        "consumerConnection", "a group's online clients and subscriptions", consumer_connection, print_table
    )
    p.add_argument("-g", "--consumerGroup", required=True)

    p = command("updateSubGroup", "create or update a subscription group", update_sub_group, print_lines)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("-b", "--brokerAddr")
    target.add_argument("-c", "--clusterName")
    p.add_argument("-g", "--groupName", required=True)
    p.add_argument("-s", "--consumeEnable", type=boolean_arg, default=True)
    p.add_argument("-m", "--consumeFromMinEnable", type=boolean_arg, default=True)
    p.add_argument("-d", "--consumeBroadcastEnable", type=boolean_arg, default=True)
    p.add_argument("-q", "--retryQueueNums", type=int, default=1)
    p.add_argument("-r", "--retryMaxTimes", type=int, default=16)
    p.add_argument("-a", "--notifyConsumerIdsChanged", type=boolean_arg, default=True)
    p.add_argument(
        "-o",
        "--consumeMessageOrderly",
        type=boolean_arg,
        default=False,
        help="RocketMQ 5 FIFO consumption (POP)",
    )

    p = command(
        "resetOffsetByTime",
        "commit, for every queue of a topic, the offset of the first message stored at or after a time "
        "(stop the group's consumers first: running ones commit what they hold)",
        reset_offset_by_time,
        print_table,
    )
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument(
        "-s",
        "--timestamp",
        required=True,
        type=timestamp_arg,
        help="milliseconds, 'now', or yyyy-MM-dd#HH:mm:ss:SSS",
    )

    p = command(
        "deleteSubGroup",
        "delete a subscription group's config on every master",
        delete_sub_group,
        print_lines,
    )
    p.add_argument("-g", "--groupName", required=True)
    p.add_argument("-c", "--clusterName", default=None)

    p = command(
        "queryDlqMsg",
        "dead-lettered messages of a consumer group (%%DLQ%%<group>)",
        query_dlq,
        print_messages,
    )
    p.add_argument("-g", "--consumerGroup", required=True)
    p.add_argument("-m", "--maxNum", type=int, default=64, help="at most this many messages")

    p = command(
        "resendDlqMsg", "send a dead-lettered message back to its original topic", resend_dlq, print_table
    )
    p.add_argument("-g", "--consumerGroup", required=True)
    p.add_argument("-i", "--msgId", required=True, help="the dead letter's offset message id")

    p = command(
        "scheduleProgress", "delayed-delivery progress per delay level and timer", schedule, print_table
    )
    p.add_argument("-b", "--brokerAddr", help="one broker ip:port (default: every master)")

    p = command(
        "pendingTransactions",
        "open transactional half messages (not committed or rolled back yet), oldest first",
        pending_transactions,
        print_table,
    )
    p.add_argument("-b", "--brokerAddr", help="one broker ip:port (default: every master)")
    p.add_argument("-g", "--producerGroup", help="only this producer group's")

    p = command(
        "updateAclConfig", "create or change an ACL account in plain_acl.yml", update_acl_config, print_lines
    )
    _acl_target(p)
    p.add_argument("-a", "--accessKey", required=True, help="the account edited")
    p.add_argument("-s", "--secretKey", help="its secret (required for a new account)")
    p.add_argument("-w", "--whiteRemoteAddress", help="peers of this account that need no signature")
    p.add_argument("-m", "--admin", type=boolean_arg, help="true: may send admin requests")
    p.add_argument("-i", "--defaultTopicPerm", help="DENY, PUB, SUB or PUB|SUB")
    p.add_argument("-u", "--defaultGroupPerm", help="DENY, PUB, SUB or PUB|SUB")
    p.add_argument("-t", "--topicPerms", help="comma-separated topic=PERM (replaces the list)")
    p.add_argument("-g", "--groupPerms", help="comma-separated group=PERM (replaces the list)")

    p = command("deleteAclConfig", "delete an ACL account from plain_acl.yml", delete_acl_config, print_lines)
    _acl_target(p)
    p.add_argument("-a", "--accessKey", required=True)

    p = command(
        "updateGlobalWhiteAddr",
        "replace plain_acl.yml's globalWhiteRemoteAddresses",
        update_global_white_addr,
        print_lines,
    )
    _acl_target(p)
    p.add_argument("-g", "--globalWhiteRemoteAddresses", required=True, help="comma-separated patterns")

    p = command(
        "clusterAclConfigVersion", "the version of each broker's plain_acl.yml", acl_versions, print_table
    )
    _acl_target(p)

    p = command("wipeWritePerm", "stop producers from writing to a broker", wipe_write_perm, print_lines)
    p.add_argument("-b", "--brokerName", required=True)

    p = command("addWritePerm", "let producers write to a broker again", add_write_perm, print_lines)
    p.add_argument("-b", "--brokerName", required=True)

    admin_toolbox_commands.register(command)
    admin_trace_commands.register(command)


def _acl_target(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("-b", "--brokerAddr", help="one broker ip:port")
    target.add_argument("-c", "--clusterName", help="every broker of a cluster, slaves included")


def _runner(handler: Command, render: Callable[[Any], None]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        addrs = [a.strip() for a in args.namesrv.replace(",", ";").split(";") if a.strip()]

        credentials, tls = credentials_of(args), tls_of(args)

        async def main() -> Any:
            async with AdminClient.open(addrs, credentials=credentials, tls=tls) as client:
                return await handler(client, args)

        try:
            result = trio.run(main)
        except AdminError as error:
            print(f"trocket admin: error: {error}", file=sys.stderr)
            return 1
        if args.json:
            json.dump(jsonable(result), sys.stdout, indent=2, sort_keys=True)
            print()
        else:
            render(result)
        return 0

    return run


# --- commands ----------------------------------------------------------------------------------


def _broker_or_masters(parser: argparse.ArgumentParser) -> None:
    """mqadmin's ``-b ADDR | -c CLUSTER`` for commands that change every master of a cluster."""
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("-b", "--brokerAddr", help="one broker ip:port")
    target.add_argument("-c", "--clusterName", help="every master of a cluster")


async def _target_brokers(client: AdminClient, args: argparse.Namespace) -> list[str]:
    """The broker ``-b`` names, or every master of the cluster ``-c`` names."""
    if args.brokerAddr:
        return [args.brokerAddr]
    return list((await client.master_addrs(args.clusterName)).values())


async def update_topic(client: AdminClient, args: argparse.Namespace) -> list[str]:
    targets = await _target_brokers(client, args)
    for address in targets:
        await client.update_topic(
            address,
            args.topic,
            read=args.readQueueNums,
            write=args.writeQueueNums,
            perm=args.perm,
            order=args.order,
            attributes=args.attributes,
        )
    return [f"create topic to {address} success." for address in targets]


async def update_topic_list(client: AdminClient, args: argparse.Namespace) -> list[str]:
    try:
        data = json.loads(await trio.Path(args.filename).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise AdminError(f"{args.filename}: cannot read a JSON list of topic configs: {error}") from None
    configs = data.get("topicConfigList") if isinstance(data, dict) else data
    if not isinstance(configs, list) or not all(isinstance(c, dict) and "topicName" in c for c in configs):
        raise AdminError(f"{args.filename}: expected a list of topic configs, each with a topicName")
    targets = await _target_brokers(client, args)
    for address in targets:
        await client.update_topics(address, configs)
    return [f"create {len(configs)} topics to {address} success." for address in targets]


async def delete_topic(client: AdminClient, args: argparse.Namespace) -> list[str]:
    brokers = await client.delete_topic(args.topic, args.clusterName)
    return [f"delete topic [{args.topic}] from cluster [{args.clusterName}] success ({', '.join(brokers)})."]


async def topic_list(client: AdminClient, args: argparse.Namespace) -> list[str]:
    return await client.topic_list()


async def topic_route(client: AdminClient, args: argparse.Namespace) -> dict[str, Any]:
    return await client.route(args.topic)


async def topic_status(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    return [
        {
            "#Broker Name": r["brokerName"],
            "#QID": r["queueId"],
            "#Min Offset": r["minOffset"],
            "#Max Offset": r["maxOffset"],
            "#Last Updated": format_time(r["lastUpdateTimestamp"]),
        }
        for r in await client.topic_status(args.topic)
    ]


async def cluster_list(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    info = await client.cluster_info()
    rows = []
    for cluster, names in sorted(info["clusterAddrTable"].items()):
        for name in names:
            for broker_id, address in sorted(info["brokerAddrTable"][name]["brokerAddrs"].items()):
                try:
                    runtime = await client.broker_runtime_info(address)
                except AdminError as error:
                    runtime = {"state": f"unreachable: {error}"}
                rows.append(
                    {
                        "#Cluster Name": cluster,
                        "#Broker Name": name,
                        "#BID": int(broker_id),
                        "#Addr": address,
                        "#Role": runtime.get("brokerRole", ""),
                        "#Version": runtime.get("brokerVersionDesc", ""),
                        "#Messages": runtime.get("putMessageTimesTotal", ""),
                        "#State": runtime.get("state", ""),
                    }
                )
    return rows


def key_value_rows(mapping: dict[str, Any]) -> list[dict[str, Any]]:
    """A mapping as mqadmin prints one: a ``#Key``/``#Value`` row per entry, sorted by key."""
    return [{"#Key": key, "#Value": value} for key, value in sorted(mapping.items())]


async def broker_status(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    info = await client.broker_runtime_info(args.brokerAddr)
    return key_value_rows(info)


async def controller_metadata(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    meta = await client.controller_metadata(args.controllerAddress)
    return key_value_rows(meta)


async def sync_state_set(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One row per replica: its set, whether it is master, in the SyncStateSet, alive."""
    table = await client.sync_state_data(args.controllerAddress, args.brokerName)
    rows = []
    for name, info in sorted(table.items()):
        replicas = [(r, True) for r in info["inSyncReplicas"]] + [
            (r, False) for r in info["notInSyncReplicas"]
        ]
        for replica, in_sync in sorted(replicas, key=lambda pair: pair[0]["brokerId"]):
            rows.append(
                {
                    "#BrokerName": name,
                    "#BrokerId": replica["brokerId"],
                    "#Address": replica["brokerAddress"],
                    "#Master": replica["brokerId"] == info["masterBrokerId"],
                    "#MasterEpoch": info["masterEpoch"],
                    "#InSyncStateSet": in_sync,
                    "#SyncStateSetEpoch": info["syncStateSetEpoch"],
                    "#Alive": replica["alive"],
                }
            )
    return rows


async def broker_epoch(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One row per epoch of each replica of the broker set the NameServer lists."""
    info = await client.cluster_info()
    entry = info["brokerAddrTable"].get(args.brokerName)
    if entry is None:
        raise AdminError(f"broker set {args.brokerName!r} is unknown to the NameServer")
    rows = []
    for broker_id, address in sorted(entry["brokerAddrs"].items(), key=lambda pair: int(pair[0])):
        cache = await client.broker_epochs(address)
        for epoch in cache["epochList"] or [{}]:
            rows.append(
                {
                    "#Broker": address,
                    "#BrokerId": cache.get("brokerId", broker_id),
                    "#Epoch": epoch.get("epoch", ""),
                    "#StartOffset": epoch.get("startOffset", ""),
                    "#EndOffset": epoch.get("endOffset", ""),
                    "#MaxOffset": cache.get("maxOffset", ""),
                }
            )
    return rows


async def elect_master(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    answer = await client.elect_master(
        args.controllerAddress, args.clusterName, args.brokerName, args.brokerId
    )
    return key_value_rows(answer)


async def clean_broker_metadata(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    try:
        ids = [int(part) for part in args.brokerControllerIdsToClean.split(";") if part.strip()]
    except ValueError:
        raise AdminError(
            f"-b {args.brokerControllerIdsToClean!r}: broker ids separated by ';', for example 1;2"
        ) from None
    await client.clean_broker_metadata(
        args.controllerAddress, args.clusterName, args.brokerName, ids, clean_living=args.cleanLivingBroker
    )
    removed = ", ".join(map(str, ids)) if ids else "all"
    return [{"#BrokerName": args.brokerName, "#Removed": removed}]


async def ha_status(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One row per master-slave connection (seen from the master) and per slave (seen from the
    slave), as RocketMQ 5's ``mqadmin haStatus`` prints."""
    if args.brokerAddr:
        addresses = [args.brokerAddr]
    else:
        info = await client.cluster_info()
        names = info["clusterAddrTable"].get(args.clusterName)
        if names is None:
            raise AdminError(f"cluster {args.clusterName!r} is unknown to the NameServer")
        addresses = [
            address
            for name in sorted(names)
            for _, address in sorted(info["brokerAddrTable"][name]["brokerAddrs"].items())
        ]
    rows: list[dict[str, Any]] = []
    for address in addresses:
        status = await client.ha_status(address)
        if status.get("master"):
            for slave in status.get("haConnectionInfo") or [{}]:
                rows.append(
                    {
                        "#Broker": address,
                        "#Role": "master",
                        "#Peer": slave.get("addr", "(no slave connected)"),
                        "#Offset": status.get("masterCommitLogMaxOffset", ""),
                        "#Ack Offset": slave.get("slaveAckOffset", ""),
                        "#Behind Bytes": slave.get("diff", ""),
                        "#In Sync": slave.get("inSync", ""),
                    }
                )
        else:
            side = status.get("haClientRuntimeInfo") or {}
            rows.append(
                {
                    "#Broker": address,
                    "#Role": "slave",
                    "#Peer": side.get("masterAddr", ""),
                    "#Offset": side.get("maxOffset", ""),
                    "#Ack Offset": side.get("maxOffset", ""),
                    "#Behind Bytes": "",
                    "#In Sync": side.get("connected", ""),
                }
            )
    return rows


async def query_by_id(client: AdminClient, args: argparse.Namespace) -> list[StoredMessage]:
    return [await client.view_message(args.msgId)]


async def query_by_key(client: AdminClient, args: argparse.Namespace) -> list[StoredMessage]:
    return await client.query_by_key(args.topic, args.msgKey)


async def query_by_unique_key(client: AdminClient, args: argparse.Namespace) -> list[StoredMessage]:
    found = await client.query_by_key(args.topic, args.msgId, unique=True)
    if not found:
        raise AdminError(f"no message of topic {args.topic!r} has unique key {args.msgId!r}")
    return found


async def query_by_offset(client: AdminClient, args: argparse.Namespace) -> list[StoredMessage]:
    message = await client.message_at(args.topic, args.brokerName, args.queueId, args.offset)
    if message is None:
        raise AdminError(f"no message at {args.topic}/{args.brokerName}/{args.queueId} offset {args.offset}")
    return [message]


async def consumer_progress(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    return [
        {
            "#Topic": r["topic"],
            "#Broker Name": r["brokerName"],
            "#QID": r["queueId"],
            "#Broker Offset": r["brokerOffset"],
            "#Consumer Offset": r["consumerOffset"],
            "#Diff": r["diff"],
            "#Pop In Flight": r.get("popInFlight", 0),
            "#LastTime": format_time(r["lastTimestamp"]),
        }
        for r in await client.consumer_progress(args.groupName)
    ]


async def consumer_connection(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    info = await client.consumer_connection(args.consumerGroup)
    rows = [
        {
            "#ClientId": c["clientId"],
            "#ClientAddr": c["clientAddr"],
            "#Language": c["language"],
            "#Version": c["version"],
        }
        for c in info["connectionSet"]
    ]
    for topic, sub in sorted(info["subscriptionTable"].items()):
        rows.append(
            {
                "#ClientId": f"subscription {topic}",
                "#ClientAddr": sub["subString"],
                "#Language": "",
                "#Version": "",
            }
        )
    rows.append(
        {
            "#ClientId": "ConsumeType",
            "#ClientAddr": f"{info['consumeType']} {info['messageModel']} {info['consumeFromWhere']}",
            "#Language": "",
            "#Version": "",
        }
    )
    return rows


async def update_sub_group(client: AdminClient, args: argparse.Namespace) -> list[str]:
    config = {
        "groupName": args.groupName,
        "consumeEnable": args.consumeEnable,
        "consumeFromMinEnable": args.consumeFromMinEnable,
        "consumeBroadcastEnable": args.consumeBroadcastEnable,
        "retryQueueNums": args.retryQueueNums,
        "retryMaxTimes": args.retryMaxTimes,
        "notifyConsumerIdsChangedEnable": args.notifyConsumerIdsChanged,
        "consumeMessageOrderly": args.consumeMessageOrderly,
    }
    targets = await _target_brokers(client, args)
    for address in targets:
        await client.update_sub_group(address, config)
    return [f"create subscription group to {address} success." for address in targets]


async def reset_offset_by_time(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = await client.reset_offset_by_time(args.group, args.topic, args.timestamp)
    return [
        {
            "#brokerName": r["brokerName"],
            "#queueId": r["queueId"],
            "#oldOffset": r["oldOffset"],
            "#newOffset": r["newOffset"],
        }
        for r in rows
    ]


async def delete_sub_group(client: AdminClient, args: argparse.Namespace) -> list[str]:
    brokers = await client.delete_sub_group(args.groupName, args.clusterName)
    return [f"delete subscription group [{args.groupName}] from broker [{name}] success." for name in brokers]


async def query_dlq(client: AdminClient, args: argparse.Namespace) -> list[StoredMessage]:
    found = await retries.dlq_messages(client, args.consumerGroup, max_num=args.maxNum)
    if not found:
        raise AdminError(f"the dead-letter queue of {args.consumerGroup!r} is empty")
    return found


async def resend_dlq(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    return [await retries.resend_dlq_message(client, args.consumerGroup, args.msgId)]


async def _brokers_asked(client: AdminClient, args: argparse.Namespace) -> list[str]:
    """``-b``, or every master the NameServers know. None known is an error, not an empty
    answer: right after a restart the NameServer is up before its brokers register, and "no
    pending transactions" would then be a wrong answer, not a missing one."""
    if args.brokerAddr:
        return [args.brokerAddr]
    addresses = list((await client.master_addrs()).values())
    if not addresses:
        raise AdminError("no master broker is registered with the NameServer yet (give one with -b)")
    return addresses


async def schedule(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    return await retries.schedule_progress(client, await _brokers_asked(client, args))


async def pending_transactions(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    addresses = await _brokers_asked(client, args)
    rows = []
    for address in addresses:
        answer = await client.pending_transactions(address, args.producerGroup)
        for item in answer["pending"]:
            born = datetime.datetime.fromtimestamp(item["bornTimestamp"] / 1000).strftime("%Y-%m-%d %H:%M:%S")
            rows.append(
                {
                    "broker": address,
                    "producerGroup": item["producerGroup"],
                    "topic": item["topic"],
                    "transactionId": item["transactionId"],
                    "halfOffset": item["halfOffset"],
                    "born": born,
                    "checkTimes": item["checkTimes"],
                }
            )
    return rows


async def _acl_targets(client: AdminClient, args: argparse.Namespace) -> list[str]:
    return [args.brokerAddr] if args.brokerAddr else await client.broker_addrs(args.clusterName)


async def update_acl_config(client: AdminClient, args: argparse.Namespace) -> list[str]:
    fields = {
        "accessKey": args.accessKey,
        "secretKey": args.secretKey,
        "whiteRemoteAddress": args.whiteRemoteAddress,
        "admin": None if args.admin is None else str(args.admin).lower(),
        "defaultTopicPerm": args.defaultTopicPerm,
        "defaultGroupPerm": args.defaultGroupPerm,
        "topicPerms": args.topicPerms,
        "groupPerms": args.groupPerms,
    }
    account = {key: value for key, value in fields.items() if value is not None}
    lines = []
    for address in await _acl_targets(client, args):
        done = await client.update_acl_config(address, account)
        lines.append(f"{done} plain access config {args.accessKey} on {address} success.")
    return lines


async def delete_acl_config(client: AdminClient, args: argparse.Namespace) -> list[str]:
    lines = []
    for address in await _acl_targets(client, args):
        await client.delete_acl_config(address, args.accessKey)
        lines.append(f"delete plain access config {args.accessKey} from {address} success.")
    return lines


async def update_global_white_addr(client: AdminClient, args: argparse.Namespace) -> list[str]:
    addresses = [a.strip() for a in args.globalWhiteRemoteAddresses.split(",") if a.strip()]
    lines = []
    for address in await _acl_targets(client, args):
        await client.update_global_white_addrs(address, addresses)
        lines.append(f"update global white remote addresses on {address} success.")
    return lines


async def acl_versions(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for address in await _acl_targets(client, args):
        info = await client.acl_config_version(address)
        rows.append(
            {
                "#Cluster Name": info["clusterName"],
                "#Broker Name": info["brokerName"],
                "#Broker Addr": info["brokerAddr"],
                "#AclConfigVersionNum": info["version"].get("counter", 0),
                "#AclLastUpdateTime": format_time(info["version"].get("timestamp", 0)),
            }
        )
    return rows


async def wipe_write_perm(client: AdminClient, args: argparse.Namespace) -> list[str]:
    counts = await client.set_write_perm(args.brokerName, writable=False)
    return [
        f"wipe write perm of broker[{args.brokerName}] in name server[{a}] OK, {n}" for a, n in counts.items()
    ]


async def add_write_perm(client: AdminClient, args: argparse.Namespace) -> list[str]:
    counts = await client.set_write_perm(args.brokerName, writable=True)
    return [
        f"add write perm of broker[{args.brokerName}] in name server[{a}] OK, {n}" for a, n in counts.items()
    ]
