"""Java's ``String.hashCode`` for many strings at once.

RocketMQ stores Java string hashes on disk: a consume-queue entry's tag code is the hash of the
message's ``TAGS`` and an index entry's key hash is the hash of ``topic#key``. The dispatch loop
needs one per message, and a per-character Python loop costs microseconds per key, so keys are
hashed as a matrix: keys of equal length become the rows of a ``uint8`` array and one product
with the powers of 31 (``uint32``, which wraps exactly like Java's ``int``) hashes them all.
Only ASCII keys take that path (their UTF-16 code units are their bytes); any other key is
hashed one character at a time by :func:`java_string_hash`, which defines the answer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_MASK = 0xFFFFFFFF


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` as a signed 32-bit int (over UTF-16 code units)."""
    h = 0
    data = text.encode("utf-16-le")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] | (data[i + 1] << 8))) & _MASK
    return h - (1 << 32) if h >= (1 << 31) else h


def _powers(length: int) -> np.ndarray:
    """``31 ** (length - 1 - i)`` modulo 2**32 for ``i`` in ``range(length)``."""
    powers = np.empty(length, dtype=np.uint32)
    value = 1
    for i in range(length - 1, -1, -1):
        powers[i] = value
        value = (value * 31) & _MASK
    return powers


_POWERS: dict[int, np.ndarray] = {}


def java_hashes(keys: Sequence[bytes], *, prefix: int = 0) -> np.ndarray:
    """Unsigned 32-bit Java hashes of UTF-8 ``keys``, as ``uint32``.

    With ``prefix`` (the unsigned hash of a string ``p``) each result is the hash of ``p + key``:
    Java's hash is a polynomial, so ``hash(p + k) = hash(p) * 31**len(k) + hash(k)``.
    """
    out = np.empty(len(keys), dtype=np.uint32)
    if not len(keys):
        return out
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    for length in np.unique(lengths).tolist():
        rows = np.flatnonzero(lengths == length)
        if length == 0:
            out[rows] = prefix
            continue
        chosen = [keys[i] for i in rows.tolist()]
        matrix = np.frombuffer(b"".join(chosen), dtype=np.uint8).reshape(len(chosen), length)
        powers = _POWERS.get(length)
        if powers is None:
            powers = _POWERS.setdefault(length, _powers(length))
        hashed = matrix.astype(np.uint32) @ powers
        if prefix:
            hashed = hashed + np.uint32(prefix * pow(31, length, 1 << 32) & _MASK)
        ascii_rows = (matrix < 0x80).all(axis=1)
        out[rows] = hashed
        if not ascii_rows.all():
            for row in rows[~ascii_rows].tolist():
                out[row] = hash_after(prefix, keys[row])
    return out


def hash_after(prefix: int, key: bytes) -> int:
    """The unsigned Java hash of ``p + key`` (``key`` UTF-8, decoded as Java would read it with
    replacement characters), where ``prefix`` is the unsigned hash of ``p``."""
    text = key.decode("utf-8", "replace")
    value = java_string_hash(text) & _MASK
    if prefix:
        units = len(text.encode("utf-16-le")) // 2
        value = (prefix * pow(31, units, 1 << 32) + value) & _MASK
    return value


def unsigned_hash(text: str) -> int:
    """Java's hash of ``text`` as an unsigned 32-bit int (the form :func:`java_hashes` takes
    as a prefix)."""
    return java_string_hash(text) & _MASK


def as_signed(hashes: np.ndarray) -> np.ndarray:
    """``uint32`` hashes as Java's signed ints (``int64``)."""
    return hashes.view(np.int32).astype(np.int64)
