"""Stored records copied out of the log back to back, in one ``bytes``.

A pull answers with up to a thousand records whose bytes go to the network as they are (a
PULL_MESSAGE body is the records concatenated). Copying each one out of the mapping as its own
``bytes`` and joining them again cost about 1 µs a record for 1 KiB records (two allocations
and copies of every byte, one Python object per record); one gather into a single ``bytes``
costs 25 µs for the thousand, and the pull sends it without another copy. Callers that look at
records one by one still can: indexing slices the record out on demand.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import attrs
import numpy as np

from wire import batch_codec
from wire.record_run import Buffer, check_at, problem_at


@attrs.frozen(eq=False)
class StoredRecords(Sequence[bytes]):
    """Records ``data[ends[i-1]:ends[i]]`` (the first from 0), as a read-only sequence of bytes."""

    data: bytes
    ends: np.ndarray
    """Cumulative end of each record in ``data`` (``int64``)."""

    @classmethod
    def gather(cls, buffer: Buffer, positions: np.ndarray, sizes: np.ndarray) -> StoredRecords:
        """The records at ``positions`` of ``buffer`` with ``sizes``, copied in one pass."""
        positions = np.ascontiguousarray(positions, dtype=np.int64)
        sizes = np.ascontiguousarray(sizes, dtype=np.int64)
        return cls(batch_codec.gather(buffer, positions, positions + sizes), np.cumsum(sizes))

    @classmethod
    def read_checked(
        cls, buffer: Buffer, positions: np.ndarray, sizes: np.ndarray, limit: int, *, base: int
    ) -> StoredRecords:
        """The records a consume queue points at (``positions`` in ``buffer``, whose first byte
        is log offset ``base``; ``sizes`` the queue's), each checked as
        :func:`~wire.record_run.check_at` checks them, copied out in one piece. The compiled
        codec copies first and checks the copy; without it numpy checks the buffer, then
        the records are gathered.

        :raises CorruptRecord: the first problem, its offset relative to ``buffer``.
        """
        positions = np.ascontiguousarray(positions, dtype=np.int64)
        sizes = np.ascontiguousarray(sizes, dtype=np.int64)
        checked = batch_codec.gather_checked(buffer, positions, sizes, limit, base)
        if checked is None:
            problem = check_at(buffer, positions, sizes, limit, base=base)
            if problem is not None:
                raise problem
            return cls(batch_codec.gather(buffer, positions, positions + sizes), np.cumsum(sizes))
        data, verdict, row = checked
        problem = problem_at(buffer, positions, sizes, limit, base=base, verdict=verdict, row=row)
        if problem is not None:
            raise problem
        return cls(data, np.cumsum(sizes))

    @classmethod
    def concat(cls, parts: Sequence[StoredRecords]) -> StoredRecords:
        """One sequence of ``parts`` in order (records read from several log files)."""
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return cls(b"", np.zeros(0, dtype=np.int64))
        shifts = np.cumsum([0] + [len(part.data) for part in parts[:-1]])
        ends = np.concatenate([part.ends + shift for part, shift in zip(parts, shifts, strict=True)])
        return cls(b"".join(part.data for part in parts), ends)

    def __len__(self) -> int:
        return len(self.ends)

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> list[bytes]: ...

    def __getitem__(self, index: int | slice) -> bytes | list[bytes]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        count = len(self.ends)
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError("stored record index out of range")
        start = int(self.ends[index - 1]) if index else 0
        return self.data[start : int(self.ends[index])]

    def __iter__(self) -> Iterator[bytes]:
        data = self.data
        start = 0
        for end in self.ends.tolist():
            yield data[start:end]
            start = end


def joined(records: Sequence[bytes]) -> bytes:
    """The records back to back (a pull's body): without a copy when they were read together."""
    if isinstance(records, StoredRecords):
        return records.data
    return b"".join(records)


__all__ = ["StoredRecords", "joined"]
