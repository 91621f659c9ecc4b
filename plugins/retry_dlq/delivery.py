"""What the delay-level scheduler and the timer share: checking saved progress against a parking
queue, and moving parked messages to their real topics."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import attrs

from kernel.context import BrokerRuntime
from kernel.model import BrokerRole, MessageBatch, PutStatus, QueueEntry
from kernel.protocols import MessageStore
from plugins.retry_dlq.parking import unpark
from wire import record

log = logging.getLogger(__name__)

RETRY_AFTER_FAILURE = 1.0
"""Seconds a scheduler waits before trying a delivery the store could not take."""


def offset_in_range(store: MessageStore, topic: str, queue_id: int, saved: int, what: str) -> int:
    """``saved`` clamped to the queue's real range (retention may have moved its start, a lost
    log tail its end); a correction is logged naming ``what`` was saved."""
    low = store.min_queue_offset(topic, queue_id)
    high = store.max_queue_offset(topic, queue_id)
    corrected = min(max(saved, low), high)
    if corrected != saved:
        log.warning("%s: saved offset %d is outside [%d, %d]; using %d", what, saved, low, high, corrected)
    return corrected


@attrs.frozen
class Delivery:
    """What :func:`deliver_parked` did with a run of parked entries."""

    done: bool
    """False when the store could not take them now: keep the progress and try again."""
    dropped: int = 0
    """Records dropped because they name no real topic (written to a parking topic by a client,
    before such sends were refused): delivering them would park them again, forever."""


async def deliver_parked(runtime: BrokerRuntime, entries: Sequence[QueueEntry]) -> Delivery:
    """Put the parked messages of ``entries`` to their real topics, in order, as one batch.

    Not done when the store cannot take them now (not writable, busy): the caller keeps its
    progress and tries again. A batch refused for good (say a topic made illegal since) is
    delivered message by message so one bad message does not hold the others back; what is
    still refused is logged and dropped.
    """
    if runtime.role is BrokerRole.SLAVE:
        # A controller-mode replica runs its schedules while a slave: its master delivers.
        return Delivery(False)
    if not entries:
        return Delivery(True)
    raw = await runtime.store.read_records(entries)
    messages = []
    for entry, data in zip(entries, raw, strict=True):
        message = unpark(record.decode_record(data))
        if message is None:
            log.error(
                "parked record at commit-log offset %d (queue offset %d) names no real topic "
                "(REAL_TOPIC); dropped",
                entry.physical_offset,
                entry.queue_offset,
            )
        else:
            messages.append(message)
    dropped = len(entries) - len(messages)
    if not messages:
        return Delivery(True, dropped)
    result = await runtime.put(MessageBatch(messages))
    if result.status.stored:
        return Delivery(True, dropped)
    if result.status in (PutStatus.SERVICE_NOT_AVAILABLE, PutStatus.OS_PAGE_CACHE_BUSY):
        log.warning("scheduled delivery waits: %s %s", result.status.value, result.remark)
        return Delivery(False)
    for message in messages:
        single = await runtime.put(MessageBatch([message]))
        if not single.status.stored:
            log.error(
                "scheduled message for %s dropped after %s: %s",
                message.topic,
                single.status.value,
                single.remark,
            )
    return Delivery(True, dropped)
