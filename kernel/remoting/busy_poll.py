"""Busy polling: the event loop stays awake for a short window after network activity.

Why it exists: a thread asleep in ``epoll_wait`` that a packet wakes pays for the wake-up
before it runs a line, and on virtual machines that is tens of microseconds (measured on this
project's machines: about 25 µs of CPU per ``time.sleep`` wake-up and 75 µs per trio one), and
the code after it runs slower. A request with one message in flight pays it twice per round
trip, once on each end: about half of the single-message round trip (docs/performance.md).

Busy polling (as Linux's ``net.core.busy_poll``, Netty's epoll busy-wait or Aeron's
busy-spin idle strategy) trades CPU for that latency: for ``window`` seconds after each
receive, and after each request this end sends, a task yields to the scheduler in a loop,
which keeps trio polling epoll with a zero timeout instead of sleeping in it. After the window
the task parks until the next activity, so an idle process burns nothing.

The cost is up to one core while traffic comes faster than the window, and a little
throughput under load (one more runnable task per scheduler pass). Off unless configured
(``[remoting] busy_poll`` on the broker, ``busy_poll=`` on the SDK's clients).
"""

from __future__ import annotations

import attrs
import trio
import trio.lowlevel


@attrs.define(eq=False)
class BusyPoller:
    """Run :meth:`run` in a nursery; connections call :meth:`touch` on activity."""

    window: float
    """Seconds the loop keeps polling after the last :meth:`touch`."""
    _hot_until: float = attrs.field(default=0.0, init=False)
    _parked: trio.Event | None = attrs.field(default=None, init=False)
    spins: int = attrs.field(default=0, init=False)
    """Scheduler passes spent polling (for tests and statistics)."""

    def __attrs_post_init__(self) -> None:
        if self.window <= 0:
            raise ValueError(f"a busy-poll window must be positive, got {self.window!r}")

    @property
    def parked(self) -> bool:
        """Whether the loop sleeps as usual now (no activity within the window)."""
        return self._parked is not None

    def touch(self) -> None:
        """Activity now: keep polling for another window (wakes the parked loop)."""
        self._hot_until = trio.current_time() + self.window
        parked = self._parked
        if parked is not None:
            self._parked = None
            parked.set()

    async def run(self) -> None:
        """Poll while hot, park while cold; until cancelled."""
        while True:
            if trio.current_time() < self._hot_until:
                self.spins += 1
                await trio.lowlevel.checkpoint()
                continue
            parked = self._parked = trio.Event()
            await parked.wait()


def start_busy_poll(nursery: trio.Nursery, window: float) -> BusyPoller | None:
    """A poller running in ``nursery`` for a positive ``window``; None (nothing runs) for 0."""
    if window <= 0:
        return None
    poller = BusyPoller(window)
    nursery.start_soon(poller.run)
    return poller
