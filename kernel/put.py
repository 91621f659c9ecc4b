"""The put pipeline: before-append hook, append, flush and replica waits, after-put hook.

Per batch: one pluggy call before and one after (each skipped when no plugin implements it,
decided at assembly), one store append, and the two durability waits. With no replicator (a
standalone broker) the flush wait is awaited directly, saving a nursery per put.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio

from kernel.context import BrokerContext
from kernel.errors import StoreNotWritable
from kernel.model import (
    MAX_PROPERTIES_SIZE,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    TRANSACTION_HALF_TOPIC,
    AppendResult,
    Durability,
    MessageBatch,
    PutResult,
    PutStatus,
    Rejection,
    Replication,
    encode_properties,
)
from kernel.protocols import FlushPolicy, MessageStore, Replicator
from wire.names import topic_problem
from wire.wire_batch import WireBatch

log = logging.getLogger(__name__)


@attrs.frozen
class PutStatistics:
    """Counters of the put pipeline since start."""

    batches: int
    """Batches that reached the pipeline."""
    messages: int
    """Messages appended to the log."""
    by_status: dict[str, int]
    """Batches per final :class:`PutStatus` name."""
    appends: int = 0
    """Store appends: fewer than batches when batches arriving together were appended at once
    (:meth:`PutPipeline.put_group`)."""


def combine(durability: Durability, replication: Replication) -> tuple[PutStatus, str]:
    """Join the two durability waits into RocketMQ's status (a replica failure wins, as in
    RocketMQ's ``handleDiskFlushAndHA``)."""
    status, remark = PutStatus.PUT_OK, ""
    if durability is Durability.TIMEOUT:
        status, remark = PutStatus.FLUSH_DISK_TIMEOUT, "flush did not complete in time"
    elif durability is Durability.FAILED:
        status, remark = PutStatus.FLUSH_DISK_TIMEOUT, "flush failed; the store is read-only"
    if replication is Replication.TIMEOUT:
        status, remark = PutStatus.FLUSH_SLAVE_TIMEOUT, "slave did not acknowledge in time"
    elif replication is Replication.NO_REPLICA:
        status, remark = PutStatus.SLAVE_NOT_AVAILABLE, "no slave is connected"
    return status, remark


def validate(batch: MessageBatch, max_message_size: int) -> Rejection | None:
    """Broker-wide limits (RocketMQ's ``checkMessage``): body size, topic and properties. The
    topic rule is RocketMQ's, whoever puts (a client, a plugin): a topic becomes a directory of
    the store, so a name that could leave its root is never acknowledged."""
    if not len(batch):
        return Rejection(PutStatus.MESSAGE_ILLEGAL, "empty batch")
    encoded = batch.encoded
    if encoded is not None:
        return _validate_encoded(encoded, max_message_size)
    for message in batch.messages:
        if len(message.body) > max_message_size:
            return Rejection(
                PutStatus.MESSAGE_ILLEGAL,
                f"message body is {len(message.body)} bytes; maxMessageSize is {max_message_size}",
            )
        problem = topic_problem(message.topic)
        if problem:
            return Rejection(PutStatus.MESSAGE_ILLEGAL, problem)
        properties = message.properties
        if not properties:
            continue
        text = "".join(map("".join, properties.items()))  # every key and value, searched at once
        if "\0" in text:
            return Rejection(PutStatus.MESSAGE_ILLEGAL, "a property contains a NUL character")
        if _properties_too_large(properties, len(text)):
            return Rejection(
                PutStatus.PROPERTIES_SIZE_EXCEEDED,
                f"properties exceed {MAX_PROPERTIES_SIZE} bytes",
            )
    return None


def _validate_encoded(batch: WireBatch, max_message_size: int) -> Rejection | None:
    """:func:`validate` on columns: one topic for the batch, body sizes as an array, one NUL
    search over every message's properties (their lengths fit a short by construction)."""
    largest = batch.largest_body()
    if largest > max_message_size:
        return Rejection(
            PutStatus.MESSAGE_ILLEGAL,
            f"message body is {largest} bytes; maxMessageSize is {max_message_size}",
        )
    problem = topic_problem(batch.topic)
    if problem:
        return Rejection(PutStatus.MESSAGE_ILLEGAL, problem)
    if batch.has_nul_in_properties():
        return Rejection(PutStatus.MESSAGE_ILLEGAL, "a property contains a NUL character")
    return None


