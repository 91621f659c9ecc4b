"""A remoting client: one connection per ``ip:port``, requests with per-request timeouts.

Used by the broker (registering with NameServers, notifying consumers happens on server
connections), the admin CLI and the client SDK. Connections are opened lazily and kept;
a closed one is replaced on the next request.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import trio

from wire.errors import RemotingConnectError
from wire.remoting.answer_reactor import shared_answer_reactor
from wire.remoting.busy_poll import AUTO, BusyPoller, BusyPollSetting, parse_busy_poll, start_busy_poll
from wire.remoting.command import RemotingCommand
from wire.remoting.connection import Connection, Router, TransportLimits
from wire.remoting.crowd import Crowd, clients_crowd
from wire.remoting.server import format_address
from wire.remoting.signature import SessionCredentials
from wire.remoting.tls import open_client_stream

log = logging.getLogger(__name__)


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` → (host, port), with a clear error for anything else."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address {address!r} is not host:port")
    return host.strip("[]"), int(port)


@attrs.define(eq=False)
class RemotingClient:
    """Open with ``async with RemotingClient.open() as client``."""

    nursery: trio.Nursery
    router: Router | None = None
    """Serves requests the server sends on our connections (e.g. NOTIFY_CONSUMER_IDS_CHANGED)."""
    limits: TransportLimits = TransportLimits()
    connect_timeout: float = 3.0
    credentials: SessionCredentials | None = None
    """When set, every request this client sends is signed (RocketMQ ACL)."""
    tls: ssl.SSLContext | None = None
    """When set, every connection speaks TLS (``tls.enable``; see :mod:`wire.remoting.tls`)."""
    busy_poller: BusyPoller | None = None
    """Keeps the loop polling while answers are due (see :mod:`wire.remoting.busy_poll`)."""
    shared_reader: bool = True
    """Plain-TCP connections wait for answers in the trio run's one
    :class:`~wire.remoting.answer_reactor.AnswerReactor` instead of each on its own socket
    (with a busy poller, while it does not poll)."""
    crowd: Crowd | None = None
    """The run's clients (an adaptive poller's: :func:`~wire.remoting.crowd.clients_crowd`),
    to which this client's connections report their receives as one peer."""
    _connections: dict[str, Connection] = attrs.field(factory=dict, init=False)
    _locks: dict[str, trio.Lock] = attrs.field(factory=dict, init=False)

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        router: Router | None = None,
        *,
        connect_timeout: float = 3.0,
        limits: TransportLimits | None = None,
        credentials: SessionCredentials | None = None,
        tls: ssl.SSLContext | None = None,
        busy_poll: BusyPollSetting = 0.0,
        shared_reader: bool = True,
    ) -> AsyncIterator[RemotingClient]:
        """``busy_poll``: whether the event loop polls instead of sleeping after each request
        sent and each receive: ``"auto"`` (adaptive), seconds of a fixed window, or 0 (off,
        the default here; the SDK's clients default to ``"auto"``). See
        :mod:`wire.remoting.busy_poll`. ``shared_reader``: answers not polled for are read by
        the run's one answer reactor (:mod:`wire.remoting.answer_reactor`); False gives each
        connection's read loop its own socket again."""
        try:
            async with trio.open_nursery() as nursery:
                # An adaptive client polls only while it is the run's one client waiting for
                # answers (see wire.remoting.crowd.clients_crowd); a fixed window always polls.
                crowd = clients_crowd() if parse_busy_poll(busy_poll) == AUTO else None
                poller = start_busy_poll(nursery, busy_poll, crowd=crowd)
                client = cls(
                    nursery,
                    router,
                    limits or TransportLimits(),
                    connect_timeout,
                    credentials,
                    tls,
                    poller,
                    shared_reader,
                    crowd,
                )
                try:
                    yield client
                finally:
                    client.close_all()
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # Connection tasks never raise, so a group holds the caller's own exception: hand
            # it back as raised, not wrapped (callers catch RemotingError, not groups).
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    async def connection(self, address: str) -> Connection:
        """The open connection to ``address``, connecting if needed.

        :raises RemotingConnectError: the address is unreachable within ``connect_timeout``.
        """
        existing = self._connections.get(address)
        if existing is not None and not existing.closed:
            return existing
        lock = self._locks.setdefault(address, trio.Lock())
        async with lock:
            existing = self._connections.get(address)
            if existing is not None and not existing.closed:
                return existing
            host, port = split_address(address)
            try:
                with trio.fail_after(self.connect_timeout):
                    stream, socket_stream = await open_client_stream(host, port, self.tls)
            except (OSError, trio.TooSlowError) as error:
                raise RemotingConnectError(f"cannot connect to {address}: {error or 'timed out'}") from None
            except trio.BrokenResourceError as error:
                raise RemotingConnectError(
                    f"cannot connect to {address}: TLS handshake failed: {error.__cause__ or error}"
                ) from None
            shared = self.shared_reader and self.tls is None
            connection = Connection(
                stream,
                address,
                self.router,
                self.limits,
                local=format_address(socket_stream.socket.getsockname()),
                busy_poller=self.busy_poller,
                reads_own_answers=True,
                answer_reactor=shared_answer_reactor() if shared else None,
                crowd=self.crowd,
                crowd_peer=self,
            )
            await self.nursery.start(connection.run)
            self._connections[address] = connection
            return connection

    async def invoke(self, address: str, request: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send ``request`` to ``address`` and return the response.

        :raises RemotingConnectError, RemotingTimeoutError, RemotingClosedError: see names.
        """
        connection = await self.connection(address)
        return await connection.request(self.signed(request), timeout)

    async def invoke_oneway(self, address: str, request: RemotingCommand) -> None:
        connection = await self.connection(address)
        connection.send_oneway(self.signed(request))

    def signed(self, request: RemotingCommand) -> RemotingCommand:
        """``request``, signed with this client's credentials when it has any (for requests
        sent on a connection directly rather than through :meth:`invoke`)."""
        if self.credentials is not None:
            self.credentials.sign(request)
        return request

    async def flush_all(self, timeout: float = 3.0) -> None:
        """Write what every connection has queued (oneway requests) before a deliberate close."""
        deadline = trio.current_time() + timeout
        for connection in list(self._connections.values()):
            await connection.flush(max(0.0, deadline - trio.current_time()))

    def close(self, address: str, reason: str = "closed by client") -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            connection.close(reason)

    def close_all(self) -> None:
        for address in list(self._connections):
            self.close(address, "client shutting down")
