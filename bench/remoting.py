"""Remoting round trips per second over loopback, next to a plain-socket echo baseline.

The server runs in its own process (as a broker would), the client in this one. For 1 and
8 connections with 1 and 64 requests in flight per connection, it measures:

* baseline: the plainest request/response protocol over trio sockets: length-prefixed frames,
  the server splits what it reads into frames and writes each one back, the client sends each
  request with its own write and wakes the waiting caller when its echo arrives (FIFO order).
  No header codec, no routing, no opaque correlation;
* pump (for reference): bytes echoed unparsed and counted in frame-sized units, the ceiling
  of the socket path itself;
* remoting: ``wire.remoting`` server and client, a JSON-header request of the same size,
  decoded, routed to a handler, answered with a response, correlated by opaque;
* inline: the same handler registered ``inline=True``: run in the connection's read loop
  instead of a task per request (printed as a second table, alternating rounds with the task
  per request);
* acl: the same with the acl plugin's guard on the server (RocketMQ plain ACL: account lookup,
  HMAC-SHA1 signature check, SUB on the topic and the group) and every request signed by the
  client.

Prints round trips/s, the ratio remoting/baseline (target: >= 40 % with 64 in flight),
acl/remoting, signed against unsigned (target: >= 80 %), and the server's CPU per round trip
without and with the ACL (read from /proc: the cost itself, steadier than throughput on a
shared machine).

    ./run bench remoting [--seconds 2]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import trio

from wire.remoting import Connection, RemotingClient, RemotingCommand, RemotingServer, RequestCode, Router
from wire.remoting.signature import SessionCredentials

ECHO = RequestCode.QUERY_CONSUMER_OFFSET
"""A request the ACL checks fully (SUB on a topic and a group), answered by an echo handler."""
REQUEST = RemotingCommand.request(ECHO, {"consumerGroup": "CG_bench", "topic": "BenchTopic", "queueId": 0})
FRAME_SIZE = len(REQUEST.encode())
ROUNDS = 7
"""Alternating rounds of the unsigned and signed remoting runs per point."""
CREDENTIALS = SessionCredentials("bench-key", "bench-secret")
ACL_FILE = {
    "accounts": [
        {"accessKey": f"other-key-{i}", "secretKey": "other-secret", "defaultTopicPerm": "SUB"}
        for i in range(50)
    ]
    + [
        {
            "accessKey": "bench-key",
            "secretKey": "bench-secret",
            "defaultTopicPerm": "DENY",
            "defaultGroupPerm": "DENY",
            "topicPerms": [f"T{i}=PUB" for i in range(100)] + ["BenchTopic=SUB"],
            "groupPerms": ["CG_bench=SUB"],
        }
    ]
}
"""51 accounts, the bench's with 101 topic permissions: lookups in tables of a realistic size."""


