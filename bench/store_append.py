"""Commit-log append throughput of store_mmap, next to raw sequential writes in the same run.

Prints msgs/s and MB/s for 128 B and 1 KiB bodies, single appends and batches of 32, for both
write paths (pwrite, mmap), each with its ratio to the raw sequential write bandwidth of the
same disk measured here. A second table compares the durable flush primitive of each path
(pwrite+fdatasync vs mmap+msync), per flush of 4 KiB and 64 KiB.

    ./run bench store_append [--seconds 2] [--dir /path/on/the/disk]
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

import trio

from kernel.context import BrokerContext
from kernel.model import Message
from kernel.testing import make_config, make_context
from plugins.store_mmap.store import open_mmap_store
from trocket.client.batch import encode_batch
from wire.wire_batch import WireBatch

FILE_SIZE = 64 * 1024 * 1024
COMMIT_EVERY = 256 * 1024
"""Staged bytes per commit in the buffered path (the commit loop takes what accumulated in one
interval; 256 KiB is about 200 ms of a slow trickle, a few ms at full speed)."""


def store_context(root: Path, **store_table: object) -> BrokerContext:
    config = make_config(
        broker={"plugins": ["store_mmap", "flush_async"], "data_dir": str(root)}, store_mmap=store_table
    )
    return make_context(config)


def raw_write_bandwidth(directory: Path, seconds: float) -> float:
    """Bytes/s of 1 MiB sequential pwrite calls cycling over a 64 MiB pre-allocated region.

    Cycling keeps the region in the page cache, so the figure is the ceiling a page-cache
    append can reach here, not the disk's writeback rate (which throttles long runs)."""
    region = 64 << 20
    path = directory / "raw.bin"
    chunk = os.urandom(1 << 20)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, region)
    for position in range(0, region, len(chunk)):  # warm the region once
        os.pwrite(fd, chunk, position)
    written = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        written += os.pwrite(fd, chunk, written % region)
    elapsed = time.perf_counter() - start
    os.close(fd)
    path.unlink()
    return written / elapsed if elapsed else 0.0


async def append_rate(
    directory: Path, write_path: str, body_size: int, batch: int, seconds: float, *, encoded: bool = False
) -> tuple[float, float]:
    """Appends per second and bytes per second. ``encoded``: each batch arrives as a client's
    SEND_BATCH_MESSAGE body and is decoded (WireBatch.decode, counted) and stored column-wise,
    as the broker's batch path does, and the dispatch columns it hands over are taken every
    256 KiB as the dispatch loop takes them (counted); otherwise as Message objects."""
    ctx = store_context(directory, commit_log_file_size=FILE_SIZE, write_path=write_path)
    body = b"x" * body_size
    properties = {"TAGS": "t", "UNIQ_KEY": "7F0000010001" + "0" * 20}
    messages = [Message("Bench", body, queue_id=i % 4, properties=properties) for i in range(batch)]
    wire_body = encode_batch([(0, body, properties)] * batch)
    count = 0
    size = 0
    async with open_mmap_store(ctx) as store:
        await store.recover(clean_shutdown=True)
        taken = store.commit_log.append_end
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            if encoded:
                wire = WireBatch.decode(wire_body, topic="Bench", queue_id=count % 4)
                result = store.commit_log.append(wire)
            else:
                result = store.commit_log.append(messages)
            count += batch
            size += sum(result.sizes)
            if store.commit_log.uncommitted_bytes() >= COMMIT_EVERY:
                # The buffered path's commit (a worker thread in the broker), inline here so its
                # cost is counted.
                work = store.commit_log.take_commit()
                store.commit_log.commit_blocking(work)
                store.commit_log.end_commit(work, ok=True)
            written = store.commit_log.positions.wrote.value
            if encoded and written - taken >= COMMIT_EVERY:
                # Take the handed-over dispatch columns as the broker's dispatch loop does every
                # few ms, up to what is written (counted: it is part of storing an encoded batch).
                _, taken = store.commit_log.scan(taken, end=written, max_bytes=1 << 30)
            if store.commit_log.append_end > FILE_SIZE * 8:
                break
        elapsed = time.perf_counter() - start
    return count / elapsed, size / elapsed


