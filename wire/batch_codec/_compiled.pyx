# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The batch codec's loops in C (see ``wire/batch_codec/__init__.py`` for why and when).

Each function here has a pure-Python twin in ``pure.py`` with the same signature and the same
answers (a property test holds them together). Inputs are buffers and ``int64`` arrays, outputs
are one ``bytes`` object or arrays: no Python object per message is made in these loops.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memchr, memcpy

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.list cimport PyList_Append

import numpy as np

from wire.errors import MalformedBatch


cdef extern from "crc32.h" nogil:
    unsigned long trocket_crc32(unsigned long crc, const unsigned char *buf, unsigned int len)
    const char *TROCKET_CRC32_BACKEND

CRC32_BACKEND = TROCKET_CRC32_BACKEND.decode()
"""Which library computes the body CRCs here: ``"isa-l"`` or ``"zlib"`` (see crc32.h)."""


cdef enum:
    ENTRY_HEADER = 20   # totalSize magic bodyCRC flag bodyLen
    HEADER_SIZE = 88    # the v1 record header up to and including bodyLen


cdef inline int64_t read_i32(const uint8_t *p) noexcept nogil:
    cdef uint32_t v = (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]
    return <int64_t>(<int>v)


cdef inline void write_i32(uint8_t *p, int64_t value) noexcept nogil:
    cdef uint32_t v = <uint32_t>value
    p[0] = (v >> 24) & 0xFF
    p[1] = (v >> 16) & 0xFF
    p[2] = (v >> 8) & 0xFF
    p[3] = v & 0xFF


cdef inline void write_i64(uint8_t *p, int64_t value) noexcept nogil:
    cdef uint64_t v = <uint64_t>value
    cdef int shift
    for shift in range(8):
        p[shift] = (v >> (56 - 8 * shift)) & 0xFF


def entry_columns(const uint8_t[::1] data):
    """(body_at, body_len, props_at, props_len, props_end, flag, nul_in_properties) of a
    SEND_BATCH_MESSAGE body.

    :raises MalformedBatch: as ``pure.entry_columns`` does, for the same entry.
    """
    cdef Py_ssize_t end = data.shape[0]
    cdef Py_ssize_t at = 0, count = 0, i
    cdef int64_t total
    cdef const uint8_t *p = &data[0] if end else NULL
    while at < end:
        if end - at < ENTRY_HEADER + 2:
            raise MalformedBatch(f"batch body is truncated at byte {at}")
        total = read_i32(p + at)
        if total < ENTRY_HEADER + 2 or at + total > end:
            raise MalformedBatch(f"batch entry at byte {at} is malformed")
        at += total
        count += 1
    # One allocation for the six columns (rows of one array): a batch of 32 paid more for six
    # separate arrays than for walking its entries.
    columns = np.empty((6, count), dtype=np.int64)
    cdef int64_t[:, ::1] c = columns
    cdef int64_t[::1] body_at = c[0], body_len = c[1], props_at = c[2], props_len = c[3]
    cdef int64_t[::1] flag = c[4], props_end = c[5]
    cdef int64_t length, length_at, entry_end
    cdef Py_ssize_t bad = -1
    at = 0
    for i in range(count):
        total = read_i32(p + at)
        length = read_i32(p + at + 16)
        flag[i] = read_i32(p + at + 12)
        body_at[i] = at + ENTRY_HEADER
        body_len[i] = length
        if bad < 0 and (length < 0 or at + ENTRY_HEADER + length + 2 > at + total):
            bad = at
        at += total
    if bad >= 0:
        raise MalformedBatch(f"batch entry at byte {bad} is malformed")
    at = 0
    for i in range(count):
        total = read_i32(p + at)
        length_at = body_at[i] + body_len[i]
        length = (<int64_t>p[length_at] << 8) | p[length_at + 1]
        if length >= 0x8000:
            length -= 0x10000
        props_at[i] = length_at + 2
        props_len[i] = length
        if bad < 0 and (length < 0 or length_at + 2 + length > at + total):
            bad = at
        at += total
    if bad >= 0:
        raise MalformedBatch(f"batch entry at byte {bad} is malformed")
    cdef bint nul = False
    with nogil:
        for i in range(count):
            props_end[i] = props_at[i] + props_len[i]
            if not nul and props_len[i] > 0:
                nul = memchr(p + props_at[i], 0, props_len[i]) != NULL
    body_at_a, body_len_a, props_at_a, props_len_a, flag_a, props_end_a = columns
    return body_at_a, body_len_a, props_at_a, props_len_a, props_end_a, flag_a, nul


