"""What the trace topic says about one message (``queryMsgTraceById``, the console's timeline).

Trace messages are found through the broker's key index (traced clients key them with the
message ids they describe) and decoded with :mod:`wire.trace_data`, whichever client wrote
them. Each record about the asked id becomes a :class:`TraceView`; the client host is the trace
message's born host, as RocketMQ's tool shows it. A SubAfter record carries no group and, from
older clients, no time: both are taken from the SubBefore record of the same request id.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence

import attrs

from trocket.admin.client import AdminClient
from wire.record import StoredMessage
from wire.trace_data import TRACE_TOPIC, TraceRecord, TraceType, decode


@attrs.frozen
class TraceView:
    """One record about the message, with where it came from."""

    type: str
    """Pub, SubBefore, SubAfter or EndTransaction."""
    group: str
    client_host: str
    timestamp: int
    """Epoch milliseconds: when the send began, the listener got the message, or it returned."""
    cost_ms: int
    success: bool
    topic: str = ""
    tags: str = ""
    keys: str = ""
    store_host: str = ""
    offset_msg_id: str = ""
    request_id: str = ""
    retry_times: int = 0
    context_code: int = 0
    transaction_state: str = ""

    @property
    def status(self) -> str:
        """RocketMQ's column: success or failed (a transaction's state for EndTransaction)."""
        if self.type == TraceType.END_TRANSACTION.value:
            return self.transaction_state
        return "success" if self.success else "failed"


def trace_views(msg_id: str, trace_messages: Iterable[StoredMessage]) -> list[TraceView]:
    """Every record about ``msg_id`` in ``trace_messages``, by time (a trace message read twice
    counts once)."""
    found: list[tuple[TraceRecord, str]] = []
    seen: set[tuple[str, int]] = set()
    for message in trace_messages:
        where = (message.store_host, message.physical_offset)
        if where in seen:
            continue
        seen.add(where)
        try:
            text = message.payload.decode()
        except (UnicodeDecodeError, zlib.error):
            continue  # not trace data
        found += [(r, message.born_host[0]) for r in decode(text) if r.msg_id == msg_id]
    started = {r.request_id: r for r, _ in found if r.type is TraceType.SUB_BEFORE}
    views = [_view(record, host, started.get(record.request_id)) for record, host in found]
    return sorted(views, key=lambda v: (v.timestamp, _ORDER[v.type]))


_ORDER = {"Pub": 0, "EndTransaction": 1, "SubBefore": 2, "SubAfter": 3}


def _view(record: TraceRecord, host: str, before: TraceRecord | None) -> TraceView:
    group, timestamp = record.group, record.timestamp
    if record.type is TraceType.SUB_AFTER and before is not None:
        group = group or before.group
        timestamp = timestamp or before.timestamp + record.cost_ms
    return TraceView(
        record.type.value,
        group,
        host,
        timestamp,
        record.cost_ms,
        record.success,
        topic=record.topic or (before.topic if before else ""),
        tags=record.tags,
        keys=record.keys,
        store_host=record.store_host,
        offset_msg_id=record.offset_msg_id,
        request_id=record.request_id,
        retry_times=before.retry_times if before is not None else record.retry_times,
        context_code=record.context_code,
        transaction_state=record.transaction_state,
    )


def consumptions(views: Sequence[TraceView]) -> dict[str, list[TraceView]]:
    """The SubAfter views by consumer group, groups in the order they first consumed."""
    out: dict[str, list[TraceView]] = {}
    for view in views:
        if view.type == TraceType.SUB_AFTER.value:
            out.setdefault(view.group, []).append(view)
    return out


async def query_trace(
    client: AdminClient,
    msg_id: str,
    *,
    trace_topic: str = TRACE_TOPIC,
    max_num: int = 64,
    begin_ms: int = 0,
    end_ms: int = 2**62,
) -> list[TraceView]:
    """The trace of ``msg_id`` (a client's message id) in ``trace_topic``: the trace messages
    keyed with it, at most ``max_num`` per broker, stored between ``begin_ms`` and ``end_ms``.

    :raises AdminError: the trace topic has no route (no broker has ``traceTopicEnable`` and no
        traced client has written to it).
    """
    found = await client.query_by_key(trace_topic, msg_id, max_num=max_num, begin_ms=begin_ms, end_ms=end_ms)
    return trace_views(msg_id, found)
