"""Latency histograms that plugins keep and anyone may read (metrics, admin tools).

A flush policy times its flushes and a replicator its waits for replicas; both are plugins,
and the metrics plugin may not import them. So the histogram is a kernel value: a plugin keeps
a :class:`LatencyHistogram`, puts its :class:`LatencySnapshot` in its ``statistics()`` object,
and a reader finds it there with :func:`latency_fields`. One observation is a ``bisect`` and
two additions: it is taken once per flush or per waiting put, never per message.
"""

from __future__ import annotations

import bisect
import itertools
from typing import Any

import attrs

DEFAULT_BOUNDS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Upper bounds in seconds: fsync on an SSD (sub-millisecond) to a stalled disk (seconds)."""


@attrs.frozen
class LatencySnapshot:
    """Counts per bucket (the last is +Inf), as a Prometheus histogram shows them."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    """Observations per bucket, not cumulative; one more entry than ``bounds``."""
    total_seconds: float

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[int]:
        return list(itertools.accumulate(self.counts))


@attrs.define(eq=False)
class LatencyHistogram:
    bounds: tuple[float, ...] = DEFAULT_BOUNDS
    _counts: list[int] = attrs.field(init=False)
    _total: float = attrs.field(default=0.0, init=False)

    def __attrs_post_init__(self) -> None:
        if list(self.bounds) != sorted(set(self.bounds)):
            raise ValueError(f"histogram bounds must increase strictly, got {self.bounds}")
        self._counts = [0] * (len(self.bounds) + 1)

    def observe(self, seconds: float) -> None:
        self._counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self._total += seconds

    def snapshot(self) -> LatencySnapshot:
        return LatencySnapshot(self.bounds, tuple(self._counts), self._total)


def latency_fields(statistics: Any) -> dict[str, LatencySnapshot]:
    """The :class:`LatencySnapshot` fields of a plugin's ``statistics()`` object, by name
    (none when it is not an attrs instance or keeps no histogram)."""
    if statistics is None or not attrs.has(type(statistics)):
        return {}
    return {
        field.name: value
        for field in attrs.fields(type(statistics))
        if isinstance(value := getattr(statistics, field.name), LatencySnapshot)
    }
