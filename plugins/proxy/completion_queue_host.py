"""grpcio's C-core server driven from trio: the gRPC stack without grpcio's Python server layer.

Why not ``grpc.aio`` (:mod:`.grpc_host`, the first host): its Python layer costs 125-150 µs of
a core per unary call before a handler runs, and reaching trio from its asyncio thread adds two
thread hand-overs a call (measured in docs/performance.md, "The gRPC proxy against remoting").
Both of grpcio's servers are built on the same Cython layer over C-core (``grpc._cython.cygrpc``:
a server, a completion queue, calls and batches of operations); this host uses that layer
directly. C-core still does everything a gRPC stack does (HTTP/2 and its flow control, TLS,
keepalive, deadlines, message size limits, compression); only the per-call Python changes: a
no-op unary call costs 27-36 µs of the server's core here instead of 150-170.

One thread, the poller, blocks in the completion queue's ``poll`` (which releases the GIL),
accepts new calls (asks C-core for the next, starts each call's first read), writes the
answers of server streams one after the other, and hands trio, in one ``run_sync_soon`` per
burst of events, only what trio must act on: calls with their request, reads a stream waits
for, calls a client gave up. Trio's thread does the rest: decoding, the handler, encoding,
the answer (C-core writes it to the socket from there). A call runs as a trio task. A
streaming call (a long-polling receive, Telemetry) reads its end from the start, so the
client cancelling it or its deadline passing cancels that task; a unary call reads its end
with its answer (one completion fewer per call), so its handler runs to its end, which the
proxy's bound by their own timeouts. Stopping the host stops accepting calls, cancels the
ones running (each answers UNAVAILABLE), then ends the thread.

``grpc._cython`` is grpcio's internal interface: the versions it is tested with are pinned in
``pyproject.toml`` and ``[proxy] grpc_server = "asyncio"`` switches back to the public one.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import grpc
import trio
from google.protobuf.message import DecodeError
from grpc._common import STATUS_CODE_TO_CYGRPC_STATUS_CODE
from grpc._cython import cygrpc

from plugins.proxy.grpc_host import (
    EXCLUSIVE_PORT,
    BidiStream,
    HostSettings,
    HostStopped,
    Method,
    RpcAbort,
    bind_failure,
)

log = logging.getLogger(__name__)

_NO_FLAGS = 0
_OK = cygrpc.StatusCode.ok
_COMPLETE = cygrpc.CompletionType.operation_complete
_QUEUE_SHUTDOWN = cygrpc.CompletionType.queue_shutdown
_NEW_CALL = "new call"
_UNIMPLEMENTED = STATUS_CODE_TO_CYGRPC_STATUS_CODE[grpc.StatusCode.UNIMPLEMENTED]
_UNAVAILABLE = STATUS_CODE_TO_CYGRPC_STATUS_CODE[grpc.StatusCode.UNAVAILABLE]
_SHUTDOWN = "shutdown"


class _Unwatched:
    """The tag of operations nobody waits for (a unary answer: C-core holds what it sends)."""

    @staticmethod
    def complete(event: Any) -> None:
        pass


_UNWATCHED = _Unwatched()


class _Waiter:
    """The tag of one batch a task waits for."""

    __slots__ = ("done", "event")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.event: Any = None

    def complete(self, event: Any) -> None:
        self.event = event
        self.done.set()


@attrs.define(eq=False)
class _CallState:
    """One call being served; also the tag of its receive-close operation, which completes
    when the call ends: cancelled (by the client, a deadline, or the host stopping) or
    answered."""

    call: Any
    close_in_answer: bool = False
    """A unary call's end is received with its answer: nothing of it is left to cancel before
    then but a short handler (streams and long polls watch for their end from the start)."""
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    initial_sent: bool = False
    finished: bool = False
    cancelled: bool = False

    def complete(self, event: Any) -> None:
        if event.batch_operations[0].cancelled():
            self.cancelled = True
            self.scope.cancel()

    def with_initial(self, operations: Sequence[Any]) -> tuple[Any, ...]:
        """``operations``, after the initial metadata if it has not gone yet."""
        if self.initial_sent:
            return tuple(operations)
        self.initial_sent = True
        return (cygrpc.SendInitialMetadataOperation(None, _NO_FLAGS), *operations)

    def last_batch(self, code: Any = _OK, details: str = "", message: bytes | None = None) -> tuple[Any, ...]:
        """The call's last operations: its last message if any, its status, and for a unary
        call the read of its end."""
        self.finished = True
        operations = [cygrpc.SendStatusFromServerOperation(None, code, details.encode(), _NO_FLAGS)]
        if message is not None:
            operations.insert(0, cygrpc.SendMessageOperation(message, _NO_FLAGS))
        if self.close_in_answer:
            operations.append(cygrpc.ReceiveCloseOnServerOperation(_NO_FLAGS))
        return self.with_initial(operations)

    def start(self, operations: Sequence[Any], tag: Any = _UNWATCHED) -> None:
        """Start a batch (trio's thread), the initial metadata first if it has not gone yet."""
        try:
            self.call.start_server_batch(self.with_initial(operations), tag)
        except ValueError:
            # C-core refuses operations on a call that has ended (cancelled meanwhile).
            self.cancelled = True
            self.scope.cancel()

    async def run(self, operations: Sequence[Any]) -> Any:
        waiter = _Waiter()
        self.start(operations, waiter)
        if self.cancelled:
            raise HostStopped("the call has ended")
        await waiter.done.wait()
        return waiter.event

    async def read(self) -> bytes | None:
        """The client's next message, ``None`` once it has sent its last."""
        event = await self.run((cygrpc.ReceiveMessageOperation(_NO_FLAGS),))
        return event.batch_operations[-1].message() if event.success else None

    def finish(self, code: Any = _OK, details: str = "", message: bytes | None = None) -> None:
        if self.finished or self.cancelled:
            return
        self.start(self.last_batch(code, details, message))


@attrs.define(eq=False)
class _StreamWriter:
    """A server stream's answers, written one after the other by the poller thread.

    C-core takes one message write of a call at a time, and each completes at once (the bytes
    go to the transport's buffer); waiting for each on trio's side cost a hand-over a message
    (33 for a receive of 32). Trio encodes them all and starts the first; the writer, as the
    tag of each write, starts the next from the poller as the previous completes, the last one
    with the call's status. A failed write (the client is gone) ends it."""

    state: _CallState
    pending: list[bytes]
    sent: int = 0

    def start_next(self) -> None:
        state = self.state
        message = self.pending[self.sent]
        self.sent += 1
        if self.sent == len(self.pending):
            # The call's last batch from the poller: trio is done with it (its task returned).
            operations, tag = state.last_batch(message=message), _UNWATCHED
        else:
            operations, tag = state.with_initial((cygrpc.SendMessageOperation(message, _NO_FLAGS),)), self
        try:
            state.call.start_server_batch(operations, tag)
        except ValueError:
            log.debug("gRPC: a stream's call ended while it was written", exc_info=True)

    def complete(self, event: Any) -> None:
        if event.success:
            self.start_next()


def _decoded(method: Method, data: bytes | None) -> Any:
    if data is None:
        raise RpcAbort(
            grpc.StatusCode.INVALID_ARGUMENT, f"{method.name}: the call carried no request message"
        )
    try:
        return method.request_type.FromString(data)
    except DecodeError as error:
        raise RpcAbort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{method.name}: not a {method.request_type.DESCRIPTOR.full_name}: {error}",
        ) from None


