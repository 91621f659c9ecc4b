"""The pull pipeline: consume-queue lookup, tag-hash filter, stored records out of the log.

Status and next-offset rules follow RocketMQ's ``DefaultMessageStore.getMessage`` so clients
correct their offsets the way they do against RocketMQ.
"""

from __future__ import annotations

from collections.abc import Collection

from kernel.model import GetResult, GetStatus
from kernel.protocols import MessageStore

MAX_SCAN_ENTRIES = 16000
"""Entries inspected per pull at most, so a tag filter matching nothing cannot stall a pull."""


async def get_messages(
    store: MessageStore,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    max_count: int = 32,
    max_bytes: int = 4 * 1024 * 1024,
    tags_codes: Collection[int] | None = None,
) -> GetResult:
    """Read up to ``max_count`` messages (and about ``max_bytes``) from a queue.

    :param tags_codes: accept only entries whose tag hash is in this set (``None`` = all).
    """
    min_offset = store.min_queue_offset(topic, queue_id)
    max_offset = store.max_queue_offset(topic, queue_id)
    if max_offset == 0:
        return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, [], 0, min_offset, max_offset)
    if offset < min_offset:
        return GetResult(GetStatus.OFFSET_TOO_SMALL, [], min_offset, min_offset, max_offset)
    if offset == max_offset:
        return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, [], offset, min_offset, max_offset)
    if offset > max_offset:
        next_offset = min_offset if min_offset == 0 else max_offset
        return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, [], next_offset, min_offset, max_offset)

    # Without a tag filter every entry is taken, so reading more than max_count is waste (it
    # was most of a small pull's cost); with one, scan ahead for matches.
    scan = max_count if tags_codes is None else MAX_SCAN_ENTRIES
    entries = store.lookup(topic, queue_id, offset, min(scan, max_offset - offset))
    if not entries:
        return GetResult(GetStatus.OFFSET_FOUND_NULL, [], offset + 1, min_offset, max_offset)
    log_min = store.watermarks().min_offset
    chosen = []
    next_offset = offset
    total = 0
    removed = False
    for entry in entries:
        if len(chosen) >= max_count or (chosen and total + entry.size > max_bytes):
            break
        next_offset = entry.queue_offset + 1
        if entry.physical_offset < log_min:
            removed = True
            continue
        if tags_codes is not None and entry.tags_code not in tags_codes:
            continue
        chosen.append(entry)
        total += entry.size
    if not chosen:
        status = GetStatus.MESSAGE_WAS_REMOVING if removed else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, [], next_offset, min_offset, max_offset)
    records = await store.read_records(chosen)
    return GetResult(
        GetStatus.FOUND,
        records,
        next_offset,
        min_offset,
        max_offset,
        [e.queue_offset for e in chosen],
    )
