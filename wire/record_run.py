"""Validating a run of consecutive stored records at once (recovery scans millions of them).

:func:`wire.record.check_header` defines what a valid record is, one record at a time.
:func:`check_run` applies the same checks to every record of a run with numpy: the only
per-record Python step left is following the size chain from one record to the next; CRCs and
the NUL searches run through ``map`` over C functions. That takes a recovery scan from about
1.6 µs to about 0.6 µs per record. Where the run stops at an invalid record, the reason comes
from ``check_header`` itself, and a property test holds both functions to the same verdict on
randomly damaged logs, so there is still one definition of a valid record.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Mapping

import attrs
import numpy as np
import numpy.ma  # noqa: F401 - np.unique imports it on first use: a first pull at the open-files limit failed

from wire import batch_codec
from wire.errors import CorruptRecord
from wire.record import check_header
from wire.record_layout import HEADER_DTYPE, HEADER_SIZE, MAGIC_V1, MIN_RECORD_SIZE

_SIZE = struct.Struct(">i")

_I64 = np.dtype(">i8")
_I16 = np.dtype(">i2")
_U8 = np.dtype(np.uint8)
_HEADER = np.dtype((np.void, HEADER_SIZE))

Buffer = bytes | bytearray | mmap.mmap
"""Buffers with ``find`` and slicing to bytes (a memoryview slices to views, which cannot be
hashed)."""


@attrs.frozen(eq=False)
class QueueSpan:
    """The first and last queue offset of one (topic, queue id) within a run."""

    first_offset: int
    last_offset: int


@attrs.frozen(eq=False)
class RecordRun:
    """What a run of valid records holds, from ``start`` to :attr:`end`."""

    count: int
    queues: dict[tuple[str, int], QueueSpan]
    end: int
    """Position after the last valid record: where the next record is, or where the run broke."""
    error: CorruptRecord | None
    """Why the record at :attr:`end` is not valid; ``None`` when the run ended because fewer
    than 8 bytes were left or ``max_bytes`` were covered (then :attr:`end` is where to go on).
    A BLANK filler or never-written zeros show up here too: the caller tells them from damage."""
    positions: np.ndarray = attrs.field(factory=lambda: np.zeros(0, dtype=np.int64))
    """Where each valid record starts in the buffer."""
    representative: np.ndarray = attrs.field(factory=lambda: np.zeros(0, dtype=np.int64))
    """Per valid record, the index of the first record of the run with its topic and queue."""
    topics: dict[int, str] = attrs.field(factory=dict)
    """Topic text per representative index."""


def check_run(
    buffer: Buffer,
    start: int,
    limit: int,
    *,
    base: int,
    check_crc: bool = True,
    max_bytes: int = 64 << 20,
    follows: Mapping[tuple[str, int], int] | None = None,
) -> RecordRun:
    """Validate records from ``start`` while they are valid, up to ``limit`` (the file size).

    Besides :func:`~wire.record.check_header`'s checks, every record must store its own log
    offset (``base + position``) and have a UTF-8 topic, as recovery requires, and each queue's
    offsets must run on by one in log order (from ``follows``, the last offset of each queue
    before this run, when given): the body CRC does not cover the queue-offset field, and a
    flipped bit there would otherwise be served. A queue starting again at 0 is accepted (a
    topic deleted and created again restarts its queues in RocketMQ).
    """
    stop = min(limit - 8 + 1, start + max_bytes)
    at, walked_to = batch_codec.size_chain(buffer, start, stop, MIN_RECORD_SIZE)
    if walked_to > limit:  # the last size runs past the file: that record is the invalid one
        walked_to, at = int(at[-1]), at[:-1]
    records = _Records.gather(buffer, at, limit, base, check_crc)
    bad = records.bad
    count = int(np.argmax(bad)) if bad.any() else len(at)
    gap, why = records.offset_gap(count, follows or {})
    if gap < count:
        count = gap
        end = int(at[count])
        error: CorruptRecord | None = CorruptRecord(end, why)
    elif count < len(at):
        end = int(at[count])
        error = _reason(buffer, end, limit, base, check_crc)
    else:
        end = walked_to
        error = _reason(buffer, end, limit, base, check_crc) if end < stop else None
    return RecordRun(
        count,
        records.queue_spans(count),
        end,
        error,
        at[:count],
        records.representative[:count],
        records.names,
    )


def _values(buffer: Buffer, dtype: np.dtype, limit: int) -> np.ndarray:
    """A read view whose element ``j`` is the big-endian value starting at byte ``j``: one
    fancy-index gather then reads a field of every record at once."""
    return np.ndarray(shape=(limit - dtype.itemsize + 1,), dtype=dtype, buffer=buffer, strides=(1,))


_ALL_BYTES = np.uint64(0xFFFFFFFFFFFFFFFF)
_MIX = np.uint64(0x9E3779B97F4A7C15)


@attrs.define(eq=False)
class _Records:
    """Verdicts (``bad``: True = invalid) and queue keys of the records of one run."""

    bad: np.ndarray
    queue_id: np.ndarray
    queue_offset: np.ndarray
    names: dict[int, str]
    """Topic text by representative record index (see :meth:`queue_spans`)."""
    representative: np.ndarray
    """Per record, the index of the first record with the same topic and queue."""

    @classmethod
    def gather(cls, buffer: Buffer, at: np.ndarray, limit: int, base: int, check_crc: bool) -> _Records:
        """Check every record starting at ``at`` (each at least a minimal record within
        ``limit``) the way :func:`~wire.record.check_header` does, in bulk."""
        count = len(at)
        if not count:
            empty = np.zeros(0, dtype=np.int64)
            return cls(np.zeros(0, dtype=bool), empty, empty, {}, empty)
        headers, i64, i16, u8 = (_values(buffer, d, limit) for d in (_HEADER, _I64, _I16, _U8))
        try:
            # One gather copies every header (88 bytes each); fields are then read from the copy.
            header = headers[at].view(HEADER_DTYPE)
            end = at + header["size"].astype(np.int64)
            magic = header["magic"]
            stored_crc = header["body_crc"].astype(np.int64)
            queue_id = header["queue_id"].astype(np.int64)
            queue_offset = header["queue_offset"].astype(np.int64)
            physical = header["physical_offset"].astype(np.int64)
            body_len = header["body_len"].astype(np.int64)
            del header
            body_at = at + HEADER_SIZE
            topic_at = body_at + body_len
            bad = (magic != MAGIC_V1) | (body_len < 0) | (topic_at + 3 > end)
            # Positions in records already found invalid are replaced by harmless in-range
            # ones, so no gather below can index outside the file.
            topic_at = np.where(bad, body_at, topic_at)
            topic_len = u8[topic_at].astype(np.int64)
            props_at = topic_at + 1 + topic_len
            bad |= props_at + 2 > end
            props_at = np.where(bad, body_at + 1, props_at)
            topic_len = np.where(bad, 0, topic_len)
            props_len = i16[props_at].astype(np.int64)
            bad |= (props_len < 0) | (props_at + 2 + props_len != end) | (physical != base + at)
            end = np.where(bad, body_at + 3, end)
            # Per record: topic length, queue id, then the topic's bytes as 8-byte words.
            key_rows = _topic_words(i64, props_at, topic_len, queue_id)
        finally:
            del headers, i64, i16, u8  # release the buffer export so the file can be unmapped
        representative = _group(key_rows)
        names: dict[int, str] = {}
        for index in np.unique(representative).tolist():
            name = bytes(buffer[int(topic_at[index]) + 1 : int(props_at[index])])
            try:
                names[index] = name.decode()
                # check_header's torn-write rule (an empty topic or a NUL in it) holds with
                # check_crc; a topic that is not UTF-8 is invalid either way.
                valid = not check_crc or (name and b"\0" not in name)
            except UnicodeDecodeError:
                valid = False
            if not valid:
                bad |= representative == index
        if check_crc and count:
            crcs = batch_codec.region_crcs(buffer, body_at, topic_at)
            nul_at = batch_codec.find_byte(buffer, props_at + 2, end, 0)
            bad |= (crcs != stored_crc) | (nul_at >= 0)
        return cls(bad, queue_id, queue_offset, names, representative)

    def offset_gap(self, count: int, follows: Mapping[tuple[str, int], int]) -> tuple[int, str]:
        """The index of the first of the ``count`` records whose queue offset does not follow
        the previous one of its queue (``count`` when none), and why."""
        if count < 1:
            return count, ""
        groups = self.representative[:count]
        offsets = self.queue_offset[:count]
        order = np.argsort(groups, kind="stable")
        ordered_groups, ordered = groups[order], offsets[order]
        broken = (
            (ordered_groups[1:] == ordered_groups[:-1])
            & (ordered[1:] != ordered[:-1] + 1)
            & (ordered[1:] != 0)
        )
        gap, why = count, ""
        if broken.any():
            index = order[1:][broken]
            at = int(index.min())
            previous = int(ordered[:-1][broken][int(np.argmin(index))])
            gap, why = at, f"queue offset {int(offsets[at])} does not follow {previous}"
        for first in np.unique(groups).tolist():
            key = (self.names.get(first, ""), int(self.queue_id[first]))
            last = follows.get(key)
            offset = int(offsets[first])
            if last is not None and offset not in (last + 1, 0) and first < gap:
                gap, why = first, f"queue offset {offset} does not follow {last}"
        if why:
            topic = self.names.get(int(groups[gap]), "?")
            why = f"{topic}/{int(self.queue_id[gap])}: {why}"
        return gap, why

    def queue_spans(self, count: int) -> dict[tuple[str, int], QueueSpan]:
        """First and last queue offset per (topic, queue id) over the first ``count`` records."""
        groups = self.representative[:count]
        spans: dict[tuple[str, int], QueueSpan] = {}
        if not count:
            return spans
        keys, first = np.unique(groups, return_index=True)
        _, from_end = np.unique(groups[::-1], return_index=True)
        last = count - 1 - from_end
        offsets = self.queue_offset
        for key, a, b in zip(keys.tolist(), first.tolist(), last.tolist(), strict=True):
            queue = (self.names[key], int(self.queue_id[a]))
            spans[queue] = QueueSpan(int(offsets[a]), int(offsets[b]))
        return spans


def _topic_words(
    i64: np.ndarray, topic_end: np.ndarray, topic_len: np.ndarray, queue_id: np.ndarray
) -> np.ndarray:
    """Rows identifying (topic, queue) exactly: length, queue id, then the topic as 8-byte words
    read backwards from its end, each masked to the topic's own bytes (a word may start in the
    body before the topic; it never reaches past the record)."""
    words = max(1, (int(topic_len.max(initial=0)) + 7) // 8)
    rows = np.empty((len(topic_end), 2 + words), dtype=np.uint64)
    rows[:, 0] = topic_len.astype(np.uint64)
    rows[:, 1] = queue_id.astype(np.uint64)
    for word in range(words):
        valid = np.clip(topic_len - 8 * word, 0, 8).astype(np.uint64)
        mask = np.where(valid == 8, _ALL_BYTES, (np.uint64(1) << (valid * np.uint64(8))) - np.uint64(1))
        begin = np.maximum(topic_end - 8 * (word + 1), 0)
        rows[:, 2 + word] = i64[begin].astype(np.int64).view(np.uint64) & mask
    return rows


def _group(rows: np.ndarray) -> np.ndarray:
    """For each row, the index of the first equal row: a hash of each row groups them, and
    the grouping is checked against the rows themselves (a hash collision falls back to an
    exact, slower grouping of the whole rows)."""
    if not len(rows):
        return np.zeros(0, dtype=np.int64)
    hashed = np.zeros(len(rows), dtype=np.uint64)
    for column in range(rows.shape[1]):
        hashed = (hashed ^ rows[:, column]) * _MIX
    _, first, inverse = np.unique(hashed, return_index=True, return_inverse=True)
    representative = first[inverse.ravel()]
    if not (rows[representative] == rows).all():
        whole = np.ascontiguousarray(rows).view(np.dtype((np.void, rows.shape[1] * 8))).ravel()
        _, first, inverse = np.unique(whole, return_index=True, return_inverse=True)
        representative = first[inverse.ravel()]
    return representative.astype(np.int64)


def _reason(buffer: Buffer, position: int, limit: int, base: int, check_crc: bool) -> CorruptRecord:
    """The canonical reason the record at ``position`` is invalid."""
    try:
        fields = check_header(buffer, position, limit, check_crc)
    except CorruptRecord as error:
        return error
    if fields[6] != base + position:
        return CorruptRecord(position, f"stored log offset {fields[6]} is not its position")
    return CorruptRecord(position, "topic is not UTF-8")


STORED_OUTSIDE = 1
"""A verdict of :func:`first_problem_at`: a position or size the written log cannot hold."""
STORED_WRONG_SIZE = 2
"""A verdict of :func:`first_problem_at`: the stored size is not the consume queue's."""
STORED_INVALID = 3
"""A verdict of :func:`first_problem_at`: the record fails its checks (CRC included)."""


