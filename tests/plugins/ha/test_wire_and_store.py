"""The HA frame codecs, and a replica's log fed in arbitrary cuts: readers only ever see whole
records, and mismatched offsets or file sizes are refused."""

from __future__ import annotations

import random

import pytest

from kernel.errors import OffsetOutOfRange, ReplicaMismatch
from kernel.model import Message
from plugins.ha.wire import HaFrameError, ReportDecoder, TransferDecoder, encode_header, encode_report
from tests.plugins.store_mmap.helpers import opened


def test_reports_keep_the_newest_complete_offset():
    decoder = ReportDecoder()
    data = encode_report(5) + encode_report(70) + encode_report(900)[:3]
    assert decoder.feed(data) == 70
    assert decoder.feed(encode_report(900)[3:]) == 900
    assert decoder.feed(b"") is None
    with pytest.raises(HaFrameError, match="negative"):
        ReportDecoder().feed(encode_report(-1))


def test_transfer_frames_split_anywhere_decode_the_same():
    frames = [(0, b"a" * 100), (100, b""), (100, b"b" * 3000), (3100, b"c")]
    stream = b"".join(encode_header(o, len(d)) + d for o, d in frames)
    rng = random.Random(7)
    for _ in range(50):
        decoder = TransferDecoder(4096)
        got = []
        position = 0
        while position < len(stream):
            step = rng.randint(1, 700)
            got += [(f.offset, bytes(f.data)) for f in decoder.feed(stream[position : position + step])]
            position += step
        assert got == frames and decoder.buffered == 0


@pytest.mark.parametrize(
    "header",
    [encode_header(-5, 1), encode_header(0, -1), encode_header(0, 4097)],
    ids=["offset", "length", "big"],
)
def test_malformed_transfer_headers_are_refused(header):
    with pytest.raises(HaFrameError, match="not an HA frame"):
        TransferDecoder(4096).feed(header)


async def test_a_replica_fed_in_random_cuts_matches_its_master(tmp_path):
    size = 64 * 1024
    async with opened(tmp_path / "m", commit_log_file_size=size) as (master, _):
        for i in range(60):
            batch = [Message("T", f"m{i}-{j}".encode() * (1 + j % 11), queue_id=j % 2) for j in range(20)]
            await master.append(batch)
        end = master.positions.wrote.value
        assert end > 2 * size
        async with opened(tmp_path / "s", commit_log_file_size=size) as (slave, _):
            rng = random.Random(3)
            offset = 0
            while offset < end:
                data = master.read_raw(offset, rng.randint(1, 5000))
                assert data, offset
                assert await slave.append_raw(offset, data) == offset + len(data)
                offset += len(data)
                wrote = slave.positions.wrote.value
                assert wrote <= offset
                # whatever the cut, the visible end is a record boundary: the log decodes to it
                _, after = await slave.read_log(0, end=wrote, max_bytes=1 << 30)
                assert after == wrote
            assert slave.positions.wrote.value == end and slave.received_end() == end
            with pytest.raises(ReplicaMismatch, match="this log ends at"):
                await slave.append_raw(end - 10, b"x" * 10)
            with pytest.raises(OffsetOutOfRange):
                master.read_raw(end + 1, 10)
            assert master.read_raw(end, 10) == b""


async def test_a_replica_with_another_file_size_is_refused(tmp_path):
    async with opened(tmp_path / "m", commit_log_file_size=64 * 1024) as (master, _):
        for _ in range(40):
            await master.append([Message("T", b"x" * 500, queue_id=0) for _ in range(10)])
        async with opened(tmp_path / "s", commit_log_file_size=32 * 1024) as (slave, _):
            offset = 0
            with pytest.raises(ReplicaMismatch, match="commit_log_file_size must be the same"):
                while True:
                    data = master.read_raw(offset, 60 * 1024)
                    await slave.append_raw(offset, data)
                    offset += len(data)


async def test_an_empty_replica_starts_where_a_trimmed_master_log_starts(tmp_path):
    """A master whose oldest files were deleted (retention) starts a new slave at its oldest
    file, not at 0: the empty replica's log begins there."""
    size = 64 * 1024
    async with opened(tmp_path / "m", commit_log_file_size=size) as (master, _):
        for i in range(60):
            await master.append([Message("T", f"m{i}-{j}".encode() * 9, queue_id=0) for j in range(20)])
        master.delete_log_head(1)
        oldest, end = master.watermarks().min_offset, master.positions.wrote.value
        assert oldest == size
        async with opened(tmp_path / "s", commit_log_file_size=size) as (slave, _):
            offset = oldest
            while offset < end:
                data = master.read_raw(offset, 32 * 1024)
                assert await slave.append_raw(offset, data) == offset + len(data)
                offset += len(data)
            assert slave.watermarks().min_offset == oldest and slave.positions.wrote.value == end
            records, after = await slave.read_log(oldest, end=end, max_bytes=1 << 30)
            assert after == end and records[0].physical_offset == oldest
            with pytest.raises(ReplicaMismatch, match="not at a multiple"):
                async with opened(tmp_path / "t", commit_log_file_size=size) as (other, _):
                    await other.append_raw(oldest + 8, b"x" * 8)