def _unhandled(batch: MessageBatch, parking: frozenset[str]) -> Rejection | None:
    """A message asking for something no loaded plugin took care of would be delivered at
    once, which is wrong either way, so it is refused instead (one pass over the batch):

    - a delay no plugin parked (moved to one of the ``parking`` topics); a half message's
      delay is not one yet: it applies when the transaction commits;
    - a transactional half message no plugin moved to the half topic (it would be visible
      before its producer commits or rolls back).
    """
    encoded = batch.encoded
    if encoded is not None and not encoded.needs_attention():
        prepared = encoded.sys_flag & SYSFLAG_TRANSACTION_ROLLBACK == SYSFLAG_TRANSACTION_PREPARED
        if prepared and encoded.topic != TRANSACTION_HALF_TOPIC:
            return Rejection(
                PutStatus.MESSAGE_ILLEGAL,
                "transactional (prepared) messages are not supported by this broker: no loaded "
                "plugin handles half messages",
            )
        return None
    for message in batch.messages:
        topic = message.topic
        if topic not in parking and message.wants_delay and not message.is_prepared:
            return Rejection(
                PutStatus.SERVICE_NOT_AVAILABLE,
                "delayed delivery is not enabled on this broker: no loaded plugin parks delayed "
                "messages (`trocket plugins` lists the installed ones; add one to [broker] plugins)",
            )
        if topic != TRANSACTION_HALF_TOPIC and message.is_prepared:
            return Rejection(
                PutStatus.MESSAGE_ILLEGAL,
                "transactional (prepared) messages are not supported by this broker: no loaded "
                "plugin handles half messages",
            )
    return None


def _properties_too_large(properties: dict[str, str], text_chars: int) -> bool:
    """Exact check only when a cheap bound (4 UTF-8 bytes per character; ``text_chars``: the
    keys' and values' characters) cannot rule it out, so the usual small property map is not
    encoded twice per put."""
    chars = text_chars + 2 * len(properties)
    return chars * 4 > MAX_PROPERTIES_SIZE and len(encode_properties(properties)) > MAX_PROPERTIES_SIZE


