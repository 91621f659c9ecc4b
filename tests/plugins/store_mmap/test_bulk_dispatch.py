"""The column-wise dispatch path gives exactly what the one-record-at-a-time definitions give.

``wire.record.decode_dispatch`` defines what a view learns from a record, ``IndexFile.put``
what one key adds to an index file and ``java_string_hash`` the hash. The dispatch loop uses
their bulk forms (``DispatchBatch``, ``IndexFile.put_many``, ``java_hashes``); these tests hold
each bulk form to its definition on random input, byte for byte where files are written.
"""

from __future__ import annotations

import random
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel import Message
from kernel.model import SCHEDULE_TOPIC, SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6
from kernel.testing import dispatch_all
from plugins.store_mmap import commit_log as commit_log_module
from plugins.store_mmap.index_file import IndexFile, key_hash, key_hashes
from tests.kernel.test_wire_batch import batch_body
from wire import batch_codec, record
from wire.dispatch_batch import AppendedWire, DispatchBatch, as_batch
from wire.dispatch_record import pack_host
from wire.java_hash import as_signed, java_hashes, java_string_hash, unsigned_hash
from wire.record_run import check_run
from wire.wire_batch import WireBatch

from .helpers import clean_close, messages, opened

PARKING = frozenset({SCHEDULE_TOPIC})
"""The parking topic these records use (a broker learns its parking topics from its plugins)."""

_TEXT = st.text(alphabet=st.characters(blacklist_characters="\x00\x01\x02", codec="utf-8"), max_size=40)


@given(st.lists(_TEXT, max_size=50), _TEXT)
@settings(max_examples=200, deadline=None)
def test_java_hashes_match_the_scalar_definition(keys, prefix):
    assert as_signed(java_hashes([k.encode() for k in keys])).tolist() == [java_string_hash(k) for k in keys]
    with_prefix = java_hashes([k.encode() for k in keys], prefix=unsigned_hash(prefix))
    assert as_signed(with_prefix).tolist() == [java_string_hash(prefix + k) for k in keys]
    assert key_hashes(with_prefix).tolist() == [key_hash(prefix + k) for k in keys]


def _random_message(rng: random.Random, i: int) -> Message:
    topic = rng.choice(["TopicA", "B", "Topic-é", SCHEDULE_TOPIC])
    properties: dict[str, str] = {}
    if rng.random() < 0.8:
        properties["UNIQ_KEY"] = f"{rng.getrandbits(128):032X}"
    if rng.random() < 0.5:
        properties["TAGS"] = rng.choice(["TagA", "tag-ü", "", "x" * 40])
    if rng.random() < 0.5:
        properties["KEYS"] = " ".join(
            rng.choice(["k1", "order-7", "ключ", "a"]) for _ in range(rng.randint(0, 3))
        )
    if topic == SCHEDULE_TOPIC:
        properties["TIMER_OUT_MS"] = rng.choice([str(rng.randint(0, 2**40)), "bad"])
        properties["REAL_TOPIC"] = "TopicA"
    if rng.random() < 0.3:
        properties["other"] = "TAGS\x01x KEYS"  # wanted names inside a value never match
    body = rng.choice([b"", b"\x02TAGS\x01evil", rng.randbytes(rng.randint(1, 300))])
    return Message(
        topic, body or b"b", queue_id=rng.randint(0, 3), properties=properties, sys_flag=rng.choice([0, 0xC])
    )


def _log(rng: random.Random, count: int) -> tuple[bytes, list[int]]:
    encoder = record.RecordEncoder(("127.0.0.1", 10911))
    run = encoder.encode_run([_random_message(rng, i) for i in range(count)], 1000, {}, 1_700_000_000_000)
    return b"\0" * 1000 + run.data, [o for o in run.offsets]


