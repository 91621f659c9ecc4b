"""Put throughput and latency under sync (group commit) and async flush, next to raw fdatasync.

In one run: the raw fdatasync rate and latency of this disk (4 KiB pwrite + fdatasync), then a
broker on store_mmap driven in-process through the kernel's put pipeline by 1, 16, 64 and 256
concurrent producers, for sync and async flush, 128 B and 1 KiB bodies. Prints msgs/s, p50/p99
put latency, and the ratios sync/async and sync-single-producer/raw-fsync.

    ./run bench flush [--seconds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import trio

from kernel import Broker, Message, MessageBatch
from kernel.testing import make_config


def raw_fdatasync(directory: Path, rounds: int = 300) -> list[float]:
    path = directory / "fsync.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, 16 << 20)
    payload = os.urandom(4096)
    samples = []
    for i in range(rounds):
        os.pwrite(fd, payload, (i * 4096) % (16 << 20))
        start = time.perf_counter()
        os.fdatasync(fd)
        samples.append(time.perf_counter() - start)
    os.close(fd)
    path.unlink()
    return samples


async def drive(
    root: Path, flush: str, producers: int, body_size: int, seconds: float
) -> tuple[float, list[float]]:
    config = make_config(
        broker={
            "plugins": ["store_mmap", "flush_sync", "flush_async"],
            "data_dir": str(root),
            "flush": flush,
        },
        store_mmap={"commit_log_file_size": "256MiB", "message_index_enable": False},
    )
    broker = Broker.assemble(config)
    latencies: list[float] = []
    count = 0
    body = b"x" * body_size
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        deadline = trio.current_time() + seconds

        async def producer(index: int) -> None:
            nonlocal count
            while trio.current_time() < deadline:
                start = time.perf_counter()
                result = await broker.put(MessageBatch([Message("Flush", body, queue_id=index % 8)]))
                latencies.append(time.perf_counter() - start)
                if not result.ok:
                    raise RuntimeError(f"put failed: {result.status} {result.remark}")
                count += 1

        started = time.perf_counter()
        async with trio.open_nursery() as workers:
            for index in range(producers):
                workers.start_soon(producer, index)
        elapsed = time.perf_counter() - started
        broker.request_stop("benchmark done")
    return count / elapsed, latencies


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        base = Path(tmp)
        raw = raw_fdatasync(base)
        raw_p50 = statistics.median(raw)
        print(
            f"raw 4 KiB pwrite+fdatasync: p50 {raw_p50 * 1e3:.3f} ms, "
            f"p99 {percentile(raw, 0.99) * 1e3:.3f} ms, "
            f"{1 / raw_p50:,.0f} fsyncs/s"
        )
        print()
        print(f"{'body':>6} {'producers':>9} {'flush':>6} {'msgs/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
        results: dict[tuple[int, int, str], tuple[float, float]] = {}
        run = 0
        for body_size in (128, 1024):
            for producers in (1, 16, 64, 256):
                for flush in ("sync", "async"):
                    run += 1
                    rate, latencies = trio.run(
                        drive, base / f"run{run}", flush, producers, body_size, args.seconds
                    )
                    p50 = statistics.median(latencies)
                    results[(body_size, producers, flush)] = (rate, p50)
                    print(
                        f"{body_size:>6} {producers:>9} {flush:>6} {rate:>10,.0f} {p50 * 1e3:>8.3f} "
                        f"{percentile(latencies, 0.99) * 1e3:>8.3f}"
                    )
        print()
        for body_size in (128, 1024):
            for producers in (1, 16, 64, 256):
                sync_rate = results[(body_size, producers, "sync")][0]
                async_rate = results[(body_size, producers, "async")][0]
                print(
                    f"sync/async throughput, {body_size} B, {producers} producers: "
                    f"{sync_rate / async_rate:.2f}"
                )
            single_p50 = results[(body_size, 1, "sync")][1]
            print(f"sync single-producer p50 / raw fdatasync p50, {body_size} B: {single_p50 / raw_p50:.2f}x")


if __name__ == "__main__":
    main()
