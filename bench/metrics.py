"""Put throughput with the metrics plugin on against off, in the same run (target: >= 97 %).

A broker on store_mmap with async flush, driven by 64 concurrent producers for single 128 B
messages and batches of 32 x 128 B: in-process through the kernel's put pipeline (``put``), and
through the broker's port with the SDK (``sdk``: one producer, 64 sends in flight, in the same
process), where the metrics plugin also counts and times every request. Metrics on
means the plugin is loaded and its Prometheus endpoint serving (on a free port), with a
scrape every second while the producers run. Off and on alternate in short rounds and each
takes its median, so a drift of the machine's speed hits both alike.

    ./run bench metrics [--seconds 2] [--rounds 5]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

import attrs
import trio

from kernel import Broker, Message, MessageBatch
from kernel.testing import make_config
from trocket import Message as SdkMessage
from trocket import Producer

PRODUCERS = 64


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def drive(root: Path, metrics: bool, batch: int, seconds: float, sdk: bool) -> tuple[float, float]:
    """Messages/s, and CPU µs per message of this process (the cost itself: steadier than a
    rate on a shared machine). ``sdk``: the producers send through the broker's port with the
    SDK (one producer, 64 sends in flight), so every request is also counted by the meter."""
    plugins = ["store_mmap", "flush_async", *(["remoting", "namesrv"] if sdk else [])]
    plugins += ["metrics"] if metrics else []
    tables: dict[str, dict[str, object]] = {"metrics": {"prom_exporter_port": 0}} if metrics else {}
    namesrv_port, broker_port = free_port(), free_port()
    network = {
        "roles": ["broker", "namesrv"],
        "listen_port": broker_port,
        "namesrv_addr": [f"127.0.0.1:{namesrv_port}"],
    }
    config = make_config(
        broker={"plugins": plugins, "data_dir": str(root), "flush": "async", **(network if sdk else {})},
        store_mmap={"commit_log_file_size": "256MiB", "message_index_enable": False},
        **({"namesrv": {"listen_port": namesrv_port}} if sdk else {}),
        **tables,
    )
    broker = Broker.assemble(config)
    count = 0
    body = b"x" * 128
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        client = None
        if sdk:
            client = await nursery.start(_open_producer, f"127.0.0.1:{namesrv_port}")
            for index in range(4):  # routes and topics made before the clock starts
                await client.producer.send(SdkMessage(f"Metered{index}", body))
        deadline = trio.current_time() + seconds

        async def producer(index: int) -> None:
            nonlocal count
            while trio.current_time() < deadline:
                if client is not None:
                    topic = f"Metered{index % 4}"
                    if batch == 1:
                        await client.producer.send(SdkMessage(topic, body))
                    else:
                        await client.producer.send_batch([SdkMessage(topic, body) for _ in range(batch)])
                    count += batch
                    continue
                messages = [Message(f"Metered{index % 4}", body, queue_id=index % 8) for _ in range(batch)]
                result = await broker.put(MessageBatch(messages))
                if not result.ok:
                    raise RuntimeError(f"put failed: {result.status} {result.remark}")
                count += batch

        async def scraper(url: str) -> None:
            while True:
                await trio.to_thread.run_sync(lambda: urllib.request.urlopen(url, timeout=5).read())
                await trio.sleep(1)

        started, cpu_started = time.perf_counter(), time.process_time()
        async with trio.open_nursery() as scraping:
            if metrics:
                from plugins.metrics import EXPORTER

                scraping.start_soon(scraper, broker.ctx.stash[EXPORTER].url)
            async with trio.open_nursery() as workers:
                for index in range(PRODUCERS):
                    workers.start_soon(producer, index)
            elapsed = time.perf_counter() - started  # the scraper's sleep is not the producers' time
            cpu = time.process_time() - cpu_started
            scraping.cancel_scope.cancel()
        if client is not None:
            client.scope.cancel()  # the producer closes before the broker stops
        broker.request_stop("benchmark done")
    return count / elapsed, 1e6 * cpu / count


@attrs.frozen
class _OpenProducer:
    producer: Producer
    scope: trio.CancelScope


async def _open_producer(namesrv: str, *, task_status: trio.TaskStatus[_OpenProducer]) -> None:
    """An SDK producer, open until its scope is cancelled."""
    with trio.CancelScope() as scope:
        async with Producer("PG_bench", namesrv) as producer:
            task_status.started(_OpenProducer(producer, scope))
            await trio.sleep_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    print(
        f"{PRODUCERS} producers, async flush, 128 B bodies, "
        f"{args.rounds} alternating rounds of {args.seconds:g} s"
    )
    print(
        f"{'path':>8} {'batch':>6} {'off msgs/s':>12} {'on msgs/s':>12} {'on/off':>7} "
        f"{'CPU us/msg off':>15} {'on':>6}"
    )
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        run = 0
        for sdk, batch in ((False, 1), (False, 32), (True, 1), (True, 32)):
            rates: dict[bool, list[float]] = {False: [], True: []}
            costs: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.rounds):
                for metrics in (False, True):
                    run += 1
                    rate, cost = trio.run(drive, Path(tmp) / f"run{run}", metrics, batch, args.seconds, sdk)
                    rates[metrics].append(rate)
                    costs[metrics].append(cost)
            off, on = statistics.median(rates[False]), statistics.median(rates[True])
            cpu_off, cpu_on = statistics.median(costs[False]), statistics.median(costs[True])
            path = "sdk" if sdk else "put"
            print(
                f"{path:>8} {batch:>6} {off:>12,.0f} {on:>12,.0f} {on / off:>7.3f} "
                f"{cpu_off:>15.2f} {cpu_on:>6.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