@given(st.integers(0, 2**32), st.integers(1, 200))
@settings(max_examples=60, deadline=None)
def test_dispatch_batch_matches_decode_dispatch(seed, count):
    data, offsets = _log(random.Random(seed), count)
    checked = check_run(data, 1000, len(data), base=0, check_crc=True)
    assert checked.count == count and checked.error is None
    batch = DispatchBatch.from_run(data, checked, PARKING)
    expected = [record.decode_dispatch(data, o, PARKING) for o in offsets]
    assert list(batch) == expected
    assert as_batch(expected).tags_code.tolist() == batch.tags_code.tolist()
    assert batch.queue_keys() == {(r.topic, r.queue_id) for r in expected}
    cut = offsets[len(offsets) // 2]
    assert list(batch.since(cut)) == [r for r in expected if r.physical_offset >= cut]
    halves = DispatchBatch.concat([batch[: count // 2], batch[count // 2 :]])
    assert list(halves) == expected and halves.key_texts() == batch.key_texts()


@given(st.integers(0, 2**32), st.integers(1, 60))
@settings(max_examples=60, deadline=None)
def test_records_of_messages_handed_over_at_append_match_the_stored_records(seed, count):
    """Single sends are dispatched from their message objects, never read back: what the
    dispatch loop builds from them is what decoding their records gives."""
    rng = random.Random(seed)
    batch = [_random_message(rng, i) for i in range(count)]
    for message in batch:
        message.sys_flag |= rng.choice([0, SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6])
        message.prepared_transaction_offset = rng.choice([0, rng.randint(1, 2**40)])
    encoder = record.RecordEncoder(("127.0.0.1", 10911))
    run = encoder.encode_run(batch, 500, {("TopicA", 1): 7}, 1_700_000_000_123)
    assert run.properties_as_given
    data = b"\0" * 500 + run.data
    expected = [record.decode_dispatch(data, o, PARKING) for o in run.offsets]
    assert record.dispatch_records(batch, run, 1_700_000_000_123, PARKING, "127.0.0.1:10911") == expected


def test_a_message_whose_properties_are_reformatted_is_not_handed_over():
    """A property value that is not a string is stored formatted (``str``), so the message no
    longer says what the record holds: such a run is read back instead."""
    message = Message("TopicA", b"b", properties={"UNIQ_KEY": "K1", "count": 3})  # type: ignore[dict-item]
    run = record.RecordEncoder(("127.0.0.1", 10911)).encode_run([message], 0, {}, 1)
    assert not run.properties_as_given
    assert record.decode_dispatch(run.data, 0).properties == {"UNIQ_KEY": "K1", "count": "3"}


@given(st.integers(0, 2**32), st.integers(1, 100), st.integers(0, 50))
@settings(max_examples=60, deadline=None)
def test_columns_handed_over_at_append_match_the_stored_records(seed, count, first_queue_offset):
    rng = random.Random(seed)
    topic = rng.choice(["TopicA", SCHEDULE_TOPIC])
    entries = []
    for i in range(count):
        message = _random_message(rng, i)
        entries.append((message.body, message.properties, rng.randint(0, 9)))
    wire = WireBatch.decode(batch_body(entries), topic=topic, queue_id=2, sys_flag=rng.choice([0, 0xC]))
    encoder = record.RecordEncoder(("127.0.0.1", 10911))
    run = encoder.encode_run(wire, 500, {(topic, 2): first_queue_offset}, 1_700_000_000_000)
    handed = DispatchBatch.from_wire(
        wire, np.array(run.offsets), np.array(run.sizes), first_queue_offset, 1_700_000_000_000, PARKING,
        pack_host("127.0.0.1:10911"),
    )  # fmt: skip
    data = b"\0" * 500 + run.data
    scanned = DispatchBatch.from_run(data, check_run(data, 500, len(data), base=0), PARKING)
    assert list(handed) == list(scanned)
    assert handed.tags_code.tolist() == scanned.tags_code.tolist()
    assert handed.key_texts() == scanned.key_texts()
    assert handed.key_rows.tolist() == scanned.key_rows.tolist()


@given(st.integers(0, 2**32), st.lists(st.integers(1, 20), min_size=2, max_size=6))
@settings(max_examples=60, deadline=None)
def test_columns_of_a_run_of_appended_batches_match_the_stored_records(seed, counts):
    """The dispatch loop turns a run of batches appended from requests into columns at once
    (mixed topics and queues, a parking topic among them): the values read back from the log."""
    rng = random.Random(seed)
    encoder = record.RecordEncoder(("127.0.0.1", 10911))
    queue_offsets: dict[tuple[str, int], int] = {}
    at, data, appended = 700, b"\0" * 700, []
    for n, count in enumerate(counts):
        topic, queue_id = rng.choice(["TopicA", "TopicB", SCHEDULE_TOPIC]), rng.randint(0, 3)
        entries = []
        for i in range(count):
            message = _random_message(rng, i)
            entries.append((message.body, message.properties, rng.randint(0, 9)))
        sys_flag = rng.choice([0, 0xC])
        wire = WireBatch.decode(batch_body(entries), topic=topic, queue_id=queue_id, sys_flag=sys_flag)
        first = queue_offsets.get((topic, queue_id), rng.randint(0, 50))
        now = 1_700_000_000_000 + n
        run = encoder.encode_run(wire, at, {(topic, queue_id): first}, now)
        queue_offsets.update(run.next_queue_offsets)
        appended.append(
            AppendedWire(
                wire, np.array(run.offsets), np.array(run.sizes), first, now, pack_host("127.0.0.1:10911")
            )
        )
        data += run.data
        at += len(run.data)
    handed = DispatchBatch.from_wires(appended, PARKING)
    scanned = DispatchBatch.from_run(data, check_run(data, 700, len(data), base=0), PARKING)
    assert list(handed) == list(scanned)
    assert handed.tags_code.tolist() == scanned.tags_code.tolist()
    assert handed.key_texts() == scanned.key_texts()
    assert handed.key_rows.tolist() == scanned.key_rows.tolist()
    assert handed.queue_keys() == scanned.queue_keys()


@given(st.integers(0, 2**32), st.integers(1, 300), st.sampled_from([1, 3, 64]), st.booleans())
@settings(max_examples=60, deadline=None)
def test_put_many_writes_what_put_writes(tmp_path_factory, seed, count, slots, compiled):
    """Both bulk writes: the compiled codec's loop, and the array operations of the pure codec."""
    compiled = compiled and batch_codec.ACCELERATED  # the arrays alone without a built codec
    rng = random.Random(seed)
    root = tmp_path_factory.mktemp("index")
    keys = [f"T#{rng.choice(['k', 'order', 'ü'])}{rng.randint(0, 20)}" for _ in range(count)]
    offsets = sorted(rng.sample(range(10**9), count))
    timestamps = sorted(rng.randint(1_700_000_000_000, 1_700_000_900_000) for _ in range(count))
    one = IndexFile.open(root / "one", slots, 120, create=True)
    many = IndexFile.open(root / "many", slots, 120, create=True)
    try:
        split = rng.randint(0, count)  # a file already holding entries, then a batch
        first = zip(keys[:split], offsets[:split], timestamps[:split], strict=True)
        before = sum(many.put(key, offset, ts) for key, offset, ts in first)
        hashed = key_hashes(java_hashes([k.encode() for k in keys[split:]]))
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(batch_codec, "ACCELERATED", compiled)
            taken = many.put_many(hashed, np.array(offsets[split:]), np.array(timestamps[split:]))
        expected = sum(one.put(k, o, t) for k, o, t in zip(keys, offsets, timestamps, strict=True))
        assert before + taken == expected
        assert bytes(one._map) == bytes(many._map)
        assert one.lookup(keys[0], 500, 0, 2**62) == many.lookup(keys[0], 500, 0, 2**62)
    finally:
        one.close()
        many.close()


def _view_files(root) -> tuple[dict[str, bytes], list[bytes]]:
    queues = {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted((root / "consumequeue").rglob("*"))
        if p.is_file()
    }
    index = [p.read_bytes() for p in sorted((root / "index").iterdir()) if p.name.isdigit()]
    return queues, index


@pytest.mark.parametrize("dispatch_each_put", [False, True])
async def test_views_built_from_handed_columns_equal_views_rebuilt_from_the_log(tmp_path, dispatch_each_put):
    """Encoded batches hand their columns to dispatch, object batches their messages (read
    back when a property had to be reformatted), and file ends leave fillers between them; a
    store rebuilt from the same log by scanning alone writes the same consume-queue and index
    bytes. Dispatched after each put, the views take each put's records on their own."""
    rng = random.Random(7)
    live = tmp_path / "live"
    async with opened(live) as (store, _):
        for i in range(90):
            if dispatch_each_put:
                await dispatch_all(store)
            if i % 3 == 2:
                await store.append(messages("TopicA", i % 4, 3, start=i * 3, size=rng.randint(10, 300)))
                continue
            if i % 3 == 1:
                batch = [_random_message(rng, j) for j in range(rng.randint(1, 40))]
                if rng.random() < 0.2:
                    batch[0].properties["count"] = 7  # type: ignore[assignment]
                await store.append(batch)
                continue
            entries = []
            for j in range(rng.randint(1, 12)):
                message = _random_message(rng, j)
                entries.append((message.body, message.properties, 0))
            await store.append(WireBatch.decode(batch_body(entries), topic="TopicA", queue_id=i % 4))
        assert store.commit_log.files.files[0].end < store.positions.wrote.value, "several log files"
        await clean_close(store)
    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(live / "commitlog", rebuilt / "commitlog")
    async with opened(rebuilt, clean=False) as (store, _):
        await clean_close(store)
    assert _view_files(live) == _view_files(rebuilt)


async def test_dispatch_far_behind_reads_the_oldest_batches_back_and_takes_the_newer_ones(
    tmp_path, monkeypatch
):
    """Past the hand-over bound the oldest batches are dropped (read back from the log), the
    newest kept: a dispatch loop that fell behind under a burst takes them again once past
    the gap, and the views are the same as a store that read everything back."""
    monkeypatch.setattr(commit_log_module, "MAX_HANDED_BATCHES", 5)
    live = tmp_path / "live"
    async with opened(live, commit_log_file_size="1MiB") as (store, _):
        for i in range(12):
            entries = [(f"b-{i}-{j}".encode() * 30, {"UNIQ_KEY": f"{i:016X}{j:016X}"}, 0) for j in range(8)]
            await store.append(WireBatch.decode(batch_body(entries), topic="TopicA", queue_id=i % 3))
        kept = list(store.commit_log._handed)
        assert len(kept) == 5, "the newest batches stay handed over"
        assert kept[-1][1] == store.positions.wrote.value
        await clean_close(store)
    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(live / "commitlog", rebuilt / "commitlog")
    async with opened(rebuilt, clean=False, commit_log_file_size="1MiB") as (store, _):
        await clean_close(store)
    assert _view_files(live) == _view_files(rebuilt)


def test_the_tag_code_is_the_due_time_only_in_parking_topics():
    """A parked record's tag field holds its due time only where a plugin declared the topic a
    parking topic; elsewhere (no delay plugin loaded) it is the tag's hash as on any topic."""
    message = Message(SCHEDULE_TOPIC, b"b", properties={"TAGS": "TagA", "TIMER_OUT_MS": "1234567"})
    run = record.RecordEncoder(("127.0.0.1", 10911)).encode_run([message], 0, {}, 1_700_000_000_000)
    checked = check_run(run.data, 0, len(run.data), base=0)
    assert record.decode_dispatch(run.data, 0, PARKING).tags_code == 1234567
    assert DispatchBatch.from_run(run.data, checked, PARKING).tags_code.tolist() == [1234567]
    plain = java_string_hash("TagA")
    assert record.decode_dispatch(run.data, 0).tags_code == plain
    assert DispatchBatch.from_run(run.data, checked).tags_code.tolist() == [plain]
