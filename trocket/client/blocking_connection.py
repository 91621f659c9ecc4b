"""Remoting over blocking sockets, for applications without an event loop (the
:class:`~trocket.client.BlockingProducer`).

A thread that sends writes its request and sleeps in ``recv`` until the answer is there: no
event loop, no task switch, no poller between the socket and the caller, which is what one
request at a time costs least with (as redis-py and RocketMQ's own synchronous clients do).
Each connection carries one request at a time; :class:`ConnectionPool` lends a connection per
concurrent caller, so threads never wait for each other's answers.

Busy polling (``busy_poll``, on by default as in the trio SDK): after writing a request the
thread looks at its socket without blocking for a short window before it sleeps in ``recv``,
which saves the wake-up on every answer that comes within it (:mod:`trocket.client.answer_spin`).

Timeouts: a plain socket stays in blocking mode and the kernel bounds each ``recv`` and
``send`` (``SO_RCVTIMEO``, ``SO_SNDTIMEO``), so a request costs one ``send`` and one ``recv``
system call; Python's own socket timeouts would add a ``poll`` before each. A TLS socket uses
Python's timeouts (its ``recv`` must not surface the kernel's bound as a TLS error).
"""

from __future__ import annotations

import itertools
import os
import socket
import ssl
import struct
import threading
import time

from kernel.errors import RemotingClosedError, RemotingConnectError, RemotingError, RemotingTimeoutError
from trocket.client.answer_spin import AnswerSpin
from wire.remoting import RemotingCommand, ResponseCode
from wire.remoting.busy_poll import BusyPollSetting
from wire.remoting.command import DEFAULT_MAX_FRAME_SIZE, FLAG_ONEWAY, FrameDecoder, FrameError
from wire.remoting.receive_buffer import RECEIVE_CHUNK
from wire.remoting.signature import SessionCredentials

_TIMEVAL = struct.Struct("@ll")


def _timeval(seconds: float) -> bytes:
    seconds = max(seconds, 0.001)  # 0 would mean "never time out"
    whole = int(seconds)
    return _TIMEVAL.pack(whole, int((seconds - whole) * 1_000_000))


