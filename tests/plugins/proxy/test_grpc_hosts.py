"""Both ways of hosting grpcio under trio answer a real grpcio client the same way: unary, server
streaming and bidirectional calls, gRPC statuses from handlers, unknown methods, requests that
are not the method's message, a client's deadline cancelling its handler, and a host stopping
with a call in flight."""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest
import trio

from plugins.proxy.completion_queue_host import CompletionQueueHost
from plugins.proxy.grpc_host import BidiStream, GrpcHost, Method, RpcAbort
from wire.grpc_v2 import definition_pb2 as pb
from wire.grpc_v2 import service_pb2 as spb

SERVICE = "test.Hosted"
HOSTS = [CompletionQueueHost, GrpcHost]


class Probe:
    """The handlers' side: what they saw."""

    def __init__(self) -> None:
        self.metadata: dict[str, dict[str, str]] = {}
        self.peer = ""
        self.cancelled = trio.Event()
        self.entered = trio.Event()
        self.closed: list[str] = []
        self.both_closed = trio.Event()

    def methods(self) -> list[Method]:
        async def echo(request: Any, metadata: Any, peer: str) -> Any:
            self.metadata[request.topic.name], self.peer = dict(metadata), peer
            return spb.QueryRouteResponse(status=pb.Status(code=pb.OK, message=request.topic.name))

        async def refuse(request: Any, metadata: Any, peer: str) -> Any:
            raise RpcAbort(grpc.StatusCode.NOT_FOUND, f"no {request.topic.name}")

        async def crash(request: Any, metadata: Any, peer: str) -> Any:
            raise ValueError("a handler bug")

        async def hang(request: Any, metadata: Any, peer: str) -> Any:
            self.entered.set()
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                self.cancelled.set()
                raise

        async def several(request: Any, metadata: Any, peer: str) -> list[Any]:
            count = int(request.topic.name)
            return [spb.QueryRouteResponse(status=pb.Status(message=str(n))) for n in range(count)]

        async def chat_open(metadata: Any, peer: str, push: Callable[[Any], None]) -> Any:
            push(spb.QueryRouteResponse(status=pb.Status(message="hello")))
            return push

        async def chat_receive(push: Any, request: Any) -> None:
            if request.topic.name == "bye":
                raise RpcAbort(grpc.StatusCode.CANCELLED, "asked to end")
            for n in range(20):  # several pushes each: all go out before the call's status
                push(spb.QueryRouteResponse(status=pb.Status(message=f"{request.topic.name.upper()}{n}")))

        async def chat_close(push: Any) -> None:
            self.closed.append("closed")
            if len(self.closed) == 2:
                self.both_closed.set()

        request, response = spb.QueryRouteRequest, spb.QueryRouteResponse
        return [
            Method("Echo", request, response, echo),
            Method("Refuse", request, response, refuse),
            Method("Crash", request, response, crash),
            Method("Hang", request, response, hang),
            Method("HangStream", request, response, hang, server_stream=True),
            Method("Several", request, response, several, server_stream=True),
            Method("Chat", request, response, BidiStream(chat_open, chat_receive, chat_close)),
        ]


def route(topic: str) -> spb.QueryRouteRequest:
    return spb.QueryRouteRequest(topic=pb.Resource(name=topic))


