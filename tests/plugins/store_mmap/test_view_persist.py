"""Consume-queue flushing (RocketMQ's FlushConsumeQueueService): a periodic persist flushes only
files with ``flush_consume_queue_least_pages`` dirty pages (or full ones) and never writes the
checkpoint; a thorough persist flushes everything, the index too, then writes the checkpoint."""

from __future__ import annotations

from kernel.testing import dispatch_all
from plugins.store_mmap.checkpoint import Checkpoint

from .helpers import messages, opened

# 4 KiB pages: 2 pages = 409.6 entries, so 100 entries stay below the threshold.
BIG_QUEUE_FILE = {"consume_queue_file_size": 20 * 10_000, "pooled_queue_entries": 0}


def _queue_file(store, topic: str):
    queue = store.queues.queue(topic, 0)
    return queue.files.files[0]


async def test_periodic_persist_flushes_only_queues_worth_flushing(tmp_path):
    async with opened(tmp_path, flush_consume_queue_least_pages=2, **BIG_QUEUE_FILE) as (store, _):
        for i in range(100):
            await store.append(messages("Few", 0, 1, start=i))
        for i in range(500):
            await store.append(messages("Many", 0, 1, start=i))
        await dispatch_all(store)
        before = Checkpoint.load(tmp_path / "checkpoint")
        await store.queues.persist(thorough=False)
        few, many = _queue_file(store, "Few"), _queue_file(store, "Many")
        assert few.flushed == 0 and few.wrote == 100 * 20, "below two pages: left dirty"
        assert many.flushed == many.wrote == 500 * 20
        assert Checkpoint.load(tmp_path / "checkpoint") == before, "no checkpoint on a light persist"

        await store.queues.persist(thorough=True)
        assert few.flushed == few.wrote
        assert Checkpoint.load(tmp_path / "checkpoint").dispatched_offset == store.positions.wrote.value


async def test_index_is_flushed_only_by_a_thorough_persist(tmp_path):
    async with opened(tmp_path) as (store, _):
        await store.append(messages("K", 0, 5))
        await dispatch_all(store)
        assert store.index is not None
        await store.index.persist(thorough=False)
        assert store.index.flushed_timestamp == 0
        await store.index.persist(thorough=True)
        assert store.index.flushed_timestamp == store.index.newest_timestamp > 0