@attrs.frozen(eq=False)
class _Arrival:
    """The tag of a new call's first read, started by the poller as the call arrives (the
    client sent its request with the call, so both events usually come in one burst)."""

    state: _CallState
    method: bytes
    metadata: tuple[tuple[str, Any], ...]


@attrs.define(eq=False)
class _Poller:
    """The poller thread: block for an event, take every other one already there, hand trio
    the ones it must act on in one ``run_sync_soon`` (one wake-up of trio's loop for a burst).

    It accepts new calls itself (asks C-core for the next, starts the call's first read and,
    for a streaming method, the read of its end), and drops what needs nobody: completed
    answers, calls that ended normally, and writes a stream's answers itself
    (:class:`_StreamWriter`). So a unary call wakes trio once, with its request."""

    server: Any
    queue: Any
    token: trio.lowlevel.TrioToken
    deliver: Callable[[list[Any]], None]
    streaming: frozenset[bytes]
    """Paths of methods whose calls watch for their end from the start (a client may give up
    on a stream or a long poll at any time)."""
    stopping: bool = False

    def run(self) -> None:
        queue = self.queue
        while True:
            wanted: list[Any] = []
            event = queue.poll()
            while event.completion_type == _COMPLETE:
                try:
                    self._sort(event, wanted)
                except Exception:  # noqa: BLE001 - one bad event must not stop the gRPC port
                    log.exception("gRPC: an event could not be handled")
                event = queue.poll(0)
            if wanted:
                try:
                    self.token.run_sync_soon(self.deliver, wanted)
                except trio.RunFinishedError:
                    return
            if event.completion_type == _QUEUE_SHUTDOWN:
                return

    def _sort(self, event: Any, wanted: list[Any]) -> None:
        tag = event.tag
        if tag is _NEW_CALL:
            self._accept(event)
        elif tag is _UNWATCHED:
            pass
        elif type(tag) is _StreamWriter:
            tag.complete(event)
        elif type(tag) is _CallState and not event.batch_operations[0].cancelled():
            pass
        else:
            wanted.append(event)

    def _accept(self, event: Any) -> None:
        if self.stopping or not event.success:
            return
        try:
            self.server.request_call(self.queue, self.queue, _NEW_CALL)
        except Exception:  # noqa: BLE001 - the server is shutting down: no more calls wanted
            log.debug("gRPC: no further call requested", exc_info=True)
        call, path = event.call, event.call_details.method
        state = _CallState(call, close_in_answer=path not in self.streaming)
        try:
            if not state.close_in_answer:
                call.start_server_batch((cygrpc.ReceiveCloseOnServerOperation(_NO_FLAGS),), state)
            arrival = _Arrival(state, path, tuple(event.invocation_metadata))
            call.start_server_batch((cygrpc.ReceiveMessageOperation(_NO_FLAGS),), arrival)
        except ValueError:
            log.debug("gRPC: a call ended as it arrived", exc_info=True)


