"""Moving parked messages to their real topics: shared by the delay-level scheduler and the timer."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kernel import record
from kernel.context import BrokerRuntime
from kernel.model import MessageBatch, PutStatus, QueueEntry
from plugins.retry_dlq.parking import unpark

log = logging.getLogger(__name__)

RETRY_AFTER_FAILURE = 1.0
"""Seconds a scheduler waits before trying a delivery the store could not take."""


async def deliver_parked(runtime: BrokerRuntime, entries: Sequence[QueueEntry]) -> bool:
    """Put the parked messages of ``entries`` to their real topics, in order, as one batch.

    False when the store cannot take them now (not writable, busy): the caller keeps its
    progress and tries again. A batch refused for good (say a topic made illegal since) is
    delivered message by message so one bad message does not hold the others back; what is
    still refused is logged and dropped.
    """
    if not entries:
        return True
    raw = await runtime.store.read_records(entries)
    messages = [unpark(record.decode_record(data)) for data in raw]
    result = await runtime.put(MessageBatch(messages))
    if result.status.stored:
        return True
    if result.status in (PutStatus.SERVICE_NOT_AVAILABLE, PutStatus.OS_PAGE_CACHE_BUSY):
        log.warning("scheduled delivery waits: %s %s", result.status.value, result.remark)
        return False
    for message in messages:
        single = await runtime.put(MessageBatch([message]))
        if not single.status.stored:
            log.error(
                "scheduled message for %s dropped after %s: %s",
                message.topic,
                single.status.value,
                single.remark,
            )
    return True
