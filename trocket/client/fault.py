"""Latency fault tolerance (RocketMQ's ``MQFaultStrategy``): a broker that answered slowly or
failed is avoided for a while when choosing the queue for the next send.

A send that took ``latency`` ms makes its broker unavailable for the period matching the
largest ``LATENCY_STEPS_MS`` entry it reached (0 below 550 ms, 30 s from 550 ms, ... 10 min from
15 s); a failed send counts as 30 s of latency (10 minutes). When every broker is isolated the least bad
one is used anyway: isolation steers, it never blocks sending.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs

LATENCY_STEPS_MS = (50, 100, 550, 1000, 2000, 3000, 15000)
ISOLATION_MS = (0, 0, 30_000, 60_000, 120_000, 180_000, 600_000)
FAILURE_LATENCY_MS = 30_000


def isolation_for(latency_ms: float) -> int:
    for step, isolation in zip(reversed(LATENCY_STEPS_MS), reversed(ISOLATION_MS), strict=True):
        if latency_ms >= step:
            return isolation
    return 0


@attrs.define
class _Fault:
    latency_ms: float
    available_at: float


@attrs.define
class LatencyFaultTolerance:
    enabled: bool = True
    clock: Callable[[], float] = time.monotonic
    _faults: dict[str, _Fault] = attrs.field(factory=dict, init=False)

    def record(self, broker_name: str, latency_ms: float, *, failed: bool = False) -> None:
        if not self.enabled:
            return
        if not failed and latency_ms < LATENCY_STEPS_MS[0]:
            # The usual send: no isolation, so the broker is simply available (no entry), which
            # costs a dict operation per send instead of an object and a walk of the steps.
            self._faults.pop(broker_name, None)
            return
        latency = FAILURE_LATENCY_MS if failed else latency_ms
        self._faults[broker_name] = _Fault(latency, self.clock() + isolation_for(latency) / 1000)

    def available(self, broker_name: str) -> bool:
        fault = self._faults.get(broker_name)
        return fault is None or self.clock() >= fault.available_at

    def least_bad(self, broker_names: list[str]) -> str:
        """Among isolated brokers, the one available soonest (then the lowest latency)."""

        def badness(name: str) -> tuple[float, float]:
            fault = self._faults.get(name)
            return (fault.available_at, fault.latency_ms) if fault else (0.0, 0.0)

        return min(broker_names, key=badness)
