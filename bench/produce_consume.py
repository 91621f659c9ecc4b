"""Produce and consume through the client SDK against a real broker, next to Redis Streams.

One run, for 128 B and 1 KiB bodies and for async and sync flush, on this machine:

* produce with 1 message in flight (also p50/p99 latency), with 64 in flight (one producer),
  from 64 producers with one send in flight each (64 connections), with batches of 32;
* pipelined produce: 16 batches of 32 in flight (512 messages), which also builds the backlog;
* consume that backlog (``--messages``, default 1,000,000) with a LitePullConsumer;
* 1 message in flight and batches of 32 again from a :class:`~trocket.BlockingProducer` (a
  blocking socket, no event loop: how redis-py's client sends the Redis rows, and how code
  without trio sends; it polls its socket for each answer for a short window first, its
  default ``busy_poll``, where redis-py sleeps in ``recv`` at once);
* async flush only: 1 message in flight again against a second broker with
  ``[remoting] busy_poll = "off"`` and a producer with ``busy_poll=0``: what the adaptive
  polling both run with by default saves (see docs/performance.md); and the 64 producers
  again against that broker: what the broker's polling costs when many clients send.

The same workloads run against Redis Streams (Debian's ``redis-server``, AOF with
``appendfsync everysec`` for async and ``always`` for sync; redis-py with hiredis): XADD one per
round trip, 64 concurrent clients, pipelines of 32 and of 512 XADDs, XREAD COUNT 1000. Ratios are
Trocket / Redis. The one-per-round-trip rows use redis-py's blocking client; they are sent again
from its asyncio client, and the trio ``Producer``'s one-in-flight rows are also set beside those
(rows ending ", redis asyncio": an event-loop client against an event-loop client). The broker
answers pulls of up to 1000 messages here (``max_pull_messages``; RocketMQ's default is 32) so
both sides move 1000 messages per consume round trip. Under sync
flush it writes zeros ahead of its appends (``[store_mmap] warm_mapped_file``, RocketMQ's
``warmMapedFileEnable``, off by default), as a deployment that acknowledges after the disk
would: ``--warm-mapped-file never`` measures without (``always``: under async flush too).
Each measured row starts once no file the appends are near is being warmed (at its quick pace
a row sharing the disk with it measured 18-25 % slower; the file ahead of the appends is warmed
at the gentle pace meanwhile, as in a deployment; docs/performance.md, twenty-eighth step).

    ./run bench produce_consume [--messages 1000000] [--sizes 128,1024] [--flush async,sync]
                                [--busy-poll auto|off|200us] [--warm-mapped-file sync|always|never]

The script installs what it needs when it can (``apt-get install redis-server`` as root, pip
``redis[hiredis]``) and says clearly when it cannot (then only Trocket's figures are printed).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.trocket_process import cpu_seconds, free_port, trocket_process  # noqa: E402
from trocket import BlockingProducer, ConsumeFromWhere, LitePullConsumer, Message, Producer  # noqa: E402
from trocket.admin import AdminClient  # noqa: E402

Figures = dict[str, float]
"""Each row's figure, and ``cpu <row>``: the server's CPU microseconds per message in it."""


@attrs.frozen
class Server:
    """A server under test: where to reach it, and its process for CPU figures."""

    address: Any
    """The NameServer address (Trocket) or the port (Redis)."""
    pid: int

    def cpu(self) -> float:
        return cpu_seconds(self.pid)


def cpu_per_message(server: Server, since: float, messages: int) -> float:
    """Server CPU microseconds per message since the CPU reading ``since``."""
    return (server.cpu() - since) / max(1, messages) * 1e6


TARGET_PIPELINED = 200_000
TARGET_CONSUME = 500_000
TARGET_P50_MS = 0.15
POLLING_OFF = "off"
"""``[remoting] busy_poll`` of the second broker the single-message rows run against again."""
EVENT_LOOP = ", redis asyncio"
"""Redis's one-in-flight rows from redis-py's asyncio client, reported beside the trio
``Producer``'s own rows (which are compared, like every row, with the blocking client)."""
PRODUCERS = 64
"""Producers of the "64 producers" row, each on a connection of its own."""


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def round_trip_rows(latencies: list[float], elapsed: float, suffix: str = "") -> Figures:
    """The one-in-flight rows of sends timed one after another: messages/s, p50 and p99 (ms),
    named with ``suffix``."""
    return {
        f"1 in flight{suffix}": len(latencies) / elapsed,
        f"p50 ms{suffix}": percentile(latencies, 0.50) * 1000,
        f"p99 ms{suffix}": percentile(latencies, 0.99) * 1000,
    }


