"""wire.record_run.check_run (bulk validation for recovery) must reach the same verdict as
wire.record.check_header applied record by record, on intact and on damaged logs."""

from __future__ import annotations

import mmap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.errors import CorruptRecord
from kernel.model import Message
from wire import record, record_run

TOPICS = ["T", "Orders", "a-topic-name-longer-than-sixteen", "Ümlaut-topic", "x" * 127]


def build_log(specs: list[tuple[int, int, bytes, dict[str, str]]], base: int = 0) -> bytearray:
    """Records laid out as a commit log starting at ``base``, queue offsets counted per queue."""
    messages = [
        Message(TOPICS[topic_index], body, queue_id=queue_id, properties=props)
        for topic_index, queue_id, body, props in specs
    ]
    return bytearray(record.RecordEncoder(("127.0.0.1", 10911)).encode_run(messages, base, {}, 1700).data)


def reference(buffer: bytes, limit: int, base: int, check_crc: bool):
    """The record-by-record definition: check_header, own log offset, UTF-8 topic, each
    queue's offsets running on by one (or starting again at 0)."""
    position, count, spans, reason = 0, 0, {}, None
    while position + 8 <= limit:
        try:
            fields = record.check_header(buffer, position, limit, check_crc)
            if fields[6] != base + position:
                raise CorruptRecord(position, f"stored log offset {fields[6]} is not its position")
            topic_at = position + record.HEADER_SIZE + fields[16]
            try:
                topic = bytes(buffer[topic_at + 1 : topic_at + 1 + buffer[topic_at]]).decode()
            except UnicodeDecodeError:
                raise CorruptRecord(position, "topic is not UTF-8") from None
            key = (topic, fields[3])
            if key in spans and fields[5] not in (spans[key][1] + 1, 0):
                raise CorruptRecord(
                    position, f"{topic}/{fields[3]}: queue offset {fields[5]} does not follow {spans[key][1]}"
                )
        except CorruptRecord as error:
            reason = error.reason
            break
        first = spans.get(key, (fields[5], 0))[0]
        spans[key] = (first, fields[5])
        count += 1
        position += fields[0]
    return count, position, spans, reason


def bulk(buffer: bytes, limit: int, base: int, check_crc: bool, max_bytes: int = 1 << 30):
    run = record_run.check_run(buffer, 0, limit, base=base, check_crc=check_crc, max_bytes=max_bytes)
    spans = {k: (v.first_offset, v.last_offset) for k, v in run.queues.items()}
    return run.count, run.end, spans, run.error.reason if run.error else None


specs = st.lists(
    st.tuples(
        st.integers(0, len(TOPICS) - 1),
        st.integers(0, 3),
        st.binary(max_size=300),
        st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "a"]), st.text("abc é", max_size=40)),
    ),
    min_size=1,
    max_size=40,
)
damage = st.one_of(
    st.tuples(st.just("byte"), st.floats(0, 1, exclude_max=True), st.integers(0, 255)),
    st.tuples(st.just("zeros"), st.floats(0, 1, exclude_max=True), st.integers(1, 5000)),
    st.tuples(st.just("cut"), st.floats(0, 1, exclude_max=True), st.just(0)),
    st.tuples(st.just("none"), st.just(0.0), st.just(0)),
)


def damaged(log: bytearray, kind: str, where: float, value: int) -> bytearray:
    """``log`` with one drawn ``damage``: a byte set, a run of zeros, or its end cut off."""
    at = int(where * len(log))
    if kind == "byte":
        log[at] = value
    elif kind == "zeros":
        log[at : at + value] = bytes(len(log[at : at + value]))
    elif kind == "cut":
        del log[at:]
    return log


@settings(max_examples=400, deadline=None)
@given(specs=specs, damage=damage, check_crc=st.booleans(), base=st.sampled_from([0, 1 << 30]))
def test_bulk_verdict_equals_record_by_record(specs, damage, check_crc, base):
    log = damaged(build_log(specs, base), *damage)
    log += bytes(64)  # never-written space after the log, as in a pre-allocated file
    data = bytes(log)
    assert bulk(data, len(data), base, check_crc) == reference(data, len(data), base, check_crc)


