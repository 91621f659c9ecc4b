"""A client's answer reactor (``wire.remoting.answer_reactor``) over real loopback TCP: the
answers of a run's many connections read by one task, everything else left to each
connection's read loop."""

from __future__ import annotations

import struct
from contextlib import AsyncExitStack

import pytest
import trio
import trio.testing

from kernel.errors import RemotingClosedError, RemotingTimeoutError
from wire.remoting import (
    Connection,
    RemotingClient,
    RemotingCommand,
    RemotingServer,
    Router,
    TransportLimits,
)
from wire.remoting import crowd as crowd_module
from wire.remoting.answer_reactor import shared_answer_reactor
from wire.remoting.crowd import clients_crowd

ECHO, HELD, ASKS_BACK = 900, 901, 902
CLIENTS = 8
ROUNDS = 20


class Server:
    """A remoting server whose HELD requests wait until released and whose ASKS_BACK requests
    send a request of their own to the client before answering."""

    def __init__(self) -> None:
        self.router = Router(name="answer-reactor-test")
        self.released = trio.Event()
        self.holding = trio.Event()
        self.router.register(ECHO, self.echo)
        self.router.register(HELD, self.hold)
        self.router.register(ASKS_BACK, self.ask_back)

    async def echo(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(0, request.ext, request.body)

    async def hold(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        self.holding.set()
        await self.released.wait()
        return request.response(0, request.ext)

    async def ask_back(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        asked = await connection.request(RemotingCommand.request(ECHO, {"from": "server"}, b"ping"), 5)
        return request.response(0, {"client said": asked.ext["answered by"]}, asked.body)


async def serve(nursery: trio.Nursery, server: Server) -> RemotingServer:
    remoting = RemotingServer("test", "127.0.0.1", 0, server.router, TransportLimits())
    await nursery.start(remoting.run)
    return remoting


async def echo_round(client: RemotingClient, address: str, name: str) -> None:
    for number in range(ROUNDS):
        request = RemotingCommand.request(ECHO, {"c": name, "n": str(number)}, name.encode())
        answer = await client.invoke(address, request, timeout=10)
        assert (answer.ext, answer.body) == ({"c": name, "n": str(number)}, name.encode())


async def test_the_answers_of_many_connections_are_read_by_one_reactor(nursery):
    remoting = await serve(nursery, Server())
    reactor = shared_answer_reactor()
    read_before = reactor.answers_read
    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(RemotingClient.open()) for _ in range(CLIENTS)]
        async with trio.open_nursery() as rounds:
            for number, client in enumerate(clients):
                rounds.start_soon(echo_round, client, remoting.address, f"c{number}")
        connections = [await client.connection(remoting.address) for client in clients]
        assert all(connection.answer_reactor is reactor for connection in connections)
        assert reactor.parked == CLIENTS  # each read loop waits in the reactor, not on its socket
    assert reactor.answers_read - read_before >= CLIENTS * ROUNDS
    assert reactor.passes > 0


async def test_a_client_without_the_shared_reader_reads_its_own_socket(nursery):
    remoting = await serve(nursery, Server())
    reactor = shared_answer_reactor()
    read_before = reactor.answers_read
    async with RemotingClient.open(shared_reader=False) as client:
        await echo_round(client, remoting.address, "own")
        assert (await client.connection(remoting.address)).answer_reactor is None
    assert reactor.answers_read == read_before


async def test_a_polling_client_reads_its_own_answers_not_the_reactor(nursery):
    remoting = await serve(nursery, Server())
    reactor = shared_answer_reactor()
    read_before = reactor.answers_read
    async with RemotingClient.open(busy_poll=0.05) as client:  # a window no round trip outlasts
        await echo_round(client, remoting.address, "poll")
        connection = await client.connection(remoting.address)
        assert connection.answers_read_by_requests >= ROUNDS - 1  # the first may come before polling
    assert reactor.answers_read == read_before


async def test_a_request_of_the_server_is_served_while_the_connection_waits_in_the_reactor(nursery):
    remoting = await serve(nursery, Server())
    router = Router(name="client side")

    async def answer_the_server(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(0, {"answered by": "client"}, request.body + b"-pong")

    router.register(ECHO, answer_the_server)
    reactor = shared_answer_reactor()
    async with RemotingClient.open(router) as client:
        for _ in range(3):  # the connection parks again after each request of the server's
            answer = await client.invoke(remoting.address, RemotingCommand.request(ASKS_BACK, {}), 10)
            assert (answer.ext, answer.body) == ({"client said": "client"}, b"ping-pong")
        read_before = reactor.answers_read
        await echo_round(client, remoting.address, "after")
        assert reactor.answers_read - read_before >= ROUNDS


async def test_a_server_closing_fails_the_waiting_request_and_leaves_the_reactor(nursery):
    server = Server()
    remoting = await serve(nursery, server)
    reactor = shared_answer_reactor()
    async with RemotingClient.open() as client:
        connection = await client.connection(remoting.address)
        failed: list[BaseException] = []

        async def held_request() -> None:
            try:
                await connection.request(RemotingCommand.request(HELD, {}), 30)
            except RemotingClosedError as error:
                failed.append(error)

        async with trio.open_nursery() as waiting:
            waiting.start_soon(held_request)
            with trio.fail_after(10):
                await server.holding.wait()
            parked_before = reactor.parked
            for served in list(remoting.connections):
                served.close("the test closes it")
        assert len(failed) == 1 and "closed" in str(failed[0])
        assert connection.closed and "closed by peer" in connection.close_reason
        assert reactor.parked == parked_before - 1
        server.released.set()
        # A closed connection is replaced on the next request, and it parks in turn.
        await echo_round(client, remoting.address, "again")


async def test_a_request_times_out_while_its_connection_waits_in_the_reactor(nursery):
    server = Server()
    remoting = await serve(nursery, server)
    async with RemotingClient.open() as client:
        with pytest.raises(RemotingTimeoutError, match="no response within 0.2s"):
            await client.invoke(remoting.address, RemotingCommand.request(HELD, {}), timeout=0.2)
        server.released.set()  # the late answer is dropped; the connection goes on
        await echo_round(client, remoting.address, "after the timeout")


async def test_a_malformed_answer_closes_only_its_connection(nursery):
    good = await serve(nursery, Server())
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    bad_port = listeners[0].socket.getsockname()[1]

    async def answer_garbage(stream: trio.SocketStream) -> None:
        async with stream:
            await stream.receive_some(65536)
            # A frame whose header claims more bytes than the frame holds.
            await stream.send_all(struct.pack(">II", 8, 1000) + b"xxxx")
            await trio.sleep_forever()

    nursery.start_soon(trio.serve_listeners, answer_garbage, listeners)
    reactor = shared_answer_reactor()
    async with RemotingClient.open() as client:
        await echo_round(client, good.address, "before")
        with pytest.raises(RemotingClosedError, match="malformed frame"):
            await client.invoke(f"127.0.0.1:{bad_port}", RemotingCommand.request(ECHO, {}), timeout=10)
        read_before = reactor.answers_read
        await echo_round(client, good.address, "after")  # the reactor reads on for the others
        assert reactor.answers_read - read_before >= ROUNDS


async def test_a_client_closing_its_connection_takes_it_out_of_the_reactor(nursery):
    remoting = await serve(nursery, Server())
    reactor = shared_answer_reactor()
    async with RemotingClient.open() as client:
        connection = await client.connection(remoting.address)
        await echo_round(client, remoting.address, "first")
        parked = reactor.parked
        client.close(remoting.address, "the test is done with it")
        with trio.fail_after(10):
            await connection.wait_closed()
        await trio.testing.wait_all_tasks_blocked()
        assert reactor.parked == parked - 1


async def test_a_failure_handling_one_connection_ends_that_connection_not_the_run(
    nursery, monkeypatch, caplog
):
    remoting = await serve(nursery, Server())
    async with RemotingClient.open() as client, RemotingClient.open() as other:
        doomed = await client.connection(remoting.address)
        await echo_round(other, remoting.address, "other")
        take_answers = Connection.take_answers

        def broken_for_one(connection: Connection, data: bytes) -> bool:
            if connection is doomed:
                raise RuntimeError("a bug in the answer's handling")
            return take_answers(connection, data)

        monkeypatch.setattr(Connection, "take_answers", broken_for_one)
        with pytest.raises(RemotingClosedError, match="answer reactor failed: RuntimeError"):
            await doomed.request(RemotingCommand.request(ECHO, {}), 10)
        assert "reading 127.0.0.1" in caplog.text
        await echo_round(other, remoting.address, "other, after")  # the reactor still runs


@pytest.fixture
def crowded_for_a_minute(monkeypatch):
    """Receives of two clients a minute apart make the run's clients crowded: the test's
    phases hold whatever the pace of a loaded machine."""
    monkeypatch.setattr(crowd_module, "CROWD_HOLD", 60.0)


async def test_adaptive_clients_of_one_run_stop_polling_while_several_wait_and_the_reactor_reads(
    nursery, crowded_for_a_minute
):
    remoting = await serve(nursery, Server())
    reactor = shared_answer_reactor()
    read_before = reactor.answers_read
    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(RemotingClient.open(busy_poll="auto")) for _ in range(CLIENTS)
        ]
        async with trio.open_nursery() as rounds:
            for number, client in enumerate(clients):
                rounds.start_soon(echo_round, client, remoting.address, f"c{number}")
        assert clients_crowd().crowded(trio.current_time())
        polled = [(await client.connection(remoting.address)).answers_read_by_requests for client in clients]
        spins = sum(client.busy_poller.spins for client in clients)
    # Only each client's first answers can come before the crowd is seen.
    assert sum(polled) <= CLIENTS * 2, f"requests kept polling among {CLIENTS} clients: {polled}"
    assert reactor.answers_read - read_before >= CLIENTS * (ROUNDS - 2)
    assert spins <= CLIENTS * 4, f"the pollers spun {spins} times while crowded"


async def test_one_client_talking_to_two_servers_is_one_peer_and_keeps_polling(nursery, crowded_for_a_minute):
    first, second = await serve(nursery, Server()), await serve(nursery, Server())
    async with RemotingClient.open(busy_poll=0.05) as fixed, RemotingClient.open(busy_poll="auto") as client:
        assert fixed.crowd is None  # a fixed window polls whatever the crowd
        async with trio.open_nursery() as rounds:
            rounds.start_soon(echo_round, client, first.address, "first")
            rounds.start_soon(echo_round, client, second.address, "second")
        assert not clients_crowd().crowded(trio.current_time()), "one client is one peer"
        await echo_round(client, first.address, "alone")
        assert (await client.connection(first.address)).answers_read_by_requests > 0, "polls again"
