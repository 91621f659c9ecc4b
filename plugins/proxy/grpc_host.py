"""grpcio's public asyncio server beside trio (``[proxy] grpc_server = "asyncio"``): the C-core
gRPC stack on an asyncio loop in its own thread, every RPC answered by a trio function in the
broker's loop. The default host is :mod:`.completion_queue_host` (fewer hand-overs, less Python
per call); this one stays for a grpcio whose internal layer that host uses has moved. The
method types and errors here are shared by both.

grpcio is the reference gRPC implementation (HTTP/2 flow control, keepalive, TLS, GOAWAY), and
its asyncio API is the only way to hold thousands of long-polling receives without a thread
each. Trio stays the owner of everything else: an RPC arrives on the asyncio thread, is handed
to the trio loop with ``TrioToken.run_sync_soon`` (non-blocking), runs there as a task, and
its answer comes back with ``loop.call_soon_threadsafe``. A call the client cancels (or whose
deadline passes) cancels its trio task; stopping the host stops grpcio with a grace period,
then the thread.

The asyncio side only moves protobuf objects; it never touches broker state.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import grpc
import trio

log = logging.getLogger(__name__)

EXCLUSIVE_PORT = [("grpc.so_reuseport", 0)]
"""grpcio binds with ``SO_REUSEPORT`` unless told not to: a second broker or proxy on the same
port would then start without an error and take half the connections. Both hosts bind alone."""

BIDI_DRAIN_TIMEOUT = 5.0
"""Seconds a bidirectional call whose client ended its side may take to write what was pushed."""

Metadata = Mapping[str, str]
Unary = Callable[[Any, Metadata, str], Awaitable[Any]]
"""``(request, metadata, peer) -> response``, run in trio."""
ServerStream = Callable[[Any, Metadata, str], Awaitable[list[Any]]]
"""``(request, metadata, peer) -> responses``, run in trio; the host writes them in order."""


def bind_failure(address: str) -> OSError:
    """The error for an address grpcio could not listen on, with the system's reason: grpcio
    only logs it, so the same bind is tried once more here to learn its errno (the CLI turns
    EADDRINUSE and EADDRNOTAVAIL into one clear line)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, int(port)))
    except (OSError, ValueError) as error:
        code = error.errno if isinstance(error, OSError) else None
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        return OSError(code, f"gRPC cannot listen on {address}: {reason}")
    return OSError(f"gRPC cannot listen on {address} (in use, or not an address of this host)")