@asynccontextmanager
async def hosted(host_type: type, probe: Probe) -> AsyncIterator[tuple[grpc.Channel, trio.CancelScope]]:
    host = host_type(SERVICE, probe.methods(), "127.0.0.1:0", grace=0.5)
    async with trio.open_nursery() as nursery:
        scope = trio.CancelScope()

        async def serve(task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
            with scope:
                await host.serve(task_status=task_status)

        port = await nursery.start(serve)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        try:
            yield channel, scope
        finally:
            channel.close()
            scope.cancel()


def stub(channel: grpc.Channel, name: str, kind: str = "unary_unary") -> Callable[..., Any]:
    """A callable for method ``name`` of the test service; ``kind`` is the channel's factory
    (``unary_unary``, ``unary_stream``, ``stream_stream``)."""
    return getattr(channel, kind)(
        f"/{SERVICE}/{name}",
        request_serializer=spb.QueryRouteRequest.SerializeToString,
        response_deserializer=spb.QueryRouteResponse.FromString,
    )


def unary(channel: grpc.Channel, name: str) -> Callable[..., Any]:
    return stub(channel, name)


def call_error(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        fn(*args, **kwargs)
    return caught.value


@pytest.mark.parametrize("host_type", HOSTS)
async def test_unary_calls_and_their_statuses(host_type):
    probe = Probe()
    async with hosted(host_type, probe) as (channel, _):

        def calls() -> dict[str, Any]:
            out: dict[str, Any] = {}
            out["echo"] = unary(channel, "Echo")(route("T1"), metadata=[("x-mq-client-id", "c1")], timeout=10)
            out["refused"] = call_error(unary(channel, "Refuse"), route("T2"), timeout=10)
            out["crashed"] = call_error(unary(channel, "Crash"), route("T3"), timeout=10)
            out["unknown"] = call_error(unary(channel, "Nothing"), route("T4"), timeout=10)
            out["after"] = unary(channel, "Echo")(route("T5"), timeout=10)
            return out

        out = await trio.to_thread.run_sync(calls)
    assert out["echo"].status.message == "T1"
    assert probe.metadata["T1"]["x-mq-client-id"] == "c1"
    assert probe.peer.startswith("ipv4:127.0.0.1:")
    assert (out["refused"].code(), out["refused"].details()) == (grpc.StatusCode.NOT_FOUND, "no T2")
    assert out["crashed"].code() is grpc.StatusCode.INTERNAL
    assert "a handler bug" in out["crashed"].details()
    assert out["unknown"].code() is grpc.StatusCode.UNIMPLEMENTED
    assert out["after"].status.message == "T5"


async def test_a_request_that_is_not_the_methods_message_is_an_invalid_argument():
    probe = Probe()
    async with hosted(CompletionQueueHost, probe) as (channel, _):
        raw = channel.unary_unary(f"/{SERVICE}/Echo", response_deserializer=spb.QueryRouteResponse.FromString)

        def calls() -> tuple[grpc.RpcError, Any]:
            error = call_error(raw, b"\xff\xff\xff", timeout=10)
            return error, unary(channel, "Echo")(route("ok"), timeout=10)

        error, after = await trio.to_thread.run_sync(calls)
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "apache.rocketmq.v2.QueryRouteRequest" in error.details()
    assert after.status.message == "ok"


@pytest.mark.parametrize("host_type", HOSTS)
async def test_server_streams_keep_their_order(host_type):
    async with hosted(host_type, Probe()) as (channel, _):
        stream = stub(channel, "Several", "unary_stream")

        def calls() -> tuple[list[str], list[str]]:
            many = [r.status.message for r in stream(route("40"), timeout=10)]
            none = [r.status.message for r in stream(route("0"), timeout=10)]
            return many, none

        many, none = await trio.to_thread.run_sync(calls)
    assert many == [str(n) for n in range(40)]
    assert none == []


@pytest.mark.parametrize("host_type", HOSTS)
async def test_bidirectional_stream_pushes_and_replies(host_type):
    probe = Probe()
    async with hosted(host_type, probe) as (channel, _):
        chat = stub(channel, "Chat", "stream_stream")

        def calls() -> tuple[list[str], grpc.RpcError]:
            replies = [r.status.message for r in chat(iter([route("a"), route("b")]), timeout=10)]
            ended = call_error(lambda: list(chat(iter([route("c"), route("bye")]), timeout=10)))
            return replies, ended

        replies, ended = await trio.to_thread.run_sync(calls)
        with trio.fail_after(10):
            await probe.both_closed.wait()
    assert replies == ["hello", *(f"A{n}" for n in range(20)), *(f"B{n}" for n in range(20))]
    assert (ended.code(), ended.details()) == (grpc.StatusCode.CANCELLED, "asked to end")


@pytest.mark.parametrize("host_type", HOSTS)
async def test_a_deadline_cancels_a_streaming_handler(host_type):
    """A stream (a long-polling receive) is cancelled when its client gives up; a unary
    handler of the completion-queue host runs to its end (the proxy's are bounded by their
    own timeouts), as its call's end is read with its answer."""
    probe = Probe()
    async with hosted(host_type, probe) as (channel, _):
        hang = stub(channel, "HangStream", "unary_stream")
        error = await trio.to_thread.run_sync(lambda: call_error(lambda: list(hang(route("x"), timeout=0.5))))
        with trio.fail_after(10):
            await probe.cancelled.wait()
        after = await trio.to_thread.run_sync(lambda: unary(channel, "Echo")(route("still"), timeout=10))
    assert error.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert after.status.message == "still"


@pytest.mark.parametrize("host_type", HOSTS)
async def test_stopping_answers_a_call_in_flight_unavailable(host_type):
    probe = Probe()
    async with hosted(host_type, probe) as (channel, scope):
        async with trio.open_nursery() as nursery:
            outcome: list[grpc.RpcError] = []

            async def hanging_call() -> None:
                hang = unary(channel, "Hang")
                error = await trio.to_thread.run_sync(lambda: call_error(hang, route("x"), timeout=20))
                outcome.append(error)

            nursery.start_soon(hanging_call)
            with trio.fail_after(10):
                await probe.entered.wait()
            scope.cancel()
    assert outcome[0].code() is grpc.StatusCode.UNAVAILABLE
    assert probe.cancelled.is_set()


@pytest.mark.parametrize("host_type", HOSTS)
async def test_a_second_host_on_a_taken_port_is_refused(host_type):
    """grpcio would share the port (SO_REUSEPORT) and split the clients between two brokers."""
    async with hosted(host_type, Probe()) as (channel, _):
        port = int(channel._channel.target().decode().rsplit(":", 1)[1])
        async with trio.open_nursery() as nursery:
            with pytest.raises(OSError, match=f"127.0.0.1:{port}") as refused:
                await nursery.start(host_type(SERVICE, [], f"127.0.0.1:{port}").serve)
        assert refused.value.errno == errno.EADDRINUSE  # what the CLI turns into one line
        echo = unary(channel, "Echo")
        first = await trio.to_thread.run_sync(lambda: echo(route("first"), timeout=10))
        assert first.status.message == "first"
