"""The compiled batch codec gives the answers of the pure one, on any input.

``wire.batch_codec.pure`` is the definition (itself held to the message-by-message codecs by
``test_wire_batch.py`` and ``test_bulk_dispatch.py``); ``wire.batch_codec._compiled`` is the
Cython twin the broker uses when it was built. Generated batches include malformed bodies and
properties with the separators in odd places, non-ASCII tags and keys, and whitespace of every
kind in ``KEYS``.
"""

from __future__ import annotations

import os
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.errors import MalformedBatch
from kernel.model import encode_properties
from wire import batch_codec
from wire.batch_codec import pure
from wire.java_hash import java_string_hash

compiled = pytest.importorskip("wire.batch_codec._compiled", reason="the compiled codec was not built")

_NAMES = ["TAGS", "KEYS", "UNIQ_KEY", "TIMER_OUT_MS", "WAIT", "DELAY", "X"]
_CHARACTERS = ["a", "b", "1", " ", "\t", "\x1c", "\x1f", "\x0b", "\x85", "é", "中", "\x01", "\x00"]
_VALUE = st.text(alphabet=st.sampled_from(_CHARACTERS), max_size=10)
_PROPS = st.dictionaries(st.sampled_from(_NAMES), _VALUE, max_size=5)
_ENTRY = st.tuples(st.binary(max_size=200), _PROPS, st.integers(-(2**31), 2**31 - 1))


def batch_body(entries: list[tuple[bytes, dict[str, str], int]]) -> bytes:
    out = bytearray()
    for body, props, flag in entries:
        encoded = encode_properties(props)
        out += struct.pack(
            ">iiiii", 22 + len(body) + len(encoded), 0, zlib.crc32(body) & 0x7FFFFFFF, flag, len(body)
        )
        out += body + struct.pack(">h", len(encoded)) + encoded
    return bytes(out)


def outcome(function, *args):
    try:
        return "ok", function(*args)
    except MalformedBatch as error:
        return "error", str(error)


def same(a, b) -> None:
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.tolist() == b.tolist()
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same(x, y)
    else:
        assert a == b


@pytest.mark.skipif(os.environ.get("CI") != "true", reason="CI checks that the install built the codec")
def test_ci_install_builds_the_compiled_codec():
    assert batch_codec.ACCELERATED
    assert batch_codec.CRC32_BACKEND == "isa-l", "./run installs libisal-dev before it builds the codec"


@given(st.binary(max_size=3000), st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 3000)), max_size=20))
@settings(max_examples=200, deadline=None)
def test_region_crcs_are_zlibs_crc32_whichever_library_computes_them(data, spans):
    begin = np.array([min(a, b, len(data)) for a, b in spans], dtype=np.int64)
    end = np.array([min(max(a, b), len(data)) for a, b in spans], dtype=np.int64)
    expected = [zlib.crc32(data[x:y]) & 0x7FFFFFFF for x, y in zip(begin.tolist(), end.tolist(), strict=True)]
    assert batch_codec.region_crcs(data, begin, end).tolist() == expected
    assert pure.region_crcs(data, begin, end).tolist() == expected


@given(st.lists(_ENTRY, max_size=30), st.data())
@settings(max_examples=300, deadline=None)
def test_entry_columns_and_records_agree(entries, data):
    body = batch_body(entries)
    if data.draw(st.booleans()):  # damage it: cut, or overwrite a few bytes
        if body and data.draw(st.booleans()):
            body = body[: data.draw(st.integers(0, len(body) - 1))]
        else:
            mutable = bytearray(body)
            for _ in range(data.draw(st.integers(1, 4))):
                if mutable:
                    mutable[data.draw(st.integers(0, len(mutable) - 1))] = data.draw(st.integers(0, 255))
            body = bytes(mutable)
    expected = outcome(pure.entry_columns, body)
    got = outcome(compiled.entry_columns, body)
    same(got, expected)
    if expected[0] != "ok":
        return
    body_at, body_len, props_at, props_len, props_end, flag, nul = expected[1]
    assert props_end.tolist() == (props_at + props_len).tolist()
    assert nul == any(b"\0" in body[a:e] for a, e in zip(props_at.tolist(), props_end.tolist(), strict=True))
    template = bytes(range(88))
    prefix = b"\x05Topic"
    physical, queue = data.draw(st.integers(0, 2**50)), data.draw(st.integers(0, 2**40))
    columns = (body_at, body_len, props_at, props_len, flag)
    same(
        compiled.encode_records(body, *columns, template, prefix, physical, queue),
        pure.encode_records(body, *columns, template, prefix, physical, queue),
    )


