"""The history checker on hand-written histories: each anomaly it reports, shown on the
smallest history that has it, and a clean run that reports none."""

from __future__ import annotations

import io

import pytest

from trocket.chaos import BadHistory, Event, HistoryWriter, check, parse


def send(t: float, op: str, body: str, process: str = "p1") -> Event:
    return Event(t, "invoke", {"id": op, "body": body, "process": process})


def ok(t: float, op: str, offset: int, queue: int = 0, replica: str = "r1", broker: str = "b") -> Event:
    return Event(t, "ok", {"id": op, "broker": broker, "queue": queue, "offset": offset, "replica": replica})


def fail(t: float, op: str) -> Event:
    return Event(t, "fail", {"id": op, "error": "refused"})


def unknown(t: float, op: str) -> Event:
    return Event(t, "info", {"id": op, "error": "timeout"})


def read(t: float, body: str, offset: int, queue: int = 0, final: bool = True, broker: str = "b") -> Event:
    return Event(
        t, "read", {"body": body, "broker": broker, "queue": queue, "offset": offset, "final": final}
    )


def fault(t: float, phase: str = "start") -> Event:
    return Event(t, "fault", {"name": "kill master", "phase": phase})


def test_a_clean_run_is_safe():
    history = [
        send(0, "1", "a"), ok(0.1, "1", 0),
        send(0.2, "2", "b"), ok(0.3, "2", 1),
        read(5, "a", 0), read(5, "b", 1),
    ]  # fmt: skip
    report = check(history)
    assert report.safe and report.acked == 2 and report.attempts == 2
    assert "acked 2 lost 0" in report.summary()


def test_lost_and_lost_below_the_highest_offset_read():
    history = [
        send(0, "1", "a"), ok(0.1, "1", 0),
        send(0.2, "2", "b"), ok(0.3, "2", 1),
        send(0.4, "3", "c"), ok(0.5, "3", 2),
        read(5, "c", 2),
    ]  # fmt: skip
    report = check(history)
    assert report.lost == ("a", "b") and report.lost_below == ("a", "b") and not report.safe
    tail = check([send(0, "1", "a"), ok(0.1, "1", 0), send(0.2, "2", "b"), ok(0.3, "2", 1), read(5, "a", 0)])
    assert tail.lost == ("b",) and tail.lost_below == ()  # the drain stopped short: lost, not a hole


def test_only_the_final_drain_counts_for_loss():
    history = [send(0, "1", "a"), ok(0.1, "1", 0), read(1, "a", 0, final=False), read(5, "x", 3)]
    report = check(history)
    assert report.lost == ("a",) and report.unexpected == ("x",)


def test_unknown_then_read_is_recovered_and_failed_then_read_is_an_aborted_read():
    history = [
        send(0, "1", "a"), unknown(1, "1"),
        send(0, "2", "b"), fail(1, "2"),
        read(5, "a", 0), read(5, "b", 1),
    ]  # fmt: skip
    report = check(history)
    assert report.recovered == ("a",) and report.aborted_reads == ("b",) and not report.safe


def test_duplicates_explained_by_a_retried_unknown_send_and_the_rest():
    history = [
        send(0, "1", "a"), unknown(1, "1"), send(1.1, "2", "a"), ok(1.2, "2", 1),
        send(2, "3", "b"), ok(2.1, "3", 2),
        read(5, "a", 0), read(5, "a", 1), read(5, "b", 2), read(5, "b", 3),
    ]  # fmt: skip
    report = check(history)
    assert report.duplicates_explained == ("a",) and report.duplicates_unexplained == ("b",)
    assert not report.safe


def test_two_bodies_at_one_position_are_inconsistent():
    history = [
        send(0, "1", "a"),
        ok(0.1, "1", 0),
        send(0, "2", "b"),
        read(5, "b", 0),
        read(5, "a", 0, broker="b"),
    ]
    report = check(history)
    assert report.inconsistent == (("b", 0, 0),)


def test_sequential_sends_stored_out_of_order_are_reordered_pipelined_ones_are_not():
    history = [
        send(0, "1", "a"), ok(0.1, "1", 5),
        send(0.2, "2", "b"), ok(0.3, "2", 4),  # invoked after a's ack, stored below it
        send(1.0, "3", "c"), send(1.0, "4", "d"), ok(1.1, "4", 6), ok(1.2, "3", 7),  # in flight together
    ]  # fmt: skip
    assert check(history).reordered == (("a", "b"),)
    other_producer = [send(0, "1", "a"), ok(0.1, "1", 5), send(0.2, "2", "b", process="p2"), ok(0.3, "2", 4)]
    assert check(other_producer).reordered == ()


def test_split_brain_acks_and_a_clean_failover():
    overlap = [
        send(0, "1", "a"), ok(0.1, "1", 0, replica="r1"),
        send(0.2, "2", "b"), ok(0.3, "2", 1, replica="r2"),
        send(0.4, "3", "c"), ok(0.5, "3", 2, replica="r1"),
    ]  # fmt: skip
    (brain,) = check(overlap).split_brain
    assert (brain.broker, brain.first, brain.second) == ("b", "r1", "r2")
    failover = [
        send(0, "1", "a"), ok(0.1, "1", 0, replica="r1"),
        fault(1), send(1.1, "2", "b"), fail(1.2, "2"),
        send(4, "3", "c"), ok(4.5, "3", 1, replica="r2"),
        send(20, "4", "d"), ok(20.1, "4", 2, replica="r1"),  # the old master, back much later
    ]  # fmt: skip
    report = check(failover)
    assert report.split_brain == ()
    assert report.rto_after_fault == (pytest.approx(3.5),)
    assert report.rto_after_failure == (pytest.approx(3.3),)


def test_histories_round_trip_through_the_writer_and_bad_lines_are_named():
    out = io.BytesIO()
    ticks = iter(range(10))
    writer = HistoryWriter(out, clock=lambda: next(ticks))
    writer.event("invoke", id="1", body="a", process="p1")
    writer.event("ok", id="1", broker="b", queue=0, offset=0, replica="r1")
    writer.event("read", body="a", broker="b", queue=0, offset=0, final=True)
    events = list(parse(out.getvalue().splitlines()))
    assert [e.kind for e in events] == ["invoke", "ok", "read"] and check(events).safe
    with pytest.raises(ValueError, match="unknown event kind"):
        writer.event("maybe")
    with pytest.raises(BadHistory, match="line 2"):
        list(parse([b'{"t": 0, "kind": "fault"}', b"{not json"]))
