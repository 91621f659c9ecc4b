"""A trio TCP server speaking RocketMQ remoting: one :class:`Connection` per accepted socket."""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs
import trio

from wire.remoting.busy_poll import BusyPoller, BusyPollSetting, start_busy_poll
from wire.remoting.connection import Connection, Router, TransportLimits
from wire.remoting.crowd import Crowd
from wire.remoting.read_reactor import ReadReactor
from wire.remoting.tls import ServerTls

log = logging.getLogger(__name__)


def format_address(sockaddr: object) -> str:
    """``ip:port`` of a socket address tuple (IPv4 or IPv6)."""
    if isinstance(sockaddr, tuple) and len(sockaddr) >= 2:
        return f"{sockaddr[0]}:{sockaddr[1]}"
    return str(sockaddr)


async def open_listeners(name: str, host: str, port: int) -> tuple[list[trio.SocketListener], int]:
    """TCP listeners on ``host:port`` (0 picks a free port) and the port bound.

    :raises OSError: naming the server and address ("broker: cannot listen on ...: Address
        already in use"), so a port clash at start is one clear line.
    """
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as error:
        raise OSError(error.errno, f"{name}: cannot listen on {host}:{port}: {error.strerror}") from None
    return listeners, int(listeners[0].socket.getsockname()[1])


@attrs.define(eq=False)
class RemotingServer:
    """Listens on ``host:port`` and serves every connection with ``router``.

    ``port=0`` picks a free port; :attr:`port` holds the bound one once started. Over
    ``limits.max_connections`` a new connection is closed at once (and logged).
    """

    name: str
    host: str
    port: int
    router: Router
    limits: TransportLimits = TransportLimits()
    on_connect: list[Callable[[Connection], None]] = attrs.field(factory=list)
    on_close: list[Callable[[Connection], None]] = attrs.field(factory=list)
    tls: ServerTls | None = None
    """TLS as ``tls.server.mode`` says; ``None`` is plain TCP (``disabled``)."""
    busy_poll: BusyPollSetting = 0.0
    """Polling after activity (see :mod:`wire.remoting.busy_poll`): ``"auto"``, seconds of a
    fixed window, or 0 (the default here: sleeps in epoll as usual; the broker's
    ``[remoting] busy_poll`` defaults to ``"auto"``)."""
    read_reactor: bool = False
    """Idle plain-TCP connections wait in one :class:`ReadReactor` (which answers lone requests
    of the router's ``across`` codes together) instead of each on its own socket."""
    reactor: ReadReactor | None = attrs.field(default=None, init=False)
    crowd: Crowd = attrs.field(factory=Crowd, init=False)
    """Whether several peers send now: the busy poller's and the reactor's switch."""
    busy_poller: BusyPoller | None = attrs.field(default=None, init=False)
    connections: set[Connection] = attrs.field(factory=set, init=False)
    refused: int = attrs.field(default=0, init=False)
    accepted: int = attrs.field(default=0, init=False)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def run(self, *, task_status: trio.TaskStatus[RemotingServer] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; ``task_status.started`` once the socket is bound."""
        listeners, self.port = await open_listeners(self.name, self.host, self.port)
        log.info("%s listening on %s", self.name, self.address)
        async with trio.open_nursery() as nursery:
            self.busy_poller = start_busy_poll(nursery, self.busy_poll, crowd=self.crowd)
            if self.read_reactor and self.tls is None and self.router.across_handlers:
                self.reactor = ReadReactor(self.router, self.crowd)
                nursery.start_soon(self.reactor.run)
            task_status.started(self)
            await trio.serve_listeners(self._serve, listeners, handler_nursery=nursery)

    async def _serve(self, stream: trio.SocketStream) -> None:
        peer = format_address(stream.socket.getpeername())
        if len(self.connections) >= self.limits.max_connections:
            self.refused += 1
            log.warning(
                "%s: refusing connection from %s: %d connections open (max_connections)",
                self.name,
                peer,
                len(self.connections),
            )
            await trio.aclose_forcefully(stream)
            return
        served: trio.abc.Stream | None = stream
        if self.tls is not None:
            served = await self.tls.accept(stream, self.name, peer)
            if served is None:
                self.refused += 1
                return
        self.accepted += 1
        connection = Connection(
            served,
            peer,
            self.router,
            self.limits,
            local=format_address(stream.socket.getsockname()),
            on_close=[self.connections.discard, *self.on_close],
            busy_poller=self.busy_poller,
            crowd=self.crowd,
            reactor=self.reactor,
        )
        self.connections.add(connection)
        for callback in self.on_connect:
            callback(connection)
        await connection.run()
        log.debug("%s: connection from %s closed: %s", self.name, peer, connection.close_reason)
