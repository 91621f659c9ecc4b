"""One task that reads the answers of a trio run's client connections.

Why it exists: a client connection's read loop waited on its own socket, so every answer cost
the client that task's wake-up through trio's epoll, an ``epoll_ctl`` to re-arm the socket for
its next wait, and a scheduler pass before the requesting task (rescheduled by the read loop)
could go on: two task steps a round trip where one does the work. An application with many
connections (64 producers with one send in flight each in one process, the bench's "64
producers" row) spent about 60 µs of its core a send, as much as the broker. Here every such
connection's socket sits in one private level-triggered epoll (registered once, no
``epoll_ctl`` per wait); one task waits for it, reads every ready socket in a pass and hands
each answer straight to the request waiting for it (docs/performance.md, thirty-second step).
It is the client's mirror of the server's read reactor (:mod:`wire.remoting.read_reactor`).

Only answers are taken here. Anything else a read brings (a request of the server's, such as
NOTIFY_CONSUMER_IDS_CHANGED or CHECK_TRANSACTION_STATE, the end of the stream, a read error, a
malformed frame) goes to the connection's own read loop, which serves or closes as it always
did and parks its socket here again when it waits next. A connection with a busy poller parks
here only while the poller does not poll: while it polls, a lone request reads its own answer
(:meth:`Connection._poll_answer`, which takes the socket out of here); an adaptive client's
poller stops while several clients of the run wait for answers (the run's clients' crowd,
:func:`wire.remoting.crowd.clients_crowd`), so many producers in one process are read here. TLS
streams (read by trio) never park here.
"""

from __future__ import annotations

import contextvars
import logging
from typing import TYPE_CHECKING

import attrs
import trio

from wire.remoting.command import RemotingCommand
from wire.remoting.parked_sockets import ParkedSockets

if TYPE_CHECKING:
    from wire.remoting.connection import Connection

log = logging.getLogger(__name__)


@attrs.define(eq=False)
class AnswerReactor:
    """Reads parked client connections' sockets; see the module docstring. One per trio run
    (:func:`shared_answer_reactor`), run as a system task."""

    _sockets: ParkedSockets = attrs.field(factory=ParkedSockets, init=False)
    """Connections whose read loops wait here, by socket descriptor (registered in the epoll)."""
    answers_read: int = attrs.field(default=0, init=False)
    """Receives this task read and kept (answers handed to their requests, or the first bytes
    of one): none of them woke a read loop."""
    passes: int = attrs.field(default=0, init=False)
    """Passes that read at least one socket (``answers_read / passes``: receives a pass)."""

    @property
    def parked(self) -> int:
        """Connections waiting here now."""
        return len(self._sockets)

    async def run(self) -> None:
        """Read ready sockets until cancelled (the end of the trio run). Never raises: a
        system task's exception would end the whole run, so a failure reading one connection
        ends that connection only."""
        sockets = self._sockets
        try:
            while True:
                await trio.lowlevel.wait_readable(sockets.fileno())
                ready = sockets.ready()
                if ready:
                    self.passes += 1
                for fd, connection in ready:
                    self._read(fd, connection)
        finally:
            sockets.close()

    async def wait_data(self, connection: Connection, fd: int) -> bytes | list[RemotingCommand]:
        """What of ``connection``'s socket its read loop must handle itself (see
        :meth:`Connection.fed`): the end of the stream (``b""``) or the server's requests,
        decoded; answers meanwhile are handed to their requests here. The socket leaves the
        epoll however the wait ends (a cancelled or closed connection included), before the
        socket can close.

        :raises OSError: the read failed (a reset connection) or brought a malformed frame.
        """
        return await self._sockets.wait_data(connection, fd)

    def _read(self, fd: int, connection: Connection) -> None:
        data = self._sockets.read(fd, connection)
        if data is None:
            return
        try:
            answered = connection.take_answers(data)
        except Exception as error:  # a bug in one connection's handling ends that connection
            log.exception("answer reactor: reading %s failed", connection.peer)
            self._sockets.unpark(fd)
            connection.feed_error(OSError(f"answer reactor failed: {type(error).__name__}: {error}"))
            return
        if answered:
            self.answers_read += 1
        else:  # its read loop takes it from here
            self._sockets.unpark(fd)


_SHARED: trio.lowlevel.RunVar[AnswerReactor] = trio.lowlevel.RunVar("trocket_answer_reactor")


def shared_answer_reactor() -> AnswerReactor:
    """The current trio run's answer reactor, started (as a system task, ended with the run)
    the first time a connection asks for it."""
    try:
        return _SHARED.get()
    except LookupError:
        pass
    reactor = AnswerReactor()
    _SHARED.set(reactor)
    # An empty context: the reactor must not carry the context variables of whichever task
    # happened to open the first connection.
    trio.lowlevel.spawn_system_task(reactor.run, name="answer reactor", context=contextvars.Context())
    return reactor
