"""The transaction plugin's requests: END_TRANSACTION (37), a producer committing or rolling back
a half message, on its own or answering a check-back (Java clients send it oneway, so most
answers are never read; they are still built, and logged when something was refused); and
QUERY_PENDING_TRANSACTIONS (Trocket's admin query of open half messages)."""

from __future__ import annotations

import json
import logging

from kernel.context import BrokerRuntime
from plugins.transaction.service import TRANSACTIONS, EndRequest
from wire.remoting import Connection, RemotingCommand, ResponseCode, parse_bool

log = logging.getLogger(__name__)

NOT_RUNNING = "the transaction service is not running"
_REQUIRED = ("producerGroup", "tranStateTableOffset", "commitLogOffset", "commitOrRollback")


def parse_end(request: RemotingCommand) -> EndRequest | str:
    """The header as an :class:`EndRequest`, or why it is not one (RocketMQ's header check)."""
    ext = request.ext
    missing = [name for name in _REQUIRED if ext.get(name) in (None, "")]
    if missing:
        return f"the END_TRANSACTION header is missing {', '.join(missing)}"
    try:
        numbers = [int(ext[name]) for name in _REQUIRED[1:]]
    except ValueError:
        shown = {name: ext[name] for name in _REQUIRED[1:]}
        return f"END_TRANSACTION header fields must be whole numbers, got {shown}"
    table_offset, log_offset, kind = numbers
    return EndRequest(
        producer_group=str(ext["producerGroup"]),
        tran_state_table_offset=table_offset,
        commit_log_offset=log_offset,
        commit_or_rollback=kind,
        from_transaction_check=parse_bool(ext.get("fromTransactionCheck")),
        msg_id=str(ext.get("msgId", "")),
        transaction_id=str(ext.get("transactionId", "")),
    )


async def handle_end_transaction(
    runtime: BrokerRuntime, connection: Connection, request: RemotingCommand
) -> RemotingCommand | None:
    parsed = parse_end(request)
    if isinstance(parsed, str):
        log.warning("END_TRANSACTION from %s refused: %s", connection.peer, parsed)
        return request.response(ResponseCode.SYSTEM_ERROR, remark=parsed)
    if request.remark:
        log.info("transaction %s: the producer says %s", parsed.transaction_id, request.remark)
    service = runtime.ctx.stash.get(TRANSACTIONS, None)
    if service is None:
        return request.response(
            ResponseCode.SERVICE_NOT_AVAILABLE, remark="the transaction service is not running"
        )
    outcome = await service.end(parsed)
    if outcome is None:
        return None
    if outcome.code != ResponseCode.SUCCESS:
        log.warning(
            "END_TRANSACTION %s from %s (group %s, half offset %d) refused: %s",
            parsed.transaction_id,
            connection.peer,
            parsed.producer_group,
            parsed.tran_state_table_offset,
            outcome.remark,
        )
    return request.response(outcome.code, remark=outcome.remark or None)


async def handle_query_pending(
    runtime: BrokerRuntime, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    """Body: ``{"pending": [...], "figures": {...}}``; ext ``producerGroup`` narrows the list."""
    service = runtime.ctx.stash.get(TRANSACTIONS, None)
    if service is None:
        return request.response(ResponseCode.SERVICE_NOT_AVAILABLE, remark=NOT_RUNNING)
    group = request.ext.get("producerGroup") or None
    pending = await service.pending(group)
    body = {
        "pending": [
            {
                "halfOffset": p.half_offset,
                "commitLogOffset": p.commit_log_offset,
                "producerGroup": p.producer_group,
                "topic": p.topic,
                "transactionId": p.transaction_id,
                "bornTimestamp": p.born_timestamp,
                "checkTimes": p.check_times,
            }
            for p in pending
        ],
        "figures": service.figures(),
    }
    return request.response(ResponseCode.SUCCESS, body=json.dumps(body).encode())
