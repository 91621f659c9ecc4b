"""Index files and queries: by key, by unique key, by time range, offset by timestamp."""

from __future__ import annotations

import struct

import numpy as np
import trio

from kernel import Message
from plugins.store_mmap.index_file import ENTRY_DTYPE, HEADER, HEADER_SIZE, key_hash
from wire import record

from .helpers import clean_close, messages, opened


async def test_query_by_key_and_unique_key(tmp_path):
    async with opened(tmp_path) as (store, _):
        await store.append(messages("T", 0, 30))
        await store.append([Message("Other", b"o", properties={"KEYS": "key7", "UNIQ_KEY": "UX"})])
        await clean_close(store)
        found = [record.decode_record(r) for r in await store.query_by_key("T", "key7")]
        assert [m.body for m in found] == [messages("T", 0, 30)[7].body]
        by_uniq = await store.query_by_key("T", f"U{12:031d}")
        assert [record.decode_record(r).queue_offset for r in by_uniq] == [12]
        assert await store.query_by_key("T", "missing") == []
        assert [record.decode_record(r).topic for r in await store.query_by_key("Other", "key7")] == ["Other"]


async def test_shared_key_returns_all_newest_first_and_max_num_caps(tmp_path):
    async with opened(tmp_path) as (store, _):
        batch = [Message("T", f"b{i}".encode(), properties={"KEYS": "order-1 extra"}) for i in range(10)]
        await store.append(batch)
        await clean_close(store)
        found = [record.decode_record(r).body for r in await store.query_by_key("T", "order-1")]
        assert found == [f"b{i}".encode() for i in reversed(range(10))]
        assert len(await store.query_by_key("T", "order-1", max_num=3)) == 3


async def test_full_index_file_rolls_to_a_new_file(tmp_path):
    async with opened(tmp_path) as (store, _):
        for start in range(0, 150, 10):
            await store.append(messages("T", 0, 10, start=start))
        await clean_close(store)
        files = sorted((tmp_path / "index").iterdir())
        assert len(files) >= 3, "100-entry files and 300 keys (UNIQ_KEY + KEYS per message)"
        assert all(len(p.name) == 17 and p.name.isdigit() for p in files)
        header = HEADER.unpack_from(files[0].read_bytes(), 0)
        assert header[4] == 64 and header[5] == 100  # slot count, entries used (index 0 unused)
        found = await store.query_by_key("T", "key3")
        assert [record.decode_record(r).queue_offset for r in found] == [3]
        assert len(await store.query_by_key("T", "key149")) == 1


async def test_time_range_filters(tmp_path):
    async with opened(tmp_path) as (store, _):
        first = await store.append(messages("T", 0, 1))
        await trio.sleep(1.1)
        second = await store.append(messages("T", 0, 1, start=1))
        await clean_close(store)
        assert len(await store.query_by_key("T", "key0", begin=0, end=first.store_timestamp)) == 1
        assert len(await store.query_by_key("T", "key1", begin=second.store_timestamp, end=2**62)) == 1
        assert await store.query_by_key("T", "key0", begin=second.store_timestamp + 2000, end=2**62) == []


async def test_offset_by_timestamp_binary_search(tmp_path):
    async with opened(tmp_path) as (store, _):
        stamps = []
        for i in range(4):
            result = await store.append(messages("T", 0, 2, start=i * 2))
            stamps.append(result.store_timestamp)
            await trio.sleep(0.02)
        await clean_close(store)
        assert store.offset_by_time("T", 0, stamps[0]) == 0
        assert store.offset_by_time("T", 0, stamps[2]) == 4
        assert store.offset_by_time("T", 0, stamps[1] - 1) == 2, "slightly earlier maps to the next entry"
        assert store.offset_by_time("T", 0, 0) == 0, "much earlier maps to the first entry"
        assert store.offset_by_time("T", 0, stamps[-1] + 10_000) == 8
        assert store.offset_by_time("missing", 0, stamps[0]) == 0
        assert store.store_time("T", 0, 3) == stamps[1]
        assert store.store_time("T", 0, 99) == -1


async def test_index_is_rebuilt_after_a_crash(tmp_path):
    async with opened(tmp_path) as (store, _):
        await store.append(messages("T", 0, 20))
        await clean_close(store)
    # Crash before the index of later messages was persisted: add files' worth of messages
    # without persisting, then delete the index directory entirely.
    import shutil

    shutil.rmtree(tmp_path / "index")
    async with opened(tmp_path, clean=False) as (store, _):
        found = await store.query_by_key("T", "key15")
        assert [record.decode_record(r).queue_offset for r in found] == [15]


def test_key_hash_is_javas_non_negative_hash():
    assert key_hash("TopicTest#key") == abs(struct.unpack(">i", struct.pack(">I", _java("TopicTest#key")))[0])


def _java(text: str) -> int:
    h = 0
    for char in text:
        h = (31 * h + ord(char)) & 0xFFFFFFFF
    return h


def _index_entries(root) -> list[tuple[bytes, list]]:
    """Each index file's slot table and its entries' (hash, offset, previous): all but the
    store times, which differ between two runs."""
    out = []
    for path in sorted((root / "index").iterdir()):
        data = path.read_bytes()
        slots, count = HEADER.unpack_from(data)[4:]
        table_end = HEADER_SIZE + slots * 4
        entries = np.frombuffer(data, ENTRY_DTYPE, count, table_end)
        out.append((data[HEADER_SIZE:table_end], entries[["hash", "offset", "previous"]].tolist()))
    return out


async def _index_many_keys(root, monkeypatch, bulk: bool) -> list[str]:
    """Single puts with hundreds of keys (a trace message's), one with a control character,
    indexed with or without the array path."""
    import plugins.store_mmap.index_file as index_file

    monkeypatch.setattr(index_file, "MANY_KEYS_CHARS", 512 if bulk else 10**9)
    keys = [f"C0A80001{i:024X}" for i in range(700)]
    spaced = " ".join(keys[:300]) + "  \t" + "\n".join(keys[300:])
    async with opened(root, commit_log_file_size="1MiB") as (store, _):
        await store.append([Message("T", b"plain", properties={"KEYS": "k1 k2", "UNIQ_KEY": "U1"})])
        await store.append([Message("T", b"many", properties={"KEYS": spaced, "UNIQ_KEY": "U2"})])
        odd = " ".join(keys[:100]) + " odd\x01key"
        await store.append([Message("T", b"odd", properties={"KEYS": odd, "UNIQ_KEY": "U3"})])
        await store.append([Message("T", b"after", properties={"KEYS": "k1"})])
        await clean_close(store)
        return keys


async def test_hundreds_of_keys_are_indexed_as_arrays_byte_for_byte_as_one_by_one(tmp_path, monkeypatch):
    keys = await _index_many_keys(tmp_path / "bulk", monkeypatch, bulk=True)
    async with opened(tmp_path / "bulk", commit_log_file_size="1MiB") as (store, _):
        for key in (keys[0], keys[299], keys[300], keys[-1], "U2"):
            assert [record.decode_record(r).body for r in await store.query_by_key("T", key)][-1:] == [
                b"many"
            ]
        assert [record.decode_record(r).body for r in await store.query_by_key("T", "k1")] == [
            b"after",
            b"plain",
        ]
        assert [record.decode_record(r).body for r in await store.query_by_key("T", "odd\x01key")] == [b"odd"]
    await _index_many_keys(tmp_path / "each", monkeypatch, bulk=False)
    assert _index_entries(tmp_path / "bulk") == _index_entries(tmp_path / "each")