def encode_records(
    const uint8_t[::1] data,
    const int64_t[::1] body_at,
    const int64_t[::1] body_len,
    const int64_t[::1] props_at,
    const int64_t[::1] props_len,
    const int64_t[::1] flag,
    bytes template,
    bytes topic_prefix,
    int64_t physical_offset,
    int64_t first_queue_offset,
):
    """Commit-log records of a batch: (bytes, record offsets, record sizes).

    ``template`` is an 88-byte header with the fields the batch shares; each record gets its
    own size, body CRC, flag, queue offset, physical offset and body length written over it.
    """
    cdef Py_ssize_t count = body_at.shape[0], i
    cdef Py_ssize_t prefix_len = len(topic_prefix)
    offsets_a = np.empty(count, dtype=np.int64)
    sizes_a = np.empty(count, dtype=np.int64)
    cdef int64_t[::1] offsets = offsets_a, sizes = sizes_a
    cdef int64_t total = 0, size
    for i in range(count):
        size = HEADER_SIZE + body_len[i] + prefix_len + 2 + props_len[i]
        sizes[i] = size
        offsets[i] = physical_offset + total
        total += size
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t *w = <uint8_t *>PyBytes_AS_STRING(out)
    cdef const uint8_t *src = &data[0] if data.shape[0] else NULL
    cdef const uint8_t *shared = <const uint8_t *>PyBytes_AS_STRING(template)
    cdef const uint8_t *prefix = <const uint8_t *>PyBytes_AS_STRING(topic_prefix)
    cdef int64_t length, tail
    with nogil:
        for i in range(count):
            length = body_len[i]
            memcpy(w, shared, HEADER_SIZE)
            write_i32(w, sizes[i])
            write_i32(w + 8, trocket_crc32(0, src + body_at[i], <unsigned int>length) & 0x7FFFFFFF)
            write_i32(w + 16, flag[i])
            write_i64(w + 20, first_queue_offset + i)
            write_i64(w + 28, offsets[i])
            write_i32(w + 84, length)
            w += HEADER_SIZE
            memcpy(w, src + body_at[i], length)
            w += length
            memcpy(w, prefix, prefix_len)
            w += prefix_len
            # the 2-byte properties length and the properties, as the client wrote them
            tail = props_len[i] + 2
            memcpy(w, src + props_at[i] - 2, tail)
            w += tail
    return out, offsets_a, sizes_a


