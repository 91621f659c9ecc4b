"""The remoting frame codec: round trips, RocketMQ's quirks, and fuzzing."""

from __future__ import annotations

import json
import struct

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.remoting import (
    SERIALIZE_ROCKETMQ,
    FrameDecoder,
    FrameError,
    RemotingCommand,
    parse_bool,
    string_fields,
)


def frame(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    return (
        struct.pack(">iI", 4 + len(header) + len(body), (serialize_type << 24) | len(header)) + header + body
    )


def test_a_request_round_trips_with_string_ext_fields():
    command = RemotingCommand.request(10, {"queueId": 3, "batch": True, "topic": "T", "skip": None}, b"body")
    (decoded,) = FrameDecoder().feed(command.encode())
    assert decoded.code == 10 and decoded.body == b"body"
    assert decoded.ext == {"queueId": "3", "batch": "true", "topic": "T"}


def test_cpp_client_numbers_in_ext_fields_are_read_as_strings():
    header = json.dumps(
        {
            "code": 11,
            "language": "CPP",
            "version": 63,
            "opaque": 5,
            "flag": 0,
            "remark": "",
            "extFields": {"queueId": 2, "maxMsgNums": 32, "queueOffset": "7"},
        }
    ).encode()
    (decoded,) = FrameDecoder().feed(frame(header))
    assert decoded.ext == {"queueId": "2", "maxMsgNums": "32", "queueOffset": "7"}
    assert (decoded.language, decoded.version, decoded.opaque) == ("CPP", 63, 5)


def test_responses_echo_opaque_and_serialize_type_and_use_string_values():
    request = RemotingCommand(10, opaque=42, serialize_type=SERIALIZE_ROCKETMQ)
    response = request.response(0, {"queueOffset": 7})
    assert response.opaque == 42 and response.is_response and response.serialize_type == SERIALIZE_ROCKETMQ
    (decoded,) = FrameDecoder().feed(response.encode())
    assert decoded.ext == {"queueOffset": "7"} and decoded.is_response


def test_json_responses_have_a_zero_type_byte_for_the_cpp_client():
    data = RemotingCommand(0, {"a": "b"}, flag=1).encode()
    assert data[4] == 0, "the C++ 1.2 client reads all four bytes as the header length"
    header = json.loads(data[8 : 8 + struct.unpack(">I", data[4:8])[0]])
    assert all(isinstance(v, str) for v in header["extFields"].values())


def test_binary_header_round_trip():
    command = RemotingCommand(
        310, {"a": "group", "b": "topic"}, b"xyz", 9, 0, "note", "JAVA", 409, SERIALIZE_ROCKETMQ
    )
    (decoded,) = FrameDecoder().feed(command.encode())
    assert (decoded.code, decoded.ext, decoded.body, decoded.opaque) == (
        310,
        {"a": "group", "b": "topic"},
        b"xyz",
        9,
    )
    assert (decoded.remark, decoded.language, decoded.version) == ("note", "JAVA", 409)


def test_every_complete_frame_in_a_buffer_is_decoded_and_partial_ones_wait():
    data = b"".join(RemotingCommand.request(i, {"n": i}).encode() for i in range(5))
    decoder = FrameDecoder()
    out = decoder.feed(data[:-3])
    assert [c.code for c in out] == [0, 1, 2, 3]
    assert [c.code for c in decoder.feed(data[-3:])] == [4]
    assert decoder.buffered == 0


@settings(max_examples=300, deadline=None)
@given(
    bodies=st.lists(
        st.one_of(
            st.binary(max_size=600),
            st.builds(lambda n, b: bytes([b]) * n, st.integers(0, 9000), st.integers(0, 255)),
        ),
        min_size=1,
        max_size=6,
    ),
    cuts=st.lists(st.integers(0, 30000), max_size=12),
    large_frame=st.sampled_from([16, 200, 5000, 10**9]),
)
def test_frames_read_in_any_pieces_decode_as_one_read_does(bodies, cuts, large_frame):
    """Large frames are collected chunk by chunk and joined once; whatever the reads' sizes,
    the commands are the ones a single read gives, and nothing is left over."""
    commands = [RemotingCommand.request(i, {"n": str(i)}, body) for i, body in enumerate(bodies)]
    data = b"".join(command.encode() for command in commands)
    points = sorted({min(cut, len(data)) for cut in cuts} | {0, len(data)})
    decoder = FrameDecoder(large_frame=large_frame)
    decoded = []
    for start, end in zip(points, points[1:], strict=False):
        decoded += decoder.feed(data[start:end])
        assert decoder.buffered == end - sum(len(c.encode()) for c in decoded)
    assert [(c.code, c.ext, c.body) for c in decoded] == [(c.code, c.ext, c.body) for c in commands]
    assert decoder.buffered == 0


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (frame(b"not json"), "not JSON"),
        (frame(b"[1,2]"), "not a JSON object"),
        (frame(b'{"code":"ten"}'), "'code' must be an integer"),
        (frame(b'{"code":1,"extFields":[1]}'), "'extFields' must be an object"),
        (frame(b"{}", serialize_type=7), "unknown serialize type 7"),
        (struct.pack(">iI", 2, 0), "outside"),
        (struct.pack(">iI", 10, 100) + b"x" * 6, "exceeds frame length"),
        (frame(b"\x00\x01", serialize_type=1), "binary header does not decode"),
    ],
)
def test_malformed_frames_raise_frame_error_with_a_reason(data, reason):
    with pytest.raises(FrameError, match=reason):
        FrameDecoder().feed(data)


