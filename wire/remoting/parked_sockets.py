"""Sockets whose connections' read loops wait in one private epoll instead of each on its own.

Why: a read loop waiting on its own socket re-arms it in trio's epoll (an ``epoll_ctl``) for
every wait and is woken, a task step, for every receive. A reactor that reads many connections
(the server's :mod:`wire.remoting.read_reactor`, the client's
:mod:`wire.remoting.answer_reactor`) registers each waiting socket here once, level-triggered,
and waits for this one epoll in trio's instead. This is the bookkeeping both share: which
connection waits on which descriptor, and taking a socket out before its connection reads
it again or closes it.
"""

from __future__ import annotations

import select
from typing import TYPE_CHECKING

import attrs

from wire.remoting.command import RemotingCommand
from wire.remoting.receive_buffer import read_available

if TYPE_CHECKING:
    from wire.remoting.connection import Connection

MAX_EVENTS = 1024
"""Most sockets one pass reads (the rest are still ready for the next)."""


@attrs.define(eq=False)
class ParkedSockets:
    """The waiting connections, by socket descriptor, and the epoll they are registered in."""

    _epoll: select.epoll = attrs.field(factory=select.epoll, init=False)
    _parked: dict[int, Connection] = attrs.field(factory=dict, init=False)

    def __len__(self) -> int:
        return len(self._parked)

    def fileno(self) -> int:
        """The epoll's descriptor, for trio's ``wait_readable``."""
        return self._epoll.fileno()

    def ready(self) -> list[tuple[int, Connection]]:
        """The parked sockets with bytes (or an end, or an error) to read now, at most
        :data:`MAX_EVENTS`, with their connections."""
        parked = self._parked
        return [(fd, parked[fd]) for fd, _ in self._epoll.poll(0, MAX_EVENTS) if fd in parked]

    async def wait_data(self, connection: Connection, fd: int) -> bytes | list[RemotingCommand]:
        """Park ``connection``'s socket and wait for what its read loop must handle itself
        (see :meth:`Connection.fed`). The socket leaves the epoll however the wait ends (a
        cancelled or closed connection included), before it can close.

        :raises OSError: the reactor's read failed (a reset connection), or brought bytes that
            end the connection.
        """
        self._parked[fd] = connection
        self._epoll.register(fd, select.EPOLLIN)
        try:
            return await connection.fed()
        finally:
            if self._parked.get(fd) is connection:
                self.unpark(fd)

    def read(self, fd: int, connection: Connection) -> bytes | None:
        """What parked ``fd`` holds now (``b""``: the end of the stream); None when it held
        nothing yet, or when the read failed (the socket taken out and the error handed to the
        connection's read loop, which closes)."""
        try:
            return read_available(fd)
        except BlockingIOError:
            return None
        except OSError as error:
            self.unpark(fd)
            connection.feed_error(error)
            return None

    def unpark(self, fd: int) -> None:
        """Take ``fd`` out: its connection's read loop takes it from here."""
        del self._parked[fd]
        try:
            self._epoll.unregister(fd)
        except (OSError, ValueError):  # already closed: the kernel dropped it
            pass

    def close(self) -> None:
        """Take every socket out and close the epoll (the reactor ends)."""
        for fd in list(self._parked):
            self.unpark(fd)
        self._epoll.close()
