"""One task that reads a server's idle plain-TCP connections and answers their lone requests
together.

Why it exists: with a task per connection, 64 producers with one send in flight each cost the
broker about twice what 64 sends in flight on one connection cost (54 against 27-30 µs of its
core a send, docs/performance.md, seventeenth step): each send paid its connection task's
wake-up, trio's re-arming of epoll (an ``epoll_ctl`` per wait), a pass of the scheduler, and a
handler and answer of its own. Here every idle connection's socket sits in one private
level-triggered epoll (registered once, no ``epoll_ctl`` per wait); one task waits for it,
reads every ready socket, and gives the lone requests of that pass (a request alone in its
receive, on a connection with nothing else in flight, of a code the router handles *across*
connections) to one call of the router (:meth:`Router.handle_across`): the sends of 64
producers are checked, put and answered together, each answer written to its own socket.

Anything else a read brings (several frames, a partial frame, a response, another code, the
end of the stream) goes to the connection's own read loop, which takes its socket out of the
epoll while it works and puts it back when it waits again: a connection with many requests in
flight reads for itself, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import trio

from wire.remoting.command import RemotingCommand
from wire.remoting.crowd import Crowd
from wire.remoting.parked_sockets import ParkedSockets

if TYPE_CHECKING:
    from wire.remoting.connection import Connection, Router

WAIT_HOLD = 2e-3
"""Longest the reactor waits for a pass whose answers wait (a sync-flush put: 0.1-0.3 ms here)
before it reads the next: waiting lets the next pass gather what arrives meanwhile (64
producers under sync flush: 31 sends a pass instead of 10-16, 39-42 instead of 46-48 µs of
the broker's CPU a send); a slow disk or replica holds the other connections' lone sends no
longer than this."""


@attrs.define(eq=False)
class ReadReactor:
    """Run :meth:`run` in the server's nursery; connections park in it with :meth:`wait_data`."""

    router: Router
    crowd: Crowd
    """The server's peers: connections wait here only while several send (a lone client's
    connection reads its own socket, which keeps its round trip one hop shorter)."""
    _sockets: ParkedSockets = attrs.field(factory=ParkedSockets, init=False)
    """Connections waiting for bytes, by socket descriptor (registered in the epoll)."""
    answered_across: int = attrs.field(default=0, init=False)
    """Lone requests answered by the reactor itself."""
    passes_answered: int = attrs.field(default=0, init=False)
    """Passes that answered lone requests (``answered_across / passes_answered``: how many a
    pass took together)."""

    @property
    def parked(self) -> int:
        """Connections waiting in the reactor now."""
        return len(self._sockets)

    async def run(self) -> None:
        """Read ready sockets until cancelled."""
        sockets = self._sockets
        at_once = self.router.inline_alone
        try:
            async with trio.open_nursery() as nursery:
                while True:
                    await trio.lowlevel.wait_readable(sockets.fileno())
                    lone: list[tuple[Connection, RemotingCommand]] = []
                    for fd, connection in sockets.ready():
                        self._read(fd, connection, lone)
                    if not lone:
                        continue
                    self._began(lone)
                    if all(request.code in at_once for _, request in lone):
                        await self._answer(lone)
                        continue
                    # A handler that waits (a sync flush, a replica): the pass is answered in a
                    # task of its own, and the reactor waits for it up to WAIT_HOLD (the sends
                    # arriving meanwhile make the next pass, and its put, bigger), then reads on.
                    answered = trio.Event()
                    nursery.start_soon(self._answer, lone, answered)
                    with trio.move_on_after(WAIT_HOLD):
                        await answered.wait()
        finally:
            sockets.close()

    async def wait_data(self, connection: Connection, fd: int) -> bytes | list[RemotingCommand]:
        """What of ``connection``'s socket its read loop must handle itself (see
        :meth:`Connection.fed`); lone requests meanwhile are answered here. The socket leaves
        the epoll however the wait ends (a cancelled loop included), before it can close.

        :raises OSError: the read failed (the peer reset the connection).
        """
        return await self._sockets.wait_data(connection, fd)

    def _read(self, fd: int, connection: Connection, lone: list[tuple[Connection, RemotingCommand]]) -> None:
        data = self._sockets.read(fd, connection)
        if data is None:
            return
        request = connection.take_receive(data)
        if request is None:  # the read loop takes it from here, on its own socket
            self._sockets.unpark(fd)
            return
        lone.append((connection, request))

    def _began(self, lone: list[tuple[Connection, RemotingCommand]]) -> None:
        self.passes_answered += 1
        self.answered_across += len(lone)
        for connection, _ in lone:
            connection.began_lone()

    async def _answer(
        self, lone: list[tuple[Connection, RemotingCommand]], answered: trio.Event | None = None
    ) -> None:
        try:
            responses = await self.router.handle_across(lone)
        finally:
            for connection, _ in lone:
                connection.ended_lone()
            if answered is not None:
                answered.set()
        for (connection, request), response in zip(lone, responses, strict=True):
            if response is not None and not request.is_oneway:
                connection.answer_now(response.encode_parts())
