"""The consume-queue pool (issue 39): small queues' entries held in memory and journaled together,
so a queue with a few messages costs no file. These tests hold it to what per-queue files
promise: every entry readable after a clean stop and after a crash, a torn or lost journal
rebuilt from the commit log, a queue that grows moved to its own files with nothing lost, a
truncated log not resurrected by the journal, and a journal that does not grow without bound."""

from __future__ import annotations

import shutil

from kernel import pull
from kernel.model import GetStatus
from kernel.testing import dispatch_all
from plugins.store_mmap import queue_pool
from plugins.store_mmap.consume_queue import ConsumeQueue
from plugins.store_mmap.queue_pool import DROP, PooledQueue
from wire import record

from .helpers import clean_close, messages, opened

POOL = "consumequeue_pool"


async def _bodies(store, topic: str, queue_id: int, start: int = 0) -> list[bytes]:
    got = await pull.get_messages(store, topic, queue_id, start, max_count=1000)
    if got.status is not GetStatus.FOUND:
        return []
    return [record.decode_record(r).body for r in got.records]


def _expected(topic: str, queue_id: int, count: int, start: int = 0) -> list[bytes]:
    return [m.body for m in messages(topic, queue_id, count, start=start)]


def _journal_records(root) -> list[tuple[int, int, int, str]]:
    """(file offset of the record, its length, kind, topic) of every record in the journal."""
    found = []
    for path in sorted((root / POOL).iterdir()):
        data = path.read_bytes()
        at = 0
        while at + 8 <= len(data):
            length, _ = queue_pool._LENGTH_CRC.unpack_from(data, at)
            if length == 0:
                break
            kind, name_length = queue_pool._KIND_TOPIC.unpack_from(data, at + 8)
            found.append((int(path.name) + at, length, kind, data[at + 11 : at + 11 + name_length].decode()))
            at += length
    return found


async def test_small_queues_are_pooled_and_read_back_after_a_clean_stop(tmp_path):
    async with opened(tmp_path) as (store, _):
        for queue_id in range(50):
            await store.append(messages("Small", queue_id, 3))
        await clean_close(store)
        assert all(isinstance(q, PooledQueue) for q in store.queues.queues.values())
    assert not (tmp_path / "consumequeue" / "Small").exists()
    async with opened(tmp_path) as (store, report):
        assert report.clean_shutdown and report.redispatch_from == store.positions.wrote.value
        for queue_id in range(50):
            assert await _bodies(store, "Small", queue_id) == _expected("Small", queue_id, 3)
        more = await store.append(messages("Small", 9, 1, start=3))
        assert more.queue_offsets == [3]


async def test_a_queue_that_grows_past_the_pool_bound_moves_to_its_own_files(tmp_path):
    async with opened(tmp_path, pooled_queue_entries=10) as (store, _):
        for start in range(0, 9, 3):  # 9 entries: pooled
            await store.append(messages("Grow", 0, 3, start=start))
        await dispatch_all(store)
        assert isinstance(store.queues.queue("Grow", 0), PooledQueue)
        await store.append(messages("Grow", 0, 3, start=9))  # 12 > 10: its own files at the put
        await dispatch_all(store)
        moved = store.queues.queue("Grow", 0)
        assert isinstance(moved, ConsumeQueue) and moved.max_queue_offset == 12
        assert store.queues.pool.held_bytes == 0
        assert await _bodies(store, "Grow", 0) == _expected("Grow", 0, 12)
        await store.append(messages("Grow", 0, 1, start=12))
        await clean_close(store)
    assert [kind for _, _, kind, topic in _journal_records(tmp_path) if topic == "Grow"][-1] == DROP
    async with opened(tmp_path, pooled_queue_entries=10) as (store, _):
        assert isinstance(store.queues.queue("Grow", 0), ConsumeQueue)
        assert not store.queues.pool.members
        assert await _bodies(store, "Grow", 0) == _expected("Grow", 0, 13)


async def test_a_batch_larger_than_the_pool_bound_goes_straight_to_its_own_files(tmp_path):
    async with opened(tmp_path, pooled_queue_entries=10) as (store, _):
        await store.append(messages("Big", 0, 11))
        await dispatch_all(store)
        assert isinstance(store.queues.queue("Big", 0), ConsumeQueue)
        assert await _bodies(store, "Big", 0) == _expected("Big", 0, 11)


