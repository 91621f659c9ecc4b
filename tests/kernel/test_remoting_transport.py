"""Server and client over real loopback TCP: concurrency, errors, limits, broken peers."""

from __future__ import annotations

import os
import struct
from collections.abc import Awaitable, Callable, Sequence

import pytest
import trio
import trio.lowlevel
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.errors import RemotingClosedError, RemotingConnectError, RemotingTimeoutError
from wire.remoting import (
    Connection,
    RemotingClient,
    RemotingCommand,
    RemotingServer,
    ResponseCode,
    Router,
    TransportLimits,
)
from wire.remoting.command import FLAG_ONEWAY, SEPARATE_BODY_BYTES, FrameDecoder
from wire.remoting.connection import IOV_MAX, _unsent

ECHO, SLOW, BOOM, NOTIFY = 900, 901, 902, 903


def make_router(events: list[str]) -> Router:
    router = Router(name="test")

    async def echo(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(0, request.ext, request.body)

    async def slow(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        await trio.sleep(float(request.ext["seconds"]))
        return request.response(0, {"slept": request.ext["seconds"]})

    async def boom(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        raise RuntimeError("handler bug")

    async def notify(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        connection.send_oneway(RemotingCommand.request(40, {"consumerGroup": "g"}))
        return request.response()

    for code, handler in ((ECHO, echo), (SLOW, slow), (BOOM, boom), (NOTIFY, notify)):
        router.register(code, handler)
    return router


async def start_server(nursery: trio.Nursery, limits: TransportLimits | None = None) -> RemotingServer:
    server = RemotingServer("test", "127.0.0.1", 0, make_router([]), limits or TransportLimits())
    await nursery.start(server.run)
    return server


async def raw_connection(server: RemotingServer) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", server.port)


async def test_requests_are_answered_concurrently_and_matched_by_opaque(nursery):
    server = await start_server(nursery)
    async with RemotingClient.open() as client:
        results = {}

        async def call(i: int, seconds: float) -> None:
            response = await client.invoke(
                server.address, RemotingCommand.request(SLOW, {"seconds": seconds})
            )
            results[i] = response.ext["slept"]

        async with trio.open_nursery() as calls:
            calls.start_soon(call, 0, 0.3)
            calls.start_soon(call, 1, 0.0)
            calls.start_soon(call, 2, 0.1)
        assert results == {0: "0.3", 1: "0.0", 2: "0.1"}
        assert len(client._connections) == 1, "one connection per address"


async def test_unknown_codes_and_failing_handlers_get_error_codes_and_the_connection_lives(nursery):
    server = await start_server(nursery)
    async with RemotingClient.open() as client:
        unknown = await client.invoke(server.address, RemotingCommand.request(4242))
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert unknown.remark == " request type 4242 not supported"
        failed = await client.invoke(server.address, RemotingCommand.request(BOOM))
        assert failed.code == ResponseCode.SYSTEM_ERROR and "handler bug" in failed.remark
        ok = await client.invoke(server.address, RemotingCommand.request(ECHO, {"k": "v"}, b"x"))
        assert (ok.code, ok.ext, ok.body) == (0, {"k": "v"}, b"x")


async def test_a_malformed_frame_closes_only_its_own_connection(nursery, caplog):
    server = await start_server(nursery)
    async with RemotingClient.open() as client:
        await client.invoke(server.address, RemotingCommand.request(ECHO))
        bad = await raw_connection(server)
        await bad.send_all(struct.pack(">iI", 12, 4) + b"nope" + b"\x00" * 4)
        assert await bad.receive_some(100) == b"", "the server closed the bad connection"
        await bad.aclose()
        assert "malformed frame" in caplog.text
        response = await client.invoke(server.address, RemotingCommand.request(ECHO, {"still": "here"}))
        assert response.ext == {"still": "here"}


async def test_a_frame_over_the_size_limit_closes_the_connection(nursery):
    server = await start_server(nursery, TransportLimits(max_frame_size=1024))
    async with RemotingClient.open() as client:
        with pytest.raises(RemotingClosedError, match="closed before 900 was answered"):
            await client.invoke(server.address, RemotingCommand.request(ECHO, body=b"x" * 4096))
        ok = await client.invoke(server.address, RemotingCommand.request(ECHO, body=b"small"))
        assert ok.body == b"small", "a new connection works"


async def test_connections_over_the_limit_are_refused(nursery):
    server = await start_server(nursery, TransportLimits(max_connections=2))
    first, second = await raw_connection(server), await raw_connection(server)
    await first.send_all(RemotingCommand.request(ECHO).encode())
    await second.send_all(RemotingCommand.request(ECHO).encode())
    await first.receive_some(1000)
    await second.receive_some(1000)
    third = await raw_connection(server)
    assert await third.receive_some(100) == b""
    assert server.refused == 1 and len(server.connections) == 2
    for stream in (first, second, third):
        await stream.aclose()


async def test_a_request_times_out_with_a_clear_error(nursery):
    server = await start_server(nursery)
    async with RemotingClient.open() as client:
        with pytest.raises(RemotingTimeoutError, match="no response within 0.1s"):
            await client.invoke(server.address, RemotingCommand.request(SLOW, {"seconds": 5}), timeout=0.1)


async def test_each_request_keeps_its_own_timeout_and_late_or_abandoned_answers_harm_nothing(nursery):
    """Timeouts are one sweep per connection, not a cancel scope per request: a short timeout
    after a long one still fires on time, a caller cancelled while waiting leaves the
    connection usable, an answer arriving after its request timed out is dropped, and requests
    that are answered in time are unaffected."""
    server = await start_server(nursery)
    address = server.address
    async with RemotingClient.open() as client:
        outcomes: dict[str, object] = {}

        async def call(name: str, seconds: float, timeout: float) -> None:
            try:
                answer = await client.invoke(
                    address, RemotingCommand.request(SLOW, {"seconds": seconds}), timeout
                )
                outcomes[name] = answer.ext["slept"]
            except RemotingTimeoutError as error:
                outcomes[name] = error

        async with trio.open_nursery() as calls:
            calls.start_soon(call, "long", 0.3, 10)  # answered in time
            await trio.sleep(0.05)
            started = trio.current_time()
            calls.start_soon(call, "short", 5, 0.2)  # an earlier deadline than the sweep's
            with trio.move_on_after(0.1):  # a caller that gives up while waiting
                await client.invoke(address, RemotingCommand.request(SLOW, {"seconds": 0.4}), 10)
        assert outcomes["long"] == "0.3"
        assert isinstance(outcomes["short"], RemotingTimeoutError)
        assert trio.current_time() - started < 4, "the short timeout fired on its own deadline"
        await trio.sleep(0.5)  # the abandoned request's answer arrives and is dropped
        echoed = await client.invoke(address, RemotingCommand.request(ECHO, {"k": "v"}, b"after"), 5)
        assert echoed.body == b"after"


async def test_connecting_to_a_closed_port_fails_clearly():
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with RemotingClient.open() as client:
        with pytest.raises(RemotingConnectError, match=f"cannot connect to 127.0.0.1:{port}"):
            await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(ECHO))


async def test_the_server_can_send_oneway_requests_to_a_client(nursery):
    server = await start_server(nursery)
    received = trio.Event()
    seen: list[RemotingCommand] = []

    async def on_notify(connection: Connection, request: RemotingCommand) -> None:
        seen.append(request)
        received.set()

    router = Router()
    router.register(40, on_notify)
    async with RemotingClient.open(router) as client:
        await client.invoke(server.address, RemotingCommand.request(NOTIFY))
        with trio.fail_after(5):
            await received.wait()
    assert seen[0].ext == {"consumerGroup": "g"} and seen[0].is_oneway


async def test_many_requests_in_flight_on_one_connection(nursery):
    server = await start_server(nursery)
    async with RemotingClient.open() as client:
        answers = []

        async def call(i: int) -> None:
            response = await client.invoke(server.address, RemotingCommand.request(ECHO, {"i": i}))
            answers.append(int(response.ext["i"]))

        async with trio.open_nursery() as calls:
            for i in range(500):
                calls.start_soon(call, i)
        assert sorted(answers) == list(range(500))


@settings(max_examples=40, deadline=None)
@given(garbage=st.binary(min_size=8, max_size=200))
def test_garbage_from_one_peer_never_disturbs_another(garbage):
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            server = await start_server(nursery)
            async with RemotingClient.open() as client:
                bad = await raw_connection(server)
                await bad.send_all(garbage)
                with trio.move_on_after(0.05):
                    await bad.receive_some(1000)
                response = await client.invoke(server.address, RemotingCommand.request(ECHO, {"ok": "1"}))
                assert response.ext == {"ok": "1"}
                await bad.aclose()
            nursery.cancel_scope.cancel()

    trio.run(main)


async def test_callers_cancelled_while_sending_large_frames_never_corrupt_the_stream(nursery):
    """An idle connection's caller writes its frame itself (no write-loop hop); a caller
    cancelled mid-write must not leave half a frame for the next request to follow."""
    server = await start_server(nursery)
    body = b"z" * (4 << 20)  # larger than the socket buffers: the write takes several turns
    async with RemotingClient.open() as client:
        for _ in range(5):
            with trio.move_on_after(0):
                await client.invoke(server.address, RemotingCommand.request(ECHO, {"big": "1"}, body))
            with trio.move_on_after(0.0005):
                await client.invoke(server.address, RemotingCommand.request(ECHO, {"big": "1"}, body))
        answers = []

        async def call(i: int) -> None:
            response = await client.invoke(server.address, RemotingCommand.request(ECHO, {"i": i}, b"x" * i))
            answers.append((int(response.ext["i"]), len(response.body)))

        async with trio.open_nursery() as calls:
            for i in range(50):
                calls.start_soon(call, i)
        assert sorted(answers) == [(i, i) for i in range(50)]


async def serve(nursery: trio.Nursery, router: Router, limits: TransportLimits) -> RemotingServer:
    server = RemotingServer("test", "127.0.0.1", 0, router, limits)
    await nursery.start(server.run)
    return server


def echo_frames(count: int, *, flag: int = 0) -> bytes:
    """``count`` ECHO requests numbered by ``i`` (and by opaque), encoded back to back."""
    frames = []
    for i in range(count):
        request = RemotingCommand.request(ECHO, {"i": str(i)})
        request.opaque, request.flag = i, flag
        frames.append(request.encode())
    return b"".join(frames)


async def test_a_run_of_grouped_requests_longer_than_max_in_flight_is_answered(nursery):
    """Requests read together go to a group handler in runs; a run needs a token per request,
    so one longer than ``max_in_flight`` must be split or the connection stalls for good."""

    async def one(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(0, request.ext)

    async def group(connection: Connection, requests):
        await trio.lowlevel.checkpoint()
        return [request.response(0, request.ext) for request in requests]

    router = Router(name="grouping")
    router.register(ECHO, one)
    router.register_group(ECHO, group)
    server = await serve(nursery, router, TransportLimits(max_in_flight=16))
    stream = await raw_connection(server)
    await stream.send_all(echo_frames(600))  # one write: the server reads them together
    decoder = FrameDecoder()
    answered: list[int] = []
    with trio.fail_after(10):
        while len(answered) < 600:
            answered += [command.opaque for command in decoder.feed(await stream.receive_some(65536))]
    await stream.aclose()
    assert sorted(answered) == list(range(600))


async def test_oneway_requests_sent_just_before_the_peer_closes_are_all_handled(nursery):
    """A peer that sends oneway requests and closes at once (a producer's last oneway sends,
    a transaction's END) expects them served: the close must not cancel them."""
    handled: list[int] = []

    async def record(connection: Connection, request: RemotingCommand) -> None:
        await trio.sleep(0.01)
        handled.append(int(request.ext["i"]))

    router = Router(name="oneway")
    router.register(ECHO, record)
    server = await serve(nursery, router, TransportLimits(max_in_flight=32))
    stream = await raw_connection(server)
    await stream.send_all(echo_frames(300, flag=FLAG_ONEWAY))
    await stream.aclose()
    with trio.fail_after(10):
        while len(handled) < 300:  # noqa: ASYNC110 - polling a plain list
            await trio.sleep(0.01)
    assert sorted(handled) == list(range(300))


async def test_inline_handlers_answer_in_order_and_a_failing_one_leaves_the_connection_up(nursery):
    """A handler registered ``inline`` runs in the read loop: requests read together are
    answered one after another in their order; a raising one gets SYSTEM_ERROR and the
    requests behind it are still answered; other codes still run as tasks beside it."""
    handled: list[str] = []

    async def inline_echo(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        handled.append(request.ext["i"])
        if request.ext["i"] == "3":
            raise RuntimeError("inline bug")
        return request.response(0, request.ext)

    async def slow(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        await trio.sleep(0.2)
        return request.response(0, {"slow": "1"})

    router = Router(name="inline")
    router.register(ECHO, inline_echo, inline=True)
    router.register(SLOW, slow)
    server = await serve(nursery, router, TransportLimits())
    stream = await raw_connection(server)
    held = RemotingCommand.request(SLOW)
    held.opaque = 1000
    await stream.send_all(held.encode() + echo_frames(50))
    decoder = FrameDecoder()
    answers: list[RemotingCommand] = []
    with trio.fail_after(10):
        while len(answers) < 51:
            answers += decoder.feed(await stream.receive_some(65536))
    await stream.aclose()
    assert handled == [str(i) for i in range(50)], "inline requests run in the order read"
    echoes = [answer for answer in answers if answer.opaque != 1000]
    assert [answer.opaque for answer in echoes] == list(range(50)), "answered in order"
    failed = echoes[3]
    assert failed.code == ResponseCode.SYSTEM_ERROR and "inline bug" in failed.remark
    assert answers[-1].opaque == 1000, "the slow task ran beside them and answered last"


async def slow_echo_connection(
    nursery: trio.Nursery, **register: bool
) -> tuple[list[object], trio.SocketStream, Callable[[int], Awaitable[list[RemotingCommand]]]]:
    """A raw connection to an ECHO server registered with ``register`` (``inline_alone=True``
    ...) whose handler sleeps a request's ``sleep`` seconds: the tasks that ran the handler,
    in order, the stream, and a reader of the next ``count`` answers."""
    tasks: list[object] = []

    async def maybe_slow(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        tasks.append(trio.lowlevel.current_task())
        await trio.sleep(float(request.ext.get("sleep", "0")))
        return request.response(0, request.ext)

    router = Router(name="inline")
    router.register(ECHO, maybe_slow, **register)
    server = await serve(nursery, router, TransportLimits())
    stream = await raw_connection(server)
    decoder = FrameDecoder()

    async def answers(count: int) -> list[RemotingCommand]:
        got: list[RemotingCommand] = []
        with trio.fail_after(10):
            while len(got) < count:
                got += decoder.feed(await stream.receive_some(65536))
        return got

    return tasks, stream, answers


async def test_inline_alone_handlers_run_in_the_read_loop_only_for_a_lone_request(nursery):
    """``inline_alone``: a request that arrives alone (one in flight) is handled by the read
    loop itself; requests read together get a task each, so a slow one does not hold back
    the answers of the others."""
    tasks, stream, answers = await slow_echo_connection(nursery, inline_alone=True)
    for i in range(3):
        await stream.send_all(echo_frames(1).replace(b'"i":"0"', f'"i":"{i}"'.encode()))
        (answer,) = await answers(1)
        assert answer.ext["i"] == str(i)
    assert tasks[0] is tasks[1] is tasks[2], "lone requests are handled by the connection's own task"

    slow, quick = RemotingCommand.request(ECHO, {"sleep": "0.3"}), RemotingCommand.request(ECHO, {"i": "q"})
    slow.opaque, quick.opaque = 100, 101
    await stream.send_all(slow.encode() + quick.encode())  # read together
    together = await answers(2)
    await stream.aclose()
    assert [answer.opaque for answer in together] == [101, 100], "the quick one was not held back"
    assert tasks[3] is not tasks[0] and tasks[4] is not tasks[0] and tasks[3] is not tasks[4]


async def test_inline_idle_handlers_run_in_the_read_loop_only_while_nothing_else_is_in_flight(nursery):
    """``inline_idle`` (the broker's sends when a put waits for its flush): a lone request on a
    connection with nothing else in flight is handled by the read loop itself; one that
    arrives while another is still being handled gets a task of its own, so it is not held
    behind the first one's wait."""
    tasks, stream, answers = await slow_echo_connection(nursery, inline_idle=True)

    def request(opaque: int, **ext: str) -> bytes:
        command = RemotingCommand.request(ECHO, ext)
        command.opaque = opaque
        return command.encode()

    for i in range(3):
        await stream.send_all(request(i))
        (answer,) = await answers(1)
        assert answer.opaque == i
    reader = tasks[0]
    assert tasks[1] is reader and tasks[2] is reader, "lone requests on an idle connection: the read loop"

    await stream.send_all(request(100, sleep="0.5") + request(101))  # read together: a task each
    (quick,) = await answers(1)
    assert quick.opaque == 101
    await stream.send_all(request(102))  # alone, but the slow one is still in flight
    (lone,) = await answers(1)
    assert lone.opaque == 102, "not held behind the slow request"
    (slow,) = await answers(1)
    await stream.aclose()
    assert slow.opaque == 100
    assert reader not in tasks[3:], "none of them ran in the read loop"


async def test_large_bodies_written_as_separate_buffers_arrive_whole_and_in_order(nursery):
    """Answers with large bodies are written with ``writev`` (header and body as two buffers,
    queued answers not joined first); with many of them in flight the socket takes them in
    pieces, and every body must still arrive byte-exact with its own header."""
    server = await start_server(nursery)
    async with RemotingClient.open() as client:
        answers = {}

        async def call(i: int) -> None:
            body = bytes([i]) * (SEPARATE_BODY_BYTES + i * 40_009)
            response = await client.invoke(server.address, RemotingCommand.request(ECHO, {"i": i}, body))
            answers[int(response.ext["i"])] = response.body == body

        async with trio.open_nursery() as calls:
            for i in range(60):
                calls.start_soon(call, i)
        assert answers == {i: True for i in range(60)}


async def test_more_queued_frames_than_one_writev_takes_are_all_sent(nursery):
    """The write loop hands its queued buffers to ``writev``, which takes at most IOV_MAX of
    them per call: answers queued behind a peer that stopped reading, more of them than that,
    must all arrive once it reads again."""
    server = await start_server(nursery)
    count = 3 * IOV_MAX
    frames = []
    for i in range(count):
        request = RemotingCommand.request(ECHO, {"i": str(i)}, b"b" * 4000)
        request.opaque = i
        frames.append(request.encode())
    stream = await raw_connection(server)
    await stream.send_all(b"".join(frames))
    await trio.sleep(0.5)  # not reading: the answers (12 MB) queue up behind the socket
    decoder, answered = FrameDecoder(), []
    with trio.fail_after(30):
        while len(answered) < count:
            answered += [int(c.ext["i"]) for c in decoder.feed(await stream.receive_some(1 << 20))]
    assert sorted(answered) == list(range(count))
    await stream.aclose()


def test_what_is_left_after_a_partial_write():
    parts = [b"abc", b"defgh", b"ij"]
    assert _unsent(parts, 0) == parts
    assert [bytes(p) for p in _unsent(parts, 2)] == [b"c", b"defgh", b"ij"]
    assert [bytes(p) for p in _unsent(parts, 3)] == [b"defgh", b"ij"]
    assert [bytes(p) for p in _unsent(parts, 6)] == [b"gh", b"ij"]
    assert [bytes(p) for p in _unsent(parts, 7)] == [b"h", b"ij"]
    assert _unsent(parts, 10) == []


def test_a_frame_in_parts_is_the_same_bytes_as_the_whole_frame():
    for body in (b"", b"small", b"x" * SEPARATE_BODY_BYTES):
        command = RemotingCommand.request(ECHO, {"k": "v"}, body)
        parts = command.encode_parts()
        assert b"".join(parts) == command.encode()
        assert len(parts) == (2 if len(body) >= SEPARATE_BODY_BYTES else 1)
        decoded = FrameDecoder().feed(b"".join(parts))
        assert decoded[0].body == body and decoded[0].ext == {"k": "v"}


async def test_one_request_in_flight_makes_no_read_that_finds_nothing(nursery, monkeypatch):
    """With one request in flight neither end can have data waiting after it answered or got
    its answer, so neither tries a read before waiting: a read that fails is a syscall and an
    exception on both ends of every single-message round trip. Requests in flight together
    (where that read finds pipelined data) are all answered as before."""
    router = Router(name="test")

    async def echo(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(0, request.ext, request.body)

    router.register(ECHO, echo, inline_alone=True)  # as the broker answers a lone send
    server = await serve(nursery, router, TransportLimits())
    reads = {"data": 0, "empty": 0}
    real_readv = os.readv  # how both ends read a plain socket (wire.remoting.receive_buffer)

    def counting_readv(fd: int, buffers: Sequence[bytearray]) -> int:
        try:
            size = real_readv(fd, buffers)
        except BlockingIOError:
            reads["empty"] += 1
            raise
        reads["data"] += 1
        return size

    monkeypatch.setattr(os, "readv", counting_readv)
    async with RemotingClient.open() as client:
        address = f"127.0.0.1:{server.port}"
        for i in range(20):
            response = await client.invoke(address, RemotingCommand.request(ECHO, {"i": str(i)}))
            assert response.ext == {"i": str(i)}
        assert reads["data"] >= 40, "both ends read every frame with os.readv"
        assert reads["empty"] == 0

        answered = []

        async def send_one(i: int) -> None:
            response = await client.invoke(address, RemotingCommand.request(ECHO, {"i": str(i)}))
            answered.append(response.ext["i"])

        async with trio.open_nursery() as senders:
            for i in range(64):
                senders.start_soon(send_one, i)
        assert sorted(answered, key=int) == [str(i) for i in range(64)]
