"""Latency fault tolerance periods and client message ids, without a broker."""

from __future__ import annotations

import pytest

from trocket.client.fault import LatencyFaultTolerance, isolation_for
from trocket.client.message_id import MessageIdGenerator


@pytest.mark.parametrize(
    ("latency_ms", "isolated_ms"),
    [(0, 0), (549, 0), (550, 30_000), (999, 30_000), (1000, 60_000), (2000, 120_000), (3000, 180_000),
     (15_000, 600_000), (99_999, 600_000)],
)  # fmt: skip
def test_isolation_periods_follow_rocketmq(latency_ms, isolated_ms):
    assert isolation_for(latency_ms) == isolated_ms


def test_a_failed_broker_is_avoided_until_its_period_ends():
    now = [100.0]
    faults = LatencyFaultTolerance(clock=lambda: now[0])
    faults.record("broker-a", 0, failed=True)
    faults.record("broker-b", 1200)
    assert not faults.available("broker-a") and not faults.available("broker-b")
    # A failure counts as 30 s of latency: 10 minutes away, as in RocketMQ; 1.2 s: one minute.
    assert faults.least_bad(["broker-a", "broker-b"]) == "broker-b"
    now[0] += 60
    assert faults.available("broker-b") and not faults.available("broker-a")
    now[0] += 540
    assert faults.available("broker-a")
    faults.record("broker-a", 20)
    assert faults.available("broker-a"), "a fast answer clears the isolation"


def test_disabled_fault_tolerance_never_isolates():
    faults = LatencyFaultTolerance(enabled=False)
    faults.record("broker-a", 0, failed=True)
    assert faults.available("broker-a")


def test_message_ids_are_unique_32_hex_digits():
    generator = MessageIdGenerator()
    ids = [generator.next_id() for _ in range(70_000)]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids[:100])
    assert len({i[:20] for i in ids}) == 1, "ip, pid and the per-process random are a fixed prefix"


def test_a_single_id_and_a_batch_of_ids_share_one_sequence():
    """next_id (a single send's path) and next_ids (a batch's) format the same counter."""
    generator = MessageIdGenerator()
    single, (first, second), last = generator.next_id(), generator.next_ids(2), generator.next_id()
    counters = [int(i[-4:], 16) for i in (single, first, second, last)]
    assert counters == [(counters[0] + step) & 0xFFFF for step in range(4)]
    assert len({i[:20] for i in (single, first, second, last)}) == 1


def test_an_ids_time_field_follows_the_clock_across_milliseconds_and_months(monkeypatch):
    """The head is formatted once per millisecond: ids of one millisecond share it, the next
    millisecond's ids carry the new time, and a new month starts the field from zero again."""
    import datetime

    from trocket.client import message_id

    month = datetime.datetime(2026, 11, 1).timestamp()
    now = [month + 5.0]
    monkeypatch.setattr(message_id.time, "time", lambda: now[0])
    generator = MessageIdGenerator()

    def elapsed_ms(message_id_: str) -> int:
        return int(message_id_[20:28], 16)

    first, second = generator.next_id(), generator.next_id()
    now[0] += 0.002
    third = generator.next_id()
    assert [elapsed_ms(i) for i in (first, second, third)] == [5000, 5000, 5002]
    now[0] = datetime.datetime(2026, 12, 1).timestamp() + 0.25
    (fourth,) = generator.next_ids(1)
    assert elapsed_ms(fourth) == 250, "a new month counts from its own start"
    assert len({int(i[-4:], 16) for i in (first, second, third, fourth)}) == 4