async def test_over_its_memory_bound_the_pool_moves_out_its_largest_queues(tmp_path):
    # 200 bytes: ten entries; queue 0 holds 8, the others 1 each.
    async with opened(tmp_path, pooled_queue_entries=100, queue_pool_memory=200) as (store, _):
        await store.append(messages("Mem", 0, 8))
        for queue_id in range(1, 6):
            await store.append(messages("Mem", queue_id, 1))
        await dispatch_all(store)
        assert isinstance(store.queues.queue("Mem", 0), ConsumeQueue), "the largest moved out"
        assert store.queues.pool.held_bytes <= 150
        assert await _bodies(store, "Mem", 0) == _expected("Mem", 0, 8)
        for queue_id in range(1, 6):
            assert await _bodies(store, "Mem", queue_id) == _expected("Mem", queue_id, 1)


async def test_a_move_the_journal_never_heard_of_is_settled_at_start(tmp_path):
    """A stop between a queue's move to its own files and the journal record saying so: at
    start the queue has both; its files win and the pool lets it go."""
    async with opened(tmp_path, pooled_queue_entries=10) as (store, _):
        await store.append(messages("Twice", 0, 5))
        await store.append(messages("Other", 0, 1))
        await dispatch_all(store)
        await store.append(messages("Twice", 0, 6, start=5))
        await clean_close(store)
    drop_at, length, _, _ = next(r for r in _journal_records(tmp_path) if r[2] == DROP)
    segment = sorted((tmp_path / POOL).iterdir())[-1]
    data = bytearray(segment.read_bytes())
    data[drop_at - int(segment.name) :] = bytes(len(data) - (drop_at - int(segment.name)))
    segment.write_bytes(bytes(data))
    async with opened(tmp_path, pooled_queue_entries=10) as (store, _):
        assert isinstance(store.queues.queue("Twice", 0), ConsumeQueue)
        assert ("Twice", 0) not in store.queues.pool.members
        assert await _bodies(store, "Twice", 0) == _expected("Twice", 0, 11)
        assert await _bodies(store, "Other", 0) == _expected("Other", 0, 1)
        assert (await store.append(messages("Twice", 0, 1, start=11))).queue_offsets == [11]


async def test_a_torn_journal_tail_after_a_crash_is_cut_and_rebuilt_from_the_log(tmp_path):
    async with opened(tmp_path) as (store, _):
        for queue_id in range(20):
            await store.append(messages("Torn", queue_id, 2))
        await clean_close(store)
        for queue_id in range(20):  # after the checkpoint: only the journal and the log have them
            await store.append(messages("Torn", queue_id, 1, start=2))
        await dispatch_all(store)
        await store.flush()
        store.queues.pool.write()
    last_at, last_length, _, _ = _journal_records(tmp_path)[-1]
    segment = sorted((tmp_path / POOL).iterdir())[-1]
    data = bytearray(segment.read_bytes())
    data[last_at - int(segment.name) + last_length - 3] ^= 0xFF  # its CRC no longer matches
    segment.write_bytes(bytes(data))
    async with opened(tmp_path, clean=False) as (store, _):
        for queue_id in range(20):
            assert await _bodies(store, "Torn", queue_id) == _expected("Torn", queue_id, 3), queue_id


async def test_a_page_lost_in_the_middle_of_the_journal_ends_its_replay_there(tmp_path, monkeypatch):
    """A power cut keeps any subset of unflushed pages: zeros in the middle of a journal file
    (records after the checkpoint) must end the replay, not skip to the next file, whose
    records would then restart queues past their lost entries. The log re-dispatches from the
    checkpoint; no queue needs rebuilding from the log's start."""
    monkeypatch.setattr(queue_pool, "SEGMENT_SIZE", 4096)
    monkeypatch.setattr(queue_pool, "ALLOCATE_STEP", 4096)
    table = {"commit_log_file_size": 8192}  # the checkpoint lies past the first log file
    async with opened(tmp_path, **table) as (store, _):
        for queue_id in range(4):
            await store.append(messages("Hole", queue_id, 20))
        await clean_close(store)  # the checkpoint covers these
        for round_ in range(20, 80):  # after it: ~15 KiB of records, three more journal files
            for queue_id in range(4):
                await store.append(messages("Hole", queue_id, 1, start=round_))
            await dispatch_all(store)
        await store.flush()
        store.queues.pool.write()
    segments = sorted((tmp_path / POOL).iterdir())
    assert len(segments) >= 3
    middle = segments[1]
    # Lost from a record's start on (where a page boundary may fall): zeros read as "no record".
    lost_at = [at for at, _, _, _ in _journal_records(tmp_path) if at > int(middle.name)][5] - int(
        middle.name
    )
    data = bytearray(middle.read_bytes())
    data[lost_at : lost_at + 2048] = bytes(2048)
    middle.write_bytes(bytes(data))
    async with opened(tmp_path, clean=False, **table) as (store, report):
        assert not any("rebuilding from the first file" in note for note in report.notes), report.notes
        for queue_id in range(4):
            assert await _bodies(store, "Hole", queue_id) == _expected("Hole", queue_id, 80), queue_id


