"""Commit-log files: 20-digit names, BLANK filler at the end of a file, rollover, reads across
files, pre-allocation, lock."""

from __future__ import annotations

import struct

import pytest

from kernel import pull
from kernel.errors import StoreLocked, StoreNotWritable
from kernel.model import GetStatus
from kernel.testing import dispatch_all
from plugins.store_mmap.store import open_mmap_store
from wire import record

from .helpers import messages, opened, store_context


async def test_rollover_names_filler_and_reads_across_files(tmp_path):
    async with opened(tmp_path) as (store, _):
        results = [await store.append(messages("T", 0, 3, start=i * 3)) for i in range(20)]
        await dispatch_all(store)
        names = sorted(p.name for p in (tmp_path / "commitlog").iterdir())
        assert all(len(n) == 20 and n.isdigit() for n in names)
        assert [int(n) for n in names] == [i * 4096 for i in range(len(names))]
        assert len(names) >= 4, "several files, plus the pre-allocated next one"
        for path in (tmp_path / "commitlog").iterdir():
            assert path.stat().st_size == 4096
        offsets = [o for r in results for o in r.physical_offsets]
        sizes = [s for r in results for s in r.sizes]
        for offset, size in zip(offsets, sizes, strict=True):
            assert offset // 4096 == (offset + size - 1) // 4096, "a record never straddles files"
        # The first file ends with a BLANK record where the next record did not fit.
        first = (tmp_path / "commitlog" / names[0]).read_bytes()
        last_in_first = max(o + s for o, s in zip(offsets, sizes, strict=True) if o < 4096)
        length, magic = struct.unpack_from(">ii", first, last_in_first)
        assert magic == record.MAGIC_BLANK and length == 4096 - last_in_first
        got = await pull.get_messages(store, "T", 0, 0, max_count=100)
        assert got.status is GetStatus.FOUND and len(got.records) == 60
        bodies = [record.decode_record(r).body for r in got.records]
        assert bodies == [m.body for m in messages("T", 0, 60)]


async def test_batches_get_consecutive_queue_offsets(tmp_path):
    async with opened(tmp_path) as (store, _):
        first = await store.append(messages("B", 1, 5))
        second = await store.append(messages("B", 1, 5, start=5))
        assert first.queue_offsets == [0, 1, 2, 3, 4] and second.queue_offsets == [5, 6, 7, 8, 9]


async def test_a_record_larger_than_a_file_is_refused(tmp_path):
    async with opened(tmp_path) as (store, _):
        with pytest.raises(StoreNotWritable, match="cannot fit"):
            await store.append(messages("T", 0, 1, size=5000))
        ok = await store.append(messages("T", 0, 1))
        assert ok.queue_offsets == [0], "a refused message does not consume a queue offset"


async def test_offset_message_id_finds_the_record(tmp_path):
    async with opened(tmp_path) as (store, _):
        result = await store.append(messages("T", 0, 4))
        address, offset = record.parse_offset_msg_id(result.msg_ids[2])
        assert address == ("127.0.0.1", 10911)
        assert record.decode_record(await store.read_record_at(offset)).body == messages("T", 0, 4)[2].body


async def test_second_store_on_the_same_directory_is_refused(tmp_path):
    async with opened(tmp_path):
        with pytest.raises(StoreLocked, match="another broker is using this store directory"):
            async with open_mmap_store(store_context(tmp_path)):
                pass
    async with opened(tmp_path):
        pass  # released on close


async def test_mmap_write_path_files_are_identical(tmp_path):
    for write_path in ("pwrite", "mmap"):
        async with opened(tmp_path / write_path, write_path=write_path) as (store, _):
            for i in range(12):
                await store.append(messages("T", i % 2, 3, start=i * 3))
            await store.flush()
    for name in ("00000000000000000000", "00000000000000004096"):
        a = (tmp_path / "pwrite" / "commitlog" / name).read_bytes()
        b = (tmp_path / "mmap" / "commitlog" / name).read_bytes()
        # Store timestamps differ between runs; compare everything else record by record.
        ra = [record.decode_record(a, o) for o in _offsets(a)]
        rb = [record.decode_record(b, o) for o in _offsets(b)]
        assert [(m.physical_offset, m.queue_offset, m.body, m.properties) for m in ra] == [
            (m.physical_offset, m.queue_offset, m.body, m.properties) for m in rb
        ]


def _offsets(data: bytes) -> list[int]:
    out, at = [], 0
    while at + 8 <= len(data):
        size, magic = struct.unpack_from(">ii", data, at)
        if magic != record.MAGIC_V1:
            break
        out.append(at)
        at += size
    return out


@pytest.mark.parametrize("write_path", ["pwrite", "mmap", "buffered"])
async def test_flushed_position_never_passes_the_written_end(tmp_path, write_path):
    """Regression: the pre-allocated next file (empty, "fully flushed") once moved the flushed
    position to its start, past bytes of the active file that were never synced, so a sync-flush
    put could be acknowledged before its bytes reached the disk."""
    async with opened(tmp_path, write_path=write_path) as (store, _):
        for i in range(40):
            result = await store.append(messages("T", 0, 1, start=i))
            flushed = await store.flush()
            assert flushed == result.end_offset == store.positions.flushed.value
        assert len(list((tmp_path / "commitlog").iterdir())) >= 3, "rolled, next file pre-allocated"