class BlockingConnection:
    """One connection to a broker or NameServer; one request at a time (not thread-safe: the
    pool hands it to one caller at a time)."""

    def __init__(
        self,
        address: str,
        *,
        connect_timeout: float = 3.0,
        tls: ssl.SSLContext | None = None,
        credentials: SessionCredentials | None = None,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        busy_poll: BusyPollSetting = 0,
    ) -> None:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise RemotingConnectError(f"{address!r} is not host:port")
        self.spin = None if tls is not None else AnswerSpin.from_setting(busy_poll)
        """How this connection's requests poll for their answers (None: they sleep in ``recv``;
        set before connecting, so an unusable setting opens no socket)."""
        self.address = address
        self.credentials = credentials
        try:
            raw = socket.create_connection((host, int(port)), timeout=connect_timeout)
        except OSError as error:
            raise RemotingConnectError(f"cannot connect to {address}: {error}") from None
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._tls = tls is not None
        if tls is not None:
            try:
                self._sock: socket.socket = tls.wrap_socket(
                    raw, server_hostname=host if tls.check_hostname else None
                )
            except (OSError, ssl.SSLError) as error:
                raw.close()
                raise RemotingConnectError(f"TLS handshake with {address} failed: {error}") from None
        else:
            raw.settimeout(None)
            self._sock = raw
        self._io_bound = -1.0
        self._decoder = FrameDecoder(max_frame_size)
        # Kept for the connection, as wire.remoting.receive_buffer explains (whose per-thread
        # buffer it cannot share: a TLS socket is read through its ssl object, not the fd).
        self._received = bytearray(RECEIVE_CHUNK)
        self._received_view = memoryview(self._received)
        self._opaques = itertools.count(1)
        self.closed = False

    def invoke(self, request: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send ``request`` and wait for its answer.

        :raises RemotingTimeoutError: no answer within ``timeout`` (the connection stays usable:
            a late answer is recognised by its opaque and dropped).
        :raises RemotingClosedError: the peer closed, or sent a frame that does not decode
            (this connection is then closed).
        """
        deadline = time.monotonic() + timeout
        opaque = request.opaque = next(self._opaques) & 0x7FFFFFFF
        self._bound(timeout)
        self._write(request)
        spin, written, window, waited = self.spin, time.monotonic(), 0.0, None
        if spin is not None:
            window = spin.begin()
        poll_until = min(written + window, deadline) if window else 0.0
        try:
            while True:
                answer = None
                for frame in self._receive(deadline, request, poll_until):  # every frame is dealt with
                    if not frame.is_response:
                        self._refuse(frame)
                    elif frame.opaque == opaque:
                        answer = frame
                    # any other answer is the late one of a request that timed out: dropped
                if answer is not None:
                    waited = time.monotonic() - written
                    return answer
        finally:
            if spin is not None:
                spin.finish(waited)

    def oneway(self, request: RemotingCommand) -> None:
        request.opaque = next(self._opaques) & 0x7FFFFFFF
        request.flag |= FLAG_ONEWAY
        self._write(request)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self._sock.close()
            except OSError:
                pass

    def _write(self, request: RemotingCommand) -> None:
        if self.closed:
            raise RemotingClosedError(f"the connection to {self.address} is closed")
        if self.credentials is not None:
            self.credentials.sign(request)
        parts = request.encode_parts()
        try:
            self._sock.sendall(parts[0] if len(parts) == 1 else b"".join(parts))
        except (BlockingIOError, TimeoutError):
            self.close()  # part of the frame may have gone: the stream cannot be used again
            raise RemotingTimeoutError(f"{self.address} did not take the request in time") from None
        except OSError as error:
            self.close()
            raise RemotingClosedError(f"sending to {self.address} failed: {error}") from None

    def _receive(
        self, deadline: float, request: RemotingCommand, poll_until: float = 0.0
    ) -> list[RemotingCommand]:
        """The frames of the next read: polled for until ``poll_until`` (monotonic seconds,
        0: not at all), then waited for in ``recv`` until ``deadline``."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise RemotingTimeoutError(
                f"no answer from {self.address} to request code {request.code} in time"
            )
        try:
            size = self._poll(poll_until) if poll_until else None
            if size is None:
                self._bound(left)
                size = self._sock.recv_into(self._received)
        except (BlockingIOError, TimeoutError, ssl.SSLWantReadError):
            raise RemotingTimeoutError(
                f"no answer from {self.address} to request code {request.code} in time"
            ) from None
        except OSError as error:
            self.close()
            raise RemotingClosedError(f"the connection to {self.address} failed: {error}") from None
        if not size:
            self.close()
            raise RemotingClosedError(f"{self.address} closed the connection")
        try:
            return self._decoder.feed(bytes(self._received_view[:size]))
        except FrameError as error:
            self.close()
            raise RemotingClosedError(f"{self.address} sent a broken frame: {error}") from None

    def _poll(self, until: float) -> int | None:
        """Bytes read by looking at the socket without blocking until ``until``, offering the
        core (``sched_yield``) between looks; None when nothing came by then."""
        sock, received, yield_core, now = self._sock, self._received, os.sched_yield, time.monotonic
        while True:
            try:
                return sock.recv_into(received, 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                if now() >= until:
                    return None
                yield_core()

    def _bound(self, left: float) -> None:
        """Bound the next ``send`` and ``recv`` by about ``left`` seconds (at most 1 % and a
        millisecond more). The kernel's bound is changed only when it would run past that or is
        far shorter than needed: a send's budget is the same from one request to the next, so
        it is set about once a connection, not once a request."""
        if self._tls:
            self._sock.settimeout(left)
            return
        if left < self._io_bound * 0.99 - 0.001 or left > self._io_bound * 1.5 + 0.01:
            bound = _timeval(left)
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, bound)
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, bound)
            self._io_bound = left

    def _refuse(self, frame: RemotingCommand) -> None:
        """A request from the peer: a producer serves none (RocketMQ answers the same)."""
        if not frame.flag & FLAG_ONEWAY:
            self._write(
                frame.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark=" this end serves no requests")
            )


class ConnectionPool:
    """Idle connections per address, lent to one caller at a time; a caller that finds none
    opens one. Thread-safe. A connection that failed is closed, never returned."""

    def __init__(
        self,
        *,
        connect_timeout: float = 3.0,
        tls: ssl.SSLContext | None = None,
        credentials: SessionCredentials | None = None,
        max_idle_per_address: int = 64,
        busy_poll: BusyPollSetting = 0,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.busy_poll = busy_poll
        self.tls = tls
        self.credentials = credentials
        self.max_idle_per_address = max_idle_per_address
        self._idle: dict[str, list[BlockingConnection]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def invoke(self, address: str, request: RemotingCommand, timeout: float) -> RemotingCommand:
        connection = self._take(address)
        try:
            response = connection.invoke(request, timeout)
        except RemotingError:
            if connection.closed:
                raise
            self._give(connection)  # a timeout: the connection is sound
            raise
        except BaseException:
            connection.close()  # interrupted mid-request: the stream's state is unknown
            raise
        self._give(connection)
        return response

    def oneway(self, address: str, request: RemotingCommand) -> None:
        connection = self._take(address)
        try:
            connection.oneway(request)
        except BaseException:
            connection.close()
            raise
        self._give(connection)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()

    def idle_count(self, address: str) -> int:
        with self._lock:
            return len(self._idle.get(address, ()))

    def _take(self, address: str) -> BlockingConnection:
        with self._lock:
            if self._closed:
                raise RemotingClosedError("the client is closed")
            idle = self._idle.get(address)
            if idle:
                return idle.pop()
        return BlockingConnection(
            address, connect_timeout=self.connect_timeout, tls=self.tls, credentials=self.credentials,
            busy_poll=self.busy_poll,
        )  # fmt: skip

    def _give(self, connection: BlockingConnection) -> None:
        with self._lock:
            if not self._closed and not connection.closed:
                idle = self._idle.setdefault(connection.address, [])
                if len(idle) < self.max_idle_per_address:
                    idle.append(connection)
                    return
        connection.close()
