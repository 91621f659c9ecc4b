"""Helpers for store tests: a real MmapStore on a temp directory with small files."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

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
