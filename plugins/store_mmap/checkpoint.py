"""The ``checkpoint`` file: RocketMQ's three timestamps plus Trocket's dispatch offset.

RocketMQ 4.x layout (4 KiB file): physicMsgTimestamp @0, logicsMsgTimestamp @8,
indexMsgTimestamp @16 (all ms, big-endian longs); 5.x adds @24 and @32. Trocket keeps the
RocketMQ fields and adds, at @128, a tagged record with the commit-log offset up to which the
consume queues were durably built, which tells abnormal recovery where to re-dispatch from.
A zeroed or missing checkpoint means "scan from the first file".
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import attrs

SIZE = 4096
_TIMESTAMPS = struct.Struct(">qqq")
_EXTENSION = struct.Struct(">4siq")
_EXTENSION_AT = 128
_TAG = b"TRKT"
_VERSION = 1


@attrs.define
class Checkpoint:
    physic_timestamp: int = 0
    """Store time of the last message known flushed in the commit log."""
    logics_timestamp: int = 0
    """Store time of the last message known flushed in the consume queues."""
    index_timestamp: int = 0
    dispatched_offset: int = 0
    """Commit-log offset up to which consume queues were flushed (Trocket extension)."""

    @property
    def is_zero(self) -> bool:
        return not (self.physic_timestamp or self.logics_timestamp or self.dispatched_offset)

    @classmethod
    def load(cls, path: Path) -> Checkpoint:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return cls()
        if len(data) < _EXTENSION_AT + _EXTENSION.size:
            data = data.ljust(_EXTENSION_AT + _EXTENSION.size, b"\0")
        physic, logics, index = _TIMESTAMPS.unpack_from(data, 0)
        tag, version, dispatched = _EXTENSION.unpack_from(data, _EXTENSION_AT)
        if tag != _TAG or version != _VERSION:
            dispatched = 0
        return cls(physic, logics, index, dispatched)

    def save(self, path: Path) -> None:
        """Write in place and fdatasync (blocking; call from a worker thread)."""
        data = bytearray(SIZE)
        _TIMESTAMPS.pack_into(data, 0, self.physic_timestamp, self.logics_timestamp, self.index_timestamp)
        _EXTENSION.pack_into(data, _EXTENSION_AT, _TAG, _VERSION, self.dispatched_offset)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, data, 0)
            os.fdatasync(fd)
        finally:
            os.close(fd)