def find_pairs(const uint8_t[::1] buffer, const int64_t[::1] begin, const int64_t[::1] end, tuple names):
    """Every ``name\x01value`` pair of ``names`` in the property regions ``buffer[begin[i]:
    end[i]]``: (region row, index into ``names``, value start, value end), in buffer order."""
    cdef Py_ssize_t count = begin.shape[0], n_names = len(names), i, k, found = 0, capacity = 0
    cdef const uint8_t *p = &buffer[0] if buffer.shape[0] else NULL
    cdef int64_t at, stop, value_end
    cdef const uint8_t *name
    cdef Py_ssize_t name_len
    cdef list keep = [bytes(x) for x in names]
    table = None  # allocated at the first match: the usual search (delay markers) finds none
    cdef int64_t[:, ::1] out
    for i in range(count):
        at = begin[i]
        stop = end[i]
        while at < stop:
            # ``at`` begins a pair: the region's start or just after a \x02
            for k in range(n_names):
                key = <bytes>keep[k]
                name = <const uint8_t *>PyBytes_AS_STRING(key)
                name_len = len(key)
                if at + name_len < stop and p[at + name_len] == 1 and _same(p + at, name, name_len):
                    value_end = at + name_len + 1
                    while value_end < stop and p[value_end] != 2:
                        value_end += 1
                    if found == capacity:
                        capacity = 16 if capacity < 8 else capacity * 2
                        grown = np.empty((4, capacity), dtype=np.int64)
                        if table is not None:
                            grown[:, :found] = table[:, :found]
                        table = grown
                        out = table
                    out[0, found] = i
                    out[1, found] = k
                    out[2, found] = at + name_len + 1
                    out[3, found] = value_end
                    found += 1
                    at = value_end
                    break
            while at < stop and p[at] != 2:
                at += 1
            at += 1
    if table is None:
        table = _EMPTY_PAIRS
    return table[0, :found], table[1, :found], table[2, :found], table[3, :found]


_EMPTY_PAIRS = np.zeros((4, 0), dtype=np.int64)


cdef inline bint _same(const uint8_t *a, const uint8_t *b, Py_ssize_t length) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(length):
        if a[i] != b[i]:
            return False
    return True


def java_hashes_at(const uint8_t[::1] buffer, const int64_t[::1] start, const int64_t[::1] end, uint32_t prefix):
    """Java hashes (``uint32``) of the strings ``buffer[start[i]:end[i]]``, each after the
    string whose unsigned hash is ``prefix``; and the rows that are not ASCII, whose hash the
    caller computes by the scalar definition (UTF-8 to UTF-16 belongs to Python's codec)."""
    cdef Py_ssize_t count = start.shape[0], i, others = 0
    cdef const uint8_t *p = &buffer[0] if buffer.shape[0] else NULL
    hashes_a = np.empty(count, dtype=np.uint32)
    other_a = np.empty(count, dtype=np.int64)
    cdef uint32_t[::1] hashes = hashes_a
    cdef int64_t[::1] other = other_a
    cdef uint32_t h
    cdef int64_t at
    cdef bint ascii
    with nogil:
        for i in range(count):
            h = prefix
            ascii = True
            for at in range(start[i], end[i]):
                if p[at] >= 0x80:
                    ascii = False
                    break
                h = h * 31 + p[at]
            hashes[i] = h
            if not ascii:
                other[others] = i
                others += 1
    return hashes_a, other_a[:others].copy()


def string_hash(str text):
    """Java's ``String.hashCode`` of ``text`` as a signed 32-bit int, over UTF-16 code units
    (a character past U+FFFF counts as its surrogate pair)."""
    cdef uint32_t h = 0, u
    cdef Py_UCS4 c
    for c in text:
        u = <uint32_t>c
        if u > 0xFFFF:
            u -= 0x10000
            h = h * 31 + (0xD800 + (u >> 10))
            h = h * 31 + (0xDC00 + (u & 0x3FF))
        else:
            h = h * 31 + u
    return <int32_t>h


cdef inline bint _is_space(uint8_t c) noexcept nogil:
    # str.split()'s ASCII whitespace (the \x1c-\x1f separators included)
    return c == 32 or 9 <= c <= 13 or 28 <= c <= 31


cdef inline bint _named(const uint8_t *p, int64_t at, int64_t key_end, const char *name, int length) noexcept nogil:
    cdef int i
    if key_end - at != length:
        return False
    for i in range(length):
        if p[at + i] != <uint8_t>name[i]:
            return False
    return True