async def serve_remoting(port: int, *, acl: bool = False, inline: bool = False) -> None:
    async def echo(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(0, {"offset": "1"})

    router = Router()
    router.register(ECHO, echo, inline=inline)
    if acl:
        from plugins.acl.guard import AclGuard
        from plugins.acl.plain_acl import parse_plain_acl

        router.guards.append(AclGuard(parse_plain_acl(ACL_FILE, "bench")).check)
    await RemotingServer("bench", "127.0.0.1", port, router).run()


async def serve_acl(port: int) -> None:
    await serve_remoting(port, acl=True)


async def serve_inline(port: int) -> None:
    await serve_remoting(port, inline=True)


async def serve_echo(port: int) -> None:
    async def echo(stream: trio.SocketStream) -> None:
        buffer = bytearray()
        try:
            while data := await stream.receive_some(256 * 1024):
                buffer += data
                while len(buffer) >= 4:
                    length = int.from_bytes(buffer[:4], "big")
                    if len(buffer) < 4 + length:
                        break
                    frame = bytes(buffer[: 4 + length])
                    del buffer[: 4 + length]
                    await stream.send_all(frame)
        except trio.BrokenResourceError:
            pass

    await trio.serve_tcp(echo, port, host="127.0.0.1")


async def serve_pump(port: int) -> None:
    async def pump(stream: trio.SocketStream) -> None:
        try:
            while data := await stream.receive_some(256 * 1024):
                await stream.send_all(data)
        except trio.BrokenResourceError:
            pass

    await trio.serve_tcp(pump, port, host="127.0.0.1")


async def run_baseline(port: int, connections: int, in_flight: int, seconds: float) -> float:
    done = 0
    frame = (FRAME_SIZE - 4).to_bytes(4, "big") + os.urandom(FRAME_SIZE - 4)

    async def connection() -> None:
        nonlocal done
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        waiting: list[trio.Event] = []
        send_lock = trio.Lock()
        deadline = trio.current_time() + seconds

        async def reader() -> None:
            pending = 0
            while True:
                data = await stream.receive_some(256 * 1024)
                if not data:
                    return
                pending += len(data)
                completed, pending = divmod(pending, FRAME_SIZE)
                for _ in range(completed):
                    waiting.pop(0).set()

        async def caller() -> None:
            nonlocal done
            while trio.current_time() < deadline:
                event = trio.Event()
                async with send_lock:
                    waiting.append(event)
                    await stream.send_all(frame)
                await event.wait()
                done += 1

        async with stream, trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            async with trio.open_nursery() as callers:
                for _ in range(in_flight):
                    callers.start_soon(caller)
            nursery.cancel_scope.cancel()

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(connections):
            nursery.start_soon(connection)
    return done / (time.perf_counter() - started)


async def run_pump(port: int, connections: int, in_flight: int, seconds: float) -> float:
    done = 0
    frame = os.urandom(FRAME_SIZE)

    async def connection() -> None:
        nonlocal done
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        deadline = trio.current_time() + seconds
        async with stream:
            await stream.send_all(frame * in_flight)
            pending = 0
            while trio.current_time() < deadline:
                data = await stream.receive_some(256 * 1024)
                pending += len(data)
                completed, pending = divmod(pending, FRAME_SIZE)
                done += completed
                if completed:
                    await stream.send_all(frame * completed)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(connections):
            nursery.start_soon(connection)
    return done / (time.perf_counter() - started)


async def run_remoting(
    port: int, connections: int, in_flight: int, seconds: float, *, signed: bool = False
) -> float:
    done = 0
    address = f"127.0.0.1:{port}"

    async def caller(client: RemotingClient, deadline: float) -> None:
        nonlocal done
        while trio.current_time() < deadline:
            request = RemotingCommand.request(ECHO, REQUEST.ext)
            response = await client.invoke(address, request, timeout=10)
            if response.code != 0:
                raise SystemExit(f"the server refused a request: {response.remark}")
            done += 1

    async def connection() -> None:
        async with RemotingClient.open(credentials=CREDENTIALS if signed else None) as client:
            await client.connection(address)
            deadline = trio.current_time() + seconds
            async with trio.open_nursery() as nursery:
                for _ in range(in_flight):
                    nursery.start_soon(caller, client, deadline)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(connections):
            nursery.start_soon(connection)
    return done / (time.perf_counter() - started)


def server_cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used (``/proc/PID/stat``)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(
    server: tuple[subprocess.Popen[bytes], int], run: Callable[..., Awaitable[float]], point: tuple
) -> tuple[float, float]:
    """Round trips/s of one round, and the server's CPU microseconds per round trip: the cost
    itself, which a throughput figure on a shared 2-vCPU machine only shows through noise."""
    process, port = server
    cpu_before, started = server_cpu_seconds(process.pid), time.perf_counter()
    rate = trio.run(run, port, *point)
    requests = rate * (time.perf_counter() - started)
    return rate, 1e6 * (server_cpu_seconds(process.pid) - cpu_before) / max(requests, 1)


def start_server(kind: str) -> tuple[subprocess.Popen[bytes], int]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen([sys.executable, __file__, "--serve", kind, str(port)])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, port
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise SystemExit(f"{kind} server did not start")


def compare_inline(servers: dict[str, tuple[subprocess.Popen[bytes], int]], seconds: float) -> None:
    """A task per request (the default) against the handler run in the read loop
    (``Router.register(..., inline=True)``), alternating short rounds, medians of each."""
    print("\ntask per request against inline handling (same echo handler, alternating rounds)")
    print(
        f"{'connections':>11} {'in flight':>9} {'task rt/s':>11} {'inline rt/s':>12} {'ratio':>6} "
        f"{'task us/rt':>11} {'inline us/rt':>13} {'task p50 us':>12} {'inline p50 us':>14}"
    )
    for connections, in_flight in ((1, 1), (1, 64), (8, 64)):
        short = (connections, in_flight, seconds / ROUNDS)
        figures: dict[str, list[tuple[float, float]]] = {"remoting": [], "inline": []}
        for _ in range(ROUNDS):
            for kind in figures:
                figures[kind].append(measured(servers[kind], run_remoting, short))
        task_rate = statistics.median(r for r, _ in figures["remoting"])
        inline_rate = statistics.median(r for r, _ in figures["inline"])
        task_cpu = statistics.median(c for _, c in figures["remoting"])
        inline_cpu = statistics.median(c for _, c in figures["inline"])
        # One in flight on one connection: the round trip is 1 / rate.
        latency = (
            (f"{1e6 / task_rate:>12.0f} {1e6 / inline_rate:>14.0f}")
            if (connections, in_flight) == (1, 1)
            else f"{'':>12} {'':>14}"
        )
        print(
            f"{connections:>11} {in_flight:>9} {task_rate:>11,.0f} {inline_rate:>12,.0f} "
            f"{inline_rate / task_rate:>6.2f} {task_cpu:>11.1f} {inline_cpu:>13.1f} {latency}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--serve", nargs=2, metavar=("KIND", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        kind, port = args.serve
        servers = {
            "remoting": serve_remoting,
            "inline": serve_inline,
            "acl": serve_acl,
            "echo": serve_echo,
            "pump": serve_pump,
        }
        trio.run(servers[kind], int(port))
        return
    print(f"frame size {FRAME_SIZE} B, {args.seconds:g} s per point, server in a separate process")
    print(
        f"{'connections':>11} {'in flight':>9} {'pump rt/s':>11} {'baseline rt/s':>14} "
        f"{'remoting rt/s':>14} {'remoting/baseline':>18} {'acl rt/s':>11} {'acl/remoting':>13} "
        f"{'server CPU us/rt':>13}"
    )
    print(f"{'':>93}{'plain':>6} {'acl':>6}")
    servers = {kind: start_server(kind) for kind in ("pump", "echo", "remoting", "acl", "inline")}
    try:
        for connections in (1, 8):
            for in_flight in (1, 64):
                point = (connections, in_flight, args.seconds)
                pump = trio.run(run_pump, servers["pump"][1], *point)
                baseline = trio.run(run_baseline, servers["echo"][1], *point)
                # Unsigned and signed alternate in short rounds and each takes its median, so a
                # drift of this (shared, virtual) machine's speed hits both alike.
                short = (connections, in_flight, args.seconds / ROUNDS)
                unsigned_rates, signed_rates, unsigned_cpu, signed_cpu = [], [], [], []
                for _ in range(ROUNDS):
                    rate, cost = measured(servers["remoting"], run_remoting, short)
                    unsigned_rates.append(rate)
                    unsigned_cpu.append(cost)
                    rate, cost = measured(servers["acl"], functools.partial(run_remoting, signed=True), short)
                    signed_rates.append(rate)
                    signed_cpu.append(cost)
                remoting, signed = statistics.median(unsigned_rates), statistics.median(signed_rates)
                cpu_note = f"{statistics.median(unsigned_cpu):>6.1f} {statistics.median(signed_cpu):>6.1f}"
                print(
                    f"{connections:>11} {in_flight:>9} {pump:>11,.0f} {baseline:>14,.0f} {remoting:>14,.0f} "
                    f"{remoting / baseline:>18.2f} {signed:>11,.0f} {signed / remoting:>13.2f} {cpu_note}",
                    flush=True,
                )
        compare_inline(servers, args.seconds)
    finally:
        for process, _ in servers.values():
            process.kill()
            process.wait()


if __name__ == "__main__":
    main()