def ratio_of(row: str, mine: float, other: float) -> float:
    """Trocket against Redis on ``row``: above 1 means Trocket is better (for a latency row,
    Redis's latency over Trocket's)."""
    return other / mine if "ms" in row else mine / other


# --- set-up -----------------------------------------------------------------------------------


def ensure_redis() -> str | None:
    """The redis-server path, installing it and redis-py when possible; None (with a reason
    printed) when not."""
    try:
        import hiredis  # noqa: F401
        import redis  # noqa: F401
    except ImportError:
        print("installing redis-py with hiredis (pip install 'redis[hiredis]') ...", flush=True)
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "redis[hiredis]>=5"], check=False
        )
        if done.returncode != 0:
            print("cannot install redis-py: Redis comparison skipped")
            return None
    path = shutil.which("redis-server")
    if path is None and shutil.which("apt-get"):
        prefix = [] if os.geteuid() == 0 else (["sudo", "-n"] if shutil.which("sudo") else None)
        if prefix is not None:
            print("installing Debian's redis-server (apt-get) ...", flush=True)
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            subprocess.run([*prefix, "apt-get", "update", "-qq"], env=env, check=False)
            subprocess.run([*prefix, "apt-get", "install", "-y", "-qq", "redis-server"], env=env, check=False)
            path = shutil.which("redis-server")
    if path is None:
        print("redis-server is not installed and cannot be (needs root or passwordless sudo with apt-get): "
              "Redis comparison skipped")  # fmt: skip
    return path


@contextmanager
def trocket_server(
    root: Path, flush: str, busy_poll: str | None = None, *, warm: bool = False, sync_with: str = "auto"
) -> Iterator[Server]:
    """A NameServer and broker; ``busy_poll`` as given, else the broker's default; ``warm``:
    ``[store_mmap] warm_mapped_file``; ``sync_with``: ``[store_mmap] sync_with``."""
    polling = f'busy_poll = "{busy_poll}"\n' if busy_poll is not None else ""
    tables = (
        f'[remoting]\nmax_pull_messages = 1000\nmax_pull_bytes = "4MiB"\n{polling}'
        '[store_mmap]\ncommit_log_file_size = "512MiB"\n'
        f"warm_mapped_file = {'true' if warm else 'false'}\n"
        f'sync_with = "{sync_with}"\n'
    )
    with trocket_process(root, f'flush = "{flush}"', tables) as process:
        yield Server(process.namesrv, process.pid)