def dispatch_properties(const uint8_t[::1] buffer, const int64_t[::1] begin, const int64_t[::1] end):
    """(tags_code, key_rows, key_start, key_end) of records whose properties are
    ``buffer[begin[i]:end[i]]``, as ``pure.dispatch_properties`` computes them for records
    outside the parking topics (keys as spans of ``buffer``, no object per key); or ``None``
    when a ``TAGS`` or ``KEYS`` value is not ASCII (the caller then takes the pure path, whose
    UTF-8 and whitespace rules are Python's own). One walk per record's properties: a record's
    unique key is emitted before its ``KEYS`` tokens wherever the two stand."""
    cdef Py_ssize_t count = begin.shape[0], i
    cdef const uint8_t *p = &buffer[0] if buffer.shape[0] else NULL
    tags_a = np.zeros(count, dtype=np.int64)
    cdef int64_t[::1] tags = tags_a
    cdef Py_ssize_t capacity = count * 2 + 8, keys = 0
    columns = np.empty((3, capacity), dtype=np.int64)
    cdef int64_t[:, ::1] key = columns
    cdef int64_t at, stop, key_end, pair_end, v, token, uniq_at, uniq_end, keys_at, keys_end
    cdef const uint8_t *found
    cdef uint32_t h
    for i in range(count):
        stop = end[i]
        at = begin[i]
        uniq_at = uniq_end = keys_at = keys_end = -1
        while at < stop:
            found = <const uint8_t *>memchr(p + at, 2, stop - at)
            pair_end = (found - p) if found != NULL else stop
            found = <const uint8_t *>memchr(p + at, 1, pair_end - at)
            if found != NULL:
                key_end = found - p
                if _named(p, at, key_end, b"TAGS", 4):
                    h = 0
                    for v in range(key_end + 1, pair_end):
                        if p[v] >= 0x80:
                            return None
                        h = h * 31 + p[v]
                    tags[i] = <int64_t>(<int>h)
                elif _named(p, at, key_end, b"UNIQ_KEY", 8):
                    uniq_at, uniq_end = key_end + 1, pair_end  # the last one wins, as in a dict
                elif _named(p, at, key_end, b"KEYS", 4):
                    keys_at, keys_end = key_end + 1, pair_end
            at = pair_end + 1
        if keys + 1 + (keys_end - keys_at) // 2 + 1 > capacity:
            capacity = 2 * capacity + (keys_end - keys_at)
            columns = _grown(columns, capacity)
            key = columns
        if uniq_end > uniq_at:
            key[0, keys] = i
            key[1, keys] = uniq_at
            key[2, keys] = uniq_end
            keys += 1
        v = keys_at
        while v < keys_end:
            if p[v] >= 0x80:
                return None
            if _is_space(p[v]):
                v += 1
                continue
            token = v
            while v < keys_end and not _is_space(p[v]):
                if p[v] >= 0x80:
                    return None
                v += 1
            key[0, keys] = i
            key[1, keys] = token
            key[2, keys] = v
            keys += 1
    return tags_a, columns[0, :keys], columns[1, :keys], columns[2, :keys]


cdef object _grown(object columns, Py_ssize_t capacity):
    grown = np.empty((3, capacity), dtype=np.int64)
    grown[:, : columns.shape[1]] = columns
    return grown


def encode_entries(list bodies, list properties, const int64_t[::1] flag):
    """A ``SEND_BATCH_MESSAGE`` body from the messages' bodies, encoded properties and flags
    (the client's side of :func:`entry_columns`).

    :raises ValueError: a message's properties do not fit the 2-byte length.
    """
    cdef Py_ssize_t count = len(bodies), i, total = 0, body_len, props_len
    if len(properties) != count or flag.shape[0] != count:
        raise ValueError("bodies, properties and flags differ in length")
    for i in range(count):
        props_len = len(<bytes?>properties[i])
        if props_len > 32767:
            raise ValueError(f"the properties of message {i} are {props_len} bytes; the limit is 32767")
        total += ENTRY_HEADER + len(<bytes?>bodies[i]) + 2 + props_len
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t *w = <uint8_t *>PyBytes_AS_STRING(out)
    cdef const uint8_t *body
    cdef bytes item
    for i in range(count):
        item = <bytes?>bodies[i]
        body = <const uint8_t *>PyBytes_AS_STRING(item)
        body_len = len(item)
        props_len = len(<bytes?>properties[i])
        write_i32(w, ENTRY_HEADER + body_len + 2 + props_len)
        write_i32(w + 4, 0)
        write_i32(w + 8, trocket_crc32(0, body, <unsigned int>body_len) & 0x7FFFFFFF)
        write_i32(w + 12, flag[i])
        write_i32(w + 16, body_len)
        w += ENTRY_HEADER
        memcpy(w, body, body_len)
        w += body_len
        w[0] = (props_len >> 8) & 0xFF
        w[1] = props_len & 0xFF
        w += 2
        memcpy(w, PyBytes_AS_STRING(<bytes?>properties[i]), props_len)
        w += props_len
    return out


