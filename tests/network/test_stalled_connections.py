"""Half-open and stalled connections are closed (issue 23): a frame that stops mid-way, a
declared 15 MiB frame that never comes, and a silent connection, on the broker's and the
NameServer's ports, while other clients are served; a long-held pull is not idle."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from tests.interop.conftest import RunningBroker, start_broker
from tests.network.wire import pull_request, send_request
from wire.remoting import RemotingClient, ResponseCode
from wire.remoting.command import FrameDecoder

TIMEOUTS = 'channel_max_idle_time = "3s"\nframe_read_timeout = "1s"'


@pytest.fixture
def broker(tmp_path):
    running = start_broker(tmp_path, namesrv=TIMEOUTS, tables=f"[remoting]\n{TIMEOUTS}\n")
    try:
        yield running
    finally:
        running.stop()


def _connect(addr: str) -> socket.socket:
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.settimeout(10)
    return sock


def _seconds_until_closed(sock: socket.socket) -> float:
    started = time.monotonic()
    try:
        assert sock.recv(1024) == b""
    except ConnectionResetError:
        pass
    return time.monotonic() - started


STALLS = {
    "half a length field": b"\x00\x00",
    "header promised, not sent": struct.pack(">ii", 200, 150) + b'{"code":',
    "a declared 15 MiB body": struct.pack(">ii", 15 * 1024 * 1024, 2) + b"{}" + b"x" * 1000,
}


@pytest.mark.parametrize("server", ["broker", "namesrv"])
@pytest.mark.parametrize("stall", list(STALLS), ids=list(STALLS))
async def test_a_frame_that_stalls_closes_its_connection_only(broker: RunningBroker, server, stall):
    addr = broker.broker if server == "broker" else broker.namesrv
    with _connect(addr) as sock:
        sock.sendall(STALLS[stall])
        async with RemotingClient.open() as client:  # others are served meanwhile
            response = await client.invoke(broker.broker, send_request("Stalls", b"x"), 10)
            assert response.code == ResponseCode.SUCCESS
        waited = _seconds_until_closed(sock)
    assert waited < 8, f"closed after {waited:.1f}s"
    assert "did not complete within 1s" in broker.log.read_text()


@pytest.mark.parametrize("server", ["broker", "namesrv"])
def test_a_silent_connection_is_closed_after_the_idle_time(broker: RunningBroker, server):
    addr = broker.broker if server == "broker" else broker.namesrv
    with _connect(addr) as sock:
        waited = _seconds_until_closed(sock)
    assert 2 < waited < 10, waited
    assert "idle for 3s (serverChannelMaxIdleTimeSeconds)" in broker.log.read_text()


async def test_a_pull_held_longer_than_the_idle_time_is_answered(broker: RunningBroker):
    async with RemotingClient.open() as client:
        await client.invoke(broker.broker, send_request("Held", b"first", queue_id=0), 10)
        # The send is answered once stored; the consume queue learns of it a moment later. A
        # pull at offset 1 before that finds an empty queue (PULL_OFFSET_MOVED, as upstream),
        # so the first pull waits for the message to be dispatched.
        first = await client.invoke(broker.broker, pull_request("Held", 0, 0, suspend_ms=5000), 15)
        assert first.code == ResponseCode.SUCCESS
        started = time.monotonic()
        held = await client.invoke(broker.broker, pull_request("Held", 0, 1, suspend_ms=5000), 15)
        assert held.code == ResponseCode.PULL_NOT_FOUND and time.monotonic() - started > 4
        again = await client.invoke(broker.broker, pull_request("Held", 0, 0), 10)
        assert again.code == ResponseCode.SUCCESS


async def test_a_connection_silent_after_its_held_pull_is_answered_is_closed_after_the_idle_time(
    broker: RunningBroker,
):
    """A held pull keeps its connection open past the idle time; once it is answered and the
    client says nothing more, the idle time counts from the answer."""
    async with RemotingClient.open() as client:
        await client.invoke(broker.broker, send_request("HeldThenIdle", b"first", queue_id=0), 10)
        first = await client.invoke(broker.broker, pull_request("HeldThenIdle", 0, 0, suspend_ms=5000), 15)
        assert first.code == ResponseCode.SUCCESS
    with _connect(broker.broker) as sock:
        sock.sendall(pull_request("HeldThenIdle", 0, 1, suspend_ms=4000).encode())
        decoder = FrameDecoder()
        answers = []
        while not answers:
            answers = decoder.feed(sock.recv(65536))
        assert answers[0].code == ResponseCode.PULL_NOT_FOUND
        waited = _seconds_until_closed(sock)
    assert 2 < waited < 9, waited
