"""Revive: messages whose invisible time passed without an ack are delivered again.

Every ``revive_interval`` the master takes the checkpoints past their deadline and, for the
offsets they still hold, puts a copy of each message into the group's POP retry topic
(``%RETRY%<group>_<topic>``, one queue, created on first use) with its reconsume times + 1,
its ``UNIQ_KEY`` kept (so it is the same message to the client) and ``RETRY_TOPIC`` naming
where it came from. A message past the group's ``retryMaxTimes`` (or that the
``trocket_redelivery_decision`` hook sends to the dead-letter queue) goes to ``%DLQ%<group>``
instead, announced through ``trocket_dead_lettered``. Then an ack record strikes the offsets
off, so a restart does not revive them a second time.

A copy that cannot be stored now (the broker refuses writes, a full disk) leaves the
checkpoint as it is and tries again ``RETRY_AFTER_FAILURE`` later: nothing is struck off
before its copy is stored.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from kernel.model import BrokerRole, DispatchRecord, Message, MessageBatch, RedeliveryAction
from plugins.pop import revive_log
from plugins.pop.inflight import Checkpoint
from plugins.pop.refusal import PopRefused, now_ms
from wire import record
from wire.names import (
    DLQ_PREFIX,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    RETRY_PREFIX,
    TIMER_PROPERTIES,
)
from wire.pop_receipt import PROPERTY_POP_CK, retry_topic

if TYPE_CHECKING:
    from plugins.pop.service import PopService

log = logging.getLogger(__name__)

RETRY_AFTER_FAILURE_MS = 5000
_DROPPED_PROPERTIES = (PROPERTY_POP_CK, PROPERTY_DELAY_TIME_LEVEL, *TIMER_PROPERTIES)
"""A copy is due now: it must not be parked again for a delay it already had."""


async def revive_forever(service: PopService) -> None:
    """Every ``revive_interval``: rebuild if needed, revive what is due, wake FIFO pollers,
    save the replay floors. A tick that fails (a full disk, no file descriptors) is logged and
    counted, and the next one tries again: the broker never stops over it."""
    failing: str | None = None
    while True:
        await trio.sleep(service.config.revive_interval)
        if service.runtime.role is BrokerRole.SLAVE:
            continue
        try:
            await _tick(service)
        except (OSError, PopRefused) as error:
            why = error.remark if isinstance(error, PopRefused) else f"{type(error).__name__}: {error}"
            service.stats.revive_failures += 1
            if why != failing:
                log.warning(
                    "pop: revive tick failed (%s); trying again every %.1fs",
                    why,
                    service.config.revive_interval,
                )
            failing = why
            continue
        if failing is not None:
            log.info("pop: revive ticks work again after: %s", failing)
            failing = None


async def _tick(service: PopService) -> None:
    await service.ensure_loaded()
    now = now_ms()
    for checkpoint in service.table.due(now):
        await revive(service, checkpoint, now)
    expired = service.orderly.newly_expired(now)
    if expired:
        service.notify({topic for _, topic, _ in expired})
    service.save_floors()


async def revive(service: PopService, checkpoint: Checkpoint, now: int) -> None:
    """Deliver again what ``checkpoint`` still holds (see the module docstring)."""
    pending = [offset for offset in checkpoint.pending() if offset not in checkpoint.acking]
    if checkpoint.acking:
        service.table.postpone(checkpoint, now + int(service.config.revive_interval * 1000))
    if not pending:
        return
    directory, offsets = service.directory(), service.consumer_offsets()
    settings = offsets.group_settings(checkpoint.group)
    if settings is None or directory.topic_queues(checkpoint.topic) is None:
        log.warning(
            "pop: dropped checkpoint of %s on %s queue %d (%d messages): the %s no longer exists",
            checkpoint.group,
            checkpoint.topic,
            checkpoint.queue_id,
            len(pending),
            "group" if settings is None else "topic",
        )
        service.table.forget(checkpoint)
        return
    checkpoint.reviving.update(pending)
    try:
        copies, dead_letters = await _copies(service, checkpoint, pending, settings.retry_max_times)
        for topic in {copy.topic for copy in copies}:
            if directory.topic_queues(topic) is None:
                await directory.create_system_topic(topic, 1)
        if copies:
            put = await service.write(copies)
            if not put.status.stored:
                _postpone(service, checkpoint, now, f"{put.status.value} {put.remark}")
                return
        ack = revive_log.AckRecord(
            checkpoint.group,
            checkpoint.topic,
            checkpoint.queue_id,
            checkpoint.start_offset,
            checkpoint.pop_time,
            tuple(pending),
        )
        put = await service.writes.put(
            MessageBatch(
                [
                    revive_log.ack_message(
                        service.revive_topic, checkpoint.revive_qid, ack, service.broker_name
                    )
                ]
            )
        )
        if not put.status.stored:
            # The copies are stored: trying again re-delivers them twice, which is allowed.
            _postpone(service, checkpoint, now, f"revive ack: {put.status.value} {put.remark}")
            return
        service.table.ack(checkpoint.key, pending)
        ctx = service.runtime.ctx
        for view, reason in dead_letters:
            ctx.hook.trocket_dead_lettered(message=view, group=checkpoint.group, reason=reason, ctx=ctx)
        service.stats.dead_lettered += len(dead_letters)
        service.stats.revived += len(copies) - len(dead_letters)
    finally:
        checkpoint.reviving.difference_update(pending)


def _postpone(service: PopService, checkpoint: Checkpoint, now: int, why: str) -> None:
    service.stats.revive_failures += 1
    log.warning(
        "pop: revive of %s on %s queue %d waits %d ms: %s",
        checkpoint.group,
        checkpoint.topic,
        checkpoint.queue_id,
        RETRY_AFTER_FAILURE_MS,
        why,
    )
    service.table.postpone(checkpoint, now + RETRY_AFTER_FAILURE_MS)


async def _copies(
    service: PopService, checkpoint: Checkpoint, pending: list[int], max_times: int
) -> tuple[list[Message], list[tuple[DispatchRecord, str]]]:
    """The messages to put for ``pending``, and the ones among them going to the DLQ (with
    why, for ``trocket_dead_lettered`` once they are stored). Offsets no longer in the queue
    (removed by retention) are logged and struck off with the others."""
    store = service.runtime.store
    wanted = set(pending)
    entries = [
        entry
        for entry in store.lookup(
            checkpoint.topic, checkpoint.queue_id, pending[0], pending[-1] - pending[0] + 1
        )
        if entry.queue_offset in wanted
    ]
    if len(entries) < len(pending):
        log.warning(
            "pop: %d in-flight messages of %s on %s queue %d are no longer stored (retention); not revived",
            len(pending) - len(entries),
            checkpoint.group,
            checkpoint.topic,
            checkpoint.queue_id,
        )
    ctx = service.runtime.ctx
    target = checkpoint.topic if checkpoint.topic.startswith(RETRY_PREFIX) else None
    copies: list[Message] = []
    dead_letters: list[tuple[DispatchRecord, str]] = []
    for data in await store.read_records(entries) if entries else []:
        stored = record.decode_record(data)
        attempt = stored.reconsume_times + 1
        original = (
            stored.properties.get(PROPERTY_RETRY_TOPIC, checkpoint.topic) if target else checkpoint.topic
        )
        decision = ctx.hook.trocket_redelivery_decision(
            message=record.decode_dispatch(data, 0),
            group=checkpoint.group,
            attempt=attempt,
            max_attempts=max_times,
            ctx=ctx,
        )
        to_dlq = attempt > max_times or (
            decision is not None and decision.action is RedeliveryAction.DEAD_LETTER
        )
        properties = {k: v for k, v in stored.properties.items() if k not in _DROPPED_PROPERTIES}
        properties.setdefault(PROPERTY_RETRY_TOPIC, original)
        properties.setdefault(
            PROPERTY_ORIGIN_MESSAGE_ID,
            stored.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or stored.offset_msg_id,
        )
        if to_dlq:
            topic = DLQ_PREFIX + checkpoint.group
            reason = f"POP delivery {attempt} of {max_times + 1} not acknowledged"
            dead_letters.append((record.decode_dispatch(data, 0), reason))
        else:
            topic = target or retry_topic(checkpoint.group, original)
        copies.append(
            Message(
                topic,
                stored.body,
                0,
                stored.flag,
                properties,
                stored.sys_flag,
                stored.born_timestamp,
                stored.born_host,
                attempt,
            )
        )
    return copies, dead_letters
