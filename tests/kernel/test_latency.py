"""The kernel's latency histogram: Prometheus ``le`` buckets (a value equal to a bound counts
in that bound's bucket), +Inf last, and found in a plugin's statistics by type."""

from __future__ import annotations

import attrs
import pytest

from kernel.latency import LatencyHistogram, LatencySnapshot, latency_fields


def test_values_fall_in_le_buckets_and_beyond_the_last_bound_in_inf():
    histogram = LatencyHistogram((0.001, 0.01))
    for seconds in (0.0005, 0.001, 0.002, 0.01, 3.0):
        histogram.observe(seconds)
    taken = histogram.snapshot()
    assert taken.counts == (2, 2, 1)
    assert taken.cumulative() == [2, 4, 5] and taken.count == 5
    assert taken.total_seconds == pytest.approx(3.0135)


def test_bounds_must_increase():
    with pytest.raises(ValueError, match="increase"):
        LatencyHistogram((0.01, 0.001))


def test_latency_fields_finds_snapshots_by_type():
    @attrs.frozen
    class Stats:
        flushes: int
        flush_latency: LatencySnapshot
        other: object = None

    taken = LatencyHistogram().snapshot()
    assert latency_fields(Stats(3, taken)) == {"flush_latency": taken}
    assert latency_fields(None) == {} and latency_fields({"a": taken}) == {}
