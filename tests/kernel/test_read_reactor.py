"""A server's read reactor (``wire.remoting.read_reactor``) over real loopback TCP: lone requests
of many connections answered together, everything else left to each connection's read loop."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio

from wire.remoting import (
    Connection,
    RemotingCommand,
    RemotingServer,
    ResponseCode,
    Router,
    TransportLimits,
)
from wire.remoting import crowd as crowd_module
from wire.remoting.command import FrameDecoder

ECHO, WAITS, PLAIN, BOOM = 900, 901, 902, 903
ROUNDS = 20
CLIENTS = 16


class Echoes:
    """A router whose ECHO and WAITS codes are handled across connections, recording how."""

    def __init__(self) -> None:
        self.router = Router(name="reactor-test")
        self.groups: list[list[str]] = []
        """Each across call: the ``c`` (client) of every request it got."""
        self.released = trio.Event()
        self.waiting: set[str] = set()
        """Clients whose WAITS request is being handled."""
        self.waiting_tasks: set[str] = set()
        """Names of the tasks that handled WAITS requests."""
        for code in (ECHO, WAITS, PLAIN, BOOM):
            self.router.register(code, self.one, inline_alone=code in (ECHO, BOOM))
        for code in (ECHO, WAITS, BOOM):
            self.router.register_across(code, self.across)

    async def one(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        if request.code == WAITS:
            self.waiting.add(request.ext["c"])
            self.waiting_tasks.add(trio.lowlevel.current_task().name)
            await self.released.wait()
        if request.code == BOOM:
            raise RuntimeError("handler bug")
        return request.response(0, {**request.ext, "peer": connection.peer}, request.body)

    async def across(self, lone: Sequence[tuple[Connection, RemotingCommand]]) -> list[RemotingCommand]:
        self.groups.append([request.ext.get("c", "") for _, request in lone])
        if any(request.code == BOOM for _, request in lone):
            raise RuntimeError("group bug")
        if any(request.code == WAITS for _, request in lone):
            self.waiting.update(request.ext["c"] for _, request in lone if request.code == WAITS)
            self.waiting_tasks.add(trio.lowlevel.current_task().name)
            await self.released.wait()
        return [
            request.response(0, {**request.ext, "peer": connection.peer}, request.body)
            for connection, request in lone
        ]


class Client:
    """A raw socket that sends frames and reads answers."""

    def __init__(self, stream: trio.SocketStream, name: str) -> None:
        self.stream, self.name = stream, name
        self.decoder = FrameDecoder()
        self.opaque = 0

    @property
    def local(self) -> str:
        host, port = self.stream.socket.getsockname()[:2]
        return f"{host}:{port}"

    def frame(self, code: int = ECHO, **ext: str) -> bytes:
        request = RemotingCommand.request(code, {"c": self.name, **ext}, b"body-" + self.name.encode())
        self.opaque += 1
        request.opaque = self.opaque
        return request.encode()

    async def answers(self, count: int) -> list[RemotingCommand]:
        got: list[RemotingCommand] = []
        with trio.fail_after(10):
            while len(got) < count:
                data = await self.stream.receive_some(65536)
                if not data:
                    raise EOFError(f"client {self.name}: the server closed the connection")
                got += self.decoder.feed(data)
        return got


async def serve(nursery: trio.Nursery, echoes: Echoes, *, read_reactor: bool = True) -> RemotingServer:
    limits = TransportLimits()
    server = RemotingServer("test", "127.0.0.1", 0, echoes.router, limits, read_reactor=read_reactor)
    await nursery.start(server.run)
    return server


@pytest.fixture(autouse=True)
def crowded_for_a_minute(monkeypatch):
    """Any two connections' receives a minute apart make the server crowded: the connections
    of a test wait in the reactor whatever the pace of a loaded machine."""
    monkeypatch.setattr(crowd_module, "CROWD_HOLD", 60.0)


@pytest.fixture
async def opened():
    """Client streams, closed after the test."""
    streams: list[trio.SocketStream] = []
    yield streams
    for stream in streams:
        await stream.aclose()


async def clients(server: RemotingServer, count: int, opened: list[trio.SocketStream]) -> list[Client]:
    group = [Client(await trio.open_tcp_stream("127.0.0.1", server.port), str(i)) for i in range(count)]
    opened += [client.stream for client in group]
    return group


async def until(condition) -> None:
    """Wait (at most 5 s) until ``condition()`` holds."""
    with trio.fail_after(5):
        while not condition():  # noqa: ASYNC110 - the server's state: no event to wait on
            await trio.sleep(0.01)


async def parked(
    nursery: trio.Nursery, opened: list[trio.SocketStream]
) -> tuple[Echoes, RemotingServer, list[Client]]:
    """A server and :data:`CLIENTS` clients after three rounds: their connections wait in the
    reactor."""
    echoes = Echoes()
    server = await serve(nursery, echoes)
    group = await clients(server, CLIENTS, opened)
    for _ in range(3):
        await one_round(group)
    return echoes, server, group


async def one_round(group: list[Client], code: int = ECHO, **ext: str) -> list[RemotingCommand]:
    """Every client sends one request, then every client reads its answer."""
    for client in group:
        await client.stream.send_all(client.frame(code, **ext))
    return [(await client.answers(1))[0] for client in group]


async def test_lone_requests_of_many_connections_are_answered_together_each_to_its_own(nursery, opened):
    echoes = Echoes()
    server = await serve(nursery, echoes)
    group = await clients(server, CLIENTS, opened)
    for round_ in range(ROUNDS):
        answers = await one_round(group, r=str(round_))
        for client, answer in zip(group, answers, strict=True):
            assert answer.code == ResponseCode.SUCCESS
            assert answer.opaque == client.opaque
            assert (answer.ext["c"], answer.ext["r"]) == (client.name, str(round_))
            assert answer.ext["peer"] == client.local, "the handler saw the connection it came on"
            assert answer.body == b"body-" + client.name.encode()
    assert server.reactor is not None and server.reactor.answered_across > 0
    assert max(map(len, echoes.groups)) > 1, "lone requests of several connections in one call"
    for calls in echoes.groups:
        assert len(calls) == len(set(calls)), "a connection has one lone request per pass at most"
    assert {connection.requests_handled for connection in server.connections} == {ROUNDS}


async def test_a_lone_client_reads_its_own_socket(nursery, opened):
    """With one client sending, the reactor stays out of the way (one hop fewer per round trip)."""
    echoes = Echoes()
    server = await serve(nursery, echoes)
    (client,) = await clients(server, 1, opened)
    for _ in range(50):
        await client.stream.send_all(client.frame())
        (answer,) = await client.answers(1)
        assert answer.opaque == client.opaque
    assert server.reactor is not None and server.reactor.answered_across == 0 and not echoes.groups


async def test_without_the_reactor_every_connection_reads_its_own_socket(nursery, opened):
    echoes = Echoes()
    server = await serve(nursery, echoes, read_reactor=False)
    group = await clients(server, 4, opened)
    for _ in range(5):
        assert [answer.code for answer in await one_round(group)] == [ResponseCode.SUCCESS] * 4
    assert server.reactor is None and not echoes.groups


async def test_other_traffic_of_a_parked_connection_goes_to_its_read_loop(nursery, opened):
    """While the server is crowded: several frames in one write, a frame in two writes, a code
    not handled across, all answered, in order where one connection's answers have one."""
    echoes, server, group = await parked(nursery, opened)
    pipelining, split, plain = group[0], group[1], group[2]

    await pipelining.stream.send_all(b"".join(pipelining.frame(i=str(i)) for i in range(50)))
    frame = split.frame(i="split")
    await split.stream.send_all(frame[:7])
    await trio.sleep(0.05)
    await split.stream.send_all(frame[7:])
    await plain.stream.send_all(plain.frame(PLAIN, i="plain"))
    others = await one_round(group[3:])

    answered = await pipelining.answers(50)
    assert sorted(int(answer.ext["i"]) for answer in answered) == list(range(50))
    assert [answer.ext["i"] for answer in await split.answers(1)] == ["split"]
    assert [answer.ext["i"] for answer in await plain.answers(1)] == ["plain"]
    assert all(answer.code == ResponseCode.SUCCESS for answer in others)
    for _ in range(3):  # and they take lone requests from the reactor again
        assert all(answer.code == ResponseCode.SUCCESS for answer in await one_round(group))


