"""A fault run's history: what clients did and saw, and when faults started and stopped.

One JSON object per line, each with ``t`` (seconds on one clock for the whole run) and
``kind``:

* ``invoke``: a send begins: ``id`` (unique per attempt), ``process`` (the producer), ``body``;
* ``ok``: it was acknowledged: ``id``, ``broker`` (broker set name), ``replica`` (the address
  that answered), ``queue``, ``offset``, ``msg_id``;
* ``fail``: it was definitely not stored (refused before the store took it): ``id``, ``error``;
* ``info``: its outcome is unknown (timeout, reset, FLUSH_SLAVE_TIMEOUT, fenced): ``id``, ``error``;
* ``read``: a consumer saw a message: ``process``, ``broker``, ``queue``, ``offset``, ``body``,
  ``final`` (true for the drain after the faults healed), ``source`` (``consumer``, or the
  replica read directly);
* ``fault``: ``name`` and ``phase`` (``start`` / ``stop``).

The writer appends from any task as things happen; the checker (:mod:`trocket.chaos.checker`)
reads the file back. Keeping the log as plain lines means a run's evidence can be read with a
text editor and re-checked after the checker changes.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import attrs
import orjson

KINDS = frozenset({"invoke", "ok", "fail", "info", "read", "fault"})


class BadHistory(ValueError):
    """A history line that is not an event (named by its line number)."""


@attrs.frozen
class Event:
    t: float
    kind: str
    fields: dict[str, Any] = attrs.field(factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.fields[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)


@attrs.define(eq=False)
class HistoryWriter:
    """Appends events to a JSON-lines file; ``clock`` is the run's one clock."""

    out: IO[bytes]
    clock: Any = time.monotonic
    kinds: Counter[str] = attrs.field(factory=Counter)
    """Events written so far by kind (a run waits on ``kinds["ok"]`` before its fault)."""

    @property
    def count(self) -> int:
        """Events written so far."""
        return sum(self.kinds.values())

    def event(self, kind: str, **fields: Any) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown event kind {kind!r}; known: {sorted(KINDS)}")
        self.out.write(orjson.dumps({"t": self.clock(), "kind": kind, **fields}) + b"\n")
        self.kinds[kind] += 1

    def flush(self) -> None:
        self.out.flush()


def parse(lines: Iterable[bytes | str]) -> Iterator[Event]:
    """:raises BadHistory: a line that is not a JSON object with ``t`` and a known ``kind``."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = orjson.loads(line)
            t, kind = float(data.pop("t")), str(data.pop("kind"))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as error:
            raise BadHistory(f"line {number}: not an event ({error})") from None
        if kind not in KINDS:
            raise BadHistory(f"line {number}: unknown kind {kind!r}")
        yield Event(t, kind, data)


def read_history(path: Path) -> list[Event]:
    with path.open("rb") as lines:
        return list(parse(lines))
