"""The RocketMQ 4.x v1 record header: its constants, its ``struct`` and its numpy row.

One definition for every codec that reads or writes headers (``wire.record`` one record at a
time; ``record_run``, ``record_columns``, ``dispatch_batch`` and ``wire_batch`` in bulk). It
imports nothing from the kernel, so every one of them can import it.
"""

from __future__ import annotations

import struct

import numpy as np

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
MAGIC_BLANK = -875286124  # 0xCBD43194

HEADER = struct.Struct(">iiiiiqqiq4siq4siiqi")
"""Everything up to and including bodyLen: 88 bytes."""
HEADER_SIZE = HEADER.size
MIN_RECORD_SIZE = HEADER_SIZE + 1 + 2

HEADER_DTYPE = np.dtype(
    [
        ("size", ">i4"),
        ("magic", ">i4"),
        ("body_crc", ">i4"),
        ("queue_id", ">i4"),
        ("flag", ">i4"),
        ("queue_offset", ">i8"),
        ("physical_offset", ">i8"),
        ("sys_flag", ">i4"),
        ("born_timestamp", ">i8"),
        ("born_host", ">u8"),
        ("store_timestamp", ">i8"),
        ("store_host", ">u8"),
        ("reconsume_times", ">i4"),
        ("prepared_offset", ">i8"),
        ("body_len", ">i4"),
    ]
)
""":data:`HEADER` as a numpy row (each host as 8 bytes: IPv4 then port)."""
assert HEADER_DTYPE.itemsize == HEADER_SIZE

_HEADER_BYTES = np.dtype((np.void, HEADER_SIZE))


def header_rows(buffer: bytes | bytearray | memoryview, positions: np.ndarray) -> np.ndarray:
    """The headers of the records starting at ``positions`` (each with 88 bytes in
    ``buffer``), copied out with one gather as :data:`HEADER_DTYPE` rows. The view over the
    buffer is released before returning, so a mapped file can be closed afterwards."""
    headers = np.ndarray(
        shape=(len(buffer) - HEADER_SIZE + 1,), dtype=_HEADER_BYTES, buffer=buffer, strides=(1,)
    )
    try:
        return headers[positions].view(HEADER_DTYPE)
    finally:
        del headers
