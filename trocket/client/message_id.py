"""Client-side unique message ids (``UNIQ_KEY``), laid out as RocketMQ's ``MessageClientIDSetter``:
16 bytes as 32 hex digits: IPv4 (4), process id (2), a per-process random (4), milliseconds
since the start of the current month (4), a counter (2). Unique per producer process without
coordination; the broker indexes them for ``queryMsgByUniqueKey``."""

from __future__ import annotations

import datetime
import itertools
import os
import random
import socket
import struct
import threading
import time


def _local_ipv4() -> bytes:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 1))  # no packet is sent; picks the outbound address
            return socket.inet_aton(probe.getsockname()[0])
    except OSError:
        return socket.inet_aton("127.0.0.1")


def _month_start_ms(now: float) -> int:
    today = datetime.datetime.fromtimestamp(now)
    return int(today.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp() * 1000)


class MessageIdGenerator:
    """Thread-safe; one per process is enough."""

    def __init__(self) -> None:
        self._prefix = _local_ipv4() + struct.pack(">HI", os.getpid() & 0xFFFF, random.getrandbits(32))
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._month_start = _month_start_ms(time.time())
        self._next_month = self._month_start + 32 * 86_400_000

    def next_id(self) -> str:
        """One id (:meth:`next_ids` without the list: a single send's path)."""
        head, number = self._reserve(1)
        return f"{head}{number & 0xFFFF:04X}"

    def next_ids(self, count: int) -> list[str]:
        """``count`` consecutive ids: the clock read and the counter reserved once, each id
        then only its counter formatted (a batch's ids cost a format each)."""
        head, first = self._reserve(count)
        return [f"{head}{number & 0xFFFF:04X}" for number in range(first, first + count)]

    def _reserve(self, count: int) -> tuple[str, int]:
        """The ids' common head (prefix and time since the month began) and the first of
        ``count`` consecutive counter values, reserved under the lock."""
        now_ms = int(time.time() * 1000)
        with self._lock:
            if now_ms >= self._next_month:
                self._month_start = _month_start_ms(now_ms / 1000)
                self._next_month = self._month_start + 32 * 86_400_000
            first = next(self._counter)
            if count > 1:
                self._counter = itertools.count(first + count)
            elapsed = (now_ms - self._month_start) & 0xFFFFFFFF
        return (self._prefix + struct.pack(">I", elapsed)).hex().upper(), first


_GENERATOR = MessageIdGenerator()


def new_message_id() -> str:
    return _GENERATOR.next_id()


def new_message_ids(count: int) -> list[str]:
    return _GENERATOR.next_ids(count)
