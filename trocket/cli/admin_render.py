"""How ``trocket admin`` prints what a command returns: tables for people, one JSON document
with ``--json`` for scripts, messages in mqadmin's layout."""

from __future__ import annotations

import datetime
import json
import zlib
from collections.abc import Sequence
from typing import Any

from wire.record import StoredMessage


def format_time(ms: int) -> str:
    if not ms:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]


def jsonable(value: Any) -> Any:
    if isinstance(value, StoredMessage):
        return message_json(value)
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    return value


def message_json(m: StoredMessage) -> dict[str, Any]:
    try:
        body = m.payload
    except zlib.error:
        body = m.body  # flagged compressed but is not: show what is stored
    return {
        "offsetMsgId": m.offset_msg_id,
        "topic": m.topic,
        "tags": m.tags,
        "keys": m.keys,
        "uniqKey": m.unique_key,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "commitLogOffset": m.physical_offset,
        "reconsumeTimes": m.reconsume_times,
        "bornTimestamp": m.born_timestamp,
        "storeTimestamp": m.store_timestamp,
        "bornHost": f"{m.born_host[0]}:{m.born_host[1]}",
        "storeHost": f"{m.store_host[0]}:{m.store_host[1]}",
        "sysFlag": m.sys_flag,
        "properties": m.properties,
        "bodySize": len(body),
        "body": body.decode("utf-8", "replace"),
    }


def print_lines(lines: Sequence[str]) -> None:
    for line in lines:
        print(line)


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


def print_table(rows: Sequence[dict[str, Any]]) -> None:
    if not rows:
        print("(nothing)")
        return
    columns = list(rows[0])
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns).rstrip())
    for row in rows:
        print("  ".join(str(row.get(c, "")).ljust(widths[c]) for c in columns).rstrip())


def print_messages(messages: Sequence[StoredMessage]) -> None:
    for index, message in enumerate(messages):
        if index:
            print()
        data = message_json(message)
        body = data.pop("body")
        for key, value in data.items():
            print(f"{key + ':':18} {value}")
        print(f"{'body:':18} {body[:200]}{'...' if len(body) > 200 else ''}")
