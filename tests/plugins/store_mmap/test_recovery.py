"""Recovery scenarios of rocketmq-features.md Part 2 (AS-01..AS-07) on real files."""

from __future__ import annotations

import shutil

import pytest

from kernel import pull
from kernel.model import GetStatus
from wire import record

from .helpers import clean_close, messages, opened

OWN_FILES = {"pooled_queue_entries": 0}
"""Every queue in its own files from its first entry (the tests that delete queue files)."""


async def fill(root, queues=((("A", 0), 20), (("A", 1), 15), (("B", 0), 10)), **store_table):
    """Write messages spread over several small files, then stop cleanly."""
    async with opened(root, **store_table) as (store, _):
        for (topic, queue_id), count in queues:
            for start in range(0, count, 5):
                await store.append(messages(topic, queue_id, 5, start=start))
        await clean_close(store)
        return store.positions.wrote.value


async def read_all(store, topic, queue_id):
    got = await pull.get_messages(store, topic, queue_id, 0, max_count=1000)
    if got.status is not GetStatus.FOUND:
        return []
    return [record.decode_record(r) for r in got.records]


async def assert_intact(store, *, a0=20, a1=15, b0=10):
    for (topic, queue_id), count in ((("A", 0), a0), (("A", 1), a1), (("B", 0), b0)):
        assert store.max_queue_offset(topic, queue_id) == count, (topic, queue_id)
        decoded = await read_all(store, topic, queue_id)
        assert [m.body for m in decoded] == [m.body for m in messages(topic, queue_id, count)]
        assert [m.queue_offset for m in decoded] == list(range(count))


async def test_as01_clean_restart_keeps_every_offset(tmp_path):
    end = await fill(tmp_path)
    async with opened(tmp_path) as (store, report):
        assert report.clean_shutdown and report.log_max_offset == end
        assert store.positions.wrote.value == end
        await assert_intact(store)
        more = await store.append(messages("A", 0, 1, start=20))
        assert more.queue_offsets == [20] and more.first_offset >= end


PHYSICAL_OFFSET_AT = 28
"""Where a v1 record stores its own commit-log offset."""


def corrupt_last_record(root, how: str = "body"):
    """Damage the newest record like a torn last write: ``body`` flips a body byte (CRC
    mismatch), ``topic`` zeroes topic and properties (a page that never reached the disk; the
    body CRC does not cover it), ``offset`` changes the stored log offset (a stale header)."""
    files = sorted((root / "commitlog").iterdir())
    for path in reversed(files):
        data = bytearray(path.read_bytes())
        offsets, at = [], 0
        while at + 8 <= len(data):
            size, magic = record.read_size_magic(data, at)
            if magic != record.MAGIC_V1:
                break
            offsets.append(at)
            at += size
        if offsets:
            victim = record.decode_record(bytes(data), offsets[-1])
            last = offsets[-1]
            if how == "body":
                data[last + record.HEADER_SIZE] ^= 0xFF
            elif how == "topic":
                # Lengths survive (they sit in other bytes), the text is zeros.
                topic_at = last + record.HEADER_SIZE + len(victim.body)
                props_at = topic_at + 1 + data[topic_at]
                data[topic_at + 1 : props_at] = bytes(props_at - topic_at - 1)
                data[props_at + 2 : last + victim.size] = bytes(last + victim.size - props_at - 2)
            else:
                data[last + PHYSICAL_OFFSET_AT] ^= 0x40
            path.write_bytes(bytes(data))
            return victim
    raise AssertionError("no record to corrupt")


@pytest.mark.parametrize(
    ("how", "note"),
    [("body", "body CRC mismatch"), ("topic", "NUL bytes"), ("offset", "is not its position")],
)
@pytest.mark.parametrize("clean", [True, False], ids=["as02-clean-marker", "as03-crash-marker"])
async def test_corrupt_last_record_is_truncated_and_its_offset_reused(tmp_path, clean, how, note):
    await fill(tmp_path)
    victim = corrupt_last_record(tmp_path, how)
    assert (victim.topic, victim.queue_id, victim.queue_offset) == ("B", 0, 9)
    async with opened(tmp_path, clean=clean) as (store, report):
        assert any(note in n for n in report.notes), report.notes
        assert report.log_max_offset == victim.physical_offset
        await assert_intact(store, b0=9)
        again = await store.append(messages("B", 0, 1, start=9))
        assert again.queue_offsets == [9] and again.first_offset == victim.physical_offset
    async with opened(tmp_path) as (store, _):
        await assert_intact(store)


