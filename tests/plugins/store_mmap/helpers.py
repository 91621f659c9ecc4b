"""Helpers for store tests: a real MmapStore on a temp directory with small files."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from kernel.context import BrokerContext
from kernel.model import Message, RecoveryReport
from kernel.testing import dispatch_all, make_config, make_context
from plugins.store_mmap.store import MmapStore, open_mmap_store

SMALL = {
    "commit_log_file_size": 4096,
    "consume_queue_file_size": 200,
    "index_hash_slots": 64,
    "index_max_entries": 100,
}


def store_context(root: Path, **store_table: Any) -> BrokerContext:
    config = make_config(
        broker={"plugins": ["store_mmap", "flush_sync"], "data_dir": str(root), "flush": "sync"},
        store_mmap={**SMALL, **store_table},
    )
    return make_context(config)


@asynccontextmanager
async def opened(
    root: Path, *, clean: bool = True, **store_table: Any
) -> AsyncIterator[tuple[MmapStore, RecoveryReport]]:
    async with open_mmap_store(store_context(root, **store_table)) as store:
        report = await store.recover(clean_shutdown=clean)
        await dispatch_all(store)
        yield store, report


async def clean_close(store: MmapStore) -> None:
    """What a clean broker stop does: dispatch everything, flush the log, persist the queues."""
    await dispatch_all(store)
    await store.flush()
    await store.queues.persist(thorough=True)


def messages(topic: str, queue_id: int, count: int, start: int = 0, size: int = 100) -> list[Message]:
    return [
        Message(
            topic,
            f"{topic}-{queue_id}-{i:06d}-".encode().ljust(size, b"x"),
            queue_id=queue_id,
            properties={"TAGS": "T", "KEYS": f"key{i}", "UNIQ_KEY": f"U{i:031d}"},
        )
        for i in range(start, start + count)
    ]


async def loop_gaps_while(slow: Callable[[], Awaitable[object]]) -> list[float]:
    """Await ``slow()`` while another task wakes every 2 ms; the gaps between its wake-ups
    (the longest is how long the event loop was held). For the flush waiters' promise: a slow
    disk holds the loop for the block limit at most, never for the call."""
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.perf_counter()
        while True:
            await trio.sleep(0.002)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        await trio.sleep(0.02)
        await slow()
        nursery.cancel_scope.cancel()
    return gaps
