"""Busy polling: the event loop stays awake for a short window after network activity.

Why it exists: a thread asleep in ``epoll_wait`` that a packet wakes pays for the wake-up
before it runs a line, and on virtual machines that is tens of microseconds (measured on this
project's machines: about 25 µs of CPU per ``time.sleep`` wake-up and 75 µs per trio one), and
the code after it runs slower. A request with one message in flight pays it twice per round
trip, once on each end: about half of the single-message round trip (docs/performance.md).

Busy polling (as Linux's ``net.core.busy_poll``, Netty's epoll busy-wait or Aeron's
busy-spin idle strategy) trades CPU for that latency: for ``window`` seconds after each
activity (a receive, a request sent, an answer written), a task yields to the scheduler in a
loop, which keeps trio polling epoll with a zero timeout instead of sleeping in it. After the
window the task parks until the next activity, so an idle process burns nothing.

Two modes:

- **adaptive** (``"auto"``, the default of the broker and the SDK): poll only while it pays.
  After an activity the loop polls only if the idle gap before it was shorter than the
  window (traffic this dense: the next activity is likely to come while polling; sparser
  traffic sleeps as usual and costs nothing). A window that runs out with nothing arriving is
  a miss, and the next 1, 2, 4 ... 64 chances to poll are passed up, so a peer that answers
  slower than the window (a held pull) costs at most one window per 64 requests; an activity
  arriving while polling is a hit and clears the back-off. While traffic is that dense,
  sleeping costs a wake-up per gap, which on these machines is most of what polling through
  the gap costs. The window stretches to a peer that answers a request a little later than
  it, up to :data:`MAX_WINDOW`: when a window started by a request (``touch("answer")``)
  ran out, the next activity tells how late the answer came, and if a window a quarter longer
  than that fits under the cap, the window becomes that and the back-off is cleared (a
  sync-flush put answered after 0.45 ms: a client that slept through every wait paid a
  wake-up per send; polling through it took one message in flight from 2.1k to 2.6k sends a
  second). An answer later than the cap allows keeps the window at the cap while it came
  within :data:`LATE_ANSWER` (one slow answer among fast ones), and a later one (a held pull)
  puts it back to its base length. The window after an
  answer this end wrote (``touch("request")``: a server waiting for its client's next
  request) stretches the same way to a client that turns around a little slower than it, but
  only up to :data:`MAX_REQUEST_WINDOW`, so a client sending every millisecond does not keep
  a broker's core spinning; and it opens whatever the gap before the answer (that gap was this
  end's own work). On a machine whose clients took 120-300 µs from an answer to their next
  request, the 200 µs base window missed two requests in five of a sync-flush producer, whose
  every miss the broker slept through (a wake-up of 50-70 µs there, docs/performance.md,
  thirty-third step). And a server's poller
  (given the server's :class:`~wire.remoting.crowd.Crowd`) polls only for a lone peer: bytes
  from one connection arriving within ``CROWD_HOLD`` (10 ms) of another's mean several peers
  keep the loop busy, and there polling only takes the core from the work and splits what one
  wait would have read together into more, smaller passes (the sends of other connections a
  pass gathers into one put); once one peer has been alone that long the loop polls again
  (measured with 2 to 64 producers, one send in flight each, against a broker with polling
  off: polling was 2-8 % slower at every count). An adaptive client's poller counts clients,
  not servers (:func:`~wire.remoting.crowd.clients_crowd`, the trio run's): one client waiting
  for answers pays for polling whatever the number of brokers it talks to, but many clients
  in one process (64 producers, one send in flight each) each polling their own answers ran
  at 0.69 of the rate of not polling at all (docs/performance.md, thirty-second step), so there
  the pollers stop while several clients receive, and their answers go to the run's answer
  reactor (:mod:`wire.remoting.answer_reactor`).
  A window that runs out while the loop is held (a task's step, the io_uring wait of a
  sync-flush put: the poller did not run in the window's second half) was never tried: it is
  no miss, and the next activity polls whatever the gap before it (that gap was the loop's
  work, not the peer's silence). Counted as misses, the request window of every sync-flush put
  ran out inside its sync, the poller backed off, and the broker slept through the client's
  next request: 58 µs from its write to the broker's read against 19 polling (docs/performance.md,
  twenty-fourth step).
- **fixed** (a duration): always poll for the window after each activity.

A client's connection whose only request waits while the loop polls lets that request's task
read its answer off the socket (``Connection._poll_answer``); the poller then reads the socket
on each of its passes between requests (:meth:`BusyPoller.on_each_pass`) and gives it back to
the connection's read loop when it stops polling (:meth:`BusyPoller.when_cool`).

Off with ``0``: the loop sleeps in epoll as it always did.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Literal

import attrs
import trio
import trio.lowlevel

from wire import units
from wire.remoting.crowd import Crowd

AUTO = "auto"
"""The setting for adaptive polling (see the module docstring)."""
AUTO_WINDOW = 200e-6
"""Window of adaptive polling: a few single-message round trips of this machine kind."""
MAX_WINDOW = 2e-3
"""Longest an adaptive window stretches (see the module docstring): a sync-flush batch of 32
messages is answered after 0.8-0.9 ms on this machine kind (1 KiB bodies: about 1 ms), which a
1 ms cap could not hold once stretched, so those clients slept through every answer (2 ms
took trio producers' sync batches 13-14 % faster; docs/performance.md, twenty-eighth step)."""
STRETCH = 1.25
"""A stretched window is this many times the lateness of the activity it missed."""
LATE_ANSWER = 5e-3
"""An answer later than the stretch can follow (``MAX_WINDOW / STRETCH``) but within this
keeps the answer window at :data:`MAX_WINDOW` instead of putting it back to its base: one slow
answer among answers the stretched window catches (a sync batch's p99 at 2-4 ms on a slower
machine) made the next windows base-length misses until a miss stretched it again (a trio
producer's sync batches caught 73 % of their answers polling; docs/performance.md, thirty-third
step). The miss's back-off still applies, so a peer that always answers this late costs at most
one window per 64 requests; a later answer (a held pull) puts the window back to its base."""
MAX_REQUEST_WINDOW = 600e-6
"""Longest the window after an answer (waiting for the peer's next request) stretches: a
client turning around in up to about 0.5 ms is polled through, one sending every millisecond
is not (see the module docstring)."""
WindowFor = Literal["answer", "request", ""]
"""What an adaptive window waits for: the answer to a request this end sent, the peer's next
request after an answer this end wrote, or any activity."""
MAX_BACK_OFF = 64
"""Most chances to poll an adaptive poller passes up after consecutive misses."""


BusyPollSetting = float | str
"""Seconds of a fixed window, ``0`` for off, or :data:`AUTO`."""


def parse_busy_poll(value: object) -> BusyPollSetting:
    """A busy-poll setting from configuration: ``"auto"``, ``"off"``, or a duration (``"200us"``,
    a number of seconds; ``0`` is off).

    :raises ValueError: anything else (the message names what is accepted)."""
    if isinstance(value, str) and value.strip().lower() in (AUTO, "off"):
        return AUTO if value.strip().lower() == AUTO else 0.0
    try:
        return units.parse_duration(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f'busy_poll must be "auto", "off" or a duration such as "200us": {error}') from None


@attrs.define(eq=False)
class BusyPoller:
    """Run :meth:`run` in a nursery; connections call :meth:`touch` on activity."""

    window: float
    """Seconds the loop keeps polling after the last :meth:`touch`."""
    adaptive: bool = False
    """Poll only while traffic is dense enough for it to pay (see the module docstring)."""
    crowd: Crowd | None = None
    """The peers: a server's (set by :class:`RemotingServer`), or for an adaptive client the
    run's clients (each client one peer): adaptive polling stops while several of them send
    (see the module docstring). A fixed window has none and always polls."""
    _hot_until: float = attrs.field(default=0.0, init=False)
    _parked: trio.Event | None = attrs.field(default=None, init=False)
    _last_touch: float = attrs.field(default=float("-inf"), init=False)
    _passing: int = attrs.field(default=0, init=False)
    """Chances to poll still to pass up after a miss (adaptive)."""
    _back_off: int = attrs.field(default=1, init=False)
    _waits_for: WindowFor = attrs.field(default="", init=False)
    """What the current window waits for: ``"answer"`` (started by a request this end sent),
    ``"request"`` (started by an answer this end wrote) or ``""`` (any activity)."""
    _missed: WindowFor = attrs.field(default="", init=False)
    """What a window that ran out waited for (as ``_waits_for``); the next activity says how
    late it came."""
    _spun_at: float = attrs.field(default=float("-inf"), init=False)
    """When the poller last polled (a window whose second half saw no poll was held)."""
    _held: bool = attrs.field(default=False, init=False)
    """The last window ran out while the loop was held (noted by the poller for the next
    :meth:`touch`)."""
    _on_cool: list[Callable[[], None]] = attrs.field(factory=list, init=False)
    """Called once when the loop stops polling (see :meth:`when_cool`)."""
    _each_pass: list[Callable[[], None]] = attrs.field(factory=list, init=False)
    """Called on every pass the loop polls (see :meth:`on_each_pass`)."""
    answer_window: float = attrs.field(default=0.0, init=False)
    """The window polled after a request this end sent: ``window``, or longer once stretched
    (other activities poll for ``window``, answers written for :attr:`request_window`)."""
    request_window: float = attrs.field(default=0.0, init=False)
    """The window polled after an answer this end wrote: ``window``, or longer once stretched
    (up to :data:`MAX_REQUEST_WINDOW`)."""
    spins: int = attrs.field(default=0, init=False)
    """Scheduler passes spent polling (for tests and statistics)."""
    hits: int = attrs.field(default=0, init=False)
    """Activities that arrived while polling."""
    misses: int = attrs.field(default=0, init=False)
    """Windows that ran out with nothing arriving."""

    def __attrs_post_init__(self) -> None:
        if self.window <= 0:
            raise ValueError(f"a busy-poll window must be positive, got {self.window!r}")
        self.answer_window = self.request_window = self.window

    @property
    def parked(self) -> bool:
        """Whether the loop sleeps as usual now (no activity within the window)."""
        return self._parked is not None

    @property
    def waits_for(self) -> WindowFor:
        """What the open window waits for: ``"answer"`` (opened by a request this end sent),
        ``"request"`` (by an answer it wrote) or ``""`` (any other activity)."""
        return self._waits_for

    @property
    def polling(self) -> bool:
        """Whether the loop polls now (an activity's window is open)."""
        return trio.current_time() < self._hot_until

    def when_cool(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, when the loop next stops polling (at once if it does not
        poll now)."""
        if self.polling:
            self._on_cool.append(callback)
        else:
            callback()

    def on_each_pass(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (synchronous, quick, never raising) on every pass the loop polls,
        until :meth:`off_each_pass`."""
        self._each_pass.append(callback)

    def off_each_pass(self, callback: Callable[[], None]) -> None:
        if callback in self._each_pass:
            self._each_pass.remove(callback)

    @property
    def serves_peers(self) -> bool:
        """The loop serves many peers (a server's: it has a :attr:`crowd`)."""
        return self.crowd is not None

    @property
    def crowded(self) -> bool:
        """Whether several peers' bytes keep arriving, so an adaptive loop does not poll."""
        return self.adaptive and self.crowd is not None and self.crowd.crowded(trio.current_time())

    def touch(self, waits_for: WindowFor = "") -> None:
        """Activity now: keep polling for another window (wakes the parked loop), unless the
        adaptive rules say polling would not pay. ``waits_for``: ``"answer"`` for a request
        sent, whose answer the window waits for; ``"request"`` for an answer written, after
        which the peer's next request may come (only these two kinds of window stretch); ``""``
        for any other activity. A server's receives are reported to its :attr:`crowd` first
        (by the connection)."""
        now = trio.current_time()
        gap = now - self._last_touch
        self._last_touch = now
        crowd = self.crowd
        if crowd is not None and self.adaptive and crowd.crowded(now):
            self._hot_until = 0.0  # the loop parks without counting a miss
            return
        window = (
            self.answer_window
            if waits_for == "answer"
            else self.request_window
            if waits_for == "request"
            else self.window
        )
        if now <= self._hot_until:
            self.hits += 1
            self._back_off = 1
        elif self.adaptive:
            held = self._held or self._held_through()
            self._held = False
            if self._missed:
                # The first activity after a window that caught nothing: ``gap`` is how late
                # it came after the activity that started that window.
                missed, self._missed = self._missed, ""
                if self._stretch(missed, late=gap):
                    self._passing = 0
                    self._back_off = 1
                    return  # the wait is over: poll again from the next activity on
            if self._passing:
                self._passing -= 1
                return
            if gap > window and not held and waits_for != "request":
                # Traffic this sparse would not arrive while polling: sleep as usual. (The
                # gap before an answer is this end's own work, not the peer's silence.)
                return
        self._hot_until = now + window
        self._waits_for = waits_for
        parked = self._parked
        if parked is not None:
            self._parked = None
            parked.set()

    def _stretch(self, missed: WindowFor, *, late: float) -> bool:
        """Stretch the kind of window that ``missed`` to :data:`STRETCH` times how ``late``
        its activity came, if that fits its cap (True); else put it back to the base window
        (an answer window: to its cap while the answer came within :data:`LATE_ANSWER`)."""
        stretched = late * STRETCH
        if missed == "answer":
            if stretched <= MAX_WINDOW:
                self.answer_window = max(self.answer_window, stretched)
                return True
            self.answer_window = MAX_WINDOW if late <= LATE_ANSWER else self.window
        else:
            if stretched <= MAX_REQUEST_WINDOW:
                self.request_window = max(self.request_window, stretched)
                return True
            self.request_window = self.window
        return False

    def _held_through(self) -> bool:
        """The current window has run out and the poller did not poll in its second half:
        the loop was held (see the module docstring), so the window was never tried."""
        hot_until = self._hot_until
        return 0.0 < hot_until < trio.current_time() and hot_until - self._spun_at > self.window / 2

    async def run(self) -> None:
        """Poll while hot, park while cold; until cancelled."""
        while True:
            now = trio.current_time()
            if now < self._hot_until:
                self._spun_at = now
                self.spins += 1
                # Offer the core to other runnable threads first (the store's flush thread,
                # the kernel's writeback): with both ends of a round trip polling on a 2-core
                # machine they otherwise wait for a time slice, and that wait was the p99 of
                # one 1 KiB message in flight (0.32-0.38 ms, 0.21-0.27 ms with it).
                for callback in tuple(self._each_pass):
                    callback()
                os.sched_yield()
                await trio.lowlevel.checkpoint()
                continue
            if self._held_through():
                self._held = True  # not a miss: the next activity polls
            elif self._hot_until:
                # The window ran out with nothing arriving: a miss.
                self.misses += 1
                if self.adaptive:
                    self._missed = self._waits_for
                    self._passing = self._back_off
                    self._back_off = min(self._back_off * 2, MAX_BACK_OFF)
            self._hot_until = 0.0
            cooled, self._on_cool = self._on_cool, []
            for callback in cooled:
                callback()
            parked = self._parked = trio.Event()
            await parked.wait()


def start_busy_poll(
    nursery: trio.Nursery, setting: BusyPollSetting, *, crowd: Crowd | None = None
) -> BusyPoller | None:
    """A poller running in ``nursery``: adaptive for :data:`AUTO`, a fixed window for a
    positive number of seconds; None (nothing runs) for 0. ``crowd``: a server's peers
    (:attr:`BusyPoller.crowd`)."""
    setting = parse_busy_poll(setting)
    if setting == AUTO:
        poller = BusyPoller(AUTO_WINDOW, adaptive=True, crowd=crowd)
    elif setting:
        poller = BusyPoller(float(setting), crowd=crowd)
    else:
        return None
    nursery.start_soon(poller.run)
    return poller