@contextmanager
def redis_server(path: str, root: Path, flush: str) -> Iterator[Server]:
    port = free_port()
    fsync = "everysec" if flush == "async" else "always"
    process = subprocess.Popen(
        [path, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
         "--appendfsync", fsync, "--dir", str(root), "--daemonize", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    import redis

    client = redis.Redis(port=port)
    deadline = time.monotonic() + 30
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise SystemExit("redis-server did not start") from None
            time.sleep(0.05)
    try:
        yield Server(port, process.pid)
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=60)


# --- Trocket workloads ------------------------------------------------------------------------


async def warming_done(server: Server) -> None:
    """Wait until the broker wrote the zeros of ``warm_mapped_file`` the appends are near (the
    first send's file; ``warmMappedNear`` in its runtime figures): measured rows must not share
    the disk with warming at its quick pace (a deployment does that once, at its first file).
    The file kept ready ahead of the active one is warmed at the gentle pace meanwhile, as in a
    deployment whose log fills slowly."""
    async with AdminClient.open([server.address]) as admin:
        for broker in (await admin.master_addrs(None)).values():
            for _ in range(600):  # a remote figure, polled; a minute at most
                if not int((await admin.broker_runtime_info(broker)).get("warmMappedNear", "0")):
                    break
                await trio.sleep(0.1)


async def one_in_flight(
    producer: Producer, server: Server, topic: str, body: bytes, round_trips: int, suffix: str = ""
) -> Figures:
    """Sends one after another: messages/s and p50/p99 latency (rows named with ``suffix``)."""
    await producer.send(Message(topic, body))  # route and connection warm
    await warming_done(server)
    latencies = []
    cpu = server.cpu()
    started = time.perf_counter()
    for _ in range(round_trips):
        sent = time.perf_counter()
        await producer.send(Message(topic, body))
        latencies.append(time.perf_counter() - sent)
    return {
        **round_trip_rows(latencies, time.perf_counter() - started, suffix),
        f"cpu 1 in flight{suffix}": cpu_per_message(server, cpu, round_trips),
    }


async def trocket_workloads(server: Server, size: int, args: argparse.Namespace, tag: str) -> Figures:
    body = os.urandom(size // 2).hex().encode()[:size]
    polling = {} if args.busy_poll is None else {"busy_poll": args.busy_poll}
    namesrv = server.address
    async with Producer("PG_bench", namesrv, send_timeout=30, **polling) as producer:
        topic = f"Bench{tag}"
        out = await one_in_flight(producer, server, topic, body, args.round_trips)

        async def sender(count: int) -> None:
            for _ in range(count):
                await producer.send(Message(topic, body))

        total = args.concurrent_messages
        await warming_done(server)
        cpu, started = server.cpu(), time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(64):
                nursery.start_soon(sender, total // 64)
        out["64 in flight"] = (total // 64 * 64) / (time.perf_counter() - started)
        out["cpu 64 in flight"] = cpu_per_message(server, cpu, total // 64 * 64)
        await warming_done(server)
        out.update(await many_producers(server, topic, body, total))

        batch = [Message(topic, body) for _ in range(32)]
        rounds = args.batch_messages // 32
        await warming_done(server)
        cpu, started = server.cpu(), time.perf_counter()
        for _ in range(rounds):
            await producer.send_batch(batch)
        out["batch 32"] = rounds * 32 / (time.perf_counter() - started)
        out["cpu batch 32"] = cpu_per_message(server, cpu, rounds * 32)

        backlog = f"Backlog{tag}"
        await producer.send(Message(backlog, body))
        rounds = (args.messages - 1) // 32
        per_task = rounds // 16

        async def batcher() -> None:
            for _ in range(per_task):
                await producer.send_batch(batch_for_backlog)

        batch_for_backlog = [Message(backlog, body) for _ in range(32)]
        await warming_done(server)
        cpu, started = server.cpu(), time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(16):
                nursery.start_soon(batcher)
        out["pipelined 512"] = per_task * 16 * 32 / (time.perf_counter() - started)
        out["cpu pipelined 512"] = cpu_per_message(server, cpu, per_task * 16 * 32)
        expected = 1 + per_task * 16 * 32

    async with LitePullConsumer(
        f"CG_bench_{tag}", namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET, pull_batch_size=1000,
        pull_threshold_for_queue=4000, pull_threshold_for_all=16000, auto_commit=False, **polling,
    ) as consumer:  # fmt: skip
        consumer.subscribe(backlog)
        got = 0
        await warming_done(server)
        cpu, started = server.cpu(), time.perf_counter()
        next_report = started + 5
        while got < expected:
            messages = await consumer.poll(timeout=30)
            if not messages:
                raise SystemExit(f"consume stalled after {got} of {expected} messages")
            got += len(messages)
            if time.perf_counter() > next_report:
                print(f"    consumed {got:,}/{expected:,}", flush=True)
                next_report += 5
        out["consume backlog"] = got / (time.perf_counter() - started)
        out["cpu consume backlog"] = cpu_per_message(server, cpu, got)
    return out


async def many_producers(server: Server, topic: str, body: bytes, total: int) -> Figures:
    """``PRODUCERS`` producers, each on its own connection with one send in flight: many
    applications sending to one broker. (The "64 in flight" row is one producer whose 64 sends
    share a connection, so the broker reads them together and puts them as one group; here
    they arrive on separate connections, and under sync flush only the flush's group commit
    brings them together.) These producers do not busy-poll: 64 pollers in one process would
    be 64 spinning tasks, where separate applications poll on cores of their own."""
    async with AsyncExitStack() as stack:
        producers = [
            await stack.enter_async_context(
                Producer("PG_bench_many", server.address, send_timeout=30, busy_poll=0)
            )
            for _ in range(PRODUCERS)
        ]
        for producer in producers:
            await producer.send(Message(topic, body))  # route and connection warm

        async def sender(producer: Producer, count: int) -> None:
            for _ in range(count):
                await producer.send(Message(topic, body))

        count = total // PRODUCERS
        cpu, started = server.cpu(), time.perf_counter()
        async with trio.open_nursery() as nursery:
            for producer in producers:
                nursery.start_soon(sender, producer, count)
        elapsed = time.perf_counter() - started
    return {
        "64 producers": count * PRODUCERS / elapsed,
        "cpu 64 producers": cpu_per_message(server, cpu, count * PRODUCERS),
    }


def trocket_blocking(server: Server, size: int, args: argparse.Namespace, tag: str) -> Figures:
    """One message in flight and batches of 32 from a blocking producer (the trio rows' topic,
    its files already made): the client Redis's rows use works the same way."""
    body = os.urandom(size // 2).hex().encode()[:size]
    topic = f"Bench{tag}"
    out: Figures = {}
    with BlockingProducer("PG_bench_blocking", server.address, send_timeout=30) as producer:
        producer.send(Message(topic, body))  # route and connection warm
        trio.run(warming_done, server)
        latencies = []
        cpu, started = server.cpu(), time.perf_counter()
        for _ in range(args.round_trips):
            sent = time.perf_counter()
            producer.send(Message(topic, body))
            latencies.append(time.perf_counter() - sent)
        out.update(round_trip_rows(latencies, time.perf_counter() - started, ", blocking"))
        out["cpu 1 in flight, blocking"] = cpu_per_message(server, cpu, args.round_trips)
        batch = [Message(topic, body) for _ in range(32)]
        rounds = args.batch_messages // 32
        trio.run(warming_done, server)
        cpu, started = server.cpu(), time.perf_counter()
        for _ in range(rounds):
            producer.send_batch(batch)
        out["batch 32, blocking"] = rounds * 32 / (time.perf_counter() - started)
        out["cpu batch 32, blocking"] = cpu_per_message(server, cpu, rounds * 32)
    return out


async def trocket_polling_off(server: Server, size: int, args: argparse.Namespace, tag: str) -> Figures:
    """One message in flight again, with neither the broker nor the producer polling; and the
    64 producers again (they never poll) against the broker that does not: adaptive polling
    should be no worse than none on either row (issue 38)."""
    body = os.urandom(size // 2).hex().encode()[:size]
    topic = f"BenchOff{tag}"
    async with Producer("PG_bench", server.address, send_timeout=30, busy_poll=0) as producer:
        out = await one_in_flight(producer, server, topic, body, args.round_trips, ", polling off")
    many = await many_producers(server, topic, body, args.concurrent_messages)
    out.update({f"{name}, polling off": value for name, value in many.items()})
    return out


# --- Redis workloads --------------------------------------------------------------------------


def redis_workloads(server: Server, size: int, args: argparse.Namespace, tag: str) -> Figures:
    import redis

    body = os.urandom(size // 2).hex().encode()[:size]
    out: Figures = {}
    port = server.address
    client = redis.Redis(port=port)
    stream = f"bench{tag}"
    client.xadd(stream, {"body": body})
    latencies = []
    cpu, started = server.cpu(), time.perf_counter()
    for _ in range(args.round_trips):
        sent = time.perf_counter()
        client.xadd(stream, {"body": body})
        latencies.append(time.perf_counter() - sent)
    out.update(round_trip_rows(latencies, time.perf_counter() - started))
    out["cpu 1 in flight"] = cpu_per_message(server, cpu, args.round_trips)
    out.update(asyncio.run(_redis_one_in_flight(port, stream, body, args.round_trips)))
    cpu = server.cpu()
    out["64 in flight"] = asyncio.run(_redis_concurrent(port, stream, body, args.concurrent_messages))
    out["cpu 64 in flight"] = cpu_per_message(server, cpu, args.concurrent_messages)
    # redis-py's asyncio pool already sends the 64 on 64 connections: the same workload.
    out["64 producers"], out["cpu 64 producers"] = out["64 in flight"], out["cpu 64 in flight"]
    rounds = args.batch_messages // 32
    cpu, started = server.cpu(), time.perf_counter()
    for _ in range(rounds):
        pipe = client.pipeline(transaction=False)
        for _ in range(32):
            pipe.xadd(stream, {"body": body})
        pipe.execute()
    out["batch 32"] = rounds * 32 / (time.perf_counter() - started)
    out["cpu batch 32"] = cpu_per_message(server, cpu, rounds * 32)
    backlog = f"backlog{tag}"
    rounds = args.messages // 512
    cpu, started = server.cpu(), time.perf_counter()
    for _ in range(rounds):
        pipe = client.pipeline(transaction=False)
        for _ in range(512):
            pipe.xadd(backlog, {"body": body})
        pipe.execute()
    out["pipelined 512"] = rounds * 512 / (time.perf_counter() - started)
    out["cpu pipelined 512"] = cpu_per_message(server, cpu, rounds * 512)
    expected, got, last = rounds * 512, 0, "0"
    cpu, started = server.cpu(), time.perf_counter()
    while got < expected:
        reply = client.xread({backlog: last}, count=1000)
        entries = reply[0][1]
        got += len(entries)
        last = entries[-1][0]
    out["consume backlog"] = got / (time.perf_counter() - started)
    out["cpu consume backlog"] = cpu_per_message(server, cpu, got)
    client.close()
    return out


async def _redis_one_in_flight(port: int, stream: str, body: bytes, round_trips: int) -> Figures:
    """One XADD after another from redis-py's asyncio client: the event-loop client to set the
    trio ``Producer`` beside (the plain rows use redis-py's blocking client, the
    ``BlockingProducer``'s counterpart)."""
    import redis.asyncio as aioredis

    client = aioredis.Redis(port=port)
    await client.xadd(stream, {"body": body})
    latencies = []
    started = time.perf_counter()
    for _ in range(round_trips):
        sent = time.perf_counter()
        await client.xadd(stream, {"body": body})
        latencies.append(time.perf_counter() - sent)
    elapsed = time.perf_counter() - started
    await client.aclose()
    return round_trip_rows(latencies, elapsed, EVENT_LOOP)


async def _redis_concurrent(port: int, stream: str, body: bytes, total: int) -> float:
    import redis.asyncio as aioredis

    client = aioredis.Redis(port=port, max_connections=64)

    async def sender(count: int) -> None:
        for _ in range(count):
            await client.xadd(stream, {"body": body})

    await client.ping()
    started = time.perf_counter()
    await asyncio.gather(*(sender(total // 64) for _ in range(64)))
    elapsed = time.perf_counter() - started
    await client.aclose()
    return total // 64 * 64 / elapsed


# --- report -----------------------------------------------------------------------------------

ROWS = [
    "1 in flight", "p50 ms", "p99 ms", "64 in flight", "64 producers", "batch 32", "pipelined 512",
    "consume backlog",
]  # fmt: skip
BUSY_ROWS = [
    "1 in flight, blocking", "p50 ms, blocking", "p99 ms, blocking", "batch 32, blocking",
    "1 in flight, polling off", "p50 ms, polling off", "p99 ms, polling off", "64 producers, polling off",
]  # fmt: skip
"""Compared with Redis's plain rows of the same name (redis-server needs no such setting, and
its rows are sent with redis-py's blocking client already)."""
VARIANTS = (", polling off", ", blocking")


def plain_row(row: str) -> str:
    for suffix in VARIANTS:
        row = row.removesuffix(suffix)
    return row


def report(results: dict[tuple[str, str, int], Figures], sizes: list[int], flushes: list[str]) -> None:
    for flush in flushes:
        for size in sizes:
            ours = results[("trocket", flush, size)]
            theirs = results.get(("redis", flush, size))
            print(f"\n{flush} flush, {size} B bodies (CPU: the server process's µs per message)")
            print(f"  {'workload':<26}{'Trocket':>14}{'Redis':>14}{'ratio':>8}{'CPU ours':>10}{'Redis':>8}")
            for row in ROWS + [r for r in BUSY_ROWS if r in ours]:
                mine = ours[row]
                other = theirs[plain_row(row)] if theirs else None
                cpu_row = "cpu " + row  # latency rows have none: their CPU is the "1 in flight" row's
                my_cpu = ours.get(cpu_row)
                other_cpu = theirs.get(plain_row(cpu_row)) if theirs and my_cpu else None
                cpu = f"{my_cpu:>10.1f}" if my_cpu is not None else f"{'':>10}"
                cpu += f"{other_cpu:>8.1f}" if other_cpu is not None else ""
                if other is None:
                    print(f"  {row:<26}{mine:>14,.2f}{'-':>14}{'':>8}{cpu}")
                    continue
                ratio = ratio_of(row, mine, other)
                print(f"  {row:<26}{mine:>14,.2f}{other:>14,.2f}{ratio:>8.2f}{cpu}")
                loop_row = row + EVENT_LOOP
                if theirs and loop_row in theirs:
                    other = theirs[loop_row]
                    print(f"  {loop_row:<26}{mine:>14,.2f}{other:>14,.2f}{ratio_of(row, mine, other):>8.2f}")
    print("\nratio > 1.0 means Trocket is faster (for latency rows: Redis latency / Trocket latency)")
    for size in sizes:
        if ("trocket", "async", size) in results:
            figures = results[("trocket", "async", size)]
            for row, target in (("pipelined 512", TARGET_PIPELINED), ("consume backlog", TARGET_CONSUME)):
                verdict = "met" if figures[row] >= target else "NOT met"
                print(f"target {row}, async, {size} B: {figures[row]:,.0f} msgs/s (>= {target:,}: {verdict})")
            for row in ("p50 ms", "p50 ms, polling off"):
                if row in figures:
                    verdict = "met" if figures[row] <= TARGET_P50_MS else "NOT met"
                    print(f"target 1 in flight {row}, async, {size} B: {figures[row]:.3f} ms "
                          f"(<= {TARGET_P50_MS}: {verdict})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=1_000_000, help="backlog size per configuration")
    parser.add_argument(
        "--round-trips", type=int, default=10_000, help="sends with 1 in flight (a p99 over 100 samples)"
    )
    parser.add_argument("--concurrent-messages", type=int, default=32_000, help="sends with 64 in flight")
    parser.add_argument("--batch-messages", type=int, default=64_000, help="messages sent in batches of 32")
    parser.add_argument("--sizes", default="128,1024")
    parser.add_argument("--flush", default="async,sync")
    parser.add_argument("--skip-redis", action="store_true")
    parser.add_argument(
        "--busy-poll", default=None, help="[remoting] busy_poll of the broker and busy_poll of the clients"
    )
    parser.add_argument(
        "--skip-polling-off", action="store_true", help="skip the single-message rows without polling"
    )
    parser.add_argument(
        "--warm-mapped-file",
        choices=("sync", "always", "never"),
        default="sync",
        help="[store_mmap] warm_mapped_file under which flush policies (default: sync)",
    )
    parser.add_argument(
        "--sync-with",
        choices=("auto", "io_uring", "thread"),
        default="auto",
        help="[store_mmap] sync_with: how the commit log's fdatasync is waited for",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    flushes = [f.strip() for f in args.flush.split(",")]
    redis_path = None if args.skip_redis else ensure_redis()
    results: dict[tuple[str, str, int], Figures] = {}
    for flush in flushes:
        warm = args.warm_mapped_file == "always" or (args.warm_mapped_file == "sync" and flush == "sync")
        with tempfile.TemporaryDirectory(prefix="trocket-bench-") as tmp:
            server_for = trocket_server(Path(tmp), flush, args.busy_poll, warm=warm, sync_with=args.sync_with)
            with server_for as server:
                for size in sizes:
                    warmed = ", warm_mapped_file = true" if warm else ""
                    print(f"Trocket, {flush} flush, {size} B{warmed} ...", flush=True)
                    results[("trocket", flush, size)] = trio.run(
                        trocket_workloads, server, size, args, f"{flush}{size}"
                    )
                    results[("trocket", flush, size)].update(
                        trocket_blocking(server, size, args, f"{flush}{size}")
                    )
        if flush == "async" and not args.skip_polling_off:
            with tempfile.TemporaryDirectory(prefix="trocket-bench-") as tmp:
                with trocket_server(Path(tmp), flush, POLLING_OFF) as server:
                    for size in sizes:
                        print(f"Trocket, {flush} flush, {size} B, busy_poll = {POLLING_OFF} ...", flush=True)
                        results[("trocket", flush, size)].update(
                            trio.run(trocket_polling_off, server, size, args, f"{flush}{size}")
                        )
        if redis_path:
            with tempfile.TemporaryDirectory(prefix="redis-bench-") as tmp:
                with redis_server(redis_path, Path(tmp), flush) as server:
                    for size in sizes:
                        print(f"Redis, {flush} flush, {size} B ...", flush=True)
                        tag = f"{flush}{size}"
                        results[("redis", flush, size)] = redis_workloads(server, size, args, tag)
    report(results, sizes, flushes)


if __name__ == "__main__":
    main()
