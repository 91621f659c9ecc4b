"""The body of SEND_BATCH_MESSAGE: each message as total size, magic, body CRC, flag, body
length, body, properties length, properties (RocketMQ's ``MessageDecoder.encodeMessage``)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable

from kernel.model import encode_properties

_HEAD = struct.Struct(">iiiii")
_PROPS_LEN = struct.Struct(">h")


def encode_batch(entries: Iterable[tuple[int, bytes, dict[str, str]]]) -> bytes:
    """``entries`` are (flag, body, properties)."""
    out = bytearray()
    for flag, body, properties in entries:
        encoded = encode_properties(properties)
        total = _HEAD.size + len(body) + _PROPS_LEN.size + len(encoded)
        out += _HEAD.pack(total, 0, zlib.crc32(body) & 0x7FFFFFFF, flag, len(body))
        out += body + _PROPS_LEN.pack(len(encoded)) + encoded
    return bytes(out)
