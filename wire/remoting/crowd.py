"""Whether several peers of a server keep sending: one detector for the server's busy poller
and its read reactor.

Why: what pays for one client hurts for many, and both the adaptive busy poller
(:mod:`wire.remoting.busy_poll`: polling takes the core from the work once several peers keep
the loop busy) and the read reactor (:mod:`wire.remoting.read_reactor`: one reader for many
connections costs a lone client's round trip a hop) switch on the same fact. Each receive of
a server's connection is reported once; bytes from a second connection within
:data:`CROWD_HOLD` of another's make the server crowded for :data:`CROWD_HOLD` more.

The same detector serves a process's clients (:func:`clients_crowd`, one per trio run): each
client is one peer, and while several of them receive answers their adaptive pollers stop (many
producers in one process, each polling its own answers, ran at 0.69 of the rate without polling).
"""

from __future__ import annotations

import attrs
import trio

CROWD_HOLD = 10e-3
"""How long bytes from a second peer keep the server crowded: longer than a busy loop's pass
over many connections (64 sends of 64 producers take a few milliseconds), short enough that a
lone producer left after a consumer's pull is alone again after a few of its sends."""


@attrs.define(eq=False)
class Crowd:
    """Receives of a server's connections (:meth:`saw`) and whether several peers send now."""

    _last_peer: object = attrs.field(default=None, init=False)
    """The connection whose bytes arrived last."""
    _last_receive: float = attrs.field(default=float("-inf"), init=False)
    """When they arrived."""
    _crowded_until: float = attrs.field(default=float("-inf"), init=False)

    def saw(self, peer: object, now: float) -> None:
        """Bytes of connection ``peer`` arrived at ``now`` (trio's clock)."""
        if peer is not self._last_peer:
            if now - self._last_receive <= CROWD_HOLD:
                self._crowded_until = now + CROWD_HOLD
            self._last_peer = peer
        self._last_receive = now

    def crowded(self, now: float) -> bool:
        """Whether bytes of two different peers arrived within :data:`CROWD_HOLD` of each
        other lately (until :data:`CROWD_HOLD` after the last such arrival)."""
        return now < self._crowded_until


_CLIENTS: trio.lowlevel.RunVar[Crowd] = trio.lowlevel.RunVar("trocket_clients_crowd")


def clients_crowd() -> Crowd:
    """The current trio run's crowd of remoting *clients* (each client one peer, whatever the
    number of servers it talks to): the adaptive pollers of the run's clients read it, so that
    many producers in one process stop polling while several of them wait for answers, as a
    server's poller does for many peers (docs/performance.md, thirty-second step)."""
    try:
        return _CLIENTS.get()
    except LookupError:
        crowd = Crowd()
        _CLIENTS.set(crowd)
        return crowd
