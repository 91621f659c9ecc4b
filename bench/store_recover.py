"""Recovery scan rate of store_mmap, next to a raw sequential read of the same files.

Builds a store of N records (128 B bodies, batches of 32), then times a full abnormal recovery
(zeroed checkpoint: every record's magic, lengths and CRC are verified) and, as the baseline,
a plain sequential read of the same commit-log files in 1 MiB chunks plus zlib.crc32 over them.

    ./run bench store_recover [--records 1000000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import zlib
from pathlib import Path

import trio

from kernel.context import BrokerContext
from kernel.model import Message
from kernel.testing import make_config, make_context
from plugins.store_mmap.store import open_mmap_store


def store_context(root: Path) -> BrokerContext:
    config = make_config(
        broker={"plugins": ["store_mmap", "flush_async"], "data_dir": str(root)},
        store_mmap={"commit_log_file_size": "256MiB", "message_index_enable": False},
    )
    return make_context(config)


async def build(root: Path, records: int) -> int:
    batch = [Message("Bench", b"x" * 128, queue_id=i % 4, properties={"TAGS": "t"}) for i in range(32)]
    async with open_mmap_store(store_context(root)) as store:
        await store.recover(clean_shutdown=True)
        for _ in range(records // 32):
            store.commit_log.append(batch)
        await store.flush()
        return store.positions.wrote.value


async def recover(root: Path) -> tuple[float, int]:
    (root / "checkpoint").write_bytes(bytes(4096))
    async with open_mmap_store(store_context(root)) as store:
        start = time.perf_counter()
        report = await store.recover(clean_shutdown=False)
        return time.perf_counter() - start, report.records_scanned


def raw_read(root: Path) -> tuple[float, int]:
    start = time.perf_counter()
    total = 0
    for path in sorted((root / "commitlog").iterdir()):
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                zlib.crc32(chunk)
                total += len(chunk)
    return time.perf_counter() - start, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        size = trio.run(build, root, args.records)
        print(
            f"built {args.records:,} records ({size / 1e6:,.0f} MB) in {time.perf_counter() - started:.1f}s"
        )
        raw_seconds, raw_bytes = raw_read(root)
        seconds, scanned = trio.run(recover, root)
        print(f"raw sequential read + crc32: {raw_bytes / raw_seconds / 1e6:,.0f} MB/s")
        print(
            f"recovery full scan: {scanned:,} records in {seconds:.2f}s = "
            f"{scanned / seconds:,.0f} records/s, "
            f"{size / seconds / 1e6:,.0f} MB/s ({size / seconds / (raw_bytes / raw_seconds):.2f}x raw)"
        )


if __name__ == "__main__":
    main()
