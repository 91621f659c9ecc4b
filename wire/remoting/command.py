"""RemotingCommand: RocketMQ's frame, with its JSON and binary (ROCKETMQ) header codecs.

Layout: ``int total length | byte serialize type | 3-byte header length | header | body``.
Requests from any client may carry a JSON or a binary header; a response uses the request's
serialize type (the C++ client only understands JSON, and only sends JSON). Header extension
fields are always strings here: RocketMQ decodes them as ``Map<String,String>``, the C++
client sends some as JSON numbers, and it ignores non-string values in responses.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

import attrs
import orjson

from wire.remoting.codes import LANGUAGES, OUR_LANGUAGE, OUR_VERSION

SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1

FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2

DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024
SEPARATE_BODY_BYTES = 16 * 1024
"""Bodies at least this large stay a buffer of their own in :meth:`RemotingCommand.encode_parts`;
smaller ones cost less to copy into the frame than a second buffer costs the write."""
_LENGTHS = struct.Struct(">iI")
_BINARY_FIXED = struct.Struct(">hBhii")


class FrameError(ValueError):
    """A frame that cannot be decoded; the connection that sent it is closed."""


@attrs.define(eq=False, slots=True)
class RemotingCommand:
    """One request or response. ``ext`` is RocketMQ's ``extFields``."""

    code: int
    ext: dict[str, str] = attrs.field(factory=dict)
    body: bytes = b""
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    language: str = OUR_LANGUAGE
    version: int = OUR_VERSION
    serialize_type: int = SERIALIZE_JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    @classmethod
    def request(
        cls, code: int, ext: Mapping[str, object] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        return cls(code, string_fields(ext) if ext else {}, body)

    def response(
        self,
        code: int = 0,
        ext: Mapping[str, object] | None = None,
        body: bytes = b"",
        remark: str | None = None,
    ) -> RemotingCommand:
        """The response to this request: same opaque and serialize type, response flag set."""
        return RemotingCommand(
            code,
            string_fields(ext) if ext else {},
            body,
            self.opaque,
            FLAG_RESPONSE,
            remark,
            serialize_type=self.serialize_type,
        )

    def encode(self) -> bytes:
        """The whole frame in one ``bytes``."""
        head = self._encode_head()
        return head + self.body if self.body else head

    def encode_parts(self) -> list[bytes]:
        """The frame as the buffers to write in order: the length prefix and header, then a
        large body on its own (a pull's megabyte of records is written with ``writev`` rather
        than copied once more into one frame)."""
        head = self._encode_head()
        if len(self.body) >= SEPARATE_BODY_BYTES:
            return [head, self.body]
        return [head + self.body if self.body else head]

    def _encode_head(self) -> bytes:
        if self.serialize_type == SERIALIZE_ROCKETMQ:
            header = _encode_binary_header(self)
        else:
            fields: dict[str, object] = {
                "code": self.code,
                "extFields": self.ext,
                "flag": self.flag,
                "language": self.language,
                "opaque": self.opaque,
                "serializeTypeCurrentRPC": "JSON",
                "version": self.version,
            }
            if self.remark is not None:
                fields["remark"] = self.remark
            header = orjson.dumps(fields)  # compact UTF-8, as json.dumps(..., ensure_ascii=False)
        lengths = _LENGTHS.pack(4 + len(header) + len(self.body), (self.serialize_type << 24) | len(header))
        return lengths + header


_IS_STR = str.__instancecheck__
"""``isinstance(value, str)`` as a function for ``map``: all-string headers are checked in C."""


def string_fields(values: Mapping[str, object]) -> dict[str, str]:
    """extFields as RocketMQ reads them: every value a string, booleans as ``true``/``false``,
    ``None`` dropped. A copy, also when every value is a string already (the common case,
    checked in one C loop: every request and answer passes here twice)."""
    if all(map(_IS_STR, values.values())):
        return dict(values)  # type: ignore[arg-type]
    out: dict[str, str] = {}
    for key, value in values.items():
        if value is None:
            continue
        if type(value) is str:
            out[key] = value
        elif isinstance(value, bool):
            out[key] = "true" if value else "false"
        else:
            out[key] = str(value)
    return out


def parse_bool(value: str | None, default: bool = False) -> bool:
    """A boolean extField: Java's ``"true"`` and the C++ client's ``"1"`` are both true."""
    if value is None or value == "":
        return default
    return value.lower() in ("true", "1")


LARGE_FRAME = 256 * 1024
"""Frames at least this long are collected as the reads' chunks and joined once: a 1 MiB pull
answer appended to the buffer read by read, then sliced out, was copied twice more than the
one join needs (about 0.13 µs of a consumer's 1.8 µs a 1 KiB message)."""


class FrameDecoder:
    """Splits a byte stream into commands; feed it whatever the socket returned."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, large_frame: int = LARGE_FRAME) -> None:
        self.max_frame_size = max_frame_size
        self.large_frame = large_frame
        """Frames of this size and more are collected in chunks (see :data:`LARGE_FRAME`)."""
        self._buffer = bytearray()
        self._chunks: list[bytes] = []
        """A large frame's bytes so far (the first chunk starts with its length), or empty."""
        self._chunked = 0
        self._frame_end = 0
        """While chunks are collected: the frame's size, its 4-byte length included."""

    @property
    def buffered(self) -> int:
        return len(self._buffer) + self._chunked

    def feed(self, data: bytes) -> list[RemotingCommand]:
        """Every complete frame now in the buffer, in order.

        :raises FrameError: a length out of bounds, an unknown serialize type or a header that
            does not decode; the stream cannot be resynchronised after that.
        """
        if self._chunks:
            self._chunks.append(data)
            self._chunked += len(data)
            if self._chunked < self._frame_end:
                return []
            command, rest = self._joined()
            return [command, *self.feed(rest)] if rest else [command]
        buffer = self._buffer
        if len(data) >= 4096 and not buffer:  # one compare for the small reads of single messages
            total = self._lengths(data, 0)[0]
            if total >= self.large_frame and len(data) - 4 < total:
                self._collect(data, total)  # kept as it is: no copy until the join
                return []
        buffer += data
        commands: list[RemotingCommand] = []
        position = 0
        end = len(buffer)
        while end - position >= 8:
            total, serialize_type, header_length = self._lengths(buffer, position)
            if end - position - 4 < total:
                if total >= self.large_frame:
                    with memoryview(buffer) as view:
                        self._collect(bytes(view[position:]), total)
                    buffer.clear()
                    return commands
                break
            start = position + 8
            view = memoryview(buffer)  # slices of a view copy once, a bytearray's twice
            header = bytes(view[start : start + header_length])
            body = bytes(view[start + header_length : position + 4 + total])
            view.release()  # the buffer cannot be resized while a view exists
            commands.append(decode_header(serialize_type, header, body))
            position += 4 + total
        if position:
            del buffer[:position]
        return commands

    def _lengths(self, data: bytes | bytearray, at: int) -> tuple[int, int, int]:
        """The frame starting at ``at``: its length (after the length word), serialize type
        and header length.

        :raises FrameError: a length out of bounds.
        """
        total, word = _LENGTHS.unpack_from(data, at)
        if total < 4 or total > self.max_frame_size:
            raise FrameError(f"frame length {total} outside [4, {self.max_frame_size}]")
        serialize_type, header_length = word >> 24, word & 0xFFFFFF
        if header_length > total - 4:
            raise FrameError(f"header length {header_length} exceeds frame length {total}")
        return total, serialize_type, header_length

    def _collect(self, first: bytes, total: int) -> None:
        """Start collecting a large frame of ``total`` bytes (after its length word) whose
        first ``first`` bytes arrived."""
        self._chunks.append(first)
        self._chunked, self._frame_end = len(first), 4 + total

    def _joined(self) -> tuple[RemotingCommand, bytes]:
        """The collected large frame decoded (its body joined from the chunks in one copy), and
        the bytes after it."""
        chunks, frame_end = self._chunks, self._frame_end
        self._chunks, self._chunked, self._frame_end = [], 0, 0
        _, serialize_type, header_length = self._lengths(chunks[0], 0)  # the first chunk holds both words
        body_start = 8 + header_length
        pieces: list[memoryview] = []
        header_pieces: list[memoryview] = []
        at = 0
        rest = b""
        for chunk in chunks:
            view = memoryview(chunk)
            chunk_end = at + len(chunk)
            if at < body_start:
                header_pieces.append(view[max(0, 8 - at) : min(len(chunk), body_start - at)])
            if chunk_end > body_start and at < frame_end:
                pieces.append(view[max(0, body_start - at) : min(len(chunk), frame_end - at)])
            if chunk_end > frame_end:
                rest = bytes(view[max(0, frame_end - at) :])
            at = chunk_end
        header = b"".join(header_pieces)
        body = b"".join(pieces)
        return decode_header(serialize_type, header, body), rest


def decode_header(serialize_type: int, header: bytes, body: bytes) -> RemotingCommand:
    if serialize_type == SERIALIZE_JSON:
        return _decode_json_header(header, body)
    if serialize_type == SERIALIZE_ROCKETMQ:
        return _decode_binary_header(header, body)
    raise FrameError(f"unknown serialize type {serialize_type}")


def _decode_json_header(header: bytes, body: bytes) -> RemotingCommand:
    try:
        fields = orjson.loads(header)
    except (ValueError, UnicodeDecodeError) as error:  # orjson.JSONDecodeError is a ValueError
        raise FrameError(f"header is not JSON: {error}") from None
    if not isinstance(fields, dict):
        raise FrameError("header is not a JSON object")
    code, opaque, flag = fields.get("code"), fields.get("opaque", 0), fields.get("flag", 0)
    for name, value in (("code", code), ("opaque", opaque), ("flag", flag)):
        if type(value) is not int:
            raise FrameError(f"header field {name!r} must be an integer, got {value!r}")
    ext = fields.get("extFields") or {}
    if not isinstance(ext, dict):
        raise FrameError("header field 'extFields' must be an object")
    remark = fields.get("remark")
    language = fields.get("language", "OTHER")
    version = fields.get("version", 0)
    if ext and not all(map(_IS_STR, ext.values())):
        ext = string_fields(ext)  # a peer that sent numbers or booleans (orjson's dict is ours)
    return RemotingCommand(
        code,
        ext,
        body,
        opaque,
        flag,
        remark if isinstance(remark, str) else None,
        language if isinstance(language, str) else "OTHER",
        version if type(version) is int else 0,
        SERIALIZE_JSON,
    )


def _decode_binary_header(header: bytes, body: bytes) -> RemotingCommand:
    try:
        code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(header, 0)
        position = _BINARY_FIXED.size
        remark_length = struct.unpack_from(">i", header, position)[0]
        position += 4
        remark = header[position : position + remark_length].decode() if remark_length > 0 else None
        position += max(remark_length, 0)
        ext_length = struct.unpack_from(">i", header, position)[0]
        position += 4
        end = position + ext_length
        if remark_length < 0 or ext_length < 0 or end > len(header):
            raise FrameError("binary header lengths exceed the header")
        ext: dict[str, str] = {}
        while position < end:
            key_length = struct.unpack_from(">h", header, position)[0]
            position += 2
            key = header[position : position + key_length].decode()
            position += key_length
            value_length = struct.unpack_from(">i", header, position)[0]
            position += 4
            value = header[position : position + value_length].decode()
            position += value_length
            if key_length < 0 or value_length < 0 or position > end:
                raise FrameError("binary header field lengths exceed the header")
            ext[key] = value
    except (struct.error, UnicodeDecodeError) as error:
        raise FrameError(f"binary header does not decode: {error}") from None
    name = LANGUAGES[language] if language < len(LANGUAGES) else "OTHER"
    return RemotingCommand(code, ext, body, opaque, flag, remark, name, version, SERIALIZE_ROCKETMQ)


def _encode_binary_header(command: RemotingCommand) -> bytes:
    language = (
        LANGUAGES.index(command.language) if command.language in LANGUAGES else LANGUAGES.index("OTHER")
    )
    remark = (command.remark or "").encode()
    fields = bytearray()
    for key, value in command.ext.items():
        k, v = key.encode(), value.encode()
        fields += struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v
    return (
        _BINARY_FIXED.pack(command.code, language, command.version, command.opaque, command.flag)
        + struct.pack(">i", len(remark))
        + remark
        + struct.pack(">i", len(fields))
        + bytes(fields)
    )
