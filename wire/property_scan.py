"""Finding a few message properties in many messages at once.

Properties are stored as ``key\\x01value\\x02`` text. The hot paths need only a handful of them
(``TAGS``, ``KEYS`` and ``UNIQ_KEY`` for the views, the delay and transaction markers for the
put path), so instead of decoding every message's properties into a dict, the property regions
of a batch are joined into one buffer, each region preceded and followed by ``\\x02``, and one
regular expression finds every wanted pair. A pair always starts right after a ``\\x02`` and
keys and values never contain ``\\x01`` or ``\\x02``, so a match can only be a whole pair: bytes
of a body are never searched (they are not in the joined buffer) and a value that looks like
``KEYS\\x01...`` is not a pair because it is not preceded by ``\\x02``.

This is the numpy definition behind :func:`wire.batch_codec.pure.find_pairs` (the compiled
twin walks the regions in place, without joining them); the dispatch reader also keeps the
joined buffer as the records' properties.
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Iterable

import attrs
import numpy as np

Buffer = bytes | bytearray | memoryview | mmap.mmap


def pattern_for(names: Iterable[str]) -> re.Pattern[bytes]:
    """A pattern matching the pairs of ``names``: group 1 the name, group 2 the value."""
    alternatives = b"|".join(re.escape(name.encode()) for name in names)
    return re.compile(rb"\x02(" + alternatives + rb")\x01([^\x02]*)")


@attrs.frozen(eq=False)
class JoinedProperties:
    """The property regions of a batch of messages in one buffer."""

    blob: bytes
    starts: np.ndarray
    """Where message ``i``'s properties begin in :attr:`blob` (``int64``)."""
    ends: np.ndarray

    @classmethod
    def join(cls, buffer: Buffer, begin: np.ndarray, end: np.ndarray) -> JoinedProperties:
        """Join ``buffer[begin[i]:end[i]]`` for every ``i``."""
        count = len(begin)
        if not count:
            empty = np.zeros(0, dtype=np.int64)
            return cls(b"", empty, empty)
        getitem = buffer.__getitem__
        regions = map(getitem, map(slice, begin.tolist(), end.tolist()))
        blob = b"\x02" + b"\x02".join(regions) + b"\x02"
        lengths = end - begin
        starts = np.empty(count, dtype=np.int64)
        starts[0] = 1
        np.cumsum(lengths[:-1] + 1, out=starts[1:])
        starts[1:] += 1
        return cls(blob, starts, starts + lengths)
