"""The batch codec in numpy and the standard library: the reference for the compiled twin.

Every function takes buffers and ``int64`` arrays and returns arrays (or one ``bytes``), never a
Python object per message it does not have to make. Where a per-message step remains (the size
chain of a batch body, ``zlib.crc32`` per body, slices to join) it is a C-level ``map`` or one
``bytes.join``. These are the definitions the compiled functions are held to.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Sequence
from functools import lru_cache
from itertools import repeat

import numpy as np

from wire.errors import MalformedBatch
from wire.java_hash import as_signed, java_hashes, java_string_hash
from wire.property_scan import Buffer, JoinedProperties, pattern_for
from wire.record_layout import HEADER_DTYPE, HEADER_SIZE

ENTRY_HEADER = 20
"""totalSize, magic, bodyCRC, flag, bodyLen: the fixed part of a batch entry."""
_TOTAL = struct.Struct(">i")
_ENTRY = np.dtype(
    {
        "names": ["total", "flag", "body_len"],
        "formats": [">i4", ">i4", ">i4"],
        "offsets": [0, 12, 16],
        "itemsize": ENTRY_HEADER,
    }
)


def entry_columns(
    data: bytes,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
    """(body_at, body_len, props_at, props_len, props_end, flag, nul_in_properties) of a
    ``SEND_BATCH_MESSAGE`` body: ``int64`` arrays, ``props_at`` where the properties text
    begins (after its length), and whether any properties text holds a NUL byte (stored records
    must not: recovery reads a NUL as the end of written data). One walk of the body answers
    everything the put path asks of every message.

    :raises MalformedBatch: an entry's sizes run past the body or each other.
    """
    positions = _entry_positions(data)
    at = np.fromiter(positions, dtype=np.int64, count=len(positions))
    if not len(at):
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, empty, empty, empty, False
    view = np.ndarray((len(data) - ENTRY_HEADER + 1,), dtype=_ENTRY, buffer=data, strides=(1,))
    entry = view[at]
    del view
    total = entry["total"].astype(np.int64)
    body_len = entry["body_len"].astype(np.int64)
    body_at = at + ENTRY_HEADER
    length_at = body_at + body_len
    bad = (body_len < 0) | (length_at + 2 > at + total)
    if bad.any():
        raise MalformedBatch(f"batch entry at byte {int(at[np.argmax(bad)])} is malformed")
    raw = np.frombuffer(data, dtype=np.uint8)
    props_len = (raw[length_at].astype(np.int64) << 8) | raw[length_at + 1]
    props_len = np.where(props_len >= 0x8000, props_len - 0x10000, props_len)
    props_at = length_at + 2
    bad = (props_len < 0) | (props_at + props_len > at + total)
    if bad.any():
        raise MalformedBatch(f"batch entry at byte {int(at[np.argmax(bad)])} is malformed")
    props_end = props_at + props_len
    nul = bool((find_byte(data, props_at, props_end, 0) >= 0).any())
    return body_at, body_len, props_at, props_len, props_end, entry["flag"].astype(np.int64), nul


def _entry_positions(data: bytes) -> list[int]:
    """Entry starts along the size chain (the one per-message Python loop of a batch).

    :raises MalformedBatch: a size too small for an entry or running past the body.
    """
    unpack = _TOTAL.unpack_from
    positions: list[int] = []
    append = positions.append
    at, end = 0, len(data)
    minimum = ENTRY_HEADER + 2
    while at < end:
        if end - at < ENTRY_HEADER + 2:
            raise MalformedBatch(f"batch body is truncated at byte {at}")
        total = unpack(data, at)[0]
        if total < minimum or at + total > end:
            raise MalformedBatch(f"batch entry at byte {at} is malformed")
        append(at)
        at += total
    return positions


_ENTRY_HEAD = struct.Struct(">iiiii")
_PROPS_LEN = struct.Struct(">h")


def encode_entries(bodies: list[bytes], properties: list[bytes], flag: np.ndarray) -> bytes:
    """A ``SEND_BATCH_MESSAGE`` body from the messages' bodies, encoded properties and flags
    (RocketMQ's ``MessageDecoder.encodeMessage`` per message; the client's side of
    :func:`entry_columns`).

    :raises ValueError: a message's properties do not fit the 2-byte length.
    """
    if not len(bodies) == len(properties) == len(flag):
        raise ValueError("bodies, properties and flags differ in length")
    out = bytearray()
    for i, (body, encoded, flag_value) in enumerate(zip(bodies, properties, flag.tolist(), strict=True)):
        if len(encoded) > 32767:
            raise ValueError(f"the properties of message {i} are {len(encoded)} bytes; the limit is 32767")
        total = ENTRY_HEADER + len(body) + 2 + len(encoded)
        out += _ENTRY_HEAD.pack(total, 0, zlib.crc32(body) & 0x7FFFFFFF, flag_value, len(body))
        out += body + _PROPS_LEN.pack(len(encoded)) + encoded
    return bytes(out)


def encode_records(
    data: bytes,
    body_at: np.ndarray,
    body_len: np.ndarray,
    props_at: np.ndarray,
    props_len: np.ndarray,
    flag: np.ndarray,
    template: bytes,
    topic_prefix: bytes,
    physical_offset: int,
    first_queue_offset: int,
) -> tuple[bytes, np.ndarray, np.ndarray]:
    """Commit-log records of a batch as one buffer: (bytes, record offsets, record sizes).

    ``template`` is an 88-byte header holding the fields every record of the batch shares; it
    is repeated, the six fields that differ are written column by column into a big-endian
    structured array, and headers, bodies, topic and properties are joined once."""
    count = len(body_at)
    sizes = HEADER_SIZE + body_len + len(topic_prefix) + 2 + props_len
    offsets = np.empty(count, dtype=np.int64)
    if not count:
        return b"", offsets, sizes
    offsets[0] = physical_offset
    np.cumsum(sizes[:-1], out=offsets[1:])
    offsets[1:] += physical_offset
    view = memoryview(data)
    getitem = view.__getitem__
    body_end = body_at + body_len
    bodies = list(map(getitem, map(slice, body_at.tolist(), body_end.tolist())))
    header = np.frombuffer(template * count, dtype=HEADER_DTYPE).copy()
    header["size"] = sizes
    header["body_crc"] = np.fromiter(map(zlib.crc32, bodies), dtype=np.int64, count=count) & 0x7FFFFFFF
    header["flag"] = flag
    header["queue_offset"] = np.arange(first_queue_offset, first_queue_offset + count, dtype=np.int64)
    header["physical_offset"] = offsets
    header["body_len"] = body_len
    headers = memoryview(header.tobytes())
    parts: list[object] = [topic_prefix] * (4 * count)
    header_slices = map(
        slice,
        range(0, HEADER_SIZE * count, HEADER_SIZE),
        range(HEADER_SIZE, HEADER_SIZE * count + 1, HEADER_SIZE),
    )
    parts[0::4] = map(headers.__getitem__, header_slices)
    parts[1::4] = bodies
    # The 2-byte properties length and the properties follow the body in the request.
    parts[3::4] = map(getitem, map(slice, body_end.tolist(), (props_at + props_len).tolist()))
    return b"".join(parts), offsets, sizes  # type: ignore[arg-type]


@lru_cache(maxsize=64)
def _pattern(names: tuple[bytes, ...]) -> re.Pattern[bytes]:
    return pattern_for([name.decode() for name in names])


def find_pairs(
    buffer: Buffer, begin: np.ndarray, end: np.ndarray, names: tuple[bytes, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every ``name\\x01value`` pair of ``names`` in the property regions
    ``buffer[begin[i]:end[i]]``: (region row, index into ``names``, value start, value end),
    positions in ``buffer``, in buffer order (see :mod:`wire.property_scan`)."""
    joined = JoinedProperties.join(buffer, begin, end)
    matches = list(_pattern(names).finditer(joined.blob))
    if not matches:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, empty
    index = {name: i for i, name in enumerate(names)}
    spans = np.array([(m.start(2), m.end(2)) for m in matches], dtype=np.int64).reshape(-1, 2)
    rows = np.searchsorted(joined.starts, spans[:, 0], side="right") - 1
    shift = begin[rows] - joined.starts[rows]
    which = np.fromiter((index[m.group(1)] for m in matches), dtype=np.int64, count=len(matches))
    return rows, which, spans[:, 0] + shift, spans[:, 1] + shift


