"""Consume-queue entries as columns: what a pull selects from, without an object per entry.

A pull reads up to a thousand 20-byte entries, drops those whose records were deleted or whose
tag hash does not match, and stops at its count and byte limits. With an object per entry that
was most of a large pull's broker time; as arrays it is a handful of numpy operations
(:func:`select`). Stores that can (``store_mmap``) answer ``lookup_columns`` with the entries
read straight from the queue file; for any other store the kernel converts its entry list.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

import attrs
import numpy as np

from kernel.model import QueueEntry


@attrs.frozen(eq=False)
class QueueEntries(Sequence[QueueEntry]):
    """Entries of one queue in order, as ``int64`` columns."""

    queue_offset: np.ndarray
    physical_offset: np.ndarray
    size: np.ndarray
    tags_code: np.ndarray

    @classmethod
    def of(cls, entries: Sequence[QueueEntry]) -> QueueEntries:
        if isinstance(entries, QueueEntries):
            return entries
        count = len(entries)

        def column(name: str) -> np.ndarray:
            return np.fromiter((getattr(e, name) for e in entries), dtype=np.int64, count=count)

        return cls(column("queue_offset"), column("physical_offset"), column("size"), column("tags_code"))

    def take(self, rows: np.ndarray) -> QueueEntries:
        return QueueEntries(
            self.queue_offset[rows], self.physical_offset[rows], self.size[rows], self.tags_code[rows]
        )

    def __len__(self) -> int:
        return len(self.queue_offset)

    def __getitem__(self, row: int) -> QueueEntry:  # type: ignore[override]
        return QueueEntry(
            int(self.queue_offset[row]),
            int(self.physical_offset[row]),
            int(self.size[row]),
            int(self.tags_code[row]),
        )

    def __iter__(self) -> Iterator[QueueEntry]:
        return map(QueueEntry, self.queue_offset.tolist(), self.physical_offset.tolist(), self.size.tolist(),
                   self.tags_code.tolist())  # fmt: skip


@attrs.frozen
class Selection:
    """What a pull takes from the entries it looked at."""

    chosen: QueueEntries
    next_offset: int
    """The queue offset after the last entry looked at (RocketMQ's ``nextBeginOffset``)."""
    removed: bool
    """Whether an entry looked at pointed below the log's minimum (its record was deleted)."""


def select(
    entries: QueueEntries,
    start: int,
    *,
    max_count: int,
    max_bytes: int,
    log_min: int,
    tags_codes: Collection[int] | None,
) -> Selection:
    """Entries a pull returns, walking from the first: stop before an entry once ``max_count``
    are taken, or once one is taken and this entry's size would pass ``max_bytes``; skip entries
    whose record was deleted and, with ``tags_codes``, entries whose tag hash is not in it.
    The walk is computed with cumulative sums instead of a loop."""
    removed = entries.physical_offset < log_min
    eligible = ~removed
    if tags_codes is not None:
        eligible &= np.isin(entries.tags_code, np.fromiter(tags_codes, dtype=np.int64, count=len(tags_codes)))
    taken_through = np.cumsum(eligible)
    taken_before = taken_through - eligible
    bytes_before = np.cumsum(entries.size * eligible) - entries.size * eligible
    stop = (taken_before >= max_count) | ((taken_before > 0) & (bytes_before + entries.size > max_bytes))
    looked = int(np.argmax(stop)) if stop.any() else len(entries)
    next_offset = int(entries.queue_offset[looked - 1]) + 1 if looked else start
    rows = np.flatnonzero(eligible[:looked])
    return Selection(entries.take(rows), next_offset, bool(removed[:looked].any()))
