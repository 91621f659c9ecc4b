"""The clock the broker's due times run on: wall-clock milliseconds that advance with the
monotonic clock from the moment the process started.

Delays, timers and POP invisibility deadlines are stored as wall-clock milliseconds (RocketMQ's
format: they outlive the process and move with replication), but comparing them with
``time.time()`` makes them follow every step of the system clock: a step of +1 h fires every
parked delay at once, a step of -1 h holds each for an hour. Measured against this clock a
step moves nothing while the process runs; the due time of a message keeps its distance from
the moment it was parked. NTP's slewing reaches the monotonic clock too, so the two stay
within the drift of the machine's oscillator. A restarted (or promoted) broker anchors to the
wall clock it finds then. Store timestamps keep the plain wall clock: users read them as the
machine's time.
"""

from __future__ import annotations

import time

_ANCHOR_WALL = time.time()
_ANCHOR_MONOTONIC = time.monotonic()


def steady_ms() -> int:
    """Wall-clock milliseconds as of process start, advanced by the monotonic clock."""
    return int((_ANCHOR_WALL + time.monotonic() - _ANCHOR_MONOTONIC) * 1000)


def wall_step_seconds() -> float:
    """How far the system wall clock has stepped away from :func:`steady_ms` since start
    (positive: it jumped ahead)."""
    return time.time() - (_ANCHOR_WALL + time.monotonic() - _ANCHOR_MONOTONIC)
