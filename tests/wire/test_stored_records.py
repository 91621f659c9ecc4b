"""Records read in one piece behave as the list of records they replace."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire.stored_records import StoredRecords, joined


def read(buffer: bytes, regions: list[tuple[int, int]]) -> StoredRecords:
    positions = np.array([start for start, _ in regions], dtype=np.int64)
    sizes = np.array([size for _, size in regions], dtype=np.int64)
    return StoredRecords.gather(buffer, positions, sizes)


@given(st.data())
def test_gathered_records_equal_the_slices_they_replace(data):
    buffer = data.draw(st.binary(min_size=1, max_size=400))
    starts = data.draw(st.lists(st.integers(0, len(buffer) - 1), max_size=20))
    regions = [(start, data.draw(st.integers(0, len(buffer) - start))) for start in starts]
    expected = [buffer[start : start + size] for start, size in regions]
    records = read(buffer, regions)
    assert list(records) == expected
    assert [records[i] for i in range(len(records))] == expected
    assert [records[-i - 1] for i in range(len(records))] == expected[::-1]
    assert records[1:3] == expected[1:3]
    assert joined(records) == b"".join(expected) == records.data
    assert len(records) == len(expected)


def test_an_index_out_of_range_is_an_index_error():
    records = read(b"abcdef", [(0, 2), (2, 3)])
    with pytest.raises(IndexError):
        records[2]
    with pytest.raises(IndexError):
        records[-3]


def test_records_read_from_several_files_concatenate_in_order():
    first = read(b"aaabbb", [(0, 3), (3, 3)])
    second = read(b"cdddd", [(0, 1), (1, 4)])
    both = StoredRecords.concat([first, second])
    assert list(both) == [b"aaa", b"bbb", b"c", b"dddd"]
    assert list(StoredRecords.concat([])) == []
    assert StoredRecords.concat([first]) is first


def test_joined_accepts_a_plain_list_too():
    assert joined([b"ab", b"c"]) == b"abc"