async def test_a_lost_journal_is_rebuilt_from_the_log(tmp_path):
    async with opened(tmp_path, commit_log_file_size=8192) as (store, _):
        for round_ in range(10):  # several log files
            for queue_id in range(6):
                await store.append(messages("Lost", queue_id, 1, start=round_))
        await clean_close(store)
    shutil.rmtree(tmp_path / POOL)
    async with opened(tmp_path, commit_log_file_size=8192) as (store, _):
        for queue_id in range(6):
            assert await _bodies(store, "Lost", queue_id) == _expected("Lost", queue_id, 10)


async def test_a_truncated_log_stays_truncated_in_pooled_queues_across_a_restart(tmp_path):
    """A demoted master cuts its divergent tail; the journal still holds the entries that
    pointed there, and an END record keeps them from coming back."""
    async with opened(tmp_path) as (store, _):
        await store.append(messages("Cut", 0, 3))
        cut_at = store.positions.wrote.value
        await store.append(messages("Cut", 0, 2, start=3))
        await dispatch_all(store)
        store.truncate(cut_at)
        store.take_over()
        again = await store.append(messages("Cut", 0, 2, start=100))
        assert again.queue_offsets == [3, 4]
        await clean_close(store)
    async with opened(tmp_path) as (store, _):
        assert await _bodies(store, "Cut", 0) == _expected("Cut", 0, 3) + _expected("Cut", 0, 2, start=100)


async def test_the_journal_is_compacted_and_old_files_deleted_once_the_rewrite_is_durable(
    tmp_path, monkeypatch
):
    """Queues that moved to their own files leave dead records behind; once the journal is
    COMPACT_FACTOR times the live state, the live state is written again and the files before
    it go at the next persist."""
    monkeypatch.setattr(queue_pool, "SEGMENT_SIZE", 4096)
    monkeypatch.setattr(queue_pool, "ALLOCATE_STEP", 4096)
    monkeypatch.setattr(queue_pool, "COMPACT_MIN", 8192)
    table = {"pooled_queue_entries": 5, "commit_log_file_size": "1MiB"}
    async with opened(tmp_path, **table) as (store, _):
        for queue_id in range(3):
            await store.append(messages("Keep", queue_id, 2))
        for round_ in range(6):  # 60 queues, a record each per round; the sixth moves them out
            for queue_id in range(60):
                await store.append(messages("Churn", queue_id, 1, start=round_))
            await dispatch_all(store)
        pool = store.queues.pool
        assert pool._rewrite_end, "compacted"
        before = len(list((tmp_path / POOL).iterdir()))
        await store.queues.persist(thorough=False)
        assert len(list((tmp_path / POOL).iterdir())) < before
        await clean_close(store)
    async with opened(tmp_path, **table) as (store, report):
        assert report.redispatch_from == store.positions.wrote.value  # the journal had everything
        assert set(store.queues.pool.members) == {("Keep", q) for q in range(3)}
        for queue_id in range(3):
            assert await _bodies(store, "Keep", queue_id) == _expected("Keep", queue_id, 2)
        for queue_id in range(60):
            assert await _bodies(store, "Churn", queue_id) == _expected("Churn", queue_id, 6)


async def test_when_its_own_files_cannot_be_created_a_queue_stays_pooled(tmp_path):
    async with opened(tmp_path, pooled_queue_entries=4) as (store, _):
        await store.append(messages("Stay", 0, 2))
        await dispatch_all(store)
        blocker = tmp_path / "consumequeue" / "Stay"
        blocker.parent.mkdir(parents=True, exist_ok=True)
        blocker.write_text("a file where its directory would go")
        await store.append(messages("Stay", 0, 4, start=2))  # past the bound: a move is tried
        await dispatch_all(store)
        assert isinstance(store.queues.queue("Stay", 0), PooledQueue)
        assert store.queues.promotions_failed >= 1
        assert await _bodies(store, "Stay", 0) == _expected("Stay", 0, 6)


async def test_turning_the_pool_off_moves_its_queues_to_their_own_files(tmp_path):
    async with opened(tmp_path) as (store, _):
        for queue_id in range(4):
            await store.append(messages("Off", queue_id, 2))
        await clean_close(store)
    async with opened(tmp_path, pooled_queue_entries=0) as (store, report):
        assert store.queues.pool is None
        assert all(isinstance(q, ConsumeQueue) for q in store.queues.queues.values())
        for queue_id in range(4):
            assert await _bodies(store, "Off", queue_id) == _expected("Off", queue_id, 2)
        await clean_close(store)
    assert not list((tmp_path / POOL).iterdir())
    async with opened(tmp_path, pooled_queue_entries=0) as (store, _):
        assert await _bodies(store, "Off", 3) == _expected("Off", 3, 2)
