"""Pull answers read in bulk (:mod:`wire.record_columns`): the record walk refuses exactly what
a record-by-record walk refuses, at the same offset, with the same reason."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.errors import CorruptRecord
from kernel.model import Message
from wire.record import encode_record
from wire.record_columns import RecordColumns, record_starts
from wire.record_layout import MAGIC_V1, MIN_RECORD_SIZE


def _walk_one_by_one(data: bytes) -> list[int]:
    """The definition: follow sizes record by record, checking each."""
    starts, at, end = [], 0, len(data)
    while at < end:
        if end - at < MIN_RECORD_SIZE:
            raise CorruptRecord(at, f"{end - at} trailing bytes are not a record")
        size, magic = struct.unpack_from(">ii", data, at)
        if magic != MAGIC_V1 or size < MIN_RECORD_SIZE or at + size > end:
            raise CorruptRecord(at, f"record of {size} bytes with magic {magic & 0xFFFFFFFF:#010x}")
        starts.append(at)
        at += size
    return starts


def _outcome(function, data):
    try:
        return "ok", list(function(data))
    except CorruptRecord as error:
        return "corrupt", error.offset, str(error)


def _records(rng: random.Random, count: int) -> bytes:
    return b"".join(
        encode_record(
            Message("T", rng.randbytes(rng.randint(0, 60)), properties={"TAGS": "a"}),
            queue_offset=i,
            physical_offset=i * 200,
            store_timestamp=1,
        )
        for i in range(count)
    )


@given(st.integers(0, 2**32), st.integers(0, 12), st.integers(0, 4), st.data())
@settings(max_examples=300, deadline=None)
def test_record_starts_refuses_what_a_record_by_record_walk_refuses(seed, count, damage, data):
    rng = random.Random(seed)
    raw = bytearray(_records(rng, count))
    for _ in range(damage):  # sizes and magics are where the walk looks
        if raw:
            raw[rng.randrange(len(raw))] = rng.choice([0, 0xFF, rng.randrange(256)])
    if raw and data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    expected = _outcome(_walk_one_by_one, bytes(raw))
    got = _outcome(record_starts, bytes(raw))
    assert got == expected


def test_a_body_length_running_past_its_record_is_refused():
    data = bytearray(_records(random.Random(1), 2))
    struct.pack_into(">i", data, 84, 10_000)  # the first record's body length
    with pytest.raises(CorruptRecord, match="body length runs past the record"):
        RecordColumns.read(bytes(data))


@pytest.mark.parametrize("cut", [1, 2, 7, 60])
def test_a_last_record_cut_short_is_refused_where_it_starts(cut):
    data = _records(random.Random(2), 3)
    last = _walk_one_by_one(data)[-1]
    assert _outcome(record_starts, data[:-cut]) == _outcome(_walk_one_by_one, data[:-cut])
    assert _outcome(record_starts, data[:-cut])[1] == last
