"""One RocketMQ remoting connection, used by servers and clients alike.

Both ends of a connection may send requests (the broker sends ``NOTIFY_CONSUMER_IDS_CHANGED``
to a consumer), so a connection has one reader and one writer task and correlates responses
by ``opaque``. Performance rules from the design: read in large chunks and decode every
complete frame in the buffer; run request handlers concurrently up to ``max_in_flight``; the
writer joins every response that is ready into one ``send_all``.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
from collections.abc import Awaitable, Callable, Sequence
from time import perf_counter
from typing import Any

import attrs
import trio

from wire.errors import RemotingClosedError, RemotingTimeoutError
from wire.remoting.answer_reactor import AnswerReactor
from wire.remoting.busy_poll import BusyPoller
from wire.remoting.codes import RequestCode, ResponseCode, code_name
from wire.remoting.command import (
    DEFAULT_MAX_FRAME_SIZE,
    FLAG_ONEWAY,
    FrameDecoder,
    FrameError,
    RemotingCommand,
)
from wire.remoting.crowd import Crowd
from wire.remoting.metering import (
    NO_RESPONSE,
    OTHER_REQUEST,
    RESULT_CANCELLED,
    RESULT_FAILED,
    RESULT_ONEWAY,
    RESULT_SUCCESS,
    RequestMeter,
)
from wire.remoting.read_reactor import ReadReactor
from wire.remoting.receive_buffer import RECEIVE_CHUNK, read_available

log = logging.getLogger(__name__)

OWN_POLL_LIMIT = 1e-3
"""A server's read loop polls its socket (:meth:`Connection._poll_socket`) at most this long
after the connection's own last receive or send: five of the busy poller's base windows (a
server's windows never stretch), so a quiet connection soon stops costing a read a pass."""

OUTBOX_HIGH_WATER = 64 * 1024 * 1024
"""Handlers wait before queueing more once this many response bytes are unsent (a peer that
does not read cannot make the broker buffer without bound)."""
DIRECT_SEND_LIMIT = 60.0
"""Longest a task may spend writing a frame itself (see ``Connection._send``) when the
connection has no frame timeout."""
IOV_MAX = 1024
"""Most buffers one ``writev`` takes on Linux; the rest go in the next call."""
ONEWAY_DRAIN_LIMIT = 10.0
"""Longest a connection whose peer closed it waits for oneway requests it already read to be
handled before cancelling them (see ``Connection.run``)."""

Handler = Callable[["Connection", RemotingCommand], Awaitable[RemotingCommand | None]]
GroupHandler = Callable[
    ["Connection", Sequence[RemotingCommand]], Awaitable[Sequence[RemotingCommand | None]]
]
Guard = Callable[["Connection", RemotingCommand], "RemotingCommand | None"]
AcrossHandler = Callable[
    [Sequence[tuple["Connection", RemotingCommand]]], Awaitable[Sequence[RemotingCommand | None]]
]


@attrs.frozen
class TransportLimits:
    """Per-connection limits (and the server's connection cap)."""

    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    max_in_flight: int = 256
    """Requests of one connection handled concurrently (held long-polling pulls count)."""
    max_connections: int = 10000
    idle_timeout: float = math.inf
    """Seconds without a byte read or written (and no request in flight) after which the
    connection is closed: RocketMQ's ``serverChannelMaxIdleTimeSeconds`` (120 s on servers).
    Frees the buffers of peers that vanished without a FIN."""
    frame_timeout: float = math.inf
    """Seconds a frame may take to arrive once its first byte came: a peer that declares
    15 MiB and stalls, or sends half a header, cannot hold a connection and its buffer."""


@attrs.define(eq=False)
class Router:
    """Request code → handler. Unknown codes get ``REQUEST_CODE_NOT_SUPPORTED``; a handler
    that raises gets ``SYSTEM_ERROR`` with the error as remark, and the connection lives on."""

    handlers: dict[int, Handler] = attrs.field(factory=dict)
    name: str = "router"
    """A label for log lines and errors (the server it routes for)."""
    group_handlers: dict[int, GroupHandler] = attrs.field(factory=dict)
    """Handlers for several requests at once: consecutive requests read from one connection
    in one receive whose codes share a group handler are given to it together (a client with
    many sends in flight), one response each, in order. A lone request still goes to its
    ordinary handler."""
    guards: list[Guard] = attrs.field(factory=list)
    """Checks every request of a known code passes before its handler runs (ACL): a guard
    returns ``None`` to let it through or the refusal to answer instead; a refused request
    never reaches its handler. Synchronous and cheap: they run once per request."""
    meter: RequestMeter | None = None
    """Counts and times every request handled (``rocketmq_rpc_latency``), when set."""
    inline: set[int] = attrs.field(factory=set)
    """Codes whose handlers run in the connection's read loop instead of a task of their own
    (see :meth:`register`)."""
    inline_alone: set[int] = attrs.field(factory=set)
    """Codes whose handlers run in the read loop when their request is the only one of its
    receive (see :meth:`register`)."""
    inline_idle: set[int] = attrs.field(factory=set)
    """Codes whose handlers run in the read loop when their request is the only one of its
    receive and nothing else of the connection is in flight (see :meth:`register`)."""
    across_handlers: dict[int, AcrossHandler] = attrs.field(factory=dict)
    """Handlers for lone requests of different connections at once (see
    :meth:`register_across`)."""

    def register(
        self,
        code: int,
        handler: Handler,
        *,
        inline: bool = False,
        inline_alone: bool = False,
        inline_idle: bool = False,
    ) -> None:
        """Route ``code`` to ``handler``. ``inline``: the handler is cheap and never waits for
        anything but the CPU and the socket (no lock held elsewhere, no flush, no replica), so
        the read loop runs it itself (answers of one receive written together) and saves a
        task's start and schedule per request
        (``./run bench remoting`` measures both ways); requests behind it on the connection wait
        until it returns. ``inline_alone``: the same, but only for a request that arrived alone
        (one in flight): a handler that is cheap one at a time but whose answers must not wait
        for each other when many arrive together (a put: a pipelining producer is stalled when
        the first answer waits for the last append). ``inline_idle``: the same, but only while
        nothing else of the connection is in flight either: a handler that waits (a sync-flush
        put waits for its flush) but is the only work of its client, whose next request can
        only follow the answer; a task of its own cost such a put 30-40 µs of its 0.35 ms."""
        if code in self.handlers:
            raise ValueError(f"{self.name}: a handler for {code_name(code)} is already registered")
        self.handlers[code] = handler
        if inline:
            self.inline.add(code)
        if inline_alone:
            self.inline_alone.add(code)
        if inline_idle:
            self.inline_idle.add(code)

    def register_group(self, code: int, handler: GroupHandler) -> None:
        """Register ``handler`` for requests of ``code`` arriving together (``code`` also needs
        an ordinary handler for requests arriving alone)."""
        if code in self.group_handlers:
            raise ValueError(f"{self.name}: a group handler for {code_name(code)} is already registered")
        self.group_handlers[code] = handler

    def register_across(self, code: int, handler: AcrossHandler) -> None:
        """Register ``handler`` for lone requests of ``code`` read from different connections in
        one pass of a server's :class:`~wire.remoting.read_reactor.ReadReactor` (each a request
        alone in its receive, on a connection with nothing else in flight), one response each,
        in order. ``code`` also needs an ordinary handler (a pass with one such request takes
        :meth:`handle`). The reactor answers a pass itself, before it reads on, when every
        code of it is registered ``inline_alone`` (its handler never waits); else in a task of
        the pass's own, which it waits for at most ``WAIT_HOLD``."""
        if code in self.across_handlers:
            raise ValueError(f"{self.name}: an across handler for {code_name(code)} is already registered")
        self.across_handlers[code] = handler

    async def handle_across(
        self, lone: Sequence[tuple[Connection, RemotingCommand]]
    ) -> list[RemotingCommand | None]:
        """The answers to lone requests of several connections (see :meth:`register_across`):
        one alone takes :meth:`handle`; more pass the guards each and go to their handler
        together, grouped by handler."""
        if len(lone) == 1:
            connection, request = lone[0]
            return [await self.handle(connection, request)]
        started = perf_counter()
        answers: list[RemotingCommand | None] = [None] * len(lone)
        by_handler: dict[AcrossHandler, list[int]] = {}
        for index, (connection, request) in enumerate(lone):
            refused = self.refusal(connection, request) if self.guards else None
            if refused is not None:
                answers[index] = refused
            else:
                by_handler.setdefault(self.across_handlers[request.code], []).append(index)
        failed: set[int] = set()
        for handler, indexes in by_handler.items():
            try:
                responses = await handler([lone[index] for index in indexes])
            except trio.Cancelled:
                raise
            except Exception as error:  # one bad group must not take the connections down
                log.exception("%s: %d lone requests of as many connections failed", self.name, len(indexes))
                remark = f"{type(error).__name__}: {error}"
                responses = [
                    lone[index][1].response(ResponseCode.SYSTEM_ERROR, remark=remark) for index in indexes
                ]
                failed.update(indexes)
            if len(responses) != len(indexes):
                raise AssertionError(
                    f"{self.name}: an across handler answered {len(responses)} of {len(indexes)}"
                )
            for index, response in zip(indexes, responses, strict=True):
                answers[index] = response
        if self.meter is not None:
            elapsed = perf_counter() - started
            for index, ((_, request), response) in enumerate(zip(lone, answers, strict=True)):
                self._observe(request, response, elapsed, failed=index in failed)
        return answers

    def refusal(self, connection: Connection, request: RemotingCommand) -> RemotingCommand | None:
        """The first guard's refusal of ``request``, or ``None`` when every guard lets it through."""
        for guard in self.guards:
            refused = guard(connection, request)
            if refused is not None:
                return refused
        return None

    async def handle_group(
        self, connection: Connection, requests: Sequence[RemotingCommand]
    ) -> list[RemotingCommand | None]:
        if self.meter is None:
            return (await self._guarded_group(connection, requests))[0]
        started = perf_counter()
        try:
            responses, failed = await self._guarded_group(connection, requests)
        except trio.Cancelled:
            elapsed = perf_counter() - started
            for request in requests:
                self.meter.observe(request.code, NO_RESPONSE, RESULT_CANCELLED, elapsed)
            raise
        elapsed = perf_counter() - started
        for request, response in zip(requests, responses, strict=True):
            raised = failed and response is not None and response.code == ResponseCode.SYSTEM_ERROR
            self._observe(request, response, elapsed, failed=raised)
        return responses

    def _observe(
        self, request: RemotingCommand, response: RemotingCommand | None, elapsed: float, *, failed: bool
    ) -> None:
        assert self.meter is not None
        if failed:
            result = RESULT_FAILED
        elif request.is_oneway:
            result = RESULT_ONEWAY
        else:
            result = RESULT_SUCCESS
        code = NO_RESPONSE if response is None or request.is_oneway else response.code
        self.meter.observe(request.code, code, result, elapsed)

    async def _guarded_group(
        self, connection: Connection, requests: Sequence[RemotingCommand]
    ) -> tuple[list[RemotingCommand | None], bool]:
        """The answers to ``requests`` and whether the group handler raised."""
        if self.guards:
            refusals = [self.refusal(connection, request) for request in requests]
            if any(refused is not None for refused in refusals):
                allowed = [
                    request for request, refused in zip(requests, refusals, strict=True) if refused is None
                ]
                answered, failed = await self._handle_group(connection, allowed) if allowed else ([], False)
                answers = iter(answered)
                return [next(answers) if refused is None else refused for refused in refusals], failed
        return await self._handle_group(connection, requests)

    async def _handle_group(
        self, connection: Connection, requests: Sequence[RemotingCommand]
    ) -> tuple[list[RemotingCommand | None], bool]:
        handler = self.group_handlers[requests[0].code]
        try:
            responses = await handler(connection, requests)
        except trio.Cancelled:
            raise
        except Exception as error:  # one bad group must not take the connection down
            log.exception(
                "%s: a group of %d requests from %s failed", self.name, len(requests), connection.peer
            )
            remark = f"{type(error).__name__}: {error}"
            return [request.response(ResponseCode.SYSTEM_ERROR, remark=remark) for request in requests], True
        if len(responses) != len(requests):
            raise AssertionError(f"{self.name}: a group handler answered {len(responses)} of {len(requests)}")
        return list(responses), False

    async def handle(self, connection: Connection, request: RemotingCommand) -> RemotingCommand | None:
        meter = self.meter
        started = perf_counter() if meter is not None else 0.0
        handler = self.handlers.get(request.code)
        if handler is None:
            response = request.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark=f" request type {request.code} not supported"
            )
        elif self.guards and (refused := self.refusal(connection, request)) is not None:
            response = refused
        else:
            try:
                response = await handler(connection, request)
            except trio.Cancelled:
                if meter is not None:
                    meter.observe(request.code, NO_RESPONSE, RESULT_CANCELLED, perf_counter() - started)
                raise
            except Exception as error:  # one bad request must not take the connection down
                log.exception("%s: %s from %s failed", self.name, code_name(request.code), connection.peer)
                response = request.response(
                    ResponseCode.SYSTEM_ERROR, remark=f"{type(error).__name__}: {error}"
                )
                if meter is not None:
                    self._observe(request, response, perf_counter() - started, failed=True)
                return response
        if meter is not None:
            # _observe's rules, inlined: this runs on every request (1.4 µs against 1.7 µs with the call)
            metered = request.code if handler is not None else OTHER_REQUEST
            if request.flag & FLAG_ONEWAY or response is None:  # a handler may leave one unanswered
                result = RESULT_ONEWAY if request.flag & FLAG_ONEWAY else RESULT_SUCCESS
                meter.observe(metered, NO_RESPONSE, result, perf_counter() - started)
            else:
                meter.observe(metered, response.code, RESULT_SUCCESS, perf_counter() - started)
        return response