def size_chain(const uint8_t[::1] buffer, Py_ssize_t start, Py_ssize_t stop, int64_t minimum):
    """Record starts along the size chain from ``start`` while they begin before ``stop``,
    stopping at a size below ``minimum``; and where the chain led."""
    cdef Py_ssize_t at = start, count = 0, end = buffer.shape[0]
    cdef int64_t size
    cdef const uint8_t *p = &buffer[0] if end else NULL
    if minimum < 4:
        raise ValueError(f"a record size below 4 bytes cannot advance the chain: {minimum}")
    while at < stop and at + 4 <= end:
        size = read_i32(p + at)
        if size < minimum:
            break
        count += 1
        at += size
    positions_a = np.empty(count, dtype=np.int64)
    cdef int64_t[::1] positions = positions_a
    cdef Py_ssize_t i
    at = start
    for i in range(count):
        positions[i] = at
        at += read_i32(p + at)
    return positions_a, at


def region_crcs(const uint8_t[::1] buffer, const int64_t[::1] begin, const int64_t[::1] end):
    """``zlib.crc32(buffer[begin[i]:end[i]]) & 0x7FFFFFFF`` per region (RocketMQ's body CRC)."""
    cdef Py_ssize_t count = begin.shape[0], i
    cdef const uint8_t *p = &buffer[0] if buffer.shape[0] else NULL
    out_a = np.empty(count, dtype=np.int64)
    cdef int64_t[::1] out = out_a
    with nogil:
        for i in range(count):
            out[i] = trocket_crc32(0, p + begin[i], <unsigned int>(end[i] - begin[i])) & 0x7FFFFFFF
    return out_a


def find_byte(const uint8_t[::1] buffer, const int64_t[::1] begin, const int64_t[::1] end, int value):
    """Per region, where byte ``value`` first occurs in ``buffer[begin[i]:end[i]]``, or -1."""
    cdef Py_ssize_t count = begin.shape[0], i
    cdef const uint8_t *p = &buffer[0] if buffer.shape[0] else NULL
    cdef const uint8_t *hit
    out_a = np.empty(count, dtype=np.int64)
    cdef int64_t[::1] out = out_a
    with nogil:
        for i in range(count):
            out[i] = -1
            if end[i] > begin[i]:
                hit = <const uint8_t *>memchr(p + begin[i], value, end[i] - begin[i])
                if hit != NULL:
                    out[i] = hit - p
    return out_a


def gather(const uint8_t[::1] buffer, const int64_t[::1] begin, const int64_t[::1] end):
    """The regions ``buffer[begin[i]:end[i]]`` back to back, as one ``bytes``."""
    cdef Py_ssize_t count = begin.shape[0], i
    cdef int64_t total = 0
    for i in range(count):
        total += end[i] - begin[i]
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t *w = <uint8_t *>PyBytes_AS_STRING(out)
    cdef const uint8_t *p = &buffer[0] if buffer.shape[0] else NULL
    with nogil:
        for i in range(count):
            memcpy(w, p + begin[i], end[i] - begin[i])
            w += end[i] - begin[i]
    return out


