"""Message trace on the client (RocketMQ 4.x's ``AsyncTraceDispatcher`` and its send and consume
hooks): what a traced producer or consumer did with each message, written to the trace topic.

A traced send or listener call only appends records to a bounded list; a background task takes
them in batches, encodes them in RocketMQ's trace format (:mod:`wire.trace_data`), and sends
them through an inner producer of its own (group ``_INNER_TRACE_PRODUCER-<group>-<kind>``),
several records per message, each message at most :data:`MAX_TRACE_BODY` bytes, keyed by the
traced messages' ids and keys so ``queryMsgTraceById`` finds them through the broker's index.
Tracing never slows or fails the traced call: when the list is full, records are dropped and
counted, and a failed trace send is logged and counted, not retried.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence

import attrs
import trio

from trocket.client.consumer.received import ReceivedMessage
from trocket.client.message import KEY_SEPARATOR, Message, SendResult, SendStatus
from wire.names import PROPERTY_TRANSACTION_PREPARED
from wire.trace_data import TRACE_PRODUCER_GROUP_PREFIX, MessageType, TraceRecord, TraceType, encode

log = logging.getLogger(__name__)

DEFAULT_REGION = "DefaultRegion"
"""What a record names as region when the broker sent none (RocketMQ's ``regionId`` default)."""
MAX_TRACE_BODY = 128 * 1024
"""Bytes of trace text per trace message at most (RocketMQ's ``maxMsgSize`` for traces)."""
QUEUE_LIMIT = 2048
"""Records waiting at most (RocketMQ's trace ``queueSize``); more are dropped and counted."""
BATCH_WAIT = 0.05
"""Seconds the writer lets records gather after the first one arrives, so a busy client sends
one trace message for many records rather than one per record."""
SENDS_IN_FLIGHT = 4

TraceSender = Callable[[Message], Awaitable[object]]


def trace_producer_group(group: str, kind: str) -> str:
    """The inner producer's group, as RocketMQ names it (``kind``: PRODUCE or CONSUME)."""
    return f"{TRACE_PRODUCER_GROUP_PREFIX}-{group}-{kind}"


def now_ms() -> int:
    return int(time.time() * 1000)


@attrs.define(eq=False)
class TraceDispatcher:
    """See the module docstring. ``append`` from any task of the owner's event loop; ``run``
    in the owner's nursery; ``close`` writes what is left (within ``timeout``) and ends ``run``."""

    send: TraceSender
    topic: str
    written: int = 0
    """Records sent to the trace topic."""
    dropped: int = 0
    """Records dropped: the list was full, or their trace message could not be sent."""
    _pending: list[TraceRecord] = attrs.field(factory=list, init=False)
    _arrived: trio.Event = attrs.field(factory=trio.Event, init=False)
    _closing: bool = attrs.field(default=False, init=False)
    _done: trio.Event = attrs.field(factory=trio.Event, init=False)
    _scope: trio.CancelScope = attrs.field(factory=trio.CancelScope, init=False)

    def append(self, records: Sequence[TraceRecord]) -> None:
        """Queue ``records`` for writing; never blocks (beyond :data:`QUEUE_LIMIT` they are
        dropped, counted and logged every thousand)."""
        room = 0 if self._closing else max(0, QUEUE_LIMIT - len(self._pending))
        if len(records) > room:
            before = self.dropped
            self.dropped += len(records) - room
            if before == 0 or before // 1000 != self.dropped // 1000:
                log.warning("trace: %d record(s) dropped so far (the writer falls behind)", self.dropped)
            records = records[:room]
        if records:
            self._pending.extend(records)
            self._arrived.set()

    async def run(self) -> None:
        """Write records as they come until :meth:`close`."""
        try:
            with self._scope:
                await self._write_batches()
        finally:
            self._done.set()

    async def _write_batches(self) -> None:
        async with trio.open_nursery() as nursery:
            slots = trio.Semaphore(SENDS_IN_FLIGHT)
            while True:
                await self._arrived.wait()
                if not self._closing:
                    await trio.sleep(BATCH_WAIT)
                batch, self._pending = self._pending, []
                self._arrived = trio.Event()
                for body, keys, count in split_messages(batch):
                    await slots.acquire()
                    nursery.start_soon(self._write, slots, body, keys, count)
                if self._closing and not self._pending:
                    return

    async def _write(self, slots: trio.Semaphore, body: str, keys: list[str], count: int) -> None:
        try:
            await self.send(Message(self.topic, body.encode(), keys=keys))
            self.written += count
        except Exception as error:  # noqa: BLE001 - a trace is never worth failing the owner
            self.dropped += count
            log.warning("trace: %d record(s) to %s not written: %s", count, self.topic, error)
        finally:
            slots.release()

    async def close(self, timeout: float) -> None:
        """Write what is queued, waiting at most ``timeout`` seconds (then what is left is
        dropped and :meth:`run` ends)."""
        self._closing = True
        self._arrived.set()
        with trio.move_on_after(timeout):
            await self._done.wait()
        if not self._done.is_set():
            log.warning("trace: gave up writing after %.3gs at shutdown", timeout)
            self._scope.cancel()
            await self._done.wait()


def split_messages(records: Sequence[TraceRecord]) -> list[tuple[str, list[str], int]]:
    """``records`` as trace message bodies of at most :data:`MAX_TRACE_BODY` bytes: (body,
    keys, record count) each. A single record larger than the limit travels alone."""
    out: list[tuple[str, list[str], int]] = []
    start, size = 0, 0
    for i, record in enumerate(records):
        one = _estimate(record)
        if size and size + one > MAX_TRACE_BODY:
            out.append((*encode(records[start:i]), i - start))
            start, size = i, 0
        size += one
    if start < len(records):
        out.append((*encode(records[start:]), len(records) - start))
    return out


def _estimate(record: TraceRecord) -> int:
    """An upper bound of a record's encoded length (fields plus separators), without encoding it."""
    return 96 + sum(
        len(text) if text.isascii() else len(text.encode())
        for text in (
            record.region,
            record.group,
            record.topic,
            record.msg_id,
            record.tags,
            record.keys,
            record.store_host,
            record.offset_msg_id,
            record.request_id,
        )
    )


# --- records ----------------------------------------------------------------------------------

DELAY_PROPERTIES = ("DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "__STARTDELIVERTIME")
"""Properties that make a message a delayed one for its Pub record's type."""


def message_type(message: Message) -> MessageType:
    properties = message.properties
    if properties.get(PROPERTY_TRANSACTION_PREPARED) == "true":
        return MessageType.TRANS_HALF
    if message.delay_level > 0 or any(key in properties for key in DELAY_PROPERTIES):
        return MessageType.DELAY
    return MessageType.NORMAL


def published(
    group: str,
    messages: Sequence[Message],
    result: SendResult,
    *,
    store_host: str,
    region: str,
    began_ms: int,
    cost_ms: int,
) -> list[TraceRecord]:
    """One Pub record per message of a send (a batch answers its ids joined by commas)."""
    ids = result.msg_id.split(",")
    offset_ids = result.offset_msg_id.split(",")
    success = result.status is SendStatus.SEND_OK
    return [
        TraceRecord(
            TraceType.PUB,
            ids[i] if i < len(ids) else "",
            began_ms,
            region or DEFAULT_REGION,
            group,
            message.topic,
            message.tags or "",
            KEY_SEPARATOR.join(message.keys),
            store_host,
            len(message.body),
            cost_ms,
            message_type(message),
            offset_ids[i] if i < len(offset_ids) else "",
            success,
        )
        for i, message in enumerate(messages)
    ]


def transaction_ended(
    group: str,
    message: Message,
    result: SendResult,
    *,
    store_host: str,
    transaction_id: str,
    state: str,
    from_check: bool = False,
) -> TraceRecord:
    """The EndTransaction record of a transactional send (``state``: COMMIT_MESSAGE,
    ROLLBACK_MESSAGE or UNKNOW)."""
    return TraceRecord(
        TraceType.END_TRANSACTION,
        result.msg_id,
        now_ms(),
        DEFAULT_REGION,
        group,
        message.topic,
        message.tags or "",
        KEY_SEPARATOR.join(message.keys),
        store_host,
        message_type=MessageType.TRANS_HALF,
        transaction_id=transaction_id,
        transaction_state=state,
        from_check=from_check,
    )


def consume_started(group: str, messages: Sequence[ReceivedMessage], request_id: str) -> list[TraceRecord]:
    """SubBefore records for the messages a listener is about to get (those whose producer
    turned tracing off with ``TRACE_ON=false`` are left out, as RocketMQ does)."""
    began = now_ms()
    records = []
    for m in messages:
        properties = m.properties
        if properties.get("TRACE_ON") == "false":
            continue
        records.append(
            TraceRecord(
                TraceType.SUB_BEFORE,
                m.msg_id,
                began,
                properties.get("MSG_REGION") or DEFAULT_REGION,
                group,
                m.topic,
                m.tags or "",
                KEY_SEPARATOR.join(m.keys),
                body_length=m.stored_size,
                request_id=request_id,
                retry_times=m.reconsume_times,
            )
        )
    return records


class ConsumeReturn:
    """RocketMQ's ``ConsumeReturnType`` ordinals, the SubAfter record's context code."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURNNULL = 3
    FAILED = 4


def consume_finished(
    started: Sequence[TraceRecord], delivered: int, *, success: bool, cost_ms: int, context_code: int
) -> list[TraceRecord]:
    """SubAfter records for ``started``: the listener call's time split over the ``delivered``
    messages it got, as RocketMQ reports it."""
    each = cost_ms // max(1, delivered)
    ended = now_ms()
    return [
        attrs.evolve(
            record,
            type=TraceType.SUB_AFTER,
            cost_ms=each,
            success=success,
            context_code=context_code,
            timestamp=ended,
        )
        for record in started
    ]
