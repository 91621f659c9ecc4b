"""Run by test_crash.py in a subprocess: a real broker on store_mmap appending under load.

Prints one line per acknowledged put: ``ack <topic> <queue> <queue offset> <physical> <body>``,
flushed at once, so the parent knows exactly what was acknowledged before it SIGKILLs us.
"""

from __future__ import annotations

import sys

import trio

from kernel import Broker, Message, MessageBatch
from kernel.testing import make_config


async def main(data_dir: str, flush: str, write_path: str, warm: bool, sync_with: str) -> None:
    config = make_config(
        broker={"plugins": ["store_mmap", "flush_sync", "flush_async"], "data_dir": data_dir, "flush": flush},
        store_mmap={
            "commit_log_file_size": "64KiB",
            "consume_queue_file_size": 2000,
            "index_hash_slots": 1000,
            "index_max_entries": 100_000,
            # This test is about crashes, not retention: a busy host disk above 85 % must not
            # make forced cleaning delete the files being verified.
            "clean_file_forcibly_enable": False,
            "write_path": write_path,
            "warm_mapped_file": warm,
            "sync_with": sync_with,
        },
        flush_async={"interval": "50ms"},
    )
    broker = Broker.assemble(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        print("ready", flush=True)

        async def producer(index: int) -> None:
            sequence = 0
            while True:
                body = f"p{index}-{sequence}-".encode().ljust(60 + sequence % 200, b"z")
                batch = MessageBatch([Message("Crash", body, queue_id=index % 3, properties={"KEYS": "k"})])
                result = await broker.put(batch)
                if not result.ok:
                    # A refused put (a full disk, a read-only store) would otherwise spin here
                    # forever with the parent waiting for acks that never come.
                    print(f"put refused: {result.status.name} {result.remark}", file=sys.stderr, flush=True)
                    raise SystemExit(3)
                a = result.append
                line = f"ack Crash {index % 3} {a.queue_offsets[0]} {a.physical_offsets[0]} {body.decode()}"
                print(line, flush=True)
                sequence += 1

        for index in range(6):
            nursery.start_soon(producer, index)


if __name__ == "__main__":
    args = sys.argv[1:]
    options = set(args[3:])  # "warm", "thread" (the flush thread instead of io_uring)
    sync_with = "thread" if "thread" in options else "auto"
    trio.run(main, args[0], args[1], args[2] if len(args) > 2 else "pwrite", "warm" in options, sync_with)