def property_pairs(const uint8_t[::1] buffer, const int64_t[::1] begin, const int64_t[::1] end):
    """Every ``name\\x01value`` item of the property regions: (items per region, name start,
    name end, value start, value end)."""
    cdef Py_ssize_t count = begin.shape[0], i, found = 0, capacity = 0
    cdef const uint8_t *p = &buffer[0] if buffer.shape[0] else NULL
    cdef const uint8_t *hit
    cdef int64_t at, high, stop, split
    counts_a = np.zeros(count, dtype=np.int64)
    cdef int64_t[::1] counts = counts_a
    for i in range(count):  # an upper bound: one pair per separator, plus one per region
        at, high = begin[i], end[i]
        capacity += 1
        while at < high:
            hit = <const uint8_t *>memchr(p + at, 2, high - at)
            if hit == NULL:
                break
            capacity += 1
            at = hit - p + 1
    spans_a = np.empty((capacity, 4), dtype=np.int64)
    cdef int64_t[:, ::1] spans = spans_a
    with nogil:
        for i in range(count):
            at, high = begin[i], end[i]
            while at < high:
                hit = <const uint8_t *>memchr(p + at, 2, high - at)
                stop = high if hit == NULL else hit - p
                hit = <const uint8_t *>memchr(p + at, 1, stop - at)
                if hit != NULL:
                    split = hit - p
                    spans[found, 0] = at
                    spans[found, 1] = split
                    spans[found, 2] = split + 1
                    spans[found, 3] = stop
                    found += 1
                    counts[i] += 1
                at = stop + 1
    used = spans_a[:found]
    return counts_a, used[:, 0].copy(), used[:, 1].copy(), used[:, 2].copy(), used[:, 3].copy()


cdef enum:
    INDEX_HEADER = 40
    INDEX_ENTRY = 20


def index_entries(
    uint8_t[::1] buffer,
    int64_t slots,
    int64_t count,
    int64_t room,
    int64_t begin_timestamp,
    const int64_t[::1] hashed,
    const int64_t[::1] offsets,
    const int64_t[::1] timestamps,
):
    """Index entries written into an index file's slots and entries, key by key, the first
    numbered ``count``, at most ``room``; returns how many (see ``pure.index_entries``)."""
    cdef Py_ssize_t n = hashed.shape[0], i
    if offsets.shape[0] != n or timestamps.shape[0] != n:
        raise ValueError("index_entries: columns of different lengths")
    if n > room:
        n = room if room > 0 else 0
    if slots <= 0:
        raise ValueError("index_entries: an index file has at least one slot")
    if n and buffer.shape[0] < INDEX_HEADER + slots * 4 + (count + n) * INDEX_ENTRY:
        raise ValueError("index_entries: the buffer ends before the entries")
    cdef uint8_t *p = &buffer[0] if buffer.shape[0] else NULL
    cdef int64_t entries_at = INDEX_HEADER + slots * 4, slot_at, previous, diff
    with nogil:
        for i in range(n):
            slot_at = hashed[i] % slots
            if slot_at < 0:
                slot_at += slots  # Python's modulo, as the pure twin takes it
            slot_at = INDEX_HEADER + slot_at * 4
            previous = read_i32(p + slot_at)
            if previous <= 0 or previous > count:
                previous = 0
            diff = timestamps[i] - begin_timestamp
            diff = 0 if diff < 0 else diff // 1000
            if diff > 2147483647:
                diff = 2147483647
            write_i32(p + entries_at + count * INDEX_ENTRY, hashed[i])
            write_i64(p + entries_at + count * INDEX_ENTRY + 4, offsets[i])
            write_i32(p + entries_at + count * INDEX_ENTRY + 12, diff)
            write_i32(p + entries_at + count * INDEX_ENTRY + 16, previous)
            write_i32(p + slot_at, count)
            count += 1
    return n


