"""The statsAll counters: sums over the last minute, hour and day from bounded buckets."""

from __future__ import annotations

from plugins.remoting.stats import GROUP_GET_NUMS, TOPIC_PUT_NUMS, BrokerStats, RollingCounter


def test_windows_sum_what_falls_in_them_and_forget_the_rest():
    counter = RollingCounter()
    start = 1_000_000.0
    counter.add(5, 50, start)
    counter.add(7, 70, start + 30)
    assert counter.window(0, start + 30) == (12, 120, 2)  # both within the minute
    assert counter.window(0, start + 95) == (0, 0, 0)  # a minute later: neither
    assert counter.window(1, start + 95) == (12, 120, 2)  # still within the hour
    counter.add(1, 10, start + 7200)
    assert counter.window(1, start + 7200) == (1, 10, 1) and counter.window(2, start + 7200) == (13, 130, 3)
    assert all(len(buckets) <= keep + 1 for buckets, keep in zip(counter.levels, (6, 60, 24), strict=True))


def test_views_are_rocketmq_broker_stats_data_and_silent_counters_are_swept():
    stats = BrokerStats()
    stats.put("T", 30, 3000, now=100.0)
    stats.got("T", "G", 12, 1200, now=110.0)
    view = stats.view(TOPIC_PUT_NUMS, "T", now=120.0)
    assert view == {
        "statsMinute": {"sum": 30, "tps": 0.5, "avgpt": 30.0},
        "statsHour": {"sum": 30, "tps": 0.01, "avgpt": 30.0},
        "statsDay": {"sum": 30, "tps": 0.0, "avgpt": 30.0},
    }
    assert stats.view(GROUP_GET_NUMS, "T@G", now=120.0)["statsDay"]["sum"] == 12
    assert stats.view(TOPIC_PUT_NUMS, "other", now=120.0) is None
    stats.sweep(now=100.0 + 86401)
    assert stats.view(GROUP_GET_NUMS, "T@G", now=100.0 + 86401) is not None  # heard 10 s later
    stats.sweep(now=110.0 + 86401)
    assert stats.counters == {}
