"""The pull's entry selection as columns gives what the entry-by-entry walk gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.model import QueueEntry
from kernel.queue_entries import QueueEntries, select


def walk(entries, start, *, max_count, max_bytes, log_min, tags_codes):
    """RocketMQ's getMessage loop, one entry at a time (the definition)."""
    chosen, next_offset, total, removed = [], start, 0, False
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
    return chosen, next_offset, removed


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(1, 500), st.integers(-3, 3)), max_size=60),
    st.integers(0, 100),
    st.integers(1, 40),
    st.integers(1, 5000),
    st.integers(0, 1000),
    st.one_of(st.none(), st.sets(st.integers(-3, 3), max_size=3)),
)
@settings(max_examples=300, deadline=None)
def test_select_matches_the_walk(rows, start, max_count, max_bytes, log_min, tags_codes):
    entries = [QueueEntry(start + i, phys, size, tag) for i, (phys, size, tag) in enumerate(rows)]
    expected = walk(
        entries, start, max_count=max_count, max_bytes=max_bytes, log_min=log_min, tags_codes=tags_codes
    )
    got = select(
        QueueEntries.of(entries),
        start,
        max_count=max_count,
        max_bytes=max_bytes,
        log_min=log_min,
        tags_codes=tags_codes,
    )
    assert (list(got.chosen), got.next_offset, got.removed) == expected