cdef enum:
    STORED_OK = 0
    STORED_OUTSIDE = 1      # a position or size the written log cannot hold
    STORED_SIZE = 2         # the stored size is not the consume queue's
    STORED_INVALID = 3      # the record fails check_header (CRC included) or its stored offset
    MAGIC_V1 = -626843481   # 0xDAA320A7
    MIN_RECORD_SIZE = 91    # HEADER_SIZE + topic length byte + properties length short


cdef inline int64_t read_i64(const uint8_t *p) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | p[i]
    return <int64_t>v


cdef inline int64_t read_i16(const uint8_t *p) noexcept nogil:
    return <int64_t>(<short>((<uint32_t>p[0] << 8) | p[1]))


cdef bint _stored_record_valid(const uint8_t *r, int64_t size, int64_t stored_offset) except -1:
    """The checks of ``wire.record.check_header`` with its CRC and of ``check_at`` on one record
    of ``size`` bytes (its stored size already matched), copied to ``r``."""
    cdef int64_t body_len, topic_at, topic_len, props_at, props_len, i
    cdef bint ascii = True
    if read_i32(r + 4) != MAGIC_V1:
        return False
    body_len = read_i32(r + 84)
    topic_at = HEADER_SIZE + body_len
    if body_len < 0 or topic_at + 3 > size:
        return False
    topic_len = r[topic_at]
    props_at = topic_at + 1 + topic_len
    if props_at + 2 > size:
        return False
    props_len = read_i16(r + props_at)
    if props_len < 0 or props_at + 2 + props_len != size:
        return False
    if read_i64(r + 28) != stored_offset:
        return False
    if <int64_t>(trocket_crc32(0, r + HEADER_SIZE, <unsigned int>body_len) & 0x7FFFFFFF) != read_i32(r + 8):
        return False
    if topic_len == 0 or memchr(r + topic_at + 1, 0, topic_len) != NULL:
        return False
    if props_len and memchr(r + props_at + 2, 0, props_len) != NULL:
        return False
    for i in range(topic_at + 1, props_at):
        if r[i] >= 0x80:
            ascii = False
            break
    if not ascii:
        try:
            PyBytes_FromStringAndSize(<const char *>(r + topic_at + 1), topic_len).decode()
        except UnicodeDecodeError:
            return False
    return True


def gather_checked(
    const uint8_t[::1] buffer, const int64_t[::1] positions, const int64_t[::1] sizes, int64_t limit, int64_t base
):
    """The records at ``positions`` with the consume queue's ``sizes``, copied back to back into
    one ``bytes`` and checked on the copy as ``wire.record_run.check_at`` checks them in the
    buffer; ``(data, verdict, row)``: verdict 0 when all are valid, else 1 (a record outside
    ``limit``), 2 (a stored size not the queue's) or 3 (a record failing its checks, CRC
    included) for the first such ``row``, in check_at's order of checks."""
    cdef Py_ssize_t count = positions.shape[0], i
    cdef int64_t total = 0, at = 0, size
    if limit > buffer.shape[0]:
        limit = buffer.shape[0]
    for i in range(count):
        if positions[i] < 0 or sizes[i] < MIN_RECORD_SIZE or positions[i] + sizes[i] > limit:
            return b"", STORED_OUTSIDE, i
        total += sizes[i]
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t *w = <uint8_t *>PyBytes_AS_STRING(out)
    cdef const uint8_t *p = &buffer[0] if buffer.shape[0] else NULL
    with nogil:
        for i in range(count):
            memcpy(w + at, p + positions[i], sizes[i])
            at += sizes[i]
    at = 0
    for i in range(count):
        if read_i32(w + at) != sizes[i]:
            return b"", STORED_SIZE, i
        at += sizes[i]
    at = 0
    for i in range(count):
        size = sizes[i]
        if not _stored_record_valid(w + at, size, base + positions[i]):
            return b"", STORED_INVALID, i
        at += size
    return out, STORED_OK, -1
