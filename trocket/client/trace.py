"""Message trace on the client (RocketMQ 4.x's ``AsyncTraceDispatcher`` and its send and consume
hooks): what a traced producer or consumer did with each message, written to the trace topic.

A traced send or listener call only appends records to a bounded list; a background task takes
them in batches and sends them through an inner producer of its own (group
``_INNER_TRACE_PRODUCER-<group>-<kind>``), many records per message, each message at most
:data:`MAX_TRACE_BODY` bytes, keyed by the traced messages' ids and keys so
``queryMsgTraceById`` finds them through the broker's index. Tracing never slows or fails the
traced call: when the list is full, records are dropped and counted, and a failed trace send is
logged and counted, not retried.

A record is kept as its finished text (RocketMQ's format, :mod:`wire.trace_data`) with the id
and keys it is indexed by: a traced send adds one f-string and one tuple, and a trace message's
body is one ``"".join`` of them.
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
from wire.trace_data import (
    TRACE_PRODUCER_GROUP_PREFIX,
    MessageType,
    end_transaction_text,
    pub_text,
    sub_after_text,
    sub_before_text,
)

log = logging.getLogger(__name__)

DEFAULT_REGION = "DefaultRegion"
"""What a record names as region when the broker sent none (RocketMQ's ``regionId`` default)."""
MAX_TRACE_BODY = 128 * 1024
"""Bytes of trace text per trace message at most (RocketMQ's ``maxMsgSize`` for traces)."""
MAX_TRACE_KEYS = 32767 - 10000
"""Characters of keys per trace message at most (RocketMQ's ``MAX_MSG_KEY_SIZE``): a message's
properties must fit a short, and a trace message's keys are every id and key it describes."""
QUEUE_LIMIT = 2048
"""Records waiting at most (RocketMQ's trace ``queueSize``); more are dropped and counted."""
BATCH_WAIT = 0.05
"""Seconds the writer lets records gather after the first one arrives, so a busy client sends
one trace message for many records rather than one per record."""
SENDS_IN_FLIGHT = 4

TraceEntry = tuple[str, str, str]
"""One record: its text (separators included), the message id and the keys it is indexed by."""
TraceSender = Callable[[Message], Awaitable[object]]


def trace_producer_group(group: str, kind: str) -> str:
    """The inner producer's group, as RocketMQ names it (``kind``: PRODUCE or CONSUME)."""
    return f"{TRACE_PRODUCER_GROUP_PREFIX}-{group}-{kind}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@attrs.define(eq=False)
class TraceDispatcher:
    """See the module docstring. ``append`` from any task of the owner's event loop; ``run``
    in a nursery that outlives the owner's tasks; ``close`` writes what is left (within
    ``timeout``) and ends ``run``."""

    send: TraceSender
    topic: str
    written: int = 0
    """Records sent to the trace topic."""
    dropped: int = 0
    """Records dropped: the list was full, or their trace message could not be sent."""
    _pending: list[TraceEntry] = attrs.field(factory=list, init=False)
    _arrived: trio.Event = attrs.field(factory=trio.Event, init=False)
    _closing: bool = attrs.field(default=False, init=False)
    _done: trio.Event = attrs.field(factory=trio.Event, init=False)
    _scope: trio.CancelScope = attrs.field(factory=trio.CancelScope, init=False)

    def append(self, entries: Sequence[TraceEntry]) -> None:
        """Queue ``entries`` for writing; never blocks (beyond :data:`QUEUE_LIMIT` they are
        dropped, counted and logged every thousand)."""
        room = 0 if self._closing else QUEUE_LIMIT - len(self._pending)
        if len(entries) > room:
            room = max(0, room)
            before = self.dropped
            self.dropped += len(entries) - room
            if before == 0 or before // 1000 != self.dropped // 1000:
                log.warning("trace: %d record(s) dropped so far (the writer falls behind)", self.dropped)
            entries = entries[:room]
        if entries:
            self._pending += entries
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


def split_messages(entries: Sequence[TraceEntry]) -> list[tuple[str, list[str], int]]:
    """``entries`` as trace message bodies of at most :data:`MAX_TRACE_BODY` bytes and
    :data:`MAX_TRACE_KEYS` characters of keys: (body, keys, record count) each. A single record
    larger than either travels alone."""
    out: list[tuple[str, list[str], int]] = []
    start, size, key_size = 0, 0, 0
    for i, (text, msg_id, keys) in enumerate(entries):
        length = len(text) if text.isascii() else len(text.encode())
        key_length = len(msg_id) + len(keys) + 2
        if i > start and (size + length > MAX_TRACE_BODY or key_size + key_length > MAX_TRACE_KEYS):
            out.append(_message(entries[start:i]))
            start, size, key_size = i, 0, 0
        size += length
        key_size += key_length
    if start < len(entries):
        out.append(_message(entries[start:]))
    return out


def _message(entries: Sequence[TraceEntry]) -> tuple[str, list[str], int]:
    keys: dict[str, None] = {}
    for _, msg_id, message_keys in entries:
        keys[msg_id] = None
        if message_keys:
            keys[message_keys] = None
    return "".join(e[0] for e in entries), list(keys), len(entries)


# --- records ----------------------------------------------------------------------------------

DELAY_PROPERTIES = ("DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "__STARTDELIVERTIME")
"""Properties that make a message a delayed one for its Pub record's type."""


_NORMAL, _TRANS_HALF, _DELAY = int(MessageType.NORMAL), int(MessageType.TRANS_HALF), int(MessageType.DELAY)


def message_type(message: Message) -> int:
    """The Pub record's message type (a ``MessageType`` ordinal, as a plain int: it is
    formatted into every Pub record)."""
    properties = message.properties
    if message.delay_level > 0:
        return _DELAY
    if not properties:
        return _NORMAL
    if properties.get(PROPERTY_TRANSACTION_PREPARED) == "true":
        return _TRANS_HALF
    if any(key in properties for key in DELAY_PROPERTIES):
        return _DELAY
    return _NORMAL


def published(
    group: str,
    messages: Sequence[Message],
    result: SendResult,
    store_host: str,
    region: str,
    began_ms: int,
    cost_ms: int,
) -> list[TraceEntry]:
    """One Pub record per message of a send (a batch answers its ids joined by commas)."""
    success = result.status is SendStatus.SEND_OK
    if len(messages) == 1:  # the common case, without the loop
        message = messages[0]
        keys = KEY_SEPARATOR.join(message.keys) if message.keys else ""
        text = pub_text(
            began_ms, region, group, message.topic, result.msg_id, message.tags or "", keys, store_host,
            len(message.body), cost_ms, message_type(message), result.offset_msg_id, success,
        )  # fmt: skip
        return [(text, result.msg_id, keys)]
    ids, offset_ids = result.msg_id.split(","), result.offset_msg_id.split(",")
    out = []
    for i, message in enumerate(messages):
        msg_id = ids[i] if i < len(ids) else ""
        keys = KEY_SEPARATOR.join(message.keys)
        text = pub_text(
            began_ms, region, group, message.topic, msg_id, message.tags or "", keys, store_host,
            len(message.body), cost_ms, message_type(message),
            offset_ids[i] if i < len(offset_ids) else "", success,
        )  # fmt: skip
        out.append((text, msg_id, keys))
    return out


def transaction_ended(
    group: str,
    message: Message,
    result: SendResult,
    *,
    store_host: str,
    transaction_id: str,
    state: str,
    from_check: bool = False,
) -> TraceEntry:
    """The EndTransaction record of a transactional send (``state``: COMMIT_MESSAGE,
    ROLLBACK_MESSAGE or UNKNOW)."""
    keys = KEY_SEPARATOR.join(message.keys)
    text = end_transaction_text(
        now_ms(), DEFAULT_REGION, group, message.topic, result.msg_id, message.tags or "", keys,
        store_host, _TRANS_HALF, transaction_id, state, from_check,
    )  # fmt: skip
    return (text, result.msg_id, keys)


@attrs.frozen
class ConsumeTrace:
    """A listener call being traced: what its SubAfter records need."""

    request_id: str
    started: tuple[tuple[str, str], ...]
    """(msg id, keys) of the messages traced."""
    delivered: int
    """Messages handed to the listener (RocketMQ splits the call's time over all of them)."""


def consume_started(
    group: str, messages: Sequence[ReceivedMessage], request_id: str
) -> tuple[ConsumeTrace, list[TraceEntry]]:
    """SubBefore records for the messages a listener is about to get (those whose producer
    turned tracing off with ``TRACE_ON=false`` are left out, as RocketMQ does)."""
    began = now_ms()
    entries = []
    started = []
    for m in messages:
        properties = m.properties
        if properties.get("TRACE_ON") == "false":
            continue
        msg_id = m.msg_id
        keys = KEY_SEPARATOR.join(m.keys)
        region = properties.get("MSG_REGION") or DEFAULT_REGION
        text = sub_before_text(began, region, group, request_id, msg_id, m.reconsume_times, keys)
        entries.append((text, msg_id, keys))
        started.append((msg_id, keys))
    return ConsumeTrace(request_id, tuple(started), len(messages)), entries


class ConsumeReturn:
    """RocketMQ's ``ConsumeReturnType`` ordinals, the SubAfter record's context code."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURNNULL = 3
    FAILED = 4


def consume_finished(
    trace: ConsumeTrace, *, success: bool, cost_ms: int, context_code: int
) -> list[TraceEntry]:
    """SubAfter records for a traced listener call: its time split over the messages it got."""
    each = cost_ms // max(1, trace.delivered)
    ended = now_ms()
    return [
        (sub_after_text(trace.request_id, msg_id, each, success, keys, context_code, ended), msg_id, keys)
        for msg_id, keys in trace.started
    ]
