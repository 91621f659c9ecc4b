"""Busy polling (``kernel.remoting.busy_poll``): polls for a window after activity, parks when
idle, and serves requests over real TCP exactly as the sleeping loop does."""

from __future__ import annotations

import pytest
import trio

from kernel.remoting import RemotingClient, RemotingCommand, RemotingServer, Router
from kernel.remoting.busy_poll import BusyPoller, start_busy_poll

ECHO = 900


async def test_a_poller_parks_until_touched_and_polls_for_its_window_after():
    poller = BusyPoller(0.05)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(poller.run)
        await trio.sleep(0.1)
        assert poller.spins == 0 and poller.parked, "never touched: parked from the start"
        poller.touch()
        await trio.sleep(0.02)
        assert poller.spins > 0, "touched: polling"
        await trio.sleep(0.2)  # the window ended long ago
        parked_at = poller.spins
        await trio.sleep(0.1)
        assert poller.spins == parked_at and poller.parked, "parked again once the window passed"
        poller.touch()
        await trio.sleep(0.02)
        assert poller.spins > parked_at, "a touch wakes the parked poller"
        nursery.cancel_scope.cancel()


async def test_no_window_starts_nothing_and_a_negative_one_is_refused():
    async with trio.open_nursery() as nursery:
        assert start_busy_poll(nursery, 0) is None
    with pytest.raises(ValueError, match="must be positive"):
        BusyPoller(-1)


async def test_a_busy_polling_server_and_client_answer_every_request(nursery):
    async def echo(connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(0, request.ext, request.body)

    router = Router(name="polled")
    router.register(ECHO, echo, inline_alone=True)
    server = RemotingServer("polled", "127.0.0.1", 0, router, busy_poll=0.02)
    await nursery.start(server.run)
    assert server.busy_poller is not None
    async with RemotingClient.open(busy_poll=0.02) as client:
        assert client.busy_poller is not None
        for i in range(50):
            answer = await client.invoke(server.address, RemotingCommand.request(ECHO, {"i": i}, b"x" * i))
            assert answer.ext["i"] == str(i) and answer.body == b"x" * i
        assert server.busy_poller.spins > 0 and client.busy_poller.spins > 0