async def test_a_malformed_frame_closes_only_its_own_parked_connection(nursery, caplog, opened):
    echoes, server, group = await parked(nursery, opened)
    bad, good = group[0], group[1:]
    await bad.stream.send_all(b"\x00\x00\x00\x08\x00\x00\x00\xffgarbage!")
    for _ in range(3):
        assert all(answer.code == ResponseCode.SUCCESS for answer in await one_round(good))
    with pytest.raises(EOFError):
        await bad.answers(1)
    await until(lambda: len(server.connections) == CLIENTS - 1)
    assert "malformed frame" in caplog.text


async def test_a_failing_group_answers_each_request_with_an_error_and_the_connections_live(nursery, opened):
    echoes, server, group = await parked(nursery, opened)
    failed = 0
    for _ in range(5):
        for answer in await one_round(group, BOOM):
            assert answer.code == ResponseCode.SYSTEM_ERROR
            assert "bug" in answer.remark
            failed += 1
    assert failed == 5 * CLIENTS
    assert all(answer.code == ResponseCode.SUCCESS for answer in await one_round(group))
    assert len(server.connections) == CLIENTS


async def test_a_guard_refuses_one_request_of_a_group_and_the_others_are_answered(nursery, opened):
    echoes = Echoes()

    def refuse_client_3(connection: Connection, request: RemotingCommand) -> RemotingCommand | None:
        if request.ext.get("c") == "3":
            return request.response(ResponseCode.NO_PERMISSION, remark="client 3 may not")
        return None

    echoes.router.guards.append(refuse_client_3)
    server = await serve(nursery, echoes)
    group = await clients(server, CLIENTS, opened)
    for _ in range(ROUNDS):
        answers = await one_round(group)
        assert answers[3].code == ResponseCode.NO_PERMISSION and answers[3].remark == "client 3 may not"
        assert all(answer.code == ResponseCode.SUCCESS for index, answer in enumerate(answers) if index != 3)
    assert not any("3" in calls for calls in echoes.groups), "a refused request never reaches its handler"


