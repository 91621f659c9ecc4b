"""The buffered write path (RocketMQ's transient store pool) under both flush policies: staged
appends are invisible until committed, the async policy's commit loop honours its interval,
least pages and thorough interval, and a sync acknowledgement implies committed and flushed."""

from __future__ import annotations

import trio

from kernel import Message, MessageBatch, pull
from kernel.model import GetStatus, PutStatus


def _tables(tmp_path, flush: str, **flush_async) -> dict:
    return {
        "plugins": ["store_mmap"],
        "store": "mmap",
        "flush": flush,
        "store_mmap": {
            "commit_log_file_size": "1MiB",
            "index_hash_slots": 1000,
            "index_max_entries": 10_000,
            "write_path": "buffered",
            "clean_file_forcibly_enable": False,
        },
        "flush_async": {"interval": "10s", "thorough_interval": "60s", **flush_async},
    }


async def _put(broker, body: bytes) -> None:
    result = await broker.put(MessageBatch([Message("Buf", body, queue_id=0)]))
    assert result.status is PutStatus.PUT_OK


async def test_async_commit_loop_publishes_staged_appends(broker_factory, tmp_path):
    tables = _tables(tmp_path, "async", commit_interval="20ms", commit_thorough_interval="50ms")
    async with broker_factory(**tables) as broker:
        visible = broker.store.positions.wrote.value
        await _put(broker, b"staged")
        assert broker.store.positions.wrote.value == visible, "acknowledged but still staged"
        with trio.fail_after(10):
            await broker.wait_dispatched()
        got = await pull.get_messages(broker.store, "Buf", 0, 0)
        assert got.status is GetStatus.FOUND and len(got.records) == 1
        stats = broker.statistics()
        assert stats.flush.commits >= 1 and stats.flush.uncommitted_bytes == 0
        assert stats.store.committed == stats.store.wrote


async def test_commit_waits_for_least_pages_until_the_thorough_interval(broker_factory, tmp_path):
    tables = _tables(
        tmp_path, "async", commit_interval="10ms", commit_least_pages=4, commit_thorough_interval="1h"
    )
    async with broker_factory(**tables) as broker:
        await _put(broker, b"small")
        await trio.sleep(0.2)  # twenty commit rounds, all below four pages
        assert broker.store.uncommitted_bytes() > 0
        assert broker.store.max_queue_offset("Buf", 0) == 0
        await _put(broker, b"x" * (5 * 4096))
        with trio.fail_after(10):
            await broker.wait_dispatched()
        assert broker.store.max_queue_offset("Buf", 0) == 2


async def test_sync_acknowledgement_means_committed_and_flushed(broker_factory, tmp_path):
    async with broker_factory(**_tables(tmp_path, "sync")) as broker:
        await _put(broker, b"durable")
        marks = broker.store.watermarks()
        assert marks.flushed == marks.committed == marks.wrote


async def test_graceful_stop_commits_staged_appends(broker_factory, tmp_path):
    tables = _tables(tmp_path, "async", commit_interval="1h", commit_thorough_interval="1h")
    async with broker_factory(**tables) as broker:
        await _put(broker, b"last words")
        assert broker.store.uncommitted_bytes() > 0
    async with broker_factory(**tables) as broker:
        assert broker.recovery is not None and broker.recovery.clean_shutdown
        await broker.wait_dispatched()
        got = await pull.get_messages(broker.store, "Buf", 0, 0)
        assert got.status is GetStatus.FOUND
