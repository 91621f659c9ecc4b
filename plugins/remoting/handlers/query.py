"""QUERY_MESSAGE (12) by key or unique key, and VIEW_MESSAGE_BY_ID (33) by commit-log offset."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugins.remoting.handlers.common import int_field, queryable, record_at, required
from wire.remoting import Connection, RemotingCommand, ResponseCode, parse_bool

if TYPE_CHECKING:
    from plugins.remoting.service import BrokerNetwork


async def query_message(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    topic, key = required(request, "topic", "key")
    max_num = int_field(request, "maxNum", 32)
    if parse_bool(request.ext.get("_UNIQUE_KEY_QUERY")):
        max_num = max(max_num, 1)
    records = await queryable(net).query_by_key(
        topic,
        key,
        max_num=max_num,
        begin=int_field(request, "beginTimestamp", 0),
        end=int_field(request, "endTimestamp", 2**62),
    )
    if not records:
        return request.response(
            ResponseCode.QUERY_NOT_FOUND, remark="can not find message, maybe time range not correct"
        )
    return request.response(
        ext={"indexLastUpdateTimestamp": 0, "indexLastUpdatePhyoffset": 0}, body=b"".join(records)
    )


async def view_message(
    net: BrokerNetwork, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    offset = int_field(request, "offset")
    return request.response(body=await record_at(net, offset, "can not find message by the offset"))
