"""Busy polling for a blocking request's answer: the thread that sent looks at its socket for a
short window instead of sleeping in ``recv`` at once.

Why: a thread asleep in ``recv`` that the answer wakes pays for the wake-up before it runs a
line, tens of microseconds on virtual machines (``wire.remoting.busy_poll`` has the figures),
and one message in flight pays it on every send. Looking at the socket without blocking, with
``sched_yield`` between looks (another runnable thread gets the core first: the broker's
loop, on a machine of two), took a :class:`~trocket.client.BlockingProducer` with one send in
flight from 4.3-4.7k to 5.2-5.7k sends a second against an async-flush broker here, p50 0.19-0.20
-> 0.15-0.16 ms (docs/performance.md, twenty-sixth step). The price is CPU: the thread burns its
core until the answer comes, at most a window per request.

The rules follow the trio SDK's adaptive poller (``wire.remoting.busy_poll``) where they apply
to a caller that knows an answer is due and, polling or not, learns how late each one came:

- a request polls for ``window`` (200 µs: a few round trips of this machine kind), then sleeps
  in ``recv`` as before;
- an answer later than the window but within :data:`MAX_WINDOW` once stretched by
  :data:`STRETCH` stretches the window to that (a sync-flush put, answered after 0.4-0.5 ms; a
  batch of 32, 0.8-1 ms);
- an answer later still while polling (a broker under load, a stalled disk) puts the window back
  to its base, and the next 1, 2, 4 ... 64 requests sleep at once before one polls again (a peer
  that slow costs at most one window per 64 requests); any answer soon enough for a (stretched)
  window, even one slept through, clears that back-off. Slept-through answers alone do not keep
  it up: their lateness includes the thread's own wake-up, which a loaded machine makes long;
- at most :data:`SPINNERS` threads of the process poll at once (half the cores, at least one):
  others sleep in ``recv``, so a hundred sending threads do not take the cores from the work.

Other threads of the process: the polling thread lets go of the interpreter lock at every look
(the read and the yield are system calls) but takes it straight back, so a thread waiting for it
may wait out the window (CPython forces a hand-over only after its 5 ms switch interval); at
most one window a request, as any thread running Python for that long would hold it. A peer
*thread* of the same process (a test's) answers late for that reason; a broker is another
process.

Each connection keeps its own :class:`AnswerSpin` (a connection serves one caller at a time).
TLS connections never poll (an ``ssl`` socket is not read with ``MSG_DONTWAIT``).
"""

from __future__ import annotations

import os
import threading

import attrs

from wire.remoting.busy_poll import (
    AUTO,
    AUTO_WINDOW,
    MAX_BACK_OFF,
    MAX_WINDOW,
    STRETCH,
    BusyPollSetting,
    parse_busy_poll,
)

SPINNERS = max(1, (os.cpu_count() or 1) // 2)
"""Threads of a process that may poll for answers at the same time."""


class SpinnerSlots:
    """The process's right to poll, :data:`SPINNERS` at once: a lock per slot (C locks; a
    ``threading.BoundedSemaphore``, whose condition is Python, cost about 2 µs a request)."""

    def __init__(self, count: int) -> None:
        self._locks = tuple(threading.Lock() for _ in range(count))

    def take(self) -> threading.Lock | None:
        """A free slot, held until released; None when every slot is held."""
        for lock in self._locks:
            if lock.acquire(blocking=False):
                return lock
        return None

    def free(self) -> int:
        return sum(not lock.locked() for lock in self._locks)


spinner_slots = SpinnerSlots(SPINNERS)


@attrs.define(eq=False)
class AnswerSpin:
    """How long the next request of one connection polls for its answer, learnt from the
    answers before it."""

    window: float
    """Seconds a request polls at first (and after a late answer)."""
    adaptive: bool = False
    """Stretch the window to answers a little later than it, back off from much later ones (see
    the module docstring); a fixed window always polls ``window``."""
    answer_window: float = attrs.field(default=0.0, init=False)
    """The window the next request polls for (``window``, or longer once stretched)."""
    _passing: int = attrs.field(default=0, init=False)
    """Requests still to sleep at once after a late answer (adaptive)."""
    _back_off: int = attrs.field(default=1, init=False)
    hits: int = attrs.field(default=0, init=False)
    """Answers that came while the thread polled."""
    late: int = attrs.field(default=0, init=False)
    """Answers too late to poll for."""
    _slot: threading.Lock | None = attrs.field(default=None, init=False)
    """The slot the current request polls with (from :meth:`begin` to :meth:`finish`)."""

    def __attrs_post_init__(self) -> None:
        if self.window <= 0:
            raise ValueError(f"a busy-poll window must be positive, got {self.window!r}")
        self.answer_window = self.window

    @classmethod
    def from_setting(cls, setting: BusyPollSetting) -> AnswerSpin | None:
        """Adaptive for ``"auto"``, a fixed window for a duration, None (sleep in ``recv``) for 0.

        :raises ValueError: a setting :func:`~wire.remoting.busy_poll.parse_busy_poll` refuses.
        """
        setting = parse_busy_poll(setting)
        if setting == AUTO:
            return cls(AUTO_WINDOW, adaptive=True)
        return cls(float(setting)) if setting else None

    @property
    def sleeping(self) -> bool:
        """The next request sleeps at once (backing off after a late answer)."""
        return self._passing > 0

    def begin(self) -> float:
        """Seconds the request just written may poll (0: sleep in ``recv``). A positive answer
        holds one of the process's :data:`SPINNERS` slots until :meth:`finish`."""
        if self._passing:
            self._passing -= 1
            return 0.0
        self._slot = spinner_slots.take()
        return 0.0 if self._slot is None else self.answer_window

    def finish(self, waited: float | None) -> None:
        """The request is over: its answer came ``waited`` seconds after it was written (None:
        no answer, nothing learnt); the slot it polled with, if any, goes back."""
        slot, self._slot = self._slot, None
        polled = slot is not None
        if polled:
            slot.release()
        if waited is None:
            return
        if waited <= self.answer_window:
            self.hits += polled
            self._back_off, self._passing = 1, 0
            return
        if not self.adaptive:
            return
        stretched = waited * STRETCH
        if stretched <= MAX_WINDOW:
            self.answer_window = stretched
            self._back_off, self._passing = 1, 0
            return
        if not polled:
            return  # slept through: its lateness includes the thread's own wake-up
        self.late += 1
        self.answer_window = self.window
        self._passing = self._back_off
        self._back_off = min(self._back_off * 2, MAX_BACK_OFF)
