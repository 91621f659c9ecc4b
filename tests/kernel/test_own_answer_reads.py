"""A request's task reads its own answer while the client busy-polls (``Connection._poll_answer``):
over real loopback TCP, every answer and every request of the server's still reaches its place,
and the read loop reads the socket again whenever no request's task does."""

from __future__ import annotations

import struct

import pytest
import trio

from kernel.errors import RemotingClosedError
from tests.kernel.test_remoting_transport import ECHO, SLOW, make_router
from wire.remoting import Connection, RemotingClient, RemotingCommand, RemotingServer, Router, TransportLimits

NOTIFY, LATER = 905, 904
"""Besides the transport tests' codes (ECHO, SLOW): a notification of the server's just before
the answer, or some time after it."""
NOTIFICATION = 40
WINDOW = 0.02
"""The client's fixed busy-poll window: it polls this long after every request and receive."""


def server_router(nursery: trio.Nursery) -> Router:
    router = make_router([])  # ECHO, SLOW and the rest, as the transport tests serve them

    async def notify(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        # The server's own request goes out just before the answer: one read often takes both.
        connection.send_oneway(RemotingCommand.request(NOTIFICATION, {"n": request.ext["n"]}))
        return request.response()

    async def later(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        async def notify_later() -> None:
            await trio.sleep(float(request.ext["after"]))
            connection.send_oneway(RemotingCommand.request(NOTIFICATION, {"n": "later"}))

        nursery.start_soon(notify_later)
        return request.response()

    router.register(NOTIFY, notify)
    router.register(LATER, later)
    return router


async def start_server(nursery: trio.Nursery) -> RemotingServer:
    server = RemotingServer("test", "127.0.0.1", 0, server_router(nursery), TransportLimits())
    await nursery.start(server.run)
    return server


def notifications(expected: int) -> tuple[Router, list[str], trio.Event]:
    """A client router recording the server's notifications; the event is set once
    ``expected`` of them came."""
    seen: list[str] = []
    all_came = trio.Event()
    router = Router(name="client")

    async def on_notification(connection: Connection, request: RemotingCommand) -> None:
        seen.append(request.ext["n"])
        if len(seen) == expected:
            all_came.set()

    router.register(NOTIFICATION, on_notification)
    return router, seen, all_came


@pytest.mark.parametrize("busy_poll", [WINDOW, 0])
async def test_a_lone_request_reads_its_own_answer_while_the_client_polls(nursery, busy_poll):
    server = await start_server(nursery)
    async with RemotingClient.open(busy_poll=busy_poll) as client:
        for i in range(30):
            response = await client.invoke(server.address, RemotingCommand.request(ECHO, {"i": str(i)}))
            assert response.ext == {"i": str(i)}
        connection = await client.connection(server.address)
        if busy_poll:
            assert connection.answers_read_by_requests >= 20, "the requests' tasks read (nearly) every answer"
        else:
            assert connection.answers_read_by_requests == 0, "without polling the read loop reads"


class _TaskSteps(trio.abc.Instrument):
    """Counts the steps of one task."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task, self.count = task, 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.count += 1


async def test_a_request_that_read_its_own_answer_goes_on_in_that_step(nursery, monkeypatch):
    """The task checkpointed while it polled for the answer, so it returns in the step that
    read it: no scheduler pass more only to go on (the pass cost the trio Producer 11 % of its
    one-in-flight rate, docs/performance.md, thirtieth step)."""
    server = await start_server(nursery)
    async with RemotingClient.open(busy_poll=WINDOW) as client:
        await client.invoke(server.address, RemotingCommand.request(ECHO))  # connected, polling
        connection = await client.connection(server.address)
        steps = _TaskSteps(trio.lowlevel.current_task())
        answered_in_step: list[int] = []
        read = Connection._read_taken_socket

        def recording_read(self: Connection) -> list[RemotingCommand] | None:
            requests = read(self)
            if self is connection and requests is not None:
                answered_in_step.append(steps.count)
            return requests

        monkeypatch.setattr(Connection, "_read_taken_socket", recording_read)
        trio.lowlevel.add_instrument(steps)
        try:
            same_step = 0
            for i in range(30):
                before = connection.answers_read_by_requests
                response = await client.invoke(server.address, RemotingCommand.request(ECHO, {"i": str(i)}))
                assert response.ext == {"i": str(i)}
                if connection.answers_read_by_requests > before:
                    same_step += answered_in_step[-1] == steps.count
        finally:
            trio.lowlevel.remove_instrument(steps)
        assert connection.answers_read_by_requests >= 20
        assert same_step >= 20, f"only {same_step} of 30 requests went on in the step that read their answer"


async def test_requests_of_the_server_read_by_a_requesting_task_are_served(nursery):
    server = await start_server(nursery)
    router, seen, all_came = notifications(30)
    async with RemotingClient.open(router, busy_poll=WINDOW) as client:
        for n in range(30):
            await client.invoke(server.address, RemotingCommand.request(NOTIFY, {"n": str(n)}))
        with trio.fail_after(5):
            await all_came.wait()
        assert sorted(seen, key=int) == [str(n) for n in range(30)]
        assert (await client.connection(server.address)).answers_read_by_requests > 0


async def test_the_read_loop_reads_again_once_the_client_stops_polling(nursery):
    """The request's task took the socket; the server speaks again only after the client's
    window ran out: the read loop, given the socket back, reads it."""
    server = await start_server(nursery)
    router, seen, all_came = notifications(1)
    async with RemotingClient.open(router, busy_poll=WINDOW) as client:
        for _ in range(5):
            await client.invoke(server.address, RemotingCommand.request(ECHO))
        await client.invoke(server.address, RemotingCommand.request(LATER, {"after": str(WINDOW * 10)}))
        assert (await client.connection(server.address)).answers_read_by_requests > 0
        with trio.fail_after(5):
            await all_came.wait()
        assert seen == ["later"]


async def test_the_server_speaking_between_our_requests_is_heard_while_the_client_polls(nursery):
    """The socket stays with the requests' tasks while the client polls; with no request
    waiting, the poller's passes read it, so the server's request is served well inside the
    poll window (10 s here, longer than the test waits)."""
    server = await start_server(nursery)
    router, seen, all_came = notifications(1)
    async with RemotingClient.open(router, busy_poll=10.0) as client:
        for _ in range(5):
            await client.invoke(server.address, RemotingCommand.request(ECHO))
        await client.invoke(server.address, RemotingCommand.request(LATER, {"after": "0.05"}))
        with trio.fail_after(5):
            await all_came.wait()
        assert seen == ["later"]


async def test_a_cancelled_request_gives_the_socket_back(nursery):
    server = await start_server(nursery)
    router, seen, all_came = notifications(1)
    async with RemotingClient.open(router, busy_poll=10.0) as client:  # polls throughout
        await client.invoke(server.address, RemotingCommand.request(ECHO))
        with trio.move_on_after(0.05) as waited:
            await client.invoke(server.address, RemotingCommand.request(SLOW, {"seconds": "0.2"}))
        assert waited.cancelled_caught
        # Still polling and nothing of ours waits for an answer: the slow answer that comes
        # late and the server's next request are read all the same.
        await client.invoke(server.address, RemotingCommand.request(LATER, {"after": "0.3"}))
        with trio.fail_after(5):
            await all_came.wait()
        assert seen == ["later"]
        response = await client.invoke(server.address, RemotingCommand.request(ECHO, {"still": "here"}))
        assert response.ext == {"still": "here"}


async def test_requests_in_flight_together_are_all_answered_while_polling(nursery):
    server = await start_server(nursery)
    async with RemotingClient.open(busy_poll=WINDOW) as client:
        answers: list[int] = []

        async def call(i: int) -> None:
            response = await client.invoke(server.address, RemotingCommand.request(ECHO, {"i": str(i)}))
            answers.append(int(response.ext["i"]))

        with trio.fail_after(20):
            for _ in range(3):  # alone, then together, then alone again
                await call(-1)
                async with trio.open_nursery() as calls:
                    for i in range(200):
                        calls.start_soon(call, i)
        assert sorted(a for a in answers if a >= 0) == sorted(list(range(200)) * 3)


async def peer_that(nursery: trio.Nursery, reply: bytes | None) -> str:
    """A raw peer: reads the request, then writes ``reply`` (None: closes the connection)."""

    async def handle(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        if reply is not None:
            await stream.send_all(reply)
            await trio.sleep(1)
        await stream.aclose()

    listeners = await nursery.start(trio.serve_tcp, handle, 0)
    return f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"


async def test_the_peer_closing_while_a_request_reads_fails_it_clearly(nursery):
    address = await peer_that(nursery, None)
    async with RemotingClient.open(busy_poll=10.0) as client:  # polls longer than the test waits
        with trio.fail_after(5), pytest.raises(RemotingClosedError, match="closed by peer"):
            await client.invoke(address, RemotingCommand.request(ECHO))


async def test_a_malformed_answer_read_by_a_request_closes_the_connection(nursery, caplog):
    address = await peer_that(nursery, struct.pack(">iI", 12, 4) + b"nope" + b"\x00" * 4)
    async with RemotingClient.open(busy_poll=10.0) as client:  # polls longer than the test waits
        with trio.fail_after(5), pytest.raises(RemotingClosedError, match="malformed frame"):
            await client.invoke(address, RemotingCommand.request(ECHO))
    assert "malformed frame" in caplog.text
