"""One send in flight: how much of a round trip is the SDK's own, next to a raw-socket client.

Why it exists: the one-in-flight rows of ``produce_consume`` time a client and a broker
together on one 2-core machine, so a broker change and a client change look the same there.
This bench separates them (issue 38). Three clients, same run, one send in flight each:

- ``sdk``: the trio :class:`~trocket.Producer` as applications use it (default busy polling);
- ``blk``: the :class:`~trocket.BlockingProducer` (plain calls, no event loop; default
  ``busy_poll``: it polls its socket for each answer before sleeping in ``recv``);
- ``raw``: a prebuilt SEND_MESSAGE_V2 frame written to a plain socket, the answer polled for
  with non-blocking reads and ``sched_yield`` between looks (as the SDK's poller yields). Its
  own cost is a few microseconds: the floor of any Python client on this machine.

Against two peers:

- ``instant``: a process that answers every request at once from raw sockets (a route to
  itself for route lookups, SUCCESS for sends and everything else), so a send's time is
  nearly all the client's;
- ``broker``: a ``trocket up`` NameServer + broker with each ``--flush`` policy.

Each row prints sends/s, p50, and the client's CPU microseconds a send; each producer's row is
then compared with the raw client's: the raw client's rate over the producer's (how much faster
a client costing nothing would be) and the producer's own part of the round trip.

    ./run bench client_send [--sends 20000] [--flush async,sync] [--size 128]
"""

from __future__ import annotations

import argparse
import os
import select
import socket
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.produce_consume import trocket_server  # noqa: E402
from trocket import BlockingProducer, Message, Producer  # noqa: E402
from trocket.admin import AdminClient  # noqa: E402
from trocket.client.sending import SendRules  # noqa: E402
from wire.remoting import RemotingCommand, RequestCode, ResponseCode  # noqa: E402
from wire.remoting.command import decode_header  # noqa: E402

TOPIC = "BenchClientSend"
WARM_SENDS = 2_000
_LENGTH = struct.Struct(">I")


# --- the instant peer -------------------------------------------------------------------------


def _route(address: str) -> bytes:
    """A TopicRouteData naming the peer itself as the only broker's master."""
    return orjson.dumps(
        {
            "brokerDatas": [{"brokerName": "instant", "cluster": "bench", "brokerAddrs": {"0": address}}],
            "queueDatas": [
                {
                    "brokerName": "instant",
                    "readQueueNums": 4,
                    "writeQueueNums": 4,
                    "perm": 6,
                    "topicSysFlag": 0,
                }
            ],
        }
    )


def _answer(request: RemotingCommand, route: bytes) -> bytes:
    if request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
        response = request.response(ResponseCode.SUCCESS, body=route)
    elif request.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE):
        queue_id = request.ext.get("e", "0")
        stored = {"msgId": "7F000001000027BD0000000000000000", "queueId": queue_id, "queueOffset": "0"}
        response = request.response(ResponseCode.SUCCESS, stored)
    else:
        response = request.response(ResponseCode.SUCCESS)
    return b"".join(response.encode_parts())


def _frames(buffer: bytearray) -> Iterator[RemotingCommand]:
    """Complete frames at the front of ``buffer`` (taken out of it)."""
    while len(buffer) >= 8:
        total = _LENGTH.unpack_from(buffer)[0]
        if len(buffer) < 4 + total:
            return
        head = _LENGTH.unpack_from(buffer, 4)[0]
        header_length = head & 0xFFFFFF
        header = bytes(buffer[8 : 8 + header_length])
        body = bytes(buffer[8 + header_length : 4 + total])
        del buffer[: 4 + total]
        yield decode_header(head >> 24, header, body)


def serve_instantly(listener: socket.socket) -> None:
    """Answer every request on every connection at once, polling (never returns)."""
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    route = _route(address)
    listener.setblocking(False)
    poller = select.epoll()
    poller.register(listener.fileno(), select.EPOLLIN)
    connections: dict[int, tuple[socket.socket, bytearray]] = {}
    while True:
        events = poller.poll(0)
        if not events:
            os.sched_yield()
            continue
        for fd, _ in events:
            if fd == listener.fileno():
                connection, _ = listener.accept()
                connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                connection.setblocking(False)
                connections[connection.fileno()] = (connection, bytearray())
                poller.register(connection.fileno(), select.EPOLLIN)
                continue
            connection, buffer = connections[fd]
            try:
                data = connection.recv(1 << 16)
            except BlockingIOError:
                continue
            if not data:
                poller.unregister(fd)
                connection.close()
                del connections[fd]
                continue
            buffer += data
            answers = [_answer(request, route) for request in _frames(buffer) if not request.is_oneway]
            if answers:
                connection.sendall(b"".join(answers))


