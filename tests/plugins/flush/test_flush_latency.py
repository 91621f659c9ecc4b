"""Both flush policies time their flushes into a latency histogram (the metrics plugin's
``trocket_flush_latency_seconds``): every fsync of the sync policy, and every async flush that
wrote something, but not the async policy's timed looks that found nothing to flush."""

from __future__ import annotations

import trio

from kernel import Message, MessageBatch
from kernel.model import PutStatus


def _tables(flush: str) -> dict:
    return {
        "plugins": ["store_mmap"],
        "store": "mmap",
        "flush": flush,
        "store_mmap": {"commit_log_file_size": "1MiB", "index_hash_slots": 1000, "index_max_entries": 10_000},
        "flush_async": {"interval": "10ms", "least_pages": 0, "thorough_interval": "10ms"},
    }


async def test_sync_flush_times_every_flush(broker_factory):
    async with broker_factory(**_tables("sync")) as broker:
        for i in range(5):
            result = await broker.put(MessageBatch([Message("Lat", b"x%d" % i)]))
            assert result.status is PutStatus.PUT_OK
        flush = broker.statistics().flush
        assert flush.flushes >= 5  # each put waited for its own flush
        assert flush.flush_latency.count == flush.flushes
        assert flush.flush_latency.total_seconds > 0


async def test_async_flush_times_flushes_that_wrote_and_skips_idle_looks(broker_factory):
    async with broker_factory(**_tables("async")) as broker:
        assert (await broker.put(MessageBatch([Message("Lat", b"y" * 5000)]))).ok
        with trio.fail_after(10):
            while broker.store.watermarks().flushed < broker.store.watermarks().wrote:  # noqa: ASYNC110
                await trio.sleep(0.01)
        await trio.sleep(0.05)  # the flush's own bookkeeping after the watermark moved
        timed = broker.statistics().flush.flush_latency.count
        assert timed >= 1
        await trio.sleep(0.3)  # thirty looks with nothing to flush
        flush = broker.statistics().flush
        assert flush.flush_latency.count == timed < flush.flushes