def test_frames_over_the_limit_are_refused_before_buffering_them():
    with pytest.raises(FrameError, match="outside"):
        FrameDecoder(max_frame_size=1024).feed(struct.pack(">iI", 2048, 10))


def test_booleans_accept_java_and_cpp_spellings():
    assert parse_bool("true") and parse_bool("TRUE") and parse_bool("1")
    assert not parse_bool("0") and not parse_bool("false") and not parse_bool(None)
    assert string_fields({"x": False, "y": 1.5}) == {"x": "false", "y": "1.5"}


def test_string_fields_copies_all_strings_and_converts_the_rest():
    """The all-strings fast path returns a copy (a caller's dict is never the command's), and
    one value of another kind sends the whole mapping through the conversion."""
    strings = {"a": "1", "b": ""}
    copied = string_fields(strings)
    assert copied == strings and copied is not strings
    assert string_fields({"a": "1", "b": 2, "c": None, "d": True}) == {"a": "1", "b": "2", "d": "true"}


def test_a_json_header_with_numbers_in_ext_fields_decodes_to_strings():
    header = orjson.dumps(
        {"code": 10, "opaque": 1, "flag": 0, "extFields": {"queueId": 3, "wait": True, "x": "y"}}
    )
    (command,) = FrameDecoder().feed(struct.pack(">iI", 4 + len(header), len(header)) + header)
    assert command.ext == {"queueId": "3", "wait": "true", "x": "y"}


text = st.text(max_size=20)


@settings(max_examples=200, deadline=None)
@given(
    code=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(0, 2**31 - 1),
    ext=st.dictionaries(text, text, max_size=5),
    body=st.binary(max_size=200),
    binary=st.booleans(),
)
def test_any_command_round_trips(code, opaque, ext, body, binary):
    command = RemotingCommand(
        code, ext, body, opaque, 0, None, "JAVA", 409, SERIALIZE_ROCKETMQ if binary else 0
    )
    (decoded,) = FrameDecoder().feed(command.encode())
    assert (decoded.code, decoded.ext, decoded.body, decoded.opaque) == (code, ext, body, opaque)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_decode_or_raise_frame_error_only(data):
    try:
        FrameDecoder(max_frame_size=4096).feed(data)
    except FrameError:
        pass


@settings(max_examples=300, deadline=None)
@given(header=st.binary(max_size=120), serialize_type=st.sampled_from([0, 1]))
def test_arbitrary_headers_in_a_well_formed_frame_never_crash_the_decoder(header, serialize_type):
    try:
        FrameDecoder().feed(frame(header, b"", serialize_type))
    except FrameError:
        pass