@attrs.define(eq=False)
class CompletionQueueHost(HostSettings):
    """See the module docstring; the same constructor and ``serve`` as :class:`.GrpcHost`."""

    waiting_requests: int = 32
    """Calls C-core may accept before the poller asks for more."""
    _nursery: trio.Nursery | None = attrs.field(default=None, init=False)
    _shut_down: trio.Event = attrs.field(factory=trio.Event, init=False)
    _trio_thread: int = attrs.field(default=0, init=False)
    _token: trio.lowlevel.TrioToken | None = attrs.field(default=None, init=False)
    _by_path: dict[bytes, Method] = attrs.field(factory=dict, init=False)

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; ``task_status`` gets the bound port.

        :raises OSError: the address cannot be bound (in use, not local).
        """
        self._by_path = {f"/{self.service_name}/{m.name}".encode(): m for m in self.methods}
        self._token = trio.lowlevel.current_trio_token()
        self._trio_thread = threading.get_ident()
        queue = cygrpc.CompletionQueue()
        server = cygrpc.Server((*EXCLUSIVE_PORT, *self.options), False)
        server.register_completion_queue(queue)
        address = self.address.encode()
        if self.credentials is None:
            port = server.add_http2_port(address)
        else:
            port = server.add_http2_port(address, self.credentials._credentials)
        if port == 0:
            raise bind_failure(self.address)
        server.start()
        self.port = port
        streaming = frozenset(
            path for path, m in self._by_path.items() if m.server_stream or isinstance(m.handler, BidiStream)
        )
        poller = _Poller(server, queue, self._token, self._deliver, streaming)
        thread = threading.Thread(target=poller.run, name=f"grpc {self.address}", daemon=True)
        thread.start()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for _ in range(self.waiting_requests):
                    server.request_call(queue, queue, _NEW_CALL)
                task_status.started(port)
                try:
                    await trio.sleep_forever()
                finally:
                    self._nursery = None
                    poller.stopping = True
                    server.shutdown(queue, _SHUTDOWN)
                    server.cancel_all_calls()
        finally:
            with trio.CancelScope(shield=True):
                with trio.move_on_after(self.grace + 5):
                    await self._shut_down.wait()
                server.destroy()
                queue.shutdown()
                await trio.to_thread.run_sync(thread.join, 5)

    def _deliver(self, events: list[Any]) -> None:
        """Trio's side of the poller: a task per call that has its request, a wake-up for what
        waits for a batch, a cancel for a call the client gave up."""
        for event in events:
            tag = event.tag
            try:
                if type(tag) is _Arrival:
                    if self._nursery is None:  # stopping: C-core cancels the call
                        continue
                    self._nursery.start_soon(self._serve_call, tag, event)
                elif tag is _SHUTDOWN:
                    self._shut_down.set()
                else:
                    tag.complete(event)
            except Exception:  # noqa: BLE001 - raising here would end trio's run, the broker
                log.exception("gRPC: an event could not be handled")

    async def _serve_call(self, arrival: _Arrival, event: Any) -> None:
        state = arrival.state
        first = event.batch_operations[0].message() if event.success else None
        method = self._by_path.get(arrival.method)
        if method is None:
            name = arrival.method.decode(errors="replace")
            state.finish(_UNIMPLEMENTED, f"no method {name}")
            return
        metadata = {key: value for key, value in arrival.metadata if isinstance(value, str)}
        peer = state.call.peer().decode(errors="replace")
        try:
            with state.scope:
                if isinstance(method.handler, BidiStream):
                    await self._bidi(method, method.handler, state, metadata, peer, first)
                else:
                    answer = await method.handler(_decoded(method, first), metadata, peer)
                    if method.server_stream:
                        self._stream(method, state, answer)
                    else:
                        state.finish(message=method.response_type.SerializeToString(answer))
        except trio.Cancelled:
            state.finish(_UNAVAILABLE, "the broker is stopping")
            raise
        except Exception as error:  # noqa: BLE001 - every failure becomes a gRPC status
            state.finish(*_status(error))

    @staticmethod
    def _stream(method: Method, state: _CallState, responses: list[Any]) -> None:
        encode = method.response_type.SerializeToString
        if len(responses) <= 1:
            state.finish(message=encode(responses[0]) if responses else None)
            return
        _StreamWriter(state, [encode(response) for response in responses]).start_next()

    async def _bidi(
        self,
        method: Method,
        stream: BidiStream,
        state: _CallState,
        metadata: dict[str, str],
        peer: str,
        first: bytes | None,
    ) -> None:
        outgoing, pending = trio.open_memory_channel[Any](math.inf)
        token = self._token
        assert token is not None

        def put(message: Any) -> None:
            try:
                outgoing.send_nowait(message)
            except trio.ClosedResourceError:
                pass  # the call is ending: nothing more goes out

        def push(message: Any) -> None:
            if threading.get_ident() == self._trio_thread:
                put(message)
            else:
                token.run_sync_soon(put, message)

        session = await stream.open(metadata, peer, push)
        failure: Exception | None = None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_all, method, state, pending)
                try:
                    data = first
                    while data is not None:
                        await stream.receive(session, _decoded(method, data))
                        data = await state.read()
                except Exception as error:  # noqa: BLE001 - raised below, outside the nursery's group
                    failure = error
                    nursery.cancel_scope.cancel()
                outgoing.close()  # the writer sends what was pushed before the client's end, then stops
        finally:
            with trio.CancelScope(shield=True):
                await stream.close(session)
        if failure is not None:
            raise failure
        state.finish()

    @staticmethod
    async def _write_all(method: Method, state: _CallState, pending: trio.MemoryReceiveChannel[Any]) -> None:
        encode = method.response_type.SerializeToString
        async for message in pending:
            await state.run((cygrpc.SendMessageOperation(encode(message), _NO_FLAGS),))


def _status(error: BaseException) -> tuple[Any, str]:
    if isinstance(error, RpcAbort):
        return STATUS_CODE_TO_CYGRPC_STATUS_CODE[error.code], error.message
    if isinstance(error, HostStopped):
        return _UNAVAILABLE, str(error)
    log.exception("gRPC handler failed", exc_info=error)
    return STATUS_CODE_TO_CYGRPC_STATUS_CODE[grpc.StatusCode.INTERNAL], f"{type(error).__name__}: {error}"
