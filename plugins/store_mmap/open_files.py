"""A bound on the store files open at once (consume queues: one or more per queue).

Every open consume-queue file costs a file descriptor (they are written with ``pwrite`` and
read with ``pread``, never mapped), and a broker with tens of thousands of queues would
otherwise hold them all, past any ``ulimit -n``. The budget keeps the most recently used files
open and *parks* the rest: a parked file keeps its positions and is opened again on its next
use (a cold queue's read or write costs an ``open``, some µs). A file in use by a flush (held)
is never parked.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from plugins.store_mmap.mapped_file import MappedFile


@attrs.define(eq=False)
class OpenFileBudget:
    """At most ``max_open`` files open (briefly more while every candidate is held)."""

    max_open: int
    parked: int = 0
    """Files parked since start (a cold queue's file closed to make room)."""
    _open: OrderedDict[MappedFile, None] = attrs.field(factory=OrderedDict, init=False)

    @property
    def open_files(self) -> int:
        return len(self._open)

    def opened(self, mapped: MappedFile) -> None:
        """``mapped`` was just opened (or reopened): it is the most recent; park the least
        recent ones beyond the bound."""
        self._open[mapped] = None
        if len(self._open) > self.max_open:
            self._park_least_recent()

    def touched(self, mapped: MappedFile) -> None:
        self._open.move_to_end(mapped)

    def forget(self, mapped: MappedFile) -> None:
        """``mapped`` was closed for good (shutdown, deletion)."""
        self._open.pop(mapped, None)

    def _park_least_recent(self) -> None:
        excess = len(self._open) - self.max_open
        # The least recent few (a held one is skipped): O(excess), not a copy of every open file.
        for candidate in list(itertools.islice(self._open, max(excess, 0) + 8)):
            if excess <= 0:
                return
            if candidate.park():
                del self._open[candidate]
                self.parked += 1
                excess -= 1