@st.composite
def regions(draw):
    """A buffer of property text with separators anywhere, and regions cut out of it."""
    text = draw(st.lists(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "\x01", "\x02", "a b", "é", "\t"])))
    buffer = "".join(text).encode()
    cuts = sorted(draw(st.lists(st.integers(0, len(buffer)), max_size=8)))
    begin = np.array(cuts[0::2][: len(cuts) // 2], dtype=np.int64)
    end = np.array(cuts[1::2], dtype=np.int64)
    return buffer, begin, end


@given(regions(), st.lists(st.sampled_from([b"TAGS", b"KEYS", b"UNIQ_KEY", b"A"]), min_size=1, unique=True))
@settings(max_examples=300, deadline=None)
def test_pair_search_agrees(found, names):
    buffer, begin, end = found
    names = tuple(names)
    same(compiled.find_pairs(buffer, begin, end, names), pure.find_pairs(buffer, begin, end, names))
    same(compiled.find_byte(buffer, begin, end, 2), pure.find_byte(buffer, begin, end, 2))
    same(compiled.find_byte(buffer, begin, end, 1), pure.find_byte(buffer, begin, end, 1))


@given(regions(), st.integers(0, 2**32 - 1))
@settings(max_examples=200, deadline=None)
def test_hashes_agree(found, prefix):
    buffer, begin, end = found
    hashes, others = compiled.java_hashes_at(buffer, begin, end, prefix)
    for row in others.tolist():
        from wire.java_hash import hash_after

        hashes[row] = hash_after(prefix, buffer[begin[row] : end[row]])
    same(hashes, pure.java_hashes_at(buffer, begin, end, prefix)[0])


@given(st.text(max_size=40))
@settings(max_examples=300, deadline=None)
def test_string_hashes_agree(text):
    assert compiled.string_hash(text) == pure.string_hash(text) == java_string_hash(text)


def test_string_hash_counts_surrogate_pairs():
    # Java: "\U0001F600".hashCode() == 1772899 (the pair D83D DE00), "a".hashCode() == 97
    assert compiled.string_hash("\U0001f600") == 1772899
    assert compiled.string_hash("a") == 97
    assert compiled.string_hash("x" * 20) == java_string_hash("x" * 20)


@given(st.lists(_PROPS, max_size=20))
@settings(max_examples=300, deadline=None)
def test_dispatch_properties_agree(records):
    blob = b"".join(b"\x02" + encode_properties(props) for props in records)
    starts, ends, at = [], [], 0
    for props in records:
        at += 1
        starts.append(at)
        at += len(encode_properties(props))
        ends.append(at)
    begin, end = np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64)
    expected = pure.dispatch_properties(blob, begin, end)
    got = compiled.dispatch_properties(blob, begin, end)
    if got is None:  # a tag or key that is not ASCII: the pure path answers
        assert any(not (p.get("TAGS", "") + p.get("KEYS", "")).isascii() for p in records)
        got = batch_codec.dispatch_properties(blob, begin, end)
    same(got, expected)
    _, key_rows, key_start, key_end = got
    texts = [blob[a:b] for a, b in zip(key_start.tolist(), key_end.tolist(), strict=True)]
    wanted = [
        (row, key.encode())
        for row, props in enumerate(records)
        for key in ([props["UNIQ_KEY"]] if props.get("UNIQ_KEY") else []) + props.get("KEYS", "").split()
    ]
    assert list(zip(key_rows.tolist(), texts, strict=True)) == wanted


def test_a_property_set_twice_counts_once_with_its_last_value():
    """As a reader's dict keeps it: one unique key, one ``KEYS`` value, one tag."""
    blob = (
        b"\x02TAGS\x01a\x02KEYS\x01x y\x02UNIQ_KEY\x01first"
        b"\x02TAGS\x01b\x02UNIQ_KEY\x01second\x02KEYS\x01z\x02"
    )
    begin, end = np.array([1], dtype=np.int64), np.array([len(blob)], dtype=np.int64)
    for codec in (pure, compiled):
        tags, rows, starts, ends = codec.dispatch_properties(blob, begin, end)
        assert tags.tolist() == [java_string_hash("b")]
        assert [blob[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)] == [b"second", b"z"]
        assert rows.tolist() == [0, 0]


@pytest.mark.parametrize(
    "value",
    [b"a b", b"  a\tb  ", "k\u3000\u00e9t\u00e9 x\u2028y".encode(), b"bad\xff\xfe z\x80", b"\x1cq\x1fr"],
)
def test_keys_tokens_hold_the_bytes_python_splits(value):
    """The pure path's key spans: the tokens ``str.split()`` finds in the decoded text, each
    span exactly the bytes of its token (bytes that are not UTF-8 included)."""
    spans = pure._tokens(value)
    decoded = value.decode("utf-8", "replace").split()
    assert [value[a:b].decode("utf-8", "replace") for a, b in spans] == decoded


@given(st.lists(_ENTRY, max_size=20))
@settings(max_examples=200, deadline=None)
def test_entry_encoders_agree(entries):
    bodies = [body for body, _, _ in entries]
    properties = [encode_properties(props) for _, props, _ in entries]
    flags = np.array([flag for _, _, flag in entries], dtype=np.int64)
    encoded = compiled.encode_entries(bodies, properties, flags)
    assert encoded == pure.encode_entries(bodies, properties, flags) == batch_body(entries)
    assert pure.entry_columns(encoded)[1].tolist() == [len(b) for b in bodies]


def test_entry_encoders_refuse_properties_longer_than_a_short():
    for codec in (compiled, pure):
        with pytest.raises(ValueError, match="properties of message 1 are 40000 bytes"):
            codec.encode_entries([b"a", b"b"], [b"", b"x" * 40000], np.zeros(2, dtype=np.int64))


@given(st.lists(st.integers(0, 120), max_size=40), st.binary(max_size=64), st.integers(4, 30), st.data())
@settings(max_examples=300, deadline=None)
def test_record_scan_loops_agree(sizes, noise, minimum, data):
    """The recovery scan's loops: the size chain (with sizes too small, zero or running past
    the buffer), body CRCs and the NUL search over regions."""
    buffer = b"".join(struct.pack(">i", size) + bytes(max(0, size - 4)) for size in sizes) + noise
    start = data.draw(st.integers(0, len(buffer)))
    stop = data.draw(st.integers(0, len(buffer) + 8))
    same(compiled.size_chain(buffer, start, stop, minimum), pure.size_chain(buffer, start, stop, minimum))
    found = regions()
    raw, begin, end = data.draw(found)
    same(compiled.region_crcs(raw, begin, end), pure.region_crcs(raw, begin, end))
    for value in (0, 1, 2, ord("a")):
        same(compiled.find_byte(raw, begin, end, value), pure.find_byte(raw, begin, end, value))


_REGION_BYTES = st.lists(
    st.sampled_from([b"a", b"\x01", b"\x02", b"\xc3\xa9", b"\xff", b"TAGS", b"\x00"]), max_size=30
)


@given(st.lists(_REGION_BYTES.map(b"".join), max_size=20), st.binary(max_size=5))
@settings(max_examples=300, deadline=None)
def test_property_pairs_and_gather_agree(regions, gap):
    """The Spark reader's loops: every ``name\\x01value`` item of property texts (items without
    ``\\x01``, empty items and values holding ``\\x01`` included), and regions gathered."""
    buffer, begin, end = _regions(regions, gap)
    got = compiled.property_pairs(buffer, begin, end)
    same(got, pure.property_pairs(buffer, begin, end))
    counts, name_at, name_end, value_at, value_end = got
    expected = [
        [item.split(b"\x01", 1) for item in region.split(b"\x02") if b"\x01" in item] for region in regions
    ]
    assert counts.tolist() == [len(pairs) for pairs in expected]
    found = [
        [buffer[a:b], buffer[c:d]] for a, b, c, d in zip(name_at, name_end, value_at, value_end, strict=True)
    ]
    assert found == [pair for pairs in expected for pair in pairs]
    assert compiled.gather(buffer, begin, end) == pure.gather(buffer, begin, end) == b"".join(regions)


def _regions(regions: list[bytes], gap: bytes) -> tuple[bytes, np.ndarray, np.ndarray]:
    buffer, begin, end = bytearray(gap), [], []
    for region in regions:
        begin.append(len(buffer))
        buffer += region
        end.append(len(buffer))
        buffer += gap
    return bytes(buffer), np.array(begin, dtype=np.int64), np.array(end, dtype=np.int64)


@given(st.lists(st.binary(min_size=0, max_size=300), max_size=12), st.binary(max_size=3))
@settings(max_examples=200, deadline=None)
def test_gather_of_long_and_short_regions(regions, gap):
    buffer, begin, end = _regions(regions, gap)
    assert compiled.gather(buffer, begin, end) == pure.gather(buffer, begin, end) == b"".join(regions)


@st.composite
def index_files(draw):
    """An index file's slots and entries (a few slots, so keys share them) with whatever the
    slot table held before (earlier entries, and numbers no entry of the file has), then keys
    to add: hashes as the index makes them, store times before, within and far past the file's
    first."""
    slots = draw(st.integers(1, 9))
    count = draw(st.integers(1, 30))
    n = draw(st.integers(0, 40))
    room = draw(st.integers(0, n + 2))
    begin = draw(st.integers(0, 2**41))
    buffer = bytearray(40 + slots * 4 + (count + n + 1) * 20)
    for slot in range(slots):
        struct.pack_into(">i", buffer, 40 + slot * 4, draw(st.integers(-(2**31), 2**31 - 1)))
    columns = [
        np.array(draw(st.lists(values, min_size=n, max_size=n)), dtype=np.int64)
        for values in (
            st.integers(-(2**31), 2**31 - 1),  # the index's hashes are >= 0; any int32 slots alike
            st.integers(0, 2**63 - 1),
            st.integers(begin - 10**7, begin + 2**32 * 1000),
        )
    ]
    return buffer, slots, count, room, begin, columns


@given(index_files())
@settings(max_examples=300, deadline=None)
def test_index_entry_writers_agree(case):
    buffer, slots, count, room, begin, (hashed, offsets, timestamps) = case
    mine, theirs = bytearray(buffer), bytearray(buffer)
    written = compiled.index_entries(mine, slots, count, room, begin, hashed, offsets, timestamps)
    expected = pure.index_entries(
        theirs, slots, count, room, begin, hashed.tolist(), offsets.tolist(), timestamps.tolist()
    )
    assert written == expected == min(room, len(hashed))
    assert mine == theirs


def test_index_entries_refuse_a_buffer_too_short_for_them():
    short = bytearray(40 + 4 + 20)
    one = np.array([5], dtype=np.int64)
    with pytest.raises(ValueError, match="ends before"):
        compiled.index_entries(short, 1, 1, 1, 0, one, one, one)
    with pytest.raises(ValueError, match="at least one slot"):
        compiled.index_entries(bytearray(100), 0, 1, 1, 0, one, one, one)
