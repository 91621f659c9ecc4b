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


def _month_bounds_ms(now: float) -> tuple[int, int]:
    """The local start of ``now``'s month and of the next one, in milliseconds (RocketMQ's
    ``MessageClientIDSetter`` counts the id's time from the first, and starts again at the second)."""
    start = datetime.datetime.fromtimestamp(now).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if start.month == 12:
        following = start.replace(year=start.year + 1, month=1)
    else:
        following = start.replace(month=start.month + 1)
    return int(start.timestamp() * 1000), int(following.timestamp() * 1000)


class MessageIdGenerator:
    """Thread-safe; one per process is enough."""

    def __init__(self) -> None:
        self._prefix = _local_ipv4() + struct.pack(">HI", os.getpid() & 0xFFFF, random.getrandbits(32))
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._month_start, self._next_month = _month_bounds_ms(time.time())
        self._head_ms = -1
        """The millisecond :attr:`_head` was formatted for."""
        self._head = ""
        """The ids' hex head for :attr:`_head_ms`: formatting it (a pack, a hex, an upper) was
        a third of a lone send's id, and one send in flight asks for a new one about every
        0.1-0.3 ms, mostly within the same millisecond (issue 38)."""

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
            if now_ms != self._head_ms:
                if now_ms >= self._next_month:
                    self._month_start, self._next_month = _month_bounds_ms(now_ms / 1000)
                elapsed = (now_ms - self._month_start) & 0xFFFFFFFF
                self._head = (self._prefix + struct.pack(">I", elapsed)).hex().upper()
                self._head_ms = now_ms
            first = next(self._counter)
            if count > 1:
                self._counter = itertools.count(first + count)
            return self._head, first


_GENERATOR = MessageIdGenerator()


def new_message_id() -> str:
    return _GENERATOR.next_id()


def new_message_ids(count: int) -> list[str]:
    return _GENERATOR.next_ids(count)