def flush_latency(directory: Path, use_mmap: bool, dirty: int, rounds: int) -> list[float]:
    path = directory / f"flush-{use_mmap}.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, 64 * 1024 * 1024)
    mapping = mmap.mmap(fd, 64 * 1024 * 1024)
    payload = os.urandom(dirty)
    position = 0
    samples = []
    for _ in range(rounds):
        if use_mmap:
            mapping[position : position + dirty] = payload
            start = time.perf_counter()
            begin = position // mmap.PAGESIZE * mmap.PAGESIZE
            mapping.flush(begin, position + dirty - begin)
        else:
            os.pwrite(fd, payload, position)
            start = time.perf_counter()
            os.fdatasync(fd)
        samples.append(time.perf_counter() - start)
        position = (position + dirty) % (60 * 1024 * 1024)
    mapping.close()
    os.close(fd)
    path.unlink()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    parser.add_argument("--dir", type=Path, default=None, help="directory on the disk to measure")
    parser.add_argument("--flush-rounds", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        base = Path(tmp)
        raw = raw_write_bandwidth(base, args.seconds)
        print(f"raw sequential write (1 MiB pwrite into cached pages): {raw / 1e6:,.0f} MB/s")
        print()
        print(f"{'path':7} {'form':8} {'body':>6} {'batch':>5} {'msgs/s':>12} {'MB/s':>9} {'vs raw':>7}")
        rates = {}
        rows = [
            (p, "objects", b, n) for p in ("pwrite", "mmap", "buffered") for b in (128, 1024) for n in (1, 32)
        ]
        rows += [("pwrite", "encoded", b, n) for b in (128, 1024) for n in (32, 256)]
        for write_path, form, body_size, batch in rows:
            directory = base / f"{write_path}-{form}-{body_size}-{batch}"
            # Each row starts from the same state: the previous row's files (up to 512 MiB)
            # deleted and their dirty pages written back, so no row pays for another's writeback.
            os.sync()
            rate, bandwidth = trio.run(
                partial(append_rate, encoded=form == "encoded"), directory, write_path, body_size, batch,
                args.seconds,
            )  # fmt: skip
            rates[(write_path, form, body_size, batch)] = rate
            shutil.rmtree(directory, ignore_errors=True)
            print(
                f"{write_path:7} {form:8} {body_size:>6} {batch:>5} {rate:>12,.0f} {bandwidth / 1e6:>9,.1f} "
                f"{bandwidth / raw:>7.3f}"
            )
        for body_size, target in ((128, 1_000_000), (1024, 400_000)):
            objects = rates[("pwrite", "objects", body_size, 32)]
            encoded = rates[("pwrite", "encoded", body_size, 32)]
            verdict = "met" if encoded >= target else "NOT met"
            print(
                f"target {body_size} B batches of 32 (encoded, as the broker stores them): "
                f"{encoded:,.0f} msgs/s (>= {target:,}: {verdict}); objects {objects:,.0f}, "
                f"encoded/objects {encoded / objects:.2f}"
            )
        print()
        print(f"{'durable flush':24} {'dirty':>7} {'p50 ms':>8} {'p99 ms':>8} {'flushes/s':>10}")
        results = {}
        for use_mmap, name in ((False, "pwrite + fdatasync"), (True, "mmap + msync")):
            for dirty in (4096, 65536):
                samples = sorted(flush_latency(base, use_mmap, dirty, args.flush_rounds))
                p50 = statistics.median(samples)
                p99 = samples[int(len(samples) * 0.99) - 1]
                results[(use_mmap, dirty)] = p50
                print(f"{name:24} {dirty:>7} {p50 * 1e3:>8.3f} {p99 * 1e3:>8.3f} {1 / p50:>10,.0f}")
        for dirty in (4096, 65536):
            ratio = results[(True, dirty)] / results[(False, dirty)]
            print(f"msync/fdatasync p50 ratio at {dirty} bytes: {ratio:.2f}x")


if __name__ == "__main__":
    main()
