"""Put throughput with the metrics plugin on against off, in the same run (target: >= 97 %).

A broker on store_mmap with async flush, driven in-process through the kernel's put pipeline
by 64 concurrent producers, for single 128 B messages and batches of 32 x 128 B. Metrics on
means the plugin is loaded and its Prometheus endpoint serving (on a free port), with a
scrape every second while the producers run. Off and on alternate in short rounds and each
takes its median, so a drift of the machine's speed hits both alike.

    ./run bench metrics [--seconds 2] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

import trio

from kernel import Broker, Message, MessageBatch
from kernel.testing import make_config

PRODUCERS = 64


async def drive(root: Path, metrics: bool, batch: int, seconds: float) -> tuple[float, float]:
    """Messages/s, and CPU µs per message of this process (the cost itself: steadier than a
    rate on a shared machine)."""
    plugins = ["store_mmap", "flush_async", *(["metrics"] if metrics else [])]
    tables = {"metrics": {"prom_exporter_port": 0}} if metrics else {}
    config = make_config(
        broker={"plugins": plugins, "data_dir": str(root), "flush": "async"},
        store_mmap={"commit_log_file_size": "256MiB", "message_index_enable": False},
        **tables,
    )
    broker = Broker.assemble(config)
    count = 0
    body = b"x" * 128
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        deadline = trio.current_time() + seconds

        async def producer(index: int) -> None:
            nonlocal count
            while trio.current_time() < deadline:
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
        broker.request_stop("benchmark done")
    return count / elapsed, 1e6 * cpu / count


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
    print(f"{'batch':>6} {'off msgs/s':>12} {'on msgs/s':>12} {'on/off':>7} {'CPU us/msg off':>15} {'on':>6}")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        run = 0
        for batch in (1, 32):
            rates: dict[bool, list[float]] = {False: [], True: []}
            costs: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.rounds):
                for metrics in (False, True):
                    run += 1
                    rate, cost = trio.run(drive, Path(tmp) / f"run{run}", metrics, batch, args.seconds)
                    rates[metrics].append(rate)
                    costs[metrics].append(cost)
            off, on = statistics.median(rates[False]), statistics.median(rates[True])
            cpu_off, cpu_on = statistics.median(costs[False]), statistics.median(costs[True])
            print(
                f"{batch:>6} {off:>12,.0f} {on:>12,.0f} {on / off:>7.3f} {cpu_off:>15.2f} {cpu_on:>6.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
