"""The steady clock due times run on: it follows the wall clock it started with and the
monotonic clock after, so a step of the system clock moves no due time."""

from __future__ import annotations

import time

from kernel import clock


def test_it_reads_the_wall_clock_while_nothing_stepped():
    assert abs(clock.steady_ms() - time.time() * 1000) < 50
    assert abs(clock.wall_step_seconds()) < 0.05


def test_a_wall_clock_step_moves_neither_it_nor_due_times_measured_on_it(monkeypatch):
    real = time.time
    before = clock.steady_ms()
    monkeypatch.setattr(time, "time", lambda: real() + 3600)
    assert abs(clock.steady_ms() - before) < 50
    assert 3599.9 < clock.wall_step_seconds() < 3600.1
