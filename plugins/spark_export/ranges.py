"""Queue offset ranges and how they become Spark partitions.

A partition is one queue's ``[start, end)`` offsets (or a slice of it), so a read is
deterministic for a given range: a streaming batch re-run after a crash reads exactly what the
first attempt planned, which is what makes the checkpoint give exactly-once output.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import attrs

from plugins.spark_export.catalog import QueueKey


@attrs.frozen
class QueueRange:
    key: QueueKey
    address: str
    start: int
    end: int

    @property
    def count(self) -> int:
        return self.end - self.start


@attrs.frozen
class SplitRules:
    max_records: int | None = None
    """A partition holds at most this many offsets (``maxRecordsPerPartition``)."""
    max_bytes: int | None = None
    """... or about this many bytes, by each queue's average record size (``maxBytesPerPartition``)."""
    min_partitions: int | None = None
    """At least this many partitions: the largest ranges are cut further (``minPartitions``)."""


def split(
    ranges: Iterable[QueueRange], rules: SplitRules, record_sizes: Mapping[QueueKey, float] | None = None
) -> list[QueueRange]:
    """Ranges cut so none is larger than the rules allow, in queue then offset order.

    Deterministic: the same ranges and rules always give the same partitions.
    """
    pieces: list[QueueRange] = []
    for whole in sorted((r for r in ranges if r.count > 0), key=lambda r: (r.key, r.start)):
        limit = whole.count
        if rules.max_records is not None:
            limit = min(limit, rules.max_records)
        if rules.max_bytes is not None and record_sizes and record_sizes.get(whole.key):
            limit = min(limit, max(1, int(rules.max_bytes // record_sizes[whole.key])))
        pieces += _cut(whole, math.ceil(whole.count / limit))
    if rules.min_partitions and len(pieces) < rules.min_partitions:
        total = sum(p.count for p in pieces)
        refined: list[QueueRange] = []
        for piece in pieces:
            share = math.ceil(rules.min_partitions * piece.count / total) if total else 1
            refined += _cut(piece, min(piece.count, max(1, share)))
        pieces = refined
    return pieces


def _cut(whole: QueueRange, parts: int) -> list[QueueRange]:
    if parts <= 1:
        return [whole]
    step, extra = divmod(whole.count, parts)
    out, at = [], whole.start
    for index in range(parts):
        size = step + (1 if index < extra else 0)
        out.append(attrs.evolve(whole, start=at, end=at + size))
        at += size
    return out


def prorate(backlog: Mapping[QueueKey, int], limit: int) -> dict[QueueKey, int]:
    """How many offsets each queue may advance when at most ``limit`` may be read in total
    (``maxOffsetsPerTrigger``): in proportion to each queue's backlog, every queue with a
    backlog getting at least one while the limit allows, the total never above ``limit``."""
    waiting = {k: v for k, v in sorted(backlog.items()) if v > 0}
    total = sum(waiting.values())
    if total <= limit:
        return dict(waiting)
    grant = dict.fromkeys(waiting, 0)
    budget = limit
    if limit >= len(waiting):
        for key in waiting:
            grant[key] = 1
        budget -= len(waiting)
    remaining = {k: v - grant[k] for k, v in waiting.items()}
    rest = sum(remaining.values())
    shares = {k: budget * v / rest for k, v in remaining.items()} if rest else {}
    for key, share in shares.items():
        grant[key] += min(remaining[key], int(share))
    left = limit - sum(grant.values())
    by_fraction = sorted(shares, key=lambda k: (-(shares[k] - int(shares[k])), k))
    for key in by_fraction:
        if left <= 0:
            break
        if grant[key] < waiting[key]:
            grant[key] += 1
            left -= 1
    return grant