async def test_a_group_that_waits_does_not_hold_up_the_other_connections(nursery, opened):
    """A code that is not answered at once (a put waiting for its flush) is handled in a task of
    its own: after waiting for it a moment (``WAIT_HOLD``), the reactor reads and answers other
    connections meanwhile."""
    echoes, server, group = await parked(nursery, opened)
    waiting, others = group[: CLIENTS // 2], group[CLIENTS // 2 :]
    for client in waiting:
        await client.stream.send_all(client.frame(WAITS))
    await until(lambda: echoes.waiting == {client.name for client in waiting})
    for _ in range(5):
        assert all(answer.code == ResponseCode.SUCCESS for answer in await one_round(others))
    echoes.released.set()
    for client in waiting:
        (answer,) = await client.answers(1)
        assert answer.code == ResponseCode.SUCCESS and answer.opaque == client.opaque
    assert {name.rpartition(".")[2] for name in echoes.waiting_tasks} == {"_answer"}, (
        "the reactor took the waiting requests (in a task of its own) and read on meanwhile"
    )


async def test_closed_connections_leave_the_reactor(nursery, opened):
    echoes, server, group = await parked(nursery, opened)
    for client in group:
        await client.stream.aclose()
    await until(lambda: not server.connections)
    assert server.reactor is not None and not server.reactor.parked
