"""RocketMQ's HA frames, byte for byte.

Slave to master: an 8-byte big-endian offset, the end of the slave's commit log ("report").
Master to slave: a 12-byte header, 8-byte offset of the first byte and 4-byte length, then that
many commit-log bytes; a length of 0 is a heartbeat. There is no handshake and no error frame:
a master that cannot serve a slave says so by the offset it sends and closes the connection.
"""

from __future__ import annotations

import struct

import attrs

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")


class HaFrameError(ValueError):
    """A peer sent bytes that are not an HA frame (negative offset or length, oversized body)."""


def encode_report(offset: int) -> bytes:
    return REPORT.pack(offset)


def encode_header(offset: int, size: int) -> bytes:
    return HEADER.pack(offset, size)


@attrs.define(eq=False)
class ReportDecoder:
    """Splits a slave's byte stream into reported offsets (only the newest matters)."""

    _buffer: bytearray = attrs.field(factory=bytearray, init=False)

    def feed(self, data: bytes) -> int | None:
        """The last complete report in ``data`` (with what was buffered), or None.

        :raises HaFrameError: a negative offset.
        """
        buffer = self._buffer
        buffer += data
        whole = len(buffer) - len(buffer) % REPORT.size
        if not whole:
            return None
        (offset,) = REPORT.unpack_from(buffer, whole - REPORT.size)
        del buffer[:whole]
        if offset < 0:
            raise HaFrameError(f"the slave reported a negative offset {offset}")
        return int(offset)


@attrs.frozen
class Transfer:
    """One master frame: ``data`` belongs at commit-log ``offset`` (empty for a heartbeat)."""

    offset: int
    data: memoryview


@attrs.define(eq=False)
class TransferDecoder:
    """Splits a master's byte stream into :class:`Transfer` frames.

    Memory bound: one frame of at most ``max_body`` bytes plus one socket read.
    """

    max_body: int
    _buffer: bytearray = attrs.field(factory=bytearray, init=False)

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Transfer]:
        """Every complete frame now buffered, in order.

        :raises HaFrameError: a negative offset or length, or a body over ``max_body``.
        """
        buffer = self._buffer
        buffer += data
        frames = []
        position = 0
        end = len(buffer)
        snapshot: memoryview | None = None
        while end - position >= HEADER.size:
            offset, size = HEADER.unpack_from(buffer, position)
            if offset < 0 or size < 0 or size > self.max_body:
                raise HaFrameError(
                    f"not an HA frame: offset {offset}, length {size} (at most {self.max_body})"
                )
            start = position + HEADER.size
            if end - start < size:
                break
            if snapshot is None:
                snapshot = memoryview(bytes(buffer))  # one copy per read; frames are views of it
            frames.append(Transfer(offset, snapshot[start : start + size]))
            position = start + size
        if position:
            del buffer[:position]
        return frames