async def test_as05_zeroed_checkpoint_crash_and_a_deleted_consume_queue_file(tmp_path):
    await fill(tmp_path, **OWN_FILES)
    (tmp_path / "checkpoint").write_bytes(bytes(4096))
    cq_dir = tmp_path / "consumequeue" / "A" / "0"
    first = sorted(cq_dir.iterdir())[0]
    first.unlink()
    async with opened(tmp_path, clean=False, **OWN_FILES) as (store, report):
        assert any("whole log" in note for note in report.notes)
        await assert_intact(store)


async def test_as05_one_queue_directory_deleted_after_a_clean_stop(tmp_path):
    await fill(tmp_path, **OWN_FILES)
    shutil.rmtree(tmp_path / "consumequeue" / "A" / "1")
    async with opened(tmp_path, **OWN_FILES) as (store, report):
        await assert_intact(store)


async def test_as06_all_consume_queues_deleted_are_rebuilt(tmp_path):
    await fill(tmp_path)
    shutil.rmtree(tmp_path / "consumequeue")
    async with opened(tmp_path) as (store, report):
        await assert_intact(store)
        more = await store.append(messages("A", 1, 1, start=15))
        assert more.queue_offsets == [15]


async def test_as07_trailing_log_files_lost_after_a_crash(tmp_path):
    await fill(tmp_path)
    files = sorted((tmp_path / "commitlog").iterdir())
    surviving_end = int(files[2].name)
    for path in files[2:]:
        path.unlink()
    async with opened(tmp_path, clean=False) as (store, report):
        assert report.log_max_offset <= surviving_end
        assert any("beyond the log end" in note for note in report.notes), report.notes
        for topic, queue_id in (("A", 0), ("A", 1), ("B", 0)):
            decoded = await read_all(store, topic, queue_id)
            assert all(m.physical_offset + m.size <= report.log_max_offset for m in decoded)
            assert [m.queue_offset for m in decoded] == list(range(len(decoded)))
            nxt = await store.append(messages(topic, queue_id, 1, start=99))
            assert nxt.queue_offsets == [len(decoded)]


async def test_as07_all_log_files_lost_empties_the_queues(tmp_path):
    await fill(tmp_path)
    shutil.rmtree(tmp_path / "commitlog")
    async with opened(tmp_path, clean=False) as (store, report):
        assert any("destroyed" in note for note in report.notes)
        for topic, queue_id in (("A", 0), ("A", 1), ("B", 0)):
            assert store.max_queue_offset(topic, queue_id) == 0
        first = await store.append(messages("A", 0, 1))
        assert first.queue_offsets == [0] and first.first_offset == 0


async def test_a_file_of_the_wrong_size_is_a_clear_error(tmp_path):
    await fill(tmp_path)
    from kernel.errors import StoreError

    with pytest.raises(StoreError, match="was the file size setting changed"):
        async with opened(tmp_path, commit_log_file_size=8192):
            pass


async def test_a_half_created_newest_file_from_a_crash_is_removed(tmp_path):
    """SIGKILL between creating a file and allocating it leaves a short, empty file."""
    end = await fill(tmp_path, **OWN_FILES)
    files = sorted((tmp_path / "commitlog").iterdir())
    stub = tmp_path / "commitlog" / f"{int(files[-1].name) + 4096:020d}"
    stub.write_bytes(b"")
    cq_dir = tmp_path / "consumequeue" / "A" / "0"
    cq_files = sorted(cq_dir.iterdir())
    (cq_dir / f"{int(cq_files[-1].name) + 200:020d}").write_bytes(bytes(64))
    index_files = sorted((tmp_path / "index").iterdir())
    (tmp_path / "index" / "99991231235959999").write_bytes(bytes(10))
    async with opened(tmp_path, clean=False, **OWN_FILES) as (store, report):
        assert report.log_max_offset == end
        assert not stub.exists()
        await assert_intact(store)
        assert len(list((tmp_path / "index").iterdir())) == len(index_files)


async def test_a_short_file_with_data_is_still_refused(tmp_path):
    await fill(tmp_path)
    files = sorted((tmp_path / "commitlog").iterdir())
    data = files[0].read_bytes()
    files[0].write_bytes(data[:1000])
    from kernel.errors import StoreError

    with pytest.raises(StoreError, match="was the file size setting changed"):
        async with opened(tmp_path):
            pass
