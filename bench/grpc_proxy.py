"""Produce and consume through the gRPC proxy next to the same workload over remoting, same run.

One `trocket up` process (async flush) serves both. Remoting: the SDK's Producer (SEND_MESSAGE_V2)
and SimpleConsumer (POP, then one ACK per message). gRPC: a grpcio (asyncio) load generator
calling SendMessage, ReceiveMessage (batches of 32) and AckMessage (one entry per message), as
the official clients do. Both keep ``--in-flight`` calls going.

    ./run bench grpc_proxy [--messages 20000] [--in-flight 32] [--size 128] [--standalone]

Each row also prints the server's CPU per message (user + system, every thread: the broker
process, plus the proxy's with ``--standalone``), a figure that carries over to other machines,
and the load generator's own (this process, every thread: grpcio's C-core threads included).
From both it prints what the target rate would take of the machine at this run's costs: both
sides share its cores, so a target whose server and client CPU together need more cores than
there are cannot be met here however the server does (issue 35's produce row, docs/performance.md).

Each row is also run against a server that answers without doing anything
(``bench/grpc_noop_server.py``: the proxy's gRPC host with prebuilt answers, in its own
process): the most the load generator reaches on this machine with any server built on
grpcio. Where half the remoting rate is above that ceiling, the bench says the target cannot
be met here whatever the proxy does.

``--standalone`` runs the proxy as its own process (``trocket proxy -n``: a second core for
gRPC, every call a remoting round trip to the broker) instead of beside the broker.

Issue 35's targets: proxy produce >= 0.5x remoting, receive + ack >= 0.5x.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.trocket_process import cpu_seconds, free_port, trocket_process  # noqa: E402
from trocket import Message, Producer, SimpleConsumer  # noqa: E402
from trocket.admin import AdminClient  # noqa: E402
from wire.grpc_v2 import definition_pb2 as pb  # noqa: E402
from wire.grpc_v2 import service_pb2 as spb  # noqa: E402

SERVICE = "/apache.rocketmq.v2.MessagingService/"
PLUGINS = '["store_mmap", "flush_async", "remoting", "namesrv", "retry_dlq", "pop", "proxy"]'
TARGET = 0.5
"""Issue 35: each gRPC row at least half its remoting row."""


async def remoting_produce(namesrv: str, topic: str, count: int, in_flight: int, body: bytes) -> float:
    async with Producer("PG_bench", namesrv) as producer:
        await producer.send(Message(topic, body))  # routes learned before the clock starts
        left = count
        started = time.perf_counter()

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await producer.send(Message(topic, body))

        async with trio.open_nursery() as nursery:
            for _ in range(in_flight):
                nursery.start_soon(worker)
        return count / (time.perf_counter() - started)


async def remoting_consume(namesrv: str, topic: str, count: int, in_flight: int) -> float:
    async with SimpleConsumer("CG_bench_remoting", namesrv, {topic: "*"}, await_duration=2) as consumer:
        done = 0
        started = finished = time.perf_counter()

        async def worker() -> None:
            nonlocal done, finished
            while done < count:
                for message in await consumer.receive(32, 60):
                    await consumer.ack(message)
                    done += 1
                    finished = time.perf_counter()

        async with trio.open_nursery() as nursery:
            for _ in range(max(1, in_flight // 8)):
                nursery.start_soon(worker)
        # Up to the last ack: a worker that found nothing left waits out a long poll, which
        # is not consuming.
        return done / (finished - started)


def metadata(client_id: str) -> list[tuple[str, str]]:
    return [("x-mq-client-id", client_id), ("x-mq-language", "PYTHON"), ("x-mq-protocol", "GRPC_V2")]


async def grpc_produce(endpoint: str, topic: str, count: int, in_flight: int, body: bytes) -> float:
    meta = metadata(f"bench@{uuid.uuid4().hex[:8]}")
    async with grpc.aio.insecure_channel(endpoint) as channel:
        send = channel.unary_unary(
            SERVICE + "SendMessage",
            request_serializer=spb.SendMessageRequest.SerializeToString,
            response_deserializer=spb.SendMessageResponse.FromString,
        )
        left = count

        def request() -> spb.SendMessageRequest:
            return spb.SendMessageRequest(
                messages=[
                    pb.Message(
                        topic=pb.Resource(name=topic),
                        body=body,
                        system_properties=pb.SystemProperties(
                            message_id=uuid.uuid4().hex, message_type=pb.NORMAL
                        ),
                    )
                ]
            )

        answer = await send(request(), metadata=meta)
        if answer.status.code != pb.OK:
            raise SystemExit(f"gRPC send refused: {answer.status}")
        started = time.perf_counter()

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await send(request(), metadata=meta)

        await asyncio.gather(*(worker() for _ in range(in_flight)))
        return count / (time.perf_counter() - started)


async def grpc_consume(endpoint: str, topic: str, broker_name: str, count: int, in_flight: int) -> float:
    meta = metadata(f"bench@{uuid.uuid4().hex[:8]}")
    async with grpc.aio.insecure_channel(endpoint) as channel:
        receive = channel.unary_stream(
            SERVICE + "ReceiveMessage",
            request_serializer=spb.ReceiveMessageRequest.SerializeToString,
            response_deserializer=spb.ReceiveMessageResponse.FromString,
        )
        ack = channel.unary_unary(
            SERVICE + "AckMessage",
            request_serializer=spb.AckMessageRequest.SerializeToString,
            response_deserializer=spb.AckMessageResponse.FromString,
        )
        group, resource = pb.Resource(name="CG_bench_grpc"), pb.Resource(name=topic)
        request = spb.ReceiveMessageRequest(
            group=group,
            message_queue=pb.MessageQueue(topic=resource, id=-1, broker=pb.Broker(name=broker_name)),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            batch_size=32,
            invisible_duration={"seconds": 60},
            long_polling_timeout={"seconds": 2},
        )
        done = 0
        started = finished = time.perf_counter()

        async def worker() -> None:
            nonlocal done, finished
            while done < count:
                async for answer in receive(request, metadata=meta):
                    if answer.HasField("message"):
                        system = answer.message.system_properties
                        entry = spb.AckMessageEntry(
                            message_id=system.message_id, receipt_handle=system.receipt_handle
                        )
                        await ack(
                            spb.AckMessageRequest(group=group, topic=resource, entries=[entry]), metadata=meta
                        )
                        done += 1
                        finished = time.perf_counter()

        await asyncio.gather(*(worker() for _ in range(max(1, in_flight // 8))))
        return done / (finished - started)  # up to the last ack, as remoting_consume


async def create_topics(namesrv: str, topics: list[str]) -> str:
    async with AdminClient.open([namesrv]) as admin:
        brokers = await admin.master_addrs(None)
        for address in brokers.values():
            for topic in topics:
                await admin.update_topic(address, topic, read=8, write=8, perm=6, order=False)
        await trio.sleep(1)
        return sorted(brokers)[0]


@contextmanager
def standalone_proxy(root: Path, namesrv: str, port: int, wanted: bool) -> Iterator[int | None]:
    """``trocket proxy -n NAMESRV`` as its own process when ``wanted``; yields its pid."""
    if not wanted:
        yield None
        return
    log = root / "proxy.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "trocket", "proxy", "-n", namesrv, "--grpc-port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "ready" not in log.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("trocket proxy did not start:\n" + log.read_text())
            time.sleep(0.05)
        yield process.pid
    finally:
        process.terminate()
        process.wait(timeout=60)


def measure(run: Callable[[], float], server_pids: list[int], messages: int) -> tuple[float, float, float]:
    """Messages a second (what ``run`` returns), the server's CPU µs a message (every process
    in ``server_pids``), and the load generator's CPU µs a message (this process)."""
    cpu, own = sum(map(cpu_seconds, server_pids)), time.process_time()
    rate = run()
    server = (sum(map(cpu_seconds, server_pids)) - cpu) / messages * 1e6
    return rate, server, (time.process_time() - own) / messages * 1e6