def check_at(
    buffer: Buffer, positions: np.ndarray, sizes: np.ndarray, limit: int, *, base: int
) -> CorruptRecord | None:
    """Validate the records a consume queue points at, in bulk: each must lie within ``limit``,
    have the ``sizes`` the queue says, store its own log offset and pass
    :func:`~wire.record.check_header` with its CRC. Returns the first problem (its offset
    relative to ``buffer``) or ``None``."""
    verdict, row = first_problem_at(buffer, positions, sizes, limit, base=base)
    return problem_at(buffer, positions, sizes, limit, base=base, verdict=verdict, row=row)


def first_problem_at(
    buffer: Buffer, positions: np.ndarray, sizes: np.ndarray, limit: int, *, base: int
) -> tuple[int, int]:
    """The checks of :func:`check_at` with numpy, as a verdict and the row it concerns: ``(0,
    -1)`` when every record is valid, else the first row outside the log
    (:data:`STORED_OUTSIDE`), else the first whose stored size is not the queue's
    (:data:`STORED_WRONG_SIZE`), else the first invalid record (:data:`STORED_INVALID`). The
    compiled codec's ``gather_checked`` answers the same on its copy of the records."""
    if not len(positions):
        return 0, -1
    outside = (positions < 0) | (sizes < MIN_RECORD_SIZE) | (positions + sizes > limit)
    if outside.any():
        return STORED_OUTSIDE, int(np.argmax(outside))
    stored = _values(buffer, np.dtype(">i4"), limit)[positions].astype(np.int64)
    wrong = stored != sizes
    if wrong.any():
        return STORED_WRONG_SIZE, int(np.argmax(wrong))
    bad = _Records.gather(buffer, positions, limit, base, True).bad
    if bad.any():
        return STORED_INVALID, int(np.argmax(bad))
    return 0, -1


def problem_at(
    buffer: Buffer, positions: np.ndarray, sizes: np.ndarray, limit: int, *, base: int, verdict: int, row: int
) -> CorruptRecord | None:
    """The :class:`CorruptRecord` (offset relative to ``buffer``) a verdict of
    :func:`first_problem_at` stands for; ``None`` for no problem."""
    if not verdict:
        return None
    position = int(positions[row])
    if verdict == STORED_OUTSIDE:
        return CorruptRecord(position, "the consume queue points outside the written log")
    if verdict == STORED_WRONG_SIZE:
        stored = _SIZE.unpack_from(buffer, position)[0]
        return CorruptRecord(position, f"size {stored} is not the queue's {int(sizes[row])}")
    return _reason(buffer, position, limit, base, True)
