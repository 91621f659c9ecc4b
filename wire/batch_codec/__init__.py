"""The batch codec: the loops of the data path that touch every message of a batch.

Batches stay buffers and arrays from the socket to the disk (:mod:`wire.wire_batch`,
:mod:`wire.dispatch_batch`). What remains per message is a handful of loops: following a
batch body's size chain, filling record headers and CRCs, finding a few properties, hashing
tags and keys the way Java does. In numpy each of them costs a few fixed microseconds per call
whatever the batch size, and a batch of 32 messages made some sixty such calls: the put path of
32 × 128 B ran at about 120k messages/s, bound by call overhead, not by bytes.

So these loops exist twice, with one signature and one answer:

- :mod:`wire.batch_codec.pure`: numpy and the standard library, the definition;
- ``wire.batch_codec._compiled``: the same loops in Cython, built by pip at install time
  (``setup.py``; gcc and the Python headers, and for CRC-32 ISA-L when installed, else zlib).

The compiled one is used when it was built and ``TROCKET_PURE_CODEC`` is not set (to ``1``);
:data:`ACCELERATED` says which. ``tests/kernel/test_batch_codec.py`` holds both to the same
answers on generated batches, including malformed ones.
"""

from __future__ import annotations

import os

import numpy as np

from wire.batch_codec import pure
from wire.java_hash import hash_after
from wire.property_scan import Buffer

try:
    if os.environ.get("TROCKET_PURE_CODEC", "") not in ("", "0"):
        raise ImportError("TROCKET_PURE_CODEC is set")
    from wire.batch_codec import _compiled  # type: ignore[attr-defined]
except ImportError:
    _compiled = None

Pairs = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""What :func:`find_pairs` returns: region row, name index, value start, value end."""

ACCELERATED: bool = _compiled is not None
"""Whether the compiled loops are in use."""
CRC32_BACKEND: str = _compiled.CRC32_BACKEND if _compiled is not None else "zlib"
"""What computes body CRCs: ``"isa-l"`` (the compiled codec built with Debian's libisal-dev)
or ``"zlib"``; the same function either way."""

_impl = _compiled if _compiled is not None else pure

entry_columns = _impl.entry_columns
encode_entries = _impl.encode_entries
encode_records = _impl.encode_records
find_pairs = _impl.find_pairs
size_chain = _impl.size_chain
region_crcs = _impl.region_crcs
find_byte = _impl.find_byte
gather = _impl.gather
index_entries = _impl.index_entries
property_pairs = _impl.property_pairs
string_hash = _impl.string_hash


def dispatch_properties(
    buffer: Buffer, begin: np.ndarray, end: np.ndarray, parked: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Tag codes and index keys (``key_rows``, ``key_start``, ``key_end``: spans of ``buffer``)
    of records (see :func:`wire.batch_codec.pure.dispatch_properties`).
    The compiled loop covers ASCII tags and keys outside the parking topics, the pure one the
    rest."""
    if _compiled is not None and (parked is None or not parked.any()):
        found = _compiled.dispatch_properties(buffer, begin, end)
        if found is not None:
            return found
    return pure.dispatch_properties(buffer, begin, end, parked)


def gather_checked(
    buffer: Buffer, positions: np.ndarray, sizes: np.ndarray, limit: int, base: int
) -> tuple[bytes, int, int] | None:
    """Served records copied out and checked in one pass: ``(data, verdict, row)`` as
    :func:`wire.record_run.first_problem_at` answers (the numpy definition) with the records
    back to back in ``data`` when the verdict is 0; ``None`` without the compiled codec (the
    caller then checks with numpy and gathers). Checking the copy instead of the mapping reads
    each record from memory once: a pull of 1,000 records of 1 KiB spent 0.76 ms in the two
    numpy-driven passes, about 40 % of what the broker did for it."""
    if _compiled is None:
        return None
    return _compiled.gather_checked(buffer, positions, sizes, limit, base)  # type: ignore[no-any-return]


def java_hashes_at(buffer: Buffer, start: np.ndarray, end: np.ndarray, prefix: int = 0) -> np.ndarray:
    """Unsigned Java hashes (``uint32``) of the UTF-8 strings ``buffer[start[i]:end[i]]``, each
    after a string whose unsigned hash is ``prefix`` (``topic#`` for index keys). Strings that
    are not ASCII are hashed by the scalar definition."""
    hashes, others = _impl.java_hashes_at(buffer, start, end, prefix)
    for row in others.tolist():
        hashes[row] = hash_after(prefix, bytes(buffer[int(start[row]) : int(end[row])]))
    return hashes


__all__ = [
    "ACCELERATED",
    "CRC32_BACKEND",
    "Pairs",
    "dispatch_properties",
    "encode_entries",
    "encode_records",
    "entry_columns",
    "find_byte",
    "find_pairs",
    "gather",
    "gather_checked",
    "index_entries",
    "java_hashes_at",
    "property_pairs",
    "pure",
    "region_crcs",
    "size_chain",
    "string_hash",
]
