"""The RocketMQ v1 stored unit: encode/decode, a golden fixture from the published layout, and
corruption detection."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel import CorruptRecord, Message
from kernel.model import decode_properties, encode_properties
from wire.java_hash import java_string_hash
from wire.record import (
    MAGIC_V1,
    RecordEncoder,
    check_record,
    decode_dispatch,
    decode_record,
    encode_record,
    offset_msg_id,
    parse_offset_msg_id,
)


def golden_record() -> bytes:
    """Built field by field from the published layout, independently of wire.record."""
    body, topic, props = b"hello", b"TopicTest", b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02"
    total = 91 + len(body) + len(topic) + len(props)
    return (
        struct.pack(">i", total)
        + struct.pack(">I", 0xDAA320A7)
        + struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF)
        + struct.pack(">i", 3)  # queue id
        + struct.pack(">i", 0)  # flag
        + struct.pack(">q", 7)  # queue offset
        + struct.pack(">q", 1000)  # physical offset
        + struct.pack(">i", 0)  # sys flag
        + struct.pack(">q", 1_700_000_000_000)  # born timestamp
        + bytes([192, 168, 1, 2]) + struct.pack(">i", 5555)
        + struct.pack(">q", 1_700_000_000_123)  # store timestamp
        + bytes([127, 0, 0, 1]) + struct.pack(">i", 10911)
        + struct.pack(">i", 2)  # reconsume times
        + struct.pack(">q", 0)  # prepared transaction offset
        + struct.pack(">i", len(body)) + body
        + bytes([len(topic)]) + topic
        + struct.pack(">h", len(props)) + props
    )  # fmt: skip


def golden_message() -> Message:
    return Message(
        topic="TopicTest",
        body=b"hello",
        queue_id=3,
        properties={"TAGS": "TagA", "KEYS": "k1 k2"},
        born_timestamp=1_700_000_000_000,
        born_host=("192.168.1.2", 5555),
        reconsume_times=2,
    )


def test_encoding_matches_the_golden_fixture_byte_for_byte():
    encoded = encode_record(
        golden_message(), queue_offset=7, physical_offset=1000, store_timestamp=1_700_000_000_123
    )
    assert encoded == golden_record()


def test_decoding_the_golden_fixture_field_by_field():
    m = decode_record(golden_record())
    assert (m.size, m.queue_id, m.queue_offset, m.physical_offset) == (len(golden_record()), 3, 7, 1000)
    assert m.born_host == ("192.168.1.2", 5555) and m.store_host == ("127.0.0.1", 10911)
    assert (m.born_timestamp, m.store_timestamp, m.reconsume_times) == (
        1_700_000_000_000,
        1_700_000_000_123,
        2,
    )
    assert (m.body, m.topic, m.tags, m.keys) == (b"hello", "TopicTest", "TagA", ["k1", "k2"])
    assert struct.unpack_from(">i", golden_record(), 4)[0] == MAGIC_V1


def test_dispatch_view_of_a_record():
    d = decode_dispatch(golden_record(), 0)
    assert (d.topic, d.queue_id, d.queue_offset, d.physical_offset) == ("TopicTest", 3, 7, 1000)
    assert d.tags_code == java_string_hash("TagA") == 2598919
    assert d.keys == "k1 k2"


@pytest.mark.parametrize(
    ("position", "reason"),
    [(4, "magic"), (90, "CRC"), (0, "size"), (84, "body length")],
)
def test_corruption_is_detected(position, reason):
    data = bytearray(golden_record())
    data[position] ^= 0x55
    with pytest.raises(CorruptRecord, match=reason):
        check_record(data, 0, limit=len(data))


@pytest.mark.parametrize("region", ["topic", "properties"])
def test_a_torn_page_over_topic_or_properties_is_detected(region):
    """The body CRC does not cover topic and properties: a power loss can leave them as zeros
    (the page never reached the disk) while the body is intact."""
    data = bytearray(golden_record())
    topic_at = data.index(b"TopicTest") - 1
    start, end = (
        (topic_at + 1, topic_at + 1 + data[topic_at]) if region == "topic" else (topic_at + 12, len(data))
    )
    data[start:end] = bytes(end - start)
    with pytest.raises(CorruptRecord, match="NUL"):
        check_record(data, 0, limit=len(data))
    check_record(data, 0, limit=len(data), check_crc=False)  # the cheap check cannot see it


def test_nul_characters_are_refused_before_they_reach_the_log():
    encoder = RecordEncoder(("127.0.0.1", 10911))
    with pytest.raises(ValueError, match="NUL"):
        encoder.encode_run([Message("T", b"x", properties={"K": "a\0b"})], 0, {}, 0)
    with pytest.raises(ValueError, match="NUL"):
        encoder.encode_run([Message("T\0", b"x")], 0, {}, 0)
    with pytest.raises(ValueError, match="127"):
        encoder.encode_run([Message("T" * 128, b"x")], 0, {}, 0)


def test_a_run_continues_queue_offsets_and_equals_records_encoded_one_by_one():
    encoder = RecordEncoder(("127.0.0.1", 10911))
    messages = [
        Message("T", b"m%d" % i, queue_id=i % 2, properties={"TAGS": "a", "n": str(i)}) for i in range(5)
    ]
    run = encoder.encode_run(messages, 1000, {("T", 1): 7}, 1700)
    assert run.queue_offsets == [0, 7, 1, 8, 2]
    assert run.next_queue_offsets == {("T", 0): 3, ("T", 1): 9}
    assert run.offsets == [1000 + sum(run.sizes[:i]) for i in range(5)]
    one_by_one = b"".join(
        encode_record(m, queue_offset=q, physical_offset=o, store_timestamp=1700)
        for m, q, o in zip(messages, run.queue_offsets, run.offsets, strict=True)
    )
    assert run.data == one_by_one
    assert [decode_record(run.data, o - 1000).properties["n"] for o in run.offsets] == [
        "0",
        "1",
        "2",
        "3",
        "4",
    ]


def test_truncated_record_is_detected():
    data = golden_record()[:-3]
    with pytest.raises(CorruptRecord):
        check_record(data, 0, limit=len(data))


def test_offset_message_id_matches_rocketmq():
    # From the reference transcript: 127.0.0.1:19911, offset 190.
    assert offset_msg_id(("127.0.0.1", 19911), 190) == "7F00000100004DC700000000000000BE"
    assert parse_offset_msg_id("7F00000100004DC700000000000000BE") == (("127.0.0.1", 19911), 190)


@settings(deadline=None)  # wall-clock deadlines make CI flaky on a busy 2-core machine
@given(
    body=st.binary(max_size=2000),
    topic=st.text(alphabet="abcXYZ-_%0123456789", min_size=1, max_size=60),
    props=st.dictionaries(
        st.text(alphabet="ABCDEFGHIJ_", min_size=1, max_size=10),
        st.text(
            alphabet=st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
            max_size=30,
        ),
        max_size=5,
    ),
    queue_offset=st.integers(0, 2**62),
    flag=st.integers(-(2**31), 2**31 - 1),
)
def test_round_trip_property(body, topic, props, queue_offset, flag):
    message = Message(topic, body, queue_id=1, flag=flag, properties=props)
    data = encode_record(message, queue_offset=queue_offset, physical_offset=42, store_timestamp=9)
    assert check_record(data, 0, limit=len(data)) == len(data)
    decoded = decode_record(data)
    assert (decoded.body, decoded.topic, decoded.properties, decoded.flag) == (body, topic, props, flag)
    assert decoded.queue_offset == queue_offset
    assert decode_properties(encode_properties(props)) == props


def test_properties_are_joined_in_c_and_a_non_string_value_is_formatted():
    """``properties_text`` (a send's header field, and what ``encode_properties`` encodes) joins
    string pairs with ``str.join``; a value Python let through as an int is formatted, not a
    TypeError in the sender's face."""
    from wire.message import properties_text

    assert properties_text({}) == "" and encode_properties({}) == b""
    assert properties_text({"KEYS": "k1 k2", "TAGS": "t"}) == "KEYS\x01k1 k2\x02TAGS\x01t\x02"
    assert properties_text({"a": "1", "b": 2}) == "a\x011\x02b\x012\x02"  # type: ignore[dict-item]
    assert encode_properties({"a": "é"}) == "a\x01é\x02".encode()
