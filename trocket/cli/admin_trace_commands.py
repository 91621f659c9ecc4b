"""``trocket admin queryMsgTraceById``: a message's trace, as mqadmin prints it (a table of
its sends, then one table per consumer group of its consumptions)."""

from __future__ import annotations

import argparse
from typing import Any

from trocket.admin.client import AdminClient
from trocket.admin.message_trace import TraceView, query_trace
from trocket.cli.admin_render import format_time
from trocket.cli.admin_toolbox_commands import Register
from wire.trace_data import TRACE_TOPIC

ROW = "{:<10} {:<20} {:<20} {:<20} {:<10} {:<10}"
"""mqadmin's ``%-10s %-20s %-20s %-20s %-10s %-10s``."""


def register(command: Register) -> None:
    p = command(
        "queryMsgTraceById",
        "a message's trace: who sent it, and each group's consumption (cost, result)",
        query_msg_trace_by_id,
        print_trace,
    )
    p.add_argument("-i", "--msgId", required=True, help="the client's message id (UNIQ_KEY)")
    p.add_argument("-t", "--traceTopic", default=TRACE_TOPIC, help=f"the trace topic (default {TRACE_TOPIC})")
    p.add_argument("-b", "--beginTimestamp", type=int, default=0, help="epoch ms (default 0)")
    p.add_argument("-e", "--endTimestamp", type=int, default=2**62, help="epoch ms (default: no end)")
    p.add_argument("--num", "--maxNum", dest="maxNum", type=int, default=64, help="trace messages per broker")


async def query_msg_trace_by_id(client: AdminClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    views = await query_trace(
        client,
        args.msgId.strip(),
        trace_topic=args.traceTopic.strip(),
        max_num=args.maxNum,
        begin_ms=args.beginTimestamp,
        end_ms=args.endTimestamp,
    )
    return [trace_row(view) for view in views]


def trace_row(view: TraceView) -> dict[str, Any]:
    return {
        "#Type": view.type,
        "#Group": view.group,
        "#ClientHost": view.client_host,
        "#Time": view.timestamp,
        "#CostTimes": view.cost_ms,
        "#Status": view.status,
        "topic": view.topic,
        "tags": view.tags,
        "keys": view.keys,
        "storeHost": view.store_host,
        "offsetMsgId": view.offset_msg_id,
        "requestId": view.request_id,
        "retryTimes": view.retry_times,
    }


def print_trace(rows: list[dict[str, Any]]) -> None:
    """mqadmin's layout: each Pub (and EndTransaction) under its own header, then a table per
    consumer group of its SubAfter records as ``Sub`` rows."""
    if not rows:
        print("no trace found for this message id")
        return
    for row in rows:
        if row["#Type"] in ("Pub", "EndTransaction"):
            time_header = "#SendTime" if row["#Type"] == "Pub" else "#EndTime"
            print(ROW.format("#Type", "#ProducerGroup", "#ClientHost", time_header, "#CostTimes", "#Status"))
            print(_line(row["#Type"], row))
            print()
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row["#Type"] == "SubAfter":
            groups.setdefault(row["#Group"], []).append(row)
    for consumed in groups.values():
        print(ROW.format("#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime", "#CostTimes", "#Status"))
        for row in consumed:
            print(_line("Sub", row))
        print()


def _line(kind: str, row: dict[str, Any]) -> str:
    return ROW.format(
        kind,
        row["#Group"],
        row["#ClientHost"],
        format_time(row["#Time"]).split(",")[0],
        f"{row['#CostTimes']}ms",
        row["#Status"],
    )