@attrs.define(eq=False)
class PutPipeline:
    """Appends batches and waits for the configured durability."""

    ctx: BrokerContext
    store: MessageStore
    flush: FlushPolicy
    replicator: Replicator | None = None
    refusal: Callable[[], str | None] = lambda: None
    """Why the broker takes no writes right now (a SLAVE, writes refused), asked right before
    each append: a batch of a group whose earlier batch waited for its flush or replicas is
    appended only after that wait, and the replica may have been deposed meanwhile (its log
    is then its new master's copy: nothing of its own may be appended to it)."""
    _batches: int = attrs.field(default=0, init=False)
    _messages: int = attrs.field(default=0, init=False)
    _by_status: dict[str, int] = attrs.field(factory=dict, init=False)
    _appends: int = attrs.field(default=0, init=False)
    _before_append: Any = attrs.field(init=False)
    _after_put: Any = attrs.field(init=False)
    _at_once: bool = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._at_once = self.replicator is None and bool(getattr(self.flush, "acknowledges_at_once", False))
        self._before_append = self.ctx.implemented("trocket_before_append")
        self._after_put = self.ctx.implemented("trocket_after_put")

    @property
    def acknowledges_at_once(self) -> bool:
        """Whether a put's answer waits for nothing but the append: a flush policy that says
        so (``acknowledges_at_once``) and no replicator."""
        return self._at_once

    async def put(self, batch: MessageBatch) -> PutResult:
        """Put one batch; the result's status says how durable it is. Never raises for an
        expected outcome (rejection, disk full, timeouts)."""
        rejection = self._check(batch)
        if rejection is not None:
            result = PutResult(rejection.status, None, rejection.remark)
        else:
            result = await self._append_and_wait(batch)
        return self._done(batch, result)

    async def put_group(self, batches: Sequence[MessageBatch]) -> list[PutResult]:
        """Put batches that arrived together (several single sends read from one connection
        at once): each is checked and answered on its own, as :meth:`put` would, but the
        accepted ones are appended with one store call, so their records are encoded and
        written as one run and the views dispatch them as one batch."""
        results: list[PutResult | None] = [None] * len(batches)
        group: list[int] = []
        for i, batch in enumerate(batches):
            rejection = self._check(batch)
            if rejection is not None:
                results[i] = PutResult(rejection.status, None, rejection.remark)
            elif isinstance(batch.payload, WireBatch):
                results[i] = await self._append_and_wait(batch)  # a batch already: stored as one
            else:
                group.append(i)
        if len(group) == 1:
            results[group[0]] = await self._append_and_wait(batches[group[0]])
        elif group and (refused := self.refusal()) is not None:
            for i in group:
                results[i] = PutResult(PutStatus.SERVICE_NOT_AVAILABLE, None, refused)
        elif group:
            messages = [m for i in group for m in batches[i].payload]
            self._appends += 1
            try:
                appended = await self.store.append(messages)
            except StoreNotWritable:
                # Nothing was written; each batch tries alone and gets its own answer.
                for i in group:
                    results[i] = await self._append_and_wait(batches[i])
            else:
                start = 0
                for i in group:
                    stop = start + len(batches[i])
                    results[i] = await self._wait(batches[i], appended.part(start, stop))
                    start = stop
        return [self._done(batch, result) for batch, result in zip(batches, results, strict=True)]  # type: ignore[arg-type]

    def _check(self, batch: MessageBatch) -> Rejection | None:
        self._batches += 1
        rejection = validate(batch, self.ctx.broker.max_message_size)
        if rejection is None and self._before_append is not None:
            rejection = self._before_append(batch, self.ctx)
        if rejection is None:
            rejection = _unhandled(batch, self.ctx.parking_topics)
        return rejection

    def _done(self, batch: MessageBatch, result: PutResult) -> PutResult:
        self._by_status[result.status.value] = self._by_status.get(result.status.value, 0) + 1
        if self._after_put is not None:
            self._after_put(batch, result, self.ctx)
        return result

    async def _append_and_wait(self, batch: MessageBatch) -> PutResult:
        refused = self.refusal()
        if refused is not None:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, None, refused)
        self._appends += 1
        try:
            appended = await self.store.append(batch.payload)
        except StoreNotWritable as error:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, None, str(error))
        return await self._wait(batch, appended)

    async def _wait(self, batch: MessageBatch, appended: AppendResult) -> PutResult:
        """The flush (and replica) wait of an appended batch, and its status."""
        self._messages += len(batch)
        # Whether the client waits matters only to a policy that waits at all (a property scan
        # per message otherwise).
        wait = True if self._at_once else batch.wait_store_ok
        if self.replicator is None:
            durability = await self.flush.wait_durable(appended, wait=wait)
            replication = Replication.NOT_REQUIRED
        else:
            durability, replication = await self._wait_both(appended, wait)
        status, remark = combine(durability, replication)
        return PutResult(status, appended, remark)

    async def _wait_both(self, appended: AppendResult, wait: bool) -> tuple[Durability, Replication]:
        outcome: dict[str, Durability | Replication] = {}
        replicator = self.replicator
        assert replicator is not None

        async def flushed() -> None:
            outcome["durability"] = await self.flush.wait_durable(appended, wait=wait)

        async def replicated() -> None:
            outcome["replication"] = await replicator.wait_replicated(appended, wait=wait)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(flushed)
            nursery.start_soon(replicated)
        return outcome["durability"], outcome["replication"]  # type: ignore[return-value]

    def statistics(self) -> PutStatistics:
        return PutStatistics(self._batches, self._messages, dict(self._by_status), self._appends)