def java_hashes_at(
    buffer: Buffer, start: np.ndarray, end: np.ndarray, prefix: int
) -> tuple[np.ndarray, np.ndarray]:
    """Java hashes (``uint32``) of the UTF-8 strings ``buffer[start[i]:end[i]]``, each after the
    string whose unsigned hash is ``prefix``; and the rows left for the scalar definition (none
    here: :func:`~wire.java_hash.java_hashes` handles every string)."""
    getitem = buffer.__getitem__
    keys = list(map(getitem, map(slice, start.tolist(), end.tolist())))
    return java_hashes(keys, prefix=prefix), np.zeros(0, dtype=np.int64)


string_hash = java_string_hash
"""Java's ``String.hashCode`` of one string, signed (the scalar definition itself)."""


_WANTED = (b"TAGS", b"KEYS", b"UNIQ_KEY", b"TIMER_OUT_MS")
_TAGS, _KEYS, _UNIQ_KEY, _TIMER_OUT_MS = range(len(_WANTED))


def dispatch_properties(
    buffer: Buffer, begin: np.ndarray, end: np.ndarray, parked: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What the views need from the properties ``buffer[begin[i]:end[i]]`` of records:

    - ``tags_code`` (``int64``): the Java hash of ``TAGS`` (0 without tags); for records whose
      ``parked`` flag is set (a parking topic of delayed messages) ``TIMER_OUT_MS`` instead;
    - ``key_rows``, ``key_start``, ``key_end``: the index keys in record order, per record its
      ``UNIQ_KEY`` first, then its ``KEYS`` split on whitespace, as the record each belongs to
      and where its UTF-8 text lies in ``buffer`` (no object per key: the index hashes them
      in place).
    """
    count = len(begin)
    tags_code = np.zeros(count, dtype=np.int64)
    record, which, start, stop = find_pairs(buffer, begin, end, _WANTED)
    if not len(record):
        return tags_code, _no_keys(), _no_keys(), _no_keys()
    # A name set twice counts once, with its last value (what a reader's dict keeps).
    pair = record * len(_WANTED) + which
    last = len(pair) - 1 - np.unique(pair[::-1], return_index=True)[1]
    if len(last) < len(pair):
        last.sort()
        record, which, start, stop = record[last], which[last], start[last], stop[last]
    in_parking = parked[record] if parked is not None else np.zeros(len(record), bool)
    tags = np.flatnonzero((which == _TAGS) & ~in_parking)
    if len(tags):
        tags_code[record[tags]] = as_signed(java_hashes_at(buffer, start[tags], stop[tags], 0)[0])
    for i in np.flatnonzero((which == _TIMER_OUT_MS) & in_parking).tolist():
        try:
            tags_code[record[i]] = int(buffer[start[i] : stop[i]])
        except ValueError:
            tags_code[record[i]] = 0
    unique = np.flatnonzero((which == _UNIQ_KEY) & (stop > start))
    key_rows = record[unique].tolist()
    key_start = start[unique].tolist()
    key_end = stop[unique].tolist()
    order = [0] * len(key_rows)
    for i in np.flatnonzero(which == _KEYS).tolist():
        for token_start, token_end in _tokens(bytes(buffer[start[i] : stop[i]])):
            key_rows.append(int(record[i]))
            key_start.append(int(start[i]) + token_start)
            key_end.append(int(start[i]) + token_end)
            order.append(1)
    by_record = np.lexsort((np.array(order, dtype=np.int64), np.array(key_rows, dtype=np.int64)))

    def column(values: list[int]) -> np.ndarray:
        return np.array(values, dtype=np.int64)[by_record]

    return tags_code, column(key_rows), column(key_start), column(key_end)


def _no_keys() -> np.ndarray:
    return np.zeros(0, dtype=np.int64)


def _tokens(value: bytes) -> list[tuple[int, int]]:
    """Byte spans of the whitespace-separated tokens of a ``KEYS`` value, split as Python's
    ``str.split()`` splits its text (Unicode whitespace included). Bytes that are not UTF-8 are
    kept as lone surrogates while splitting (never whitespace, as the replacement character a
    reader decodes them to is not), so each span holds exactly the bytes of its token."""
    if value.isascii():
        text = value.decode()
        return [(m.start(), m.end()) for m in _TOKEN.finditer(text)]
    text = value.decode("utf-8", "surrogateescape")
    spans = []
    for token in _TOKEN.finditer(text):
        first = len(text[: token.start()].encode("utf-8", "surrogateescape"))
        spans.append((first, first + len(token.group().encode("utf-8", "surrogateescape"))))
    return spans


_TOKEN = re.compile(r"\S+")
"""What ``str.split()`` keeps: maximal runs of characters that are not whitespace."""


_SIZE = struct.Struct(">i")


def size_chain(buffer: Buffer, start: int, stop: int, minimum: int) -> tuple[np.ndarray, int]:
    """Record starts along the size chain from ``start`` while they begin before ``stop``,
    stopping at a size below ``minimum`` (zeros, damage); and where the chain led. A size
    running past the buffer is left to the caller."""
    if minimum < 4:
        raise ValueError(f"a record size below 4 bytes cannot advance the chain: {minimum}")
    unpack = _SIZE.unpack_from
    positions: list[int] = []
    append = positions.append
    at, end = start, len(buffer)
    while at < stop and at + 4 <= end:
        size = unpack(buffer, at)[0]
        if size < minimum:
            break
        append(at)
        at += size
    return np.array(positions, dtype=np.int64), at


def region_crcs(buffer: Buffer, begin: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``zlib.crc32(buffer[begin[i]:end[i]]) & 0x7FFFFFFF`` per region (RocketMQ's body CRC)."""
    regions = map(buffer.__getitem__, map(slice, begin.tolist(), end.tolist()))
    return np.fromiter(map(zlib.crc32, regions), dtype=np.int64, count=len(begin)) & 0x7FFFFFFF


def find_byte(buffer: Buffer, begin: np.ndarray, end: np.ndarray, value: int) -> np.ndarray:
    """Per region, where byte ``value`` first occurs in ``buffer[begin[i]:end[i]]``, or -1."""
    find = buffer.find if hasattr(buffer, "find") else bytes(buffer).find
    found = map(find, repeat(bytes((value,))), begin.tolist(), end.tolist())
    return np.fromiter(found, dtype=np.int64, count=len(begin))


def gather(buffer: Buffer, begin: np.ndarray, end: np.ndarray) -> bytes:
    """The regions ``buffer[begin[i]:end[i]]`` back to back, as one ``bytes`` (a column's data
    for Arrow, whose offsets are the cumulative region lengths)."""
    lengths = end - begin
    total = int(lengths.sum())
    if total < 64 * len(begin):  # many short regions (property names, values): one fancy index
        first_of_each = np.cumsum(lengths) - lengths
        at = np.repeat(begin - first_of_each, lengths) + np.arange(total, dtype=np.int64)
        return np.frombuffer(buffer, dtype=np.uint8)[at].tobytes()
    view = memoryview(buffer)
    return b"".join([view[b:e] for b, e in zip(begin.tolist(), end.tolist(), strict=True)])


def property_pairs(
    buffer: Buffer, begin: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every ``name\x01value`` item of the property regions ``buffer[begin[i]:end[i]]``:
    (items per region, name start, name end, value start, value end), positions in ``buffer``,
    regions in order. Items are separated by ``\x02``; the name ends at an item's first
    ``\x01`` and the value runs to the item's end; an item without ``\x01`` (the empty one after
    the last separator included) is not a pair."""
    joined = JoinedProperties.join(buffer, begin, end)  # regions apart by one more separator
    raw = np.frombuffer(joined.blob, dtype=np.uint8)
    separators = np.flatnonzero(raw == 2)
    item_start, item_end = separators[:-1] + 1, separators[1:]
    ones = np.append(np.flatnonzero(raw == 1), len(raw))  # one past the end: "no \x01 left"
    split = ones[np.searchsorted(ones, item_start)]
    pair = split < item_end
    item_start, item_end, split = item_start[pair], item_end[pair], split[pair]
    rows = np.searchsorted(joined.starts, item_start, side="right") - 1
    shift = begin[rows] - joined.starts[rows] if len(rows) else np.zeros(0, dtype=np.int64)
    counts = np.bincount(rows, minlength=len(begin)).astype(np.int64)
    return counts, item_start + shift, split + shift, split + 1 + shift, item_end + shift


INDEX_HEADER = 40
"""An index file's header (see :mod:`plugins.store_mmap.index_file`); slots follow it."""
INDEX_ENTRY = 20
_INDEX_SLOT = struct.Struct(">i")
_INDEX_ENTRY = struct.Struct(">iqii")


def index_entries(
    buffer: Buffer,
    slots: int,
    count: int,
    room: int,
    begin_timestamp: int,
    hashed: Sequence[int],
    offsets: Sequence[int],
    timestamps: Sequence[int],
) -> int:
    """Write index entries into the slots and entries of an index file ``buffer`` (RocketMQ's
    layout: 40-byte header, ``slots`` big-endian slot numbers, 20-byte entries), key by key in
    order, the first numbered ``count``, at most ``room`` of them; returns how many.

    Each entry is (key hash, commit-log offset, seconds since ``begin_timestamp`` clamped to
    [0, 2^31 - 1], the entry its slot held before: 0 when that is not an earlier entry of
    this file), and its slot then holds its number. ``hashed`` are key hashes as
    :func:`~plugins.store_mmap.index_file.key_hash` gives them (0 <= hash < 2^31)."""
    entries_at = INDEX_HEADER + slots * 4
    taken = 0
    for key, offset, timestamp in zip(hashed, offsets, timestamps, strict=True):
        if taken == room:
            break
        slot_at = INDEX_HEADER + (key % slots) * 4
        previous = _INDEX_SLOT.unpack_from(buffer, slot_at)[0]
        if previous <= 0 or previous > count:
            previous = 0
        diff = (timestamp - begin_timestamp) // 1000
        diff = 0 if diff < 0 else min(diff, 2**31 - 1)
        _INDEX_ENTRY.pack_into(buffer, entries_at + count * INDEX_ENTRY, key, offset, diff, previous)
        _INDEX_SLOT.pack_into(buffer, slot_at, count)
        count += 1
        taken += 1
    return taken