@contextmanager
def instant_peer() -> Iterator[str]:
    """The instant peer in a child process; its address."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        try:
            serve_instantly(listener)
        finally:
            os._exit(0)
    listener.close()
    try:
        yield address
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


# --- the clients ------------------------------------------------------------------------------


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def figures(latencies: list[float], elapsed: float, cpu: float) -> dict[str, float]:
    count = len(latencies)
    return {
        "sends/s": count / elapsed,
        "p50 us": statistics.median(latencies) * 1e6,
        "client cpu us": cpu / count * 1e6,
    }


async def sdk_sends(namesrv: str, body: bytes, sends: int) -> dict[str, float]:
    """The trio Producer, one send in flight."""
    async with Producer("PG_bench_client", namesrv, send_timeout=30) as producer:
        message = Message(TOPIC, body)
        for _ in range(WARM_SENDS):
            await producer.send(message)
        latencies = []
        cpu, started = cpu_seconds(), time.perf_counter()
        for _ in range(sends):
            sent = time.perf_counter()
            await producer.send(message)
            latencies.append(time.perf_counter() - sent)
        return figures(latencies, time.perf_counter() - started, cpu_seconds() - cpu)


def blocking_sends(namesrv: str, body: bytes, sends: int) -> dict[str, float]:
    """The BlockingProducer, one send in flight."""
    with BlockingProducer("PG_bench_client", namesrv, send_timeout=30) as producer:
        message = Message(TOPIC, body)
        for _ in range(WARM_SENDS):
            producer.send(message)
        latencies = []
        cpu, started = cpu_seconds(), time.perf_counter()
        for _ in range(sends):
            sent = time.perf_counter()
            producer.send(message)
            latencies.append(time.perf_counter() - sent)
        return figures(latencies, time.perf_counter() - started, cpu_seconds() - cpu)


def raw_frame(body: bytes) -> bytes:
    """A SEND_MESSAGE_V2 request for queue 0 as the SDK builds it (its id repeats: the store
    takes the same id many times, as it would from a client retrying)."""
    request, _ = SendRules("PG_bench_client").single(Message(TOPIC, body))
    request.ext["e"] = "0"
    request.opaque = 1
    return b"".join(request.encode_parts())


def raw_sends(address: str, body: bytes, sends: int) -> dict[str, float]:
    """The floor: a prebuilt frame, the answer polled for (``sched_yield`` between looks)."""
    frame = raw_frame(body)
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as connection:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection.setblocking(False)

        def round_trip() -> None:
            connection.sendall(frame)
            received = b""
            while len(received) < 4 or len(received) < 4 + _LENGTH.unpack_from(received)[0]:
                try:
                    chunk = connection.recv(1 << 16)
                except BlockingIOError:
                    os.sched_yield()
                    continue
                if not chunk:
                    raise ConnectionError("the peer closed the connection")
                received += chunk

        for _ in range(WARM_SENDS):
            round_trip()
        latencies = []
        cpu, started = cpu_seconds(), time.perf_counter()
        for _ in range(sends):
            sent = time.perf_counter()
            round_trip()
            latencies.append(time.perf_counter() - sent)
        return figures(latencies, time.perf_counter() - started, cpu_seconds() - cpu)


async def broker_address(namesrv: str) -> str:
    async with AdminClient.open([namesrv]) as admin:
        return next(iter((await admin.master_addrs(None)).values()))


# --- report -----------------------------------------------------------------------------------


def show(peer: str, client: str, row: dict[str, float]) -> None:
    print(
        f"  {peer:14s} {client:4s}  {row['sends/s']:9,.0f} sends/s  p50 {row['p50 us']:6.1f} us"
        f"  client CPU {row['client cpu us']:6.1f} us a send",
        flush=True,
    )


def compare(peer: str, client: str, row: dict[str, float], raw: dict[str, float]) -> None:
    ratio = raw["sends/s"] / row["sends/s"]
    share = (row["p50 us"] - raw["p50 us"]) / row["p50 us"]
    print(
        f"  {peer:14s} raw / {client} rate {ratio:.2f}x; {client}'s own part of a round trip "
        f"{row['p50 us'] - raw['p50 us']:.1f} us of {row['p50 us']:.1f} ({share:.0%})",
        flush=True,
    )


def report(peer: str, sdk: dict[str, float], blocking: dict[str, float], raw: dict[str, float]) -> None:
    show(peer, "sdk", sdk)
    show(peer, "blk", blocking)
    show(peer, "raw", raw)
    compare(peer, "sdk", sdk, raw)
    compare(peer, "blk", blocking, raw)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=20_000, help="measured sends a row")
    parser.add_argument("--flush", default="async,sync", help="broker flush policies, comma-separated")
    parser.add_argument("--size", type=int, default=128, help="body bytes")
    parser.add_argument("--no-instant", action="store_true", help="skip the instant peer")
    args = parser.parse_args()
    body = os.urandom(args.size // 2).hex().encode()[: args.size]
    print(f"one send in flight, {args.size} B bodies, {args.sends:,} sends a row", flush=True)
    if not args.no_instant:
        with instant_peer() as address:
            sdk = trio.run(sdk_sends, address, body, args.sends)
            blocking = blocking_sends(address, body, args.sends)
            raw = raw_sends(address, body, args.sends)
        report("instant peer", sdk, blocking, raw)
    for flush in [f.strip() for f in args.flush.split(",") if f.strip()]:
        with tempfile.TemporaryDirectory(prefix="trocket-bench-client-") as root:
            with trocket_server(Path(root), flush) as server:
                sdk = trio.run(sdk_sends, server.address, body, args.sends)
                blocking = blocking_sends(server.address, body, args.sends)
                raw = raw_sends(trio.run(broker_address, server.address), body, args.sends)
                blocking_again = blocking_sends(server.address, body, args.sends)
                sdk_again = trio.run(sdk_sends, server.address, body, args.sends)
        # The better of each producer's rows either side of the raw one: a drift of the machine
        # during the run does not overstate a producer's part.
        report(
            f"broker {flush}",
            min(sdk, sdk_again, key=lambda row: row["p50 us"]),
            min(blocking, blocking_again, key=lambda row: row["p50 us"]),
            raw,
        )


if __name__ == "__main__":
    main()
