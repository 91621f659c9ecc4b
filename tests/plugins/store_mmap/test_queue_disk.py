"""Consume-queue disk grows with data, not with queue count (issue 39, item 2): every queue file
was allocated whole up front (5.7 MiB each with RocketMQ's sizes: 1,000 topics x 8 queues took
4.6 GB for one message per queue). Queue files are now sparse and each put allocates the pages
its entries need before it is acknowledged, so a full disk still refuses the put (ENOSPC), never
a SIGBUS and never an acknowledged message its queue cannot hold. Small queues are pooled by
default (one shared journal, no file of their own): a message per queue costs its 20-byte entry
and a record header there."""

from __future__ import annotations

import pytest

from kernel import pull
from kernel.errors import StoreNotWritable
from kernel.model import GetStatus
from kernel.testing import dispatch_all

from .helpers import clean_close, messages, opened
from .test_retention import tiny_filesystem  # noqa: F401 - the fixture

ROCKETMQ_QUEUE_FILE = 300_000 * 20
QUEUES = 400


def _disk(root) -> tuple[int, int]:
    """(real bytes allocated, apparent bytes) of the files under ``root``."""
    files = [p for p in root.rglob("*") if p.is_file()]
    return sum(p.stat().st_blocks * 512 for p in files), sum(p.stat().st_size for p in files)


async def _each_queue_holds_one(store) -> None:
    for queue_id in range(QUEUES):
        got = await pull.get_messages(store, "Wide", queue_id, 0)
        assert got.status is GetStatus.FOUND and len(got.records) == 1, queue_id


async def test_with_own_files_a_message_per_queue_costs_a_page_not_a_whole_queue_file(tmp_path):
    async with opened(
        tmp_path / "store", consume_queue_file_size=ROCKETMQ_QUEUE_FILE, pooled_queue_entries=0
    ) as (store, _):
        for queue_id in range(QUEUES):
            await store.append(messages("Wide", queue_id, 1))
        await dispatch_all(store)
        await _each_queue_holds_one(store)
    real, apparent = _disk(tmp_path / "store" / "consumequeue")
    assert apparent == QUEUES * ROCKETMQ_QUEUE_FILE  # RocketMQ's file size and names are kept
    assert real <= QUEUES * 8192, f"{real} bytes really allocated for {QUEUES} one-entry queues"


async def test_pooled_a_message_per_queue_costs_its_entry_in_the_pool_and_no_file(tmp_path):
    root = tmp_path / "store"
    async with opened(root, consume_queue_file_size=ROCKETMQ_QUEUE_FILE) as (store, _):
        for queue_id in range(QUEUES):
            await store.append(messages("Wide", queue_id, 1))
        await clean_close(store)
        await _each_queue_holds_one(store)
    assert not [p for p in (root / "consumequeue").rglob("*") if p.is_file()]
    real, _ = _disk(root / "consumequeue_pool")
    # The journal's records (about 50 bytes a queue) and its space allocated ahead (1 MiB).
    assert real <= (1 << 20) + QUEUES * 64, f"{real} bytes for {QUEUES} one-entry queues"
    async with opened(root, consume_queue_file_size=ROCKETMQ_QUEUE_FILE) as (store, report):
        assert report.clean_shutdown
        await _each_queue_holds_one(store)
        assert (await store.append(messages("Wide", 7, 1, start=1))).queue_offsets == [1]


@pytest.mark.parametrize("pooled", [0, 204], ids=["own-files", "pooled"])
async def test_a_full_disk_refuses_the_put_that_its_queue_could_not_hold(tiny_filesystem, tmp_path, pooled):  # noqa: F811
    """The queues on a 40 KiB filesystem, the log elsewhere: puts to new queues fill it, then
    one is refused with ENOSPC, and every acknowledged message is readable from its queue."""
    root = tiny_filesystem / "store"
    acked: list[int] = []
    async with opened(
        root,
        consume_queue_file_size=ROCKETMQ_QUEUE_FILE,
        commit_log_dir=str(tmp_path / "log"),
        pooled_queue_entries=pooled,
    ) as (
        store,
        _,
    ):
        with pytest.raises(StoreNotWritable, match="cannot open the consume queue Wide/") as refused:
            for queue_id in range(5000):
                await store.append(messages("Wide", queue_id, 1))
                acked.append(queue_id)
        assert "the disk is full" in str(refused.value)
        assert acked, "some puts fit"
        await dispatch_all(store)
        for queue_id in acked:
            got = await pull.get_messages(store, "Wide", queue_id, 0)
            assert got.status is GetStatus.FOUND, queue_id


async def test_queue_files_allocated_whole_by_an_older_version_load_with_their_entries(tmp_path):
    """A store written before queue files were sparse (every file allocated, zeros past the
    entries) starts with the same queue ends: the end is the first invalid entry either way."""
    import os

    from plugins.store_mmap.consume_queue import ENTRY

    root = tmp_path / "store"
    async with opened(root, consume_queue_file_size=4000, pooled_queue_entries=0) as (store, _):
        await store.append(messages("Old", 0, 3))
        await dispatch_all(store)
        await clean_close(store)
    path = next((root / "consumequeue" / "Old" / "0").iterdir())
    data = path.read_bytes()
    path.unlink()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, 4000)  # as MappedFile.open did: no hole anywhere
    os.pwrite(fd, data[: 3 * ENTRY.size], 0)
    os.close(fd)
    async with opened(root, consume_queue_file_size=4000, pooled_queue_entries=0) as (store, _):
        assert store.max_queue_offset("Old", 0) == 3
        got = await pull.get_messages(store, "Old", 0, 0)
        assert got.queue_offsets == [0, 1, 2]