@settings(max_examples=50, deadline=None)
@given(specs=specs)
def test_runs_split_by_max_bytes_add_up_to_one_run(specs):
    data = bytes(build_log(specs)) + bytes(16)
    whole = record_run.check_run(data, 0, len(data), base=0)
    position, count = 0, 0
    while True:
        run = record_run.check_run(data, position, len(data), base=0, max_bytes=500)
        count += run.count
        position = run.end
        if run.error is not None or position + 8 > len(data):
            break
    assert (count, position) == (whole.count, whole.end) == (len(specs), len(data) - 16)


def test_a_hash_collision_falls_back_to_exact_grouping(monkeypatch):
    monkeypatch.setattr(record_run, "_MIX", record_run.np.uint64(0))  # every row hashes alike
    specs_ = [(i % len(TOPICS), i % 3, b"b%d" % i, {}) for i in range(30)]
    data = bytes(build_log(specs_)) + bytes(16)
    assert bulk(data, len(data), 0, True) == reference(data, len(data), 0, True)
    assert len(record_run.check_run(data, 0, len(data), base=0).queues) == 15


def test_reads_an_mmap_and_lets_it_close(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(bytes(build_log([(1, 0, b"x" * 100, {"TAGS": "t"})] * 10)) + bytes(4096))
    with path.open("rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        run = record_run.check_run(mapped, 0, len(mapped), base=0)
        assert run.count == 10 and run.error is not None  # zeros after the last record
        assert run.error.reason.startswith("magic")
        mapped.close()  # no numpy view still exports the buffer


@pytest.mark.parametrize("check_crc", [True, False])
def test_a_flipped_body_byte_is_a_crc_error_only_when_checking(check_crc):
    log = build_log([(0, 0, b"hello", {})] * 3)
    second = len(log) // 3
    log[second + record.HEADER_SIZE] ^= 0xFF
    run = record_run.check_run(bytes(log), 0, len(log), base=0, check_crc=check_crc)
    if check_crc:
        assert (run.count, run.end, run.error.reason) == (1, second, "body CRC mismatch")
    else:
        assert (run.count, run.error) == (3, None)


def test_a_flipped_bit_in_a_queue_offset_is_invalid_though_every_crc_holds():
    """Chaos finding 5: the body CRC does not cover the queue offset; continuity does."""
    from wire.record_layout import HEADER_DTYPE

    specs = [(1, 0, b"first", {}), (1, 0, b"second", {}), (1, 0, b"third", {})]
    log = build_log(specs, 0)
    second = record.check_header(bytes(log), 0, len(log), True)[0]
    field = second + HEADER_DTYPE.fields["queue_offset"][1]
    log[field + 3] ^= 0x08  # bit 35 of the big-endian offset: 1 becomes 2**35 + 1
    data = bytes(log) + bytes(64)
    run = record_run.check_run(data, 0, len(data), base=0)
    assert run.count == 1 and run.end == second
    assert (
        run.error is not None and "Orders/0: queue offset 34359738369 does not follow 0" in run.error.reason
    )
    clean = bytes(build_log(specs, 0)) + bytes(64)
    assert record_run.check_run(clean, 0, len(clean), base=0).count == 3
    # Across runs: a queue must go on from where the previous run left it (or start again at 0).
    later = record_run.check_run(clean, 0, len(clean), base=0, follows={("Orders", 0): 5})
    assert later.count == 3  # it starts at 0: a topic created again
    moved = bytes(build_log([(1, 0, b"x", {})], 0))
    shifted = bytearray(moved)
    shifted[HEADER_DTYPE.fields["queue_offset"][1] + 7] = 9  # the queue's first offset is 9
    data = bytes(shifted) + bytes(64)
    assert record_run.check_run(data, 0, len(data), base=0, follows={("Orders", 0): 5}).count == 0
    assert record_run.check_run(data, 0, len(data), base=0, follows={("Orders", 0): 8}).count == 1