@attrs.define(eq=False)
class _Pending:
    """A request waiting for its response: its task parks in :meth:`wait` and is woken by the
    response, by the connection's close, or by the timeout sweep (:meth:`Connection._expire`).
    No cancel scope per request: entering and leaving one (registering its deadline) was a tenth
    of a client's CPU with 64 sends in flight."""

    deadline: float
    response: RemotingCommand | None = None
    finished: bool = False
    """Answered, failed or timed out: the requesting task goes on (or need not park)."""
    _task: trio.lowlevel.Task | None = None

    def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        if self._task is not None:
            task, self._task = self._task, None
            trio.lowlevel.reschedule(task)

    async def wait(self) -> None:
        """Until :meth:`finish` (at once when it already ran); cancellation ends the wait."""
        if self.finished:
            await trio.lowlevel.checkpoint()
            return
        self._task = trio.lowlevel.current_task()

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._task = None
            self.finished = True
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)


@attrs.define(eq=False)
class Connection:
    """A framed, bidirectional RocketMQ connection over a trio stream."""

    stream: trio.abc.Stream
    peer: str
    """``ip:port`` of the other end (the born host of messages it sends)."""
    router: Router | None = None
    limits: TransportLimits = TransportLimits()
    local: str = ""
    attributes: dict[str, Any] = attrs.field(factory=dict)
    """Per-connection state for handlers (a client id, a registered broker address)."""
    on_close: list[Callable[[Connection], None]] = attrs.field(factory=list)
    close_reason: str = ""
    busy_poller: BusyPoller | None = None
    """Told of every receive and every frame sent, when the process busy-polls."""
    crowd: Crowd | None = None
    """The peers this connection's loop serves or talks to: a server's connection reports each
    receive to its server's crowd, an adaptive client's to its run's clients' crowd."""
    crowd_peer: object = None
    """Whom this connection's receives count as in :attr:`crowd` (None: the connection itself,
    as a server's; a client's connections count as their client, so one producer talking to
    several brokers is one peer)."""
    reactor: ReadReactor | None = None
    """The server's reader of idle plain-TCP connections, when it has one: this connection's
    read loop waits in it instead of on its own socket (see :mod:`wire.remoting.read_reactor`)."""
    answer_reactor: AnswerReactor | None = None
    """A client's reader of its trio run's connections, when it has one: this connection's read
    loop waits in it instead of on its own socket, and the reactor hands answers straight to
    their requests (see :mod:`wire.remoting.answer_reactor`). With a busy poller only while it
    does not poll (a lone request reads its own answer then); never on a TLS stream."""
    _decoder: FrameDecoder = attrs.field(init=False)
    _fed: bytes | list[RemotingCommand] | OSError | None = attrs.field(default=None, init=False)
    """What the reactor handed the read loop (bytes read, frames decoded, a read's error)."""
    _fed_task: trio.lowlevel.Task | None = attrs.field(default=None, init=False)
    _lone_last: bool = attrs.field(default=True, init=False)
    """The last receive the read loop handled was one the reactor could have answered: the
    connection waits in the reactor next while the server is crowded (a pipelining client's
    connection reads its socket itself)."""
    _outbox: list[bytes] = attrs.field(factory=list, init=False)
    """Buffers of queued frames, in order (a frame may be several: see ``encode_parts``)."""
    _outbox_bytes: int = attrs.field(default=0, init=False)
    _written: trio.Event = attrs.field(factory=trio.Event, init=False)
    """Set after each completed write (and at close), for :meth:`flush`."""
    _wakeup: trio.Event = attrs.field(factory=trio.Event, init=False)
    _drained: trio.Event = attrs.field(factory=trio.Event, init=False)
    _writing: bool = attrs.field(default=False, init=False)
    """A ``send_all`` is in progress (the write loop's or a handler's, see :meth:`_respond`)."""
    _pending: dict[int, _Pending] = attrs.field(factory=dict, init=False)
    _sweep: trio.CancelScope | None = attrs.field(default=None, init=False)
    """The timeout sweep's sleep (see :meth:`_expire`): its deadline is the earliest pending
    request's, moved only when a request with an earlier one arrives."""
    _opaque: itertools.count[int] = attrs.field(factory=itertools.count, init=False)
    _closed: trio.Event = attrs.field(factory=trio.Event, init=False)
    _cancel: trio.CancelScope | None = attrs.field(default=None, init=False)
    _last_activity: float = attrs.field(factory=trio.current_time, init=False)
    _in_flight: int = attrs.field(default=0, init=False)
    _oneway_in_flight: int = attrs.field(default=0, init=False)
    _oneway_done: trio.Event = attrs.field(factory=trio.Event, init=False)
    _peer_finished: bool = attrs.field(default=False, init=False)
    """The peer closed its side in order (EOF): the oneway requests it sent are drained."""
    requests_handled: int = attrs.field(default=0, init=False)
    _fd: int = attrs.field(default=-1, init=False)
    """The socket's descriptor for :meth:`_write_now` when the stream is plain TCP, else -1."""
    _frame_started: float | None = attrs.field(default=None, init=False)
    """When the bytes of a frame not yet complete began to arrive (None: no partial frame)."""
    _read_watch: trio.CancelScope | None = attrs.field(default=None, init=False)
    """The sleep of :meth:`_watch_reads`, moved earlier when a partial frame starts."""
    reads_own_answers: bool = attrs.field(default=False, kw_only=True)
    """While the busy poller polls, requests' tasks read the socket themselves and the read
    loop steps aside (a client's connections; see :meth:`_poll_answer`). Off without a busy
    poller or on a TLS stream."""
    _socket_taken: bool = attrs.field(default=False, init=False)
    """A request's task reads the socket now; the read loop waits aside until it is given
    back (see :meth:`_poll_answer`)."""
    _socket_wait: trio.CancelScope | None = attrs.field(default=None, init=False)
    """The read loop's wait on the socket, while it waits there (cancelled to take it)."""
    _reader_aside: trio.lowlevel.Task | None = attrs.field(default=None, init=False)
    """The read loop, waiting aside while the socket is taken."""
    _back_when_cool: bool = attrs.field(default=False, init=False)
    """The busy poller gives the socket back when it stops polling (asked once a window)."""
    _requests_reading: int = attrs.field(default=0, init=False)
    """Requests' tasks polling the socket now (while none does, the poller's passes read it)."""
    answers_read_by_requests: int = attrs.field(default=0, init=False)
    """Receives a request's task read itself (see :meth:`_poll_answer`)."""
    polled_waits: int = attrs.field(default=0, init=False)
    """Waits of the read loop spent polling the socket while the busy poller polled (see
    :meth:`_poll_socket`)."""
    polled_reads: int = attrs.field(default=0, init=False)
    """Of those, the ones that read what came (the others ended with the poller's window, or
    the connection's own quiet: ``OWN_POLL_LIMIT``)."""
    polling_socket: bool = attrs.field(default=False, init=False)
    """Whether the read loop polls the socket now (see :meth:`_poll_socket`)."""
    _serving: tuple[trio.Nursery, trio.CapacityLimiter] | None = attrs.field(default=None, init=False)
    """Where the read loop starts the peer's requests (and a request's task reading the socket
    starts those it reads)."""

    def __attrs_post_init__(self) -> None:
        self._decoder = FrameDecoder(self.limits.max_frame_size)
        if type(self.stream) is trio.SocketStream:
            self._fd = self.stream.socket.fileno()
        else:
            self.reactor = None
        if self._fd < 0:
            self.answer_reactor = None
        if self._fd < 0 or self.busy_poller is None:
            # Only a polling loop's requests read the socket (a TLS stream is read by trio):
            # the read loop's wait needs no cancel scope then.
            self.reads_own_answers = False

    @property
    def requests_in_flight(self) -> int:
        """Requests of the peer's being handled now (the one asking included)."""
        return self._in_flight

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def run(self, *, task_status: trio.TaskStatus[Connection] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the connection until the peer closes it, a frame is malformed, or
        :meth:`close` is called. Handlers still running are cancelled then, except that a
        peer's orderly close first lets the oneway requests it sent before closing finish (a
        producer that sends oneway and exits at once expects them served, as RocketMQ's
        brokers do; requests with a response have nobody left to answer)."""
        try:
            with trio.CancelScope() as self._cancel:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._write_loop)
                    nursery.start_soon(self._expire)
                    # Set before any request of ours can be made: a request's task that reads
                    # the peer's requests starts them here too.
                    self._serving = (nursery, trio.CapacityLimiter(self.limits.max_in_flight))
                    task_status.started(self)
                    await self._read_loop(nursery)
                    if self._peer_finished:
                        await self._drain_oneway()
                    nursery.cancel_scope.cancel()
        finally:
            self._finish()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self.stream)

    async def _drain_oneway(self) -> None:
        with trio.move_on_after(ONEWAY_DRAIN_LIMIT) as waited:
            while self._oneway_in_flight:
                self._oneway_done = trio.Event()
                await self._oneway_done.wait()
        if waited.cancelled_caught:
            log.warning(
                "%s closed the connection; %d oneway requests it sent were still unhandled after %gs",
                self.peer,
                self._oneway_in_flight,
                ONEWAY_DRAIN_LIMIT,
            )

    async def flush(self, timeout: float) -> bool:
        """Wait until every queued frame was written (oneway requests included), at most
        ``timeout`` seconds; whether it was. Called before a deliberate close, so a oneway
        request sent just before (a transaction's end) is not dropped with the outbox."""
        with trio.move_on_after(timeout):
            while (self._outbox or self._writing) and not self.closed:
                self._written = trio.Event()
                await self._written.wait()
            return True
        return False

    def close(self, reason: str) -> None:
        """Close from any task; pending requests fail with :class:`RemotingClosedError`."""
        if not self.close_reason:
            self.close_reason = reason
        if self._cancel is not None:
            self._cancel.cancel()

    def _finish(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._fd = -1  # the stream closes next; its number may then name another socket
        self._written.set()
        for pending in self._pending.values():
            pending.finish()  # only marks and reschedules: the dict is left as it is
        for callback in self.on_close:
            try:
                callback(self)
            except Exception:  # a failing listener must not hide the others
                log.exception("on-close callback of %s failed", self.peer)

    def _read_deadline(self) -> float:
        """When the connection gives up on its peer: the frame deadline while a frame is partly
        read, else the idle deadline (none while requests are in flight: a held pull is not
        idle)."""
        limits = self.limits
        deadline = math.inf if self._in_flight else self._last_activity + limits.idle_timeout
        if self._frame_started is not None:
            deadline = min(deadline, self._frame_started + limits.frame_timeout)
        return deadline

    def _expired(self, decoder: FrameDecoder, now: float) -> str | None:
        """Why the connection gives up on its peer at ``now`` (:meth:`_read_deadline` passed),
        or None."""
        if now < self._read_deadline():
            return None
        started = self._frame_started
        if started is not None and now >= started + self.limits.frame_timeout:
            return (
                f"a frame did not complete within {self.limits.frame_timeout:g}s "
                f"({decoder.buffered} bytes of it received)"
            )
        return f"idle for {self.limits.idle_timeout:g}s (serverChannelMaxIdleTimeSeconds)"

    async def _watch_reads(self, decoder: FrameDecoder) -> None:
        """Close the connection once :meth:`_read_deadline` passes. One task per connection
        that sleeps until the deadline and looks again, instead of a deadline on every
        receive: a cancel scope with a deadline costs about 7 µs to enter and leave on this
        project's machines, paid on both ends of every round trip. While requests are in
        flight (no idle deadline) it looks once per idle timeout; a partial frame moves its
        sleep earlier (see :meth:`_frame_began`)."""
        while True:
            now = trio.current_time()
            expired = self._expired(decoder, now)
            if expired is not None:
                log.warning("closing connection from %s: %s", self.peer, expired)
                self.close(expired)
                return
            wake = min(self._read_deadline(), now + self.limits.idle_timeout)
            with trio.CancelScope(deadline=wake) as self._read_watch:
                await trio.sleep_forever()
            self._read_watch = None

    def _frame_began(self, now: float) -> None:
        """Bytes of a frame not yet complete arrived at ``now``: its deadline may come before
        the one :meth:`_watch_reads` sleeps until."""
        self._frame_started = now
        watch = self._read_watch
        deadline = now + self.limits.frame_timeout
        if watch is not None and deadline < watch.deadline:
            watch.deadline = deadline

    async def _read_loop(self, nursery: trio.Nursery) -> None:
        decoder = self._decoder
        assert self._serving is not None  # set by run() before the read loop starts
        limiter = self._serving[1]
        inline = self.router.inline if self.router is not None else set()
        inline_alone = self.router.inline_alone if self.router is not None else set()
        inline_idle = self.router.inline_idle if self.router is not None else set()
        nursery.start_soon(self._watch_reads, decoder)
        waited_last = True
        while True:
            try:
                if self._fd >= 0:
                    # Data can be there already only while something is outstanding: an answer
                    # we wait for, or a request of the peer's still being handled (the peer
                    # pipelines then). Otherwise the read would find nothing (one message in
                    # flight: the peer sends again only after our answer).
                    eager = bool(self._pending or self._in_flight)
                    reactor = self.reactor
                    answers = self.answer_reactor
                    if answers is not None and not self._socket_taken and not self._polling():
                        # The reactor reads the socket and hands answers to their requests:
                        # what comes here is the peer's requests or the stream's end. A request
                        # that polls for its answer takes the socket out of it (_take_socket).
                        parked = await self._park(answers)
                        if parked is None:
                            continue
                        data = parked
                        waited_last = True
                    elif (
                        reactor is not None
                        and not eager
                        and self._lone_last
                        and reactor.crowd.crowded(trio.current_time())
                    ):
                        data = await reactor.wait_data(self, self._fd)
                        waited_last = True
                    else:
                        data, waited_last = await self._receive_plain(waited_last, eager)
                else:
                    data = await self.stream.receive_some(RECEIVE_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
                self.close_reason = self.close_reason or f"receive failed: {error}"
                return
            if isinstance(data, bytes) and not data:
                self.close_reason = self.close_reason or "closed by peer"
                self._peer_finished = True
                return
            requests = self._received(data)
            if requests is None:
                return
            answers: list[bytes] = []
            if len(requests) == 1 and (
                requests[0].code in inline_alone or (requests[0].code in inline_idle and not self._in_flight)
            ):
                await self._serve_inline(requests[0], answers)
                requests = []
            for run in self._runs(requests):
                if len(run) == 1 and run[0].code in inline:
                    await self._serve_inline(run[0], answers)
                    continue
                tokens = []
                for _ in run:
                    token = object()
                    try:
                        limiter.acquire_on_behalf_of_nowait(token)  # no yield: the usual case
                    except trio.WouldBlock:
                        await limiter.acquire_on_behalf_of(token)
                    tokens.append(token)
                # Counted here, not when the task first runs: a task started just before the
                # peer's close must already count as in flight for the drain in ``run``.
                self._in_flight += len(run)
                self._oneway_in_flight += sum(request.is_oneway for request in run)
                if len(run) == 1:
                    nursery.start_soon(self._serve_request, run[0], limiter, tokens[0])
                else:
                    nursery.start_soon(self._serve_group, run, limiter, tokens)
            if answers:
                await self._send(answers)

    # --- the read reactor's side (see wire.remoting.read_reactor) ---------------------------

    async def fed(self) -> bytes | list[RemotingCommand]:
        """What the reactor hands this connection's read loop next: bytes read (b"" at the end
        of the stream) or frames it decoded.

        :raises OSError: the reactor's read failed.
        """
        while self._fed is None:
            self._fed_task = trio.lowlevel.current_task()

            def abort(_: Any) -> trio.lowlevel.Abort:
                self._fed_task = None
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)
        fed, self._fed = self._fed, None
        if isinstance(fed, OSError):
            raise fed
        return fed

    def _hand_over(self, fed: bytes | list[RemotingCommand] | OSError) -> None:
        self._fed = fed
        task, self._fed_task = self._fed_task, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    def feed_error(self, error: OSError) -> None:
        """The reactor's read of this socket failed."""
        self._hand_over(error)

    def _polling(self) -> bool:
        """Whether this connection's busy poller polls now (a request may read its own answer)."""
        poller = self.busy_poller
        return poller is not None and poller.polling

    async def _park(self, answers: AnswerReactor) -> bytes | list[RemotingCommand] | None:
        """Wait in the answer reactor; None when a request of ours took the socket meanwhile
        (its wait cancelled: the read loop then waits aside)."""
        if not self.reads_own_answers:
            return await answers.wait_data(self, self._fd)
        data = None
        with trio.CancelScope() as self._socket_wait:
            data = await answers.wait_data(self, self._fd)
        self._socket_wait = None
        return data

    def take_answers(self, data: bytes) -> bool:
        """Bytes the answer reactor read from this parked connection: True when they held only
        answers (given to their requests here; a partial frame stays in the decoder), False
        when the read loop takes over: the end of the stream (``b""``), the peer's requests
        (handed over decoded) or a malformed frame (the close reason set; handed over as an
        error, which ends the read loop)."""
        if not data:
            self._hand_over(data)
            return False
        requests = self._received(data)
        if requests is None:
            self._hand_over(OSError("malformed frame"))
            return False
        if requests:
            self._hand_over(requests)
            return False
        return True

    def take_receive(self, data: bytes) -> RemotingCommand | None:
        """Bytes the reactor read from this parked connection: the request it answers itself
        (a lone request of a code the router handles across connections, nothing else of the
        connection in flight, no bytes left over), or None when the read loop takes them (it
        is woken). A malformed frame closes the connection, as in the read loop."""
        router = self.router
        if not data or router is None or self._in_flight or self._pending or self._decoder.buffered:
            self._hand_over(data)
            return None
        crowd = self.crowd
        assert crowd is not None
        now = trio.current_time()
        crowd.saw(self, now)
        try:
            commands = self._decoder.feed(data)
        except FrameError as error:
            log.warning("closing connection from %s: malformed frame: %s", self.peer, error)
            self.close(f"malformed frame: {error}")  # cancels the parked read loop
            return None
        if len(commands) == 1 and not self._decoder.buffered and crowd.crowded(now):
            request = commands[0]
            if not request.is_response and request.code in router.across_handlers:
                self._last_activity = now
                if self.busy_poller is not None:
                    self.busy_poller.touch()
                return request
        # Anything else, or the crowd is gone: the read loop handles it and reads its own
        # socket again.
        self._hand_over(commands)
        return None

    def began_lone(self) -> None:
        """The reactor handles a lone request of this connection (it counts as in flight)."""
        self._in_flight += 1

    def ended_lone(self) -> None:
        self._in_flight -= 1
        self.requests_handled += 1

    def answer_now(self, parts: list[bytes]) -> None:
        """Write an answer the reactor built, without waiting: what the socket does not take
        at once (or all of it, behind frames already queued) goes to the write loop."""
        if self.busy_poller is not None:
            self.busy_poller.touch("request")
        if self.closed:
            return
        if self._writing or self._outbox:
            self._enqueue(parts)
            return
        try:
            rest = self._write_now(parts)
        except OSError as error:
            self.close(f"send failed: {error}")
            return
        if rest:
            self._enqueue(rest)
        self._written.set()
        self._last_activity = trio.current_time()

    async def _receive_plain(self, waited_last: bool, eager: bool) -> tuple[bytes, bool]:
        """The next bytes of a plain TCP socket, and whether they had to be waited for.

        Read with :func:`read_available` when the socket holds data, else after trio's ``wait_readable``:
        trio's ``receive_some`` costs a scheduler pass after every read even when the data
        was there, and the read after a wake-up is the single-message round trip's critical
        path on both ends. Two reads in a row that found data without waiting yield once in
        between, so a peer that keeps the socket full cannot starve the other tasks.
        ``eager=False``: the caller expects nothing yet, so the read that would fail (a
        syscall and an exception, on both ends of every single-message round trip) is
        skipped and the wait comes first: in the busy poller's passes while it polls (a
        server's connections, :meth:`_poll_socket`), else in trio's epoll.
        """
        if eager:
            if not waited_last:
                await trio.lowlevel.checkpoint()
            if not self._socket_taken:
                try:
                    return read_available(self._fd), False
                except BlockingIOError:
                    pass
        poller = self.busy_poller
        if poller is not None and not self.reads_own_answers and poller.polling:
            polled = await self._poll_socket(poller)
            if polled is not None:
                return polled, True
        while True:
            if self._socket_taken:
                await self._wait_aside()
                continue
            if self.reads_own_answers:
                with trio.CancelScope() as self._socket_wait:
                    await trio.lowlevel.wait_readable(self._fd)
                self._socket_wait = None
            else:
                await trio.lowlevel.wait_readable(self._fd)
            try:
                return read_available(self._fd), True
            except BlockingIOError:
                continue  # woken without data (a request's task read it first): wait again

    async def _poll_socket(self, poller: BusyPoller) -> bytes | None:
        """What the socket brings while the busy poller polls, read here with a non-blocking
        read in each of its passes; None once the poller stops (the caller waits in trio's
        epoll then) or the connection ends.

        Why: a server's read loop waiting in ``wait_readable`` is woken through trio's epoll
        (the event found in a pass, the task rescheduled into the next one) and re-arms the
        socket (an ``epoll_ctl``) for every wait: on a one-message-in-flight round trip the
        broker spends that on every request, though the poller spins through the same passes
        anyway. Polled here, the request is read in the pass it arrived in and nothing is
        re-armed (docs/performance.md, twenty-seventh step). A client's connections do the
        same from the requesting task (:meth:`_poll_answer`). Several peers sending make the
        poller stop (its crowd rule), so a busy server waits in epoll as before; a connection
        quiet for ``OWN_POLL_LIMIT`` (or the poller's longer fixed window) goes back to epoll
        while another keeps the poller busy (a broker's idle consumers must not each cost a
        read in every pass of one producer's round trips)."""
        fd = self._fd
        quiet_limit = max(OWN_POLL_LIMIT, poller.window)
        self.polled_waits += 1
        self.polling_socket = True
        try:
            while poller.polling and self._fd == fd:
                try:
                    data = read_available(fd)
                except BlockingIOError:
                    if trio.current_time() - self._last_activity > quiet_limit:
                        return None
                    await trio.lowlevel.checkpoint()
                    continue
                self.polled_reads += 1
                return data
            return None
        finally:
            self.polling_socket = False

    def _received(self, data: bytes | list[RemotingCommand]) -> list[RemotingCommand] | None:
        """Take what a receive brought (bytes read, or the frames the server's reactor
        decoded): answers go to the requests waiting for them; the peer's requests are
        returned for the caller to serve. None for a malformed frame (the close reason set:
        the caller ends the connection)."""
        self._last_activity = now = trio.current_time()
        if self.crowd is not None and not isinstance(data, list):  # a list: the reactor told
            peer = self.crowd_peer
            self.crowd.saw(self if peer is None else peer, now)
        if self.busy_poller is not None:
            self.busy_poller.touch()
        decoder = self._decoder
        try:
            commands = data if isinstance(data, list) else decoder.feed(data)
        except FrameError as error:
            self.close_reason = f"malformed frame: {error}"
            log.warning("closing connection from %s: malformed frame: %s", self.peer, error)
            return None
        if not decoder.buffered:
            self._frame_started = None
        elif commands or self._frame_started is None:
            self._frame_began(now)  # the bytes left over begin the next frame
        requests = []
        for command in commands:
            if command.is_response:
                pending = self._pending.pop(command.opaque, None)
                if pending is not None and not pending.finished:
                    pending.response = command
                    pending.finish()
            else:
                requests.append(command)
        if self.reactor is not None:
            across = self.router.across_handlers  # type: ignore[union-attr]
            self._lone_last = len(commands) == 1 and len(requests) == 1 and requests[0].code in across
        return requests

    async def _wait_aside(self) -> None:
        """Wait while requests' tasks read the socket (until :meth:`_give_socket_back`)."""
        while self._socket_taken:
            self._reader_aside = trio.lowlevel.current_task()

            def abort(_: Any) -> trio.lowlevel.Abort:
                self._reader_aside = None
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)

    def _take_socket(self, poller: BusyPoller) -> None:
        self._socket_taken = True
        if self._socket_wait is not None:
            self._socket_wait.cancel()
        poller.on_each_pass(self._read_between_requests)
        if not self._back_when_cool:
            self._back_when_cool = True
            poller.when_cool(self._cooled)

    def _read_between_requests(self) -> None:
        """A pass of the busy poller while the socket is taken and no request's task reads it:
        whatever the peer sent meanwhile (a request of its own, a late answer, the end of the
        stream) is taken now, not when the poller stops."""
        if self._requests_reading or not self._socket_taken:
            return
        requests = self._read_taken_socket()
        if requests:
            assert self._serving is not None  # set by run() before any request of ours
            self._serving[0].start_soon(self._serve_each, requests)

    def _read_taken_socket(self) -> list[RemotingCommand] | None:
        """One read of the socket while it is taken: the peer's requests it brought (answers
        went to their requests), or None when it held nothing. The end of the stream or a read
        error gives the socket back (the read loop meets it and closes); a malformed frame
        closes the connection."""
        try:
            data = read_available(self._fd)
        except BlockingIOError:
            return None
        except OSError:
            self._give_socket_back()
            return None
        if not data:
            self._give_socket_back()
            return None
        requests = self._received(data)
        if requests is None:
            self._give_socket_back()
            self.close(self.close_reason)
        return requests

    def _cooled(self) -> None:
        self._back_when_cool = False
        self._give_socket_back()

    def _give_socket_back(self) -> None:
        if not self._socket_taken:
            return
        self._socket_taken = False
        if self.busy_poller is not None:
            self.busy_poller.off_each_pass(self._read_between_requests)
        task, self._reader_aside = self._reader_aside, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    async def _poll_answer(self, pending: _Pending, poller: BusyPoller) -> bool:
        """Read the socket from the requesting task until ``pending`` is answered, while the
        busy poller polls and nothing else of ours waits for an answer here.

        Why: the read loop's hand-over cost a one-in-flight send the read loop's wake-up and
        step, trio's re-arming of epoll for its next wait, and a scheduler batch before the
        requesting task ran again (17-19 µs of the SDK's 85 a send; this path saves 4-10 µs
        of them, docs/performance.md, twenty-fifth step). Here the requesting task polls the
        socket itself (a read that finds nothing and a checkpoint, in the passes the busy
        poller spins anyway) and goes on in the step that read its answer. The read loop
        steps aside for it (its wait on the socket is cancelled, so trio's epoll no longer
        watches the socket) until the socket is given back: when the poller stops polling,
        when other requests of ours wait for answers (the read loop reads for many), when the
        answer did not come (a timeout, a cancelled request), or when a read found the end of
        the stream or an error (the read loop meets it and closes). Between requests the
        poller's passes read the socket (:meth:`_read_between_requests`). The peer's own
        requests read here are served as the read loop serves them, each in a task of its
        own. Returns whether it checkpointed (the caller need not, once answered)."""
        if not self._socket_taken:
            self._take_socket(poller)
        fd = self._fd
        self._requests_reading += 1
        checkpointed = False
        try:
            while not pending.finished:
                if not self._socket_taken or self._fd != fd or not poller.polling:
                    return checkpointed
                requests = self._read_taken_socket()
                if requests is None:
                    # Nothing yet (or the socket went back). The busy poller, polling in the
                    # same passes, offers the core each pass.
                    await trio.lowlevel.checkpoint()
                    checkpointed = True
                    continue
                self.answers_read_by_requests += 1
                if requests:
                    with trio.CancelScope(shield=True):  # read off the socket: never dropped
                        await self._serve_each(requests)
        finally:
            self._requests_reading -= 1
            if self._pending or not poller.polling or not pending.finished:
                self._give_socket_back()
        return checkpointed

    async def _serve_each(self, requests: list[RemotingCommand]) -> None:
        """Start the peer's requests a request's task read, each in a task of its own in the
        read loop's nursery (as the read loop starts those it does not serve inline)."""
        assert self._serving is not None  # set by run() before any request of ours
        nursery, limiter = self._serving
        for request in requests:
            token = object()
            await limiter.acquire_on_behalf_of(token)
            self._in_flight += 1
            self._oneway_in_flight += int(request.is_oneway)
            nursery.start_soon(self._serve_request, request, limiter, token)

    async def _serve_inline(self, request: RemotingCommand, answers: list[bytes]) -> None:
        """Handle ``request`` in the read loop (its code is registered inline); its response
        joins ``answers``, which the read loop writes in one go once every request of the
        receive was handled."""
        assert self.router is not None
        self._in_flight += 1
        try:
            response = await self.router.handle(self, request)
        finally:
            self._in_flight -= 1
        self.requests_handled += 1
        if response is not None and not request.is_oneway:
            answers += response.encode_parts()

    def _runs(self, requests: list[RemotingCommand]) -> list[list[RemotingCommand]]:
        """``requests`` in order, consecutive ones sharing a group handler kept together, at
        most ``max_in_flight`` to a run: a run is started once it holds a token per request,
        so a longer one could never start and would stall the connection for good."""
        groups = self.router.group_handlers if self.router is not None else {}
        if len(requests) < 2 or not groups:
            return [[request] for request in requests]
        longest = self.limits.max_in_flight
        runs: list[list[RemotingCommand]] = []
        previous = None
        for request in requests:
            handler = groups.get(request.code)
            if handler is not None and handler is previous and len(runs[-1]) < longest:
                runs[-1].append(request)
            else:
                runs.append([request])
            previous = handler
        return runs

    async def _serve_group(
        self, requests: list[RemotingCommand], limiter: trio.CapacityLimiter, tokens: list[object]
    ) -> None:
        oneway = sum(request.is_oneway for request in requests)
        try:
            assert self.router is not None
            responses = await self.router.handle_group(self, requests)
            self.requests_handled += len(requests)
            parts = [
                part
                for request, response in zip(requests, responses, strict=True)
                if response is not None and not request.is_oneway
                for part in response.encode_parts()
            ]
            if parts:
                await self._send(parts)
        finally:
            self._in_flight -= len(requests)
            self._oneway_finished(oneway)
            self._last_activity = trio.current_time()
            for token in tokens:
                limiter.release_on_behalf_of(token)

    async def _serve_request(
        self, request: RemotingCommand, limiter: trio.CapacityLimiter, token: object
    ) -> None:
        oneway = int(request.is_oneway)
        try:
            if self.router is None:
                response: RemotingCommand | None = request.response(
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark=" this end serves no requests"
                )
            else:
                response = await self.router.handle(self, request)
            self.requests_handled += 1
            if response is not None and not request.is_oneway:
                await self._send(response.encode_parts())
        finally:
            self._in_flight -= 1
            self._oneway_finished(oneway)
            self._last_activity = trio.current_time()
            limiter.release_on_behalf_of(token)

    def _oneway_finished(self, count: int) -> None:
        if count:
            self._oneway_in_flight -= count
            if not self._oneway_in_flight:
                self._oneway_done.set()

    async def _send(self, parts: list[bytes], *, answer_due: bool = False) -> None:
        """Send frames (``parts``: their buffers in order). When nothing else is being written
        (an idle connection: one request in flight) the calling task writes them itself, which
        saves the round trip a wake-up of the write loop and a task switch on each side;
        otherwise they join the outbox, which the write loop sends coalesced. The direct write
        is shielded from the caller's cancellation (a frame cut short would corrupt the stream)
        and bounded by the frame timeout instead: a peer that does not read for that long
        loses the connection."""
        if self.busy_poller is not None:
            # After a request: its answer may follow soon; after an answer: the peer's next request.
            self.busy_poller.touch("answer" if answer_due else "request")
        if self._writing or self._outbox or self.closed:
            await self._wait_writable()
            self._enqueue(parts)
            return
        self._writing = True
        try:
            rest = self._write_now(parts)
            if rest:
                limit = min(self.limits.frame_timeout, DIRECT_SEND_LIMIT)
                with trio.CancelScope(shield=True, deadline=trio.current_time() + limit) as scope:
                    await self._write_rest(rest)
                if scope.cancelled_caught:
                    self.close(f"a frame could not be sent within {limit:g}s (the peer does not read)")
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError) as error:
            self.close(f"send failed: {error}")
        finally:
            self._writing = False
            self._written.set()
            if self._outbox:
                self._wakeup.set()
        self._last_activity = trio.current_time()

    def _write_now(self, parts: list[bytes]) -> list[bytes]:
        """Write what the socket takes at once, without trio; what is left for
        :meth:`_write_rest` (all of it for a TLS stream or a full socket buffer), empty when
        nothing is. A frame usually fits the socket buffer whole; trio's ``send_all`` costs
        two scheduler passes and a cancel scope even then, about a quarter of the broker's
        time per single-message round trip. Several buffers go in one ``writev``, not joined
        first (a pull's answers are megabytes).

        :raises OSError: the peer is gone (the caller closes the connection).
        """
        if self._fd < 0:
            return parts
        try:
            sent = os.write(self._fd, parts[0]) if len(parts) == 1 else os.writev(self._fd, parts[:IOV_MAX])
        except BlockingIOError:
            return parts
        return _unsent(parts, sent)

    async def _write_rest(self, rest: list[bytes]) -> None:
        """Write ``rest`` entirely, waiting for the socket to take it."""
        if self._fd < 0:
            await self.stream.send_all(rest[0] if len(rest) == 1 else b"".join(rest))
            return
        while rest:
            if self._fd < 0:
                raise trio.ClosedResourceError("the connection closed while writing")
            await trio.lowlevel.wait_writable(self._fd)
            rest = self._write_now(rest)

    async def _wait_writable(self) -> None:
        while self._outbox_bytes > OUTBOX_HIGH_WATER and not self.closed:
            await self._drained.wait()

    def _enqueue(self, parts: list[bytes]) -> None:
        if self.closed:
            return
        self._outbox += parts
        self._outbox_bytes += sum(map(len, parts))
        self._wakeup.set()

    async def _write_loop(self) -> None:
        while True:
            if not self._outbox or self._writing:
                self._wakeup = trio.Event()
                await self._wakeup.wait()
                continue
            chunks, self._outbox = self._outbox, []
            self._outbox_bytes = 0
            self._drained.set()
            self._drained = trio.Event()
            self._writing = True
            try:
                rest = self._write_now(chunks)
                if rest:
                    await self._write_rest(rest)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
                self.close(f"send failed: {error}")
                return
            finally:
                self._writing = False
                self._written.set()
            self._last_activity = trio.current_time()

    # --- requests from this end -------------------------------------------------------------

    async def request(self, command: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for its response.

        :raises RemotingTimeoutError: no response within ``timeout`` seconds.
        :raises RemotingClosedError: the connection closed first.
        """
        if self.closed:
            raise RemotingClosedError(f"connection to {self.peer} is closed ({self.close_reason})")
        command.opaque = next(self._opaque) & 0x7FFFFFFF
        command.flag = 0
        pending = _Pending(trio.current_time() + timeout)
        self._pending[command.opaque] = pending
        sweep = self._sweep
        if sweep is not None and pending.deadline < sweep.deadline:
            sweep.deadline = pending.deadline  # rare: requests mostly share one timeout
        try:
            await self._send(command.encode_parts(), answer_due=True)
            poller = self.busy_poller
            checkpointed = False
            if (
                self.reads_own_answers
                and poller is not None
                and len(self._pending) == 1
                and self._fd >= 0
                and poller.polling
            ):
                checkpointed = await self._poll_answer(pending, poller)
            if not (checkpointed and pending.finished):
                # A request read in the poller's passes has checkpointed there already: one more
                # pass only to go on (an event loop's whole pass a send) is not taken.
                await pending.wait()
        finally:
            self._pending.pop(command.opaque, None)
            pending.finished = True
        if pending.response is not None:
            return pending.response
        if self.closed:
            raise RemotingClosedError(
                f"connection to {self.peer} closed before {code_name(command.code)} was answered "
                f"({self.close_reason})"
            )
        raise RemotingTimeoutError(
            f"{code_name(command.code)} to {self.peer}: no response within {timeout:g}s"
        )

    async def _expire(self) -> None:
        """Finish pending requests whose deadline passed (they raise RemotingTimeoutError):
        one sleep until the earliest deadline, instead of a cancel scope per request."""
        while True:
            now = trio.current_time()
            earliest = math.inf
            for pending in list(self._pending.values()):
                if pending.finished:
                    continue
                if pending.deadline <= now:
                    pending.finish()
                else:
                    earliest = min(earliest, pending.deadline)
            with trio.CancelScope(deadline=earliest) as self._sweep:
                await trio.sleep_forever()
            self._sweep = None

    def send_oneway(self, command: RemotingCommand) -> None:
        """Queue a request that expects no response (flag ``ONEWAY``)."""
        command.opaque = next(self._opaque) & 0x7FFFFFFF
        command.flag = FLAG_ONEWAY
        self._enqueue(command.encode_parts())


def _unsent(parts: list[bytes], sent: int) -> list[bytes]:
    """What of ``parts`` is left after the first ``sent`` bytes were written."""
    for index, part in enumerate(parts):
        if sent < len(part):
            if not sent:
                return parts[index:]
            return [memoryview(part)[sent:], *parts[index + 1 :]]  # type: ignore[list-item]
        sent -= len(part)
    return []


__all__ = ["Connection", "Guard", "Handler", "RequestCode", "Router", "TransportLimits"]