@contextmanager
def noop_server(port: int, body_size: int) -> Iterator[int]:
    """``bench/grpc_noop_server.py`` on ``port`` in its own process; yields its pid."""
    process = subprocess.Popen(
        [sys.executable, str(REPO / "bench" / "grpc_noop_server.py"), str(port), str(body_size)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            raise SystemExit("the no-op gRPC server did not start")
        yield process.pid
    finally:
        process.terminate()
        process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--standalone", action="store_true", help="the proxy in its own process")
    parser.add_argument(
        "--grpc-server", choices=("completion_queue", "asyncio"), default="completion_queue",
        help="[proxy] grpc_server: how trio drives grpcio",
    )  # fmt: skip
    args = parser.parse_args()
    body = b"x" * args.size
    grpc_port = free_port()
    proxy_settings = f'[proxy]\ngrpc_port = {grpc_port}\ngrpc_server = "{args.grpc_server}"\n'
    roles = '["broker", "namesrv"]' if args.standalone else '["broker", "namesrv", "proxy"]'
    with (
        tempfile.TemporaryDirectory() as root,
        trocket_process(
            Path(root),
            f"roles = {roles}\nplugins = {PLUGINS}",
            proxy_settings,
        ) as broker,
        standalone_proxy(Path(root), broker.namesrv, grpc_port, args.standalone) as proxy_pid,
    ):
        namesrv, endpoint = broker.namesrv, f"127.0.0.1:{grpc_port}"
        pids = [broker.pid] if proxy_pid is None else [broker.pid, proxy_pid]

        def measured(run: Callable[[], float]) -> tuple[float, float, float]:
            return measure(run, pids, args.messages)

        broker_name = trio.run(create_topics, namesrv, ["BenchRemoting", "BenchGrpc"])
        produce_remoting = measured(
            lambda: trio.run(remoting_produce, namesrv, "BenchRemoting", args.messages, args.in_flight, body)
        )
        produce_grpc = measured(
            lambda: asyncio.run(grpc_produce(endpoint, "BenchGrpc", args.messages, args.in_flight, body))
        )
        consume_remoting = measured(
            lambda: trio.run(remoting_consume, namesrv, "BenchRemoting", args.messages, args.in_flight)
        )
        consume_grpc = measured(
            lambda: asyncio.run(
                grpc_consume(endpoint, "BenchGrpc", broker_name, args.messages, args.in_flight)
            )
        )
    noop_port = free_port()
    with noop_server(noop_port, args.size) as noop_pid:
        noop = f"127.0.0.1:{noop_port}"
        produce_noop = measure(
            lambda: asyncio.run(grpc_produce(noop, "BenchGrpc", args.messages, args.in_flight, body)),
            [noop_pid],
            args.messages,
        )
        consume_noop = measure(
            lambda: asyncio.run(grpc_consume(noop, "BenchGrpc", "noop", args.messages, args.in_flight)),
            [noop_pid],
            args.messages,
        )
    where = "the proxy in its own process" if args.standalone else "one process"
    where += f", grpc_server = {args.grpc_server}"
    print(f"{args.messages} messages of {args.size} B, {args.in_flight} in flight (async flush, {where})")
    side = f"{'msg/s':>9}{'server':>8}{'client':>8}"
    print(f"{'':<16}{'remoting':^25}{'gRPC proxy':^25}{'':8}{'':10}{'no-op gRPC server':^25}")
    print(f"{'row':<16}{side}{side}{'ratio':>8}  target  {side}{'ratio':>8}")
    cores = len(os.sched_getaffinity(0))
    needs, ceilings = [], []
    for name, (base, base_cpu, base_client), (proxied, proxied_cpu, proxied_client), noop in (
        ("produce", produce_remoting, produce_grpc, produce_noop),
        ("receive + ack", consume_remoting, consume_grpc, consume_noop),
    ):
        print(
            f"{name:<16}{base:>9,.0f}{base_cpu:>8.0f}{base_client:>8.0f}"
            f"{proxied:>9,.0f}{proxied_cpu:>8.0f}{proxied_client:>8.0f}"
            f"{proxied / base:>8.2f}  >= {TARGET:.2f}  {noop[0]:>9,.0f}{noop[1]:>8.0f}{noop[2]:>8.0f}"
            f"{noop[0] / base:>8.2f}"
        )
        wanted = TARGET * base
        verdict = "below it: no proxy can meet the target here" if noop[0] < wanted else "room left"
        ceilings.append(
            f"{name}: the target {wanted:,.0f} msg/s against {noop[0]:,.0f} with a server that does"
            f" nothing ({verdict}); the proxy reaches {proxied / noop[0]:.0%} of that ceiling"
        )
        ceiling = cores * 1e6 / (proxied_cpu + proxied_client)
        needs.append(
            f"{name}: {wanted:,.0f} msg/s through the proxy needs {wanted * proxied_client / 1e6:.2f} cores"
            f" for the load generator and {wanted * proxied_cpu / 1e6:.2f} for the server; the cores"
            f" here hold both at most at {ceiling:,.0f} msg/s (this run: {proxied / ceiling:.0%} of that)"
        )
    print("server, client: CPU µs a message (user + system, every thread) of the broker process (and")
    print("the proxy's with --standalone), and of this process, the load generator; they carry over")
    print("to other machines where rates do not")
    print(f"at the target, with this run's costs ({cores} cores here):")
    for line in needs:
        print(f"  {line}")
    print("the ceiling: the same load generator against bench/grpc_noop_server.py (its own process)")
    for line in ceilings:
        print(f"  {line}")


if __name__ == "__main__":
    main()