class RpcAbort(Exception):
    """Raised by a trio handler to end the call with a gRPC status (not a RocketMQ one)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class HostStopped(Exception):
    """The trio side is gone: the call cannot be answered."""


@attrs.frozen
class BidiStream:
    """A client- and server-streaming method (Telemetry): ``open`` runs in trio once per call
    with a ``send`` that writes a message to the client from any thread and returns a handler
    for each message the client sends; ``close`` runs when the call ends."""

    open: Callable[[Metadata, str, Callable[[Any], None]], Awaitable[Any]]
    receive: Callable[[Any, Any], Awaitable[None]]
    close: Callable[[Any], Awaitable[None]]


@attrs.frozen
class Method:
    name: str
    request_type: Any
    response_type: Any
    handler: Unary | ServerStream | BidiStream
    server_stream: bool = False


@attrs.define(eq=False)
class TrioBridge:
    """Runs trio functions for asyncio callers (see the module docstring)."""

    token: trio.lowlevel.TrioToken
    nursery: trio.Nursery

    async def call(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        scope_box: list[trio.CancelScope] = []

        def settle(ok: bool, value: Any) -> None:
            if not future.done():
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)

        async def run() -> None:
            with trio.CancelScope() as scope:
                scope_box.append(scope)
                try:
                    result = await fn(*args)
                except trio.Cancelled:
                    loop.call_soon_threadsafe(settle, False, HostStopped("the call was cancelled"))
                    raise
                except Exception as error:  # noqa: BLE001 - handed to the caller's thread
                    loop.call_soon_threadsafe(settle, False, error)
                else:
                    loop.call_soon_threadsafe(settle, True, result)

        try:
            self.token.run_sync_soon(self.nursery.start_soon, run)
        except trio.RunFinishedError:
            raise HostStopped("the broker is stopping") from None
        try:
            return await future
        except asyncio.CancelledError:
            if scope_box:
                try:
                    self.token.run_sync_soon(scope_box[0].cancel)
                except trio.RunFinishedError:
                    pass
            raise


def _metadata(context: grpc.aio.ServicerContext) -> dict[str, str]:
    return {key: value for key, value in (context.invocation_metadata() or ()) if isinstance(value, str)}


@attrs.define(eq=False)
class HostSettings:
    """What both hosts are built from (the service's methods, where to listen, grpcio's
    options, TLS), so the proxy picks one by ``[proxy] grpc_server`` alone."""

    service_name: str
    methods: list[Method]
    address: str
    options: list[tuple[str, Any]] = attrs.field(factory=list)
    credentials: grpc.ServerCredentials | None = None
    grace: float = 2.0
    port: int = 0
    """The bound port, once serving."""


@attrs.define(eq=False)
class GrpcHost(HostSettings):
    """See the module docstring."""

    _loop: asyncio.AbstractEventLoop | None = attrs.field(default=None, init=False)
    _stop: asyncio.Event | None = attrs.field(default=None, init=False)
    _thread: threading.Thread | None = attrs.field(default=None, init=False)

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; ``task_status`` gets the bound port.

        :raises OSError: the address cannot be bound (in use, not local).
        """
        token = trio.lowlevel.current_trio_token()
        started = trio.Event()
        outcome: list[BaseException | int] = []
        async with trio.open_nursery() as nursery:
            bridge = TrioBridge(token, nursery)

            def report(value: BaseException | int) -> None:
                outcome.append(value)
                try:
                    token.run_sync_soon(started.set)
                except trio.RunFinishedError:
                    pass

            self._thread = threading.Thread(
                target=self._thread_main, args=(bridge, report), name=f"grpc {self.address}", daemon=True
            )
            self._thread.start()
            try:
                await started.wait()
                if not isinstance(outcome[0], BaseException):
                    self.port = outcome[0]
                    task_status.started(self.port)
                    await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True):
                    await self._shutdown()
                nursery.cancel_scope.cancel()
        if isinstance(outcome[0], BaseException):
            raise outcome[0]  # outside the nursery: the caller gets the error itself, not a group

    async def _shutdown(self) -> None:
        loop, stop, thread = self._loop, self._stop, self._thread
        if loop is not None and stop is not None:
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:
                pass  # the loop ended already
        if thread is not None:
            await trio.to_thread.run_sync(thread.join, self.grace + 5)

    def _thread_main(self, bridge: TrioBridge, report: Callable[[BaseException | int], None]) -> None:
        try:
            asyncio.run(self._main(bridge, report))
        except BaseException as error:  # noqa: BLE001 - reported to trio, which raises it
            report(error)

    async def _main(self, bridge: TrioBridge, report: Callable[[BaseException | int], None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = grpc.aio.server(options=[*EXCLUSIVE_PORT, *self.options])
        handlers = {method.name: self._handler(method, bridge) for method in self.methods}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(self.service_name, handlers),))
        try:
            if self.credentials is None:
                port = server.add_insecure_port(self.address)
            else:
                port = server.add_secure_port(self.address, self.credentials)
        except RuntimeError:  # grpcio >= 1.60 raises where older ones returned 0
            port = 0
        if port == 0:
            raise bind_failure(self.address)
        await server.start()
        report(port)
        await self._stop.wait()
        await server.stop(self.grace)

    def _handler(self, method: Method, bridge: TrioBridge) -> grpc.RpcMethodHandler:
        decode, encode = method.request_type.FromString, method.response_type.SerializeToString
        handler = method.handler
        if isinstance(handler, BidiStream):
            return grpc.stream_stream_rpc_method_handler(
                _bidi(handler, bridge), request_deserializer=decode, response_serializer=encode
            )
        if method.server_stream:
            return grpc.unary_stream_rpc_method_handler(
                _server_stream(handler, bridge), request_deserializer=decode, response_serializer=encode
            )
        return grpc.unary_unary_rpc_method_handler(
            _unary(handler, bridge), request_deserializer=decode, response_serializer=encode
        )


async def _aborting(context: grpc.aio.ServicerContext, error: BaseException) -> None:
    if isinstance(error, RpcAbort):
        await context.abort(error.code, error.message)
    if isinstance(error, HostStopped):
        await context.abort(grpc.StatusCode.UNAVAILABLE, str(error))
    log.exception("gRPC handler failed", exc_info=error)
    await context.abort(grpc.StatusCode.INTERNAL, f"{type(error).__name__}: {error}")


def _unary(handler: Any, bridge: TrioBridge) -> Callable[..., Awaitable[Any]]:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await bridge.call(handler, request, _metadata(context), context.peer())
        except Exception as error:  # noqa: BLE001 - every failure becomes a gRPC status
            await _aborting(context, error)

    return call


def _server_stream(handler: Any, bridge: TrioBridge) -> Callable[..., Any]:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            responses = await bridge.call(handler, request, _metadata(context), context.peer())
        except Exception as error:  # noqa: BLE001 - every failure becomes a gRPC status
            await _aborting(context, error)
            return
        for response in responses:
            yield response

    return call


def _bidi(stream: BidiStream, bridge: TrioBridge) -> Callable[..., Awaitable[None]]:
    async def call(request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        loop = asyncio.get_running_loop()
        outgoing: asyncio.Queue[Any] = asyncio.Queue()

        def send(message: Any) -> None:
            loop.call_soon_threadsafe(outgoing.put_nowait, message)

        async def write_all() -> None:
            while True:
                await context.write(await outgoing.get())
                outgoing.task_done()

        try:
            session = await bridge.call(stream.open, _metadata(context), context.peer(), send)
        except Exception as error:  # noqa: BLE001 - every failure becomes a gRPC status
            await _aborting(context, error)
            return
        writer = asyncio.ensure_future(write_all())
        try:
            async for message in request_iterator:
                await bridge.call(stream.receive, session, message)
            # The client ended its stream: what was pushed before goes out before the status
            # (the pushes reached this loop before the last answer from trio did).
            drained = asyncio.ensure_future(outgoing.join())
            await asyncio.wait(
                {drained, writer}, timeout=BIDI_DRAIN_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
            )
            drained.cancel()
        except RpcAbort as error:
            await context.abort(error.code, error.message)
        except HostStopped:
            pass
        finally:
            writer.cancel()
            try:
                await bridge.call(stream.close, session)
            except HostStopped:
                pass

    return call
