"""A batch kept as the client encoded it stores the same bytes as the same messages as objects.

``RecordEncoder.encode_run`` over :class:`Message` objects defines the stored records; the put
path encodes a ``SEND_BATCH_MESSAGE`` body column-wise (:class:`WireBatch`). These tests hold the
two to the same bytes on random batches, and check the batch's answers to the put path.
"""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel import Message, MessageBatch
from kernel.model import encode_properties
from wire import record
from wire.wire_batch import MalformedBatch, WireBatch

_TEXT = st.text(alphabet=st.characters(blacklist_characters="\x00\x01\x02", codec="utf-8"), max_size=12)
_PROPS = st.dictionaries(_TEXT.filter(bool), _TEXT, max_size=4)
_ENTRY = st.tuples(st.binary(min_size=1, max_size=300), _PROPS, st.integers(-(2**31), 2**31 - 1))


def batch_body(entries: list[tuple[bytes, dict[str, str], int]]) -> bytes:
    """What a client sends (RocketMQ's ``MessageDecoder.encodeMessage`` per message)."""
    out = bytearray()
    for body, props, flag in entries:
        encoded = encode_properties(props)
        out += struct.pack(
            ">iiiii", 20 + len(body) + 2 + len(encoded), 0, zlib.crc32(body) & 0x7FFFFFFF, flag, len(body)
        )
        out += body + struct.pack(">h", len(encoded)) + encoded
    return bytes(out)


@given(
    st.lists(_ENTRY, min_size=1, max_size=40),
    st.sampled_from(["T", "Topic-é", "x" * 127]),
    st.integers(0, 7),
    st.integers(0, 2**40),
    st.integers(0, 10),
    st.sampled_from([0, 0x10, 0x1]),
)
@settings(max_examples=150, deadline=None)
def test_columns_store_the_bytes_objects_store(entries, topic, queue_id, start, queue_start, sys_flag):
    common = dict(sys_flag=sys_flag, born_timestamp=1_700_000_000_123, born_host=("10.1.2.3", 5555))
    wire = WireBatch.decode(batch_body(entries), topic=topic, queue_id=queue_id, **common, reconsume_times=2)
    messages = [
        Message(
            topic, body, queue_id, flag, props, sys_flag, common["born_timestamp"], common["born_host"], 2
        )
        for body, props, flag in entries
    ]
    assert list(wire) == messages
    known = {(topic, queue_id): queue_start}
    columns = record.RecordEncoder(("192.168.0.9", 10911)).encode_run(wire, start, known, 1_700_000_000_999)
    objects = record.RecordEncoder(("192.168.0.9", 10911)).encode_run(
        messages, start, known, 1_700_000_000_999
    )
    assert columns == objects
    half = len(entries) // 2
    assert list(wire[half:]) == messages[half:]


def test_malformed_bodies_name_the_byte():
    good = batch_body([(b"one", {}, 0), (b"two", {"a": "b"}, 0)])
    with pytest.raises(MalformedBatch, match="truncated at byte 54"):
        WireBatch.decode(good + b"\0" * 5, topic="T", queue_id=0)
    broken = bytearray(good)
    struct.pack_into(">i", broken, 25 + 16, 10_000)  # second body length runs past its entry
    with pytest.raises(MalformedBatch, match="entry at byte 25"):
        WireBatch.decode(bytes(broken), topic="T", queue_id=0)
    with pytest.raises(MalformedBatch, match="entry at byte 0"):
        WireBatch.decode(struct.pack(">i", 7) + b"\0" * 30, topic="T", queue_id=0)


def test_answers_to_the_put_path():
    def batch(*props: dict[str, str]) -> MessageBatch:
        return MessageBatch(
            WireBatch.decode(batch_body([(b"b", p, 0) for p in props]), topic="T", queue_id=0)
        )

    assert batch({"WAIT": "false"}, {"WAIT": "false"}).wait_store_ok is False
    assert batch({"WAIT": "false"}, {}).wait_store_ok is True
    assert batch({"x": "WAIT\x01false"}).wait_store_ok is True
    assert not batch({"KEYS": "DELAY"}).encoded.needs_attention()
    assert batch({"DELAY": "3"}).encoded.needs_attention()
    assert batch({"TIMER_DELAY_MS": "10"}).encoded.needs_attention()
    assert batch({"TRAN_MSG": "true"}).encoded.needs_attention()
    touched = batch({"DELAY": "3"})
    touched.messages[0].topic = "SCHEDULE_TOPIC_XXXX"  # a hook rewrites: objects win from now on
    assert touched.encoded is None and touched.payload[0].topic == "SCHEDULE_TOPIC_XXXX"
