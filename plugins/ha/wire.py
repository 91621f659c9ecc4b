"""RocketMQ's HA frames, byte for byte.

Slave to master: an 8-byte big-endian offset, the end of the slave's commit log ("report").
Master to slave: a 12-byte header, 8-byte offset of the first byte and 4-byte length, then that
many commit-log bytes; a length of 0 is a heartbeat. There is no handshake and no error frame:
a master that cannot serve a slave says so by the offset it sends and closes the connection.

Controller mode adds one frame, first on the slave's side: a 16-byte hello, ``-1`` (``-2`` for
an async learner) then the slave's broker id (two big-endian longs), so the master knows which
SyncStateSet member acks (RocketMQ 4.x masters would refuse it as a negative offset; only
controller-mode masters expect it). Epoch histories are compared before the connection, over the broker port
(``GET_BROKER_EPOCH_CACHE``).
"""

from __future__ import annotations

import struct

import attrs

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")
HELLO = struct.Struct(">qq")
HELLO_MARK = -1
LEARNER_HELLO_MARK = -2
"""The hello of an async learner: a replica that copies the log but never joins the SyncStateSet."""


class HaFrameError(ValueError):
    """A peer sent bytes that are not an HA frame (negative offset or length, oversized body)."""


def encode_report(offset: int) -> bytes:
    return REPORT.pack(offset)


def encode_hello(broker_id: int, *, learner: bool = False) -> bytes:
    return HELLO.pack(LEARNER_HELLO_MARK if learner else HELLO_MARK, broker_id)


def encode_header(offset: int, size: int) -> bytes:
    return HEADER.pack(offset, size)


@attrs.define(eq=False)
class ReportDecoder:
    """Splits a slave's byte stream into reported offsets (only the newest matters)."""

    expect_hello: bool = False
    """Controller mode: the stream begins with a hello naming the slave's broker id."""
    broker_id: int | None = None
    learner: bool = False
    _buffer: bytearray = attrs.field(factory=bytearray, init=False)

    def feed(self, data: bytes) -> int | None:
        """The last complete report in ``data`` (with what was buffered), or None.

        :raises HaFrameError: a negative offset, or a missing or malformed hello.
        """
        buffer = self._buffer
        buffer += data
        if self.expect_hello and self.broker_id is None:
            if len(buffer) < HELLO.size:
                return None
            mark, broker_id = HELLO.unpack_from(buffer)
            if mark not in (HELLO_MARK, LEARNER_HELLO_MARK) or broker_id <= 0:
                raise HaFrameError("a controller-mode master expects a slave's hello (its broker id) first")
            self.broker_id = int(broker_id)
            self.learner = mark == LEARNER_HELLO_MARK
            del buffer[: HELLO.size]
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
