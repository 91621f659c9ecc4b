"""What a pull serves: ``StoredRecords.read_checked`` copies the records a consume queue points
at and checks them. The compiled codec checks its copy in one pass; numpy
(``wire.record_run.first_problem_at``) checks the mapping. Both must find the same first
problem (or none) on damaged logs and damaged queue entries, and serve the same bytes."""

from __future__ import annotations

import mmap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.errors import CorruptRecord
from tests.kernel.test_record_run import build_log, damage, damaged, specs
from wire import batch_codec, record, record_run
from wire.stored_records import StoredRecords

needs_compiled = pytest.mark.skipif(not batch_codec.ACCELERATED, reason="the compiled codec is not built")


def layout(log: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Where each record of an intact log starts, and its size (a consume queue's view)."""
    positions, sizes, at = [], [], 0
    while at < len(log):
        size = record.check_header(log, at, len(log), False)[0]
        positions.append(at)
        sizes.append(size)
        at += size
    return np.array(positions, dtype=np.int64), np.array(sizes, dtype=np.int64)


def pure(buffer, positions, sizes, limit, base):
    """The numpy verdict and, when valid, the gathered bytes."""
    verdict, row = record_run.first_problem_at(buffer, positions, sizes, limit, base=base)
    data = batch_codec.pure.gather(buffer, positions, positions + sizes) if not verdict else b""
    return data, verdict, row


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(
    specs=specs,
    damage=damage,
    base=st.sampled_from([0, 1 << 30]),
    entry=st.tuples(st.integers(0, 39), st.integers(-200, 200), st.integers(-200, 200)),
    reorder=st.booleans(),
)
def test_the_compiled_pass_finds_what_numpy_finds(specs, damage, base, entry, reorder):
    log = build_log(specs, base)
    positions, sizes = layout(bytes(log))
    row, shift, grow = entry
    if row < len(positions):  # a damaged consume-queue entry: moved and/or resized
        positions[row] += shift
        sizes[row] += grow
    if reorder:  # a pull takes records of several queues, not in log order
        positions, sizes = positions[::-1].copy(), sizes[::-1].copy()
    data = bytes(damaged(log, *damage) + bytes(64))
    limit = len(data) - 64 + (shift % 7)  # a written end inside the record, at it or past it
    compiled = batch_codec.gather_checked(data, positions, sizes, limit, base)
    assert compiled == pure(data, positions, sizes, limit, base)


@needs_compiled
def test_every_kind_of_problem_is_reported_alike_by_both(monkeypatch):
    log = build_log([(1, 0, b"body-%d" % i, {"TAGS": "t"}) for i in range(6)])
    positions, sizes = layout(bytes(log))
    cases = {
        "outside": (bytes(log), positions + np.array([0, 0, 0, 0, 0, 10**6]), sizes),
        "size": (bytes(log), positions, sizes + np.array([0, 0, 0, 1, 0, 0])),
        "crc": (bytes(_flip(log, int(positions[2]) + record.HEADER_SIZE)), positions, sizes),
        "nul": (bytes(_zero(log, int(positions[4]) + int(sizes[4]) - 1)), positions, sizes),
        "offset": (bytes(_flip(log, int(positions[1]) + 35)), positions, sizes),
    }
    reasons = {}
    for name, (data, at, size) in cases.items():
        found = []
        for compiled in (True, False):
            if not compiled:
                monkeypatch.setattr(batch_codec, "_compiled", None)
            with pytest.raises(CorruptRecord) as caught:
                StoredRecords.read_checked(data, at, size, len(data), base=0)
            found.append((caught.value.offset, caught.value.reason))
            monkeypatch.undo()
        assert found[0] == found[1]
        reasons[name] = found[0][1]
    assert reasons["outside"] == "the consume queue points outside the written log"
    assert reasons["size"].startswith("size ")
    assert reasons["crc"] == "body CRC mismatch"
    assert reasons["nul"].startswith("topic or properties contain NUL bytes")
    assert reasons["offset"].startswith("stored log offset")


def _zero(log: bytearray, at: int) -> bytearray:
    copy = bytearray(log)
    copy[at] = 0
    return copy


def _flip(log: bytearray, at: int) -> bytearray:
    copy = bytearray(log)
    copy[at] ^= 0xFF
    return copy


@pytest.mark.parametrize("compiled", [True, False])
def test_valid_records_are_served_from_an_mmap_that_can_close_after(tmp_path, monkeypatch, compiled):
    if compiled and not batch_codec.ACCELERATED:
        pytest.skip("the compiled codec is not built")
    if not compiled:
        monkeypatch.setattr(batch_codec, "_compiled", None)
    log = bytes(build_log([(3, i % 2, b"x" * (50 + i), {"KEYS": f"k{i}"}) for i in range(20)], 4096))
    positions, sizes = layout(log)
    path = tmp_path / "log"
    path.write_bytes(log + bytes(4096))
    with path.open("rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        served = StoredRecords.read_checked(mapped, positions[5:15], sizes[5:15], len(log), base=4096)
        mapped.close()  # nothing of the read still exports the mapping
    assert list(served) == [log[p : p + s] for p, s in zip(positions[5:15], sizes[5:15], strict=True)]
