"""The pull pipeline: consume-queue lookup, tag-hash filter, stored records out of the log.

Entries are selected as columns (:mod:`kernel.queue_entries`); a store offering
``lookup_columns(topic, queue_id, offset, count) -> QueueEntries`` hands them over without an
object per entry, and its ``read_records`` receives the chosen :class:`QueueEntries`.

Status and next-offset rules follow RocketMQ's ``DefaultMessageStore.getMessage`` so clients
correct their offsets the way they do against RocketMQ.
"""

from __future__ import annotations

from collections.abc import Collection

from kernel.model import GetResult, GetStatus
from kernel.protocols import MessageStore
from kernel.queue_entries import QueueEntries, select

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
    count = min(scan, max_offset - offset)
    lookup_columns = getattr(store, "lookup_columns", None)
    if lookup_columns is not None:
        entries = lookup_columns(topic, queue_id, offset, count)
    else:
        entries = QueueEntries.of(store.lookup(topic, queue_id, offset, count))
    if not len(entries):
        return GetResult(GetStatus.OFFSET_FOUND_NULL, [], offset + 1, min_offset, max_offset)
    picked = select(
        entries,
        offset,
        max_count=max_count,
        max_bytes=max_bytes,
        log_min=store.watermarks().min_offset,
        tags_codes=tags_codes,
    )
    if not len(picked.chosen):
        status = GetStatus.MESSAGE_WAS_REMOVING if picked.removed else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, [], picked.next_offset, min_offset, max_offset)
    records = await store.read_records(picked.chosen)
    return GetResult(
        GetStatus.FOUND,
        records,
        picked.next_offset,
        min_offset,
        max_offset,
        picked.chosen.queue_offset.tolist(),
    )
