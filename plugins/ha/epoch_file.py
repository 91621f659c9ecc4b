"""The epoch file (``epochFileCheckpoint``): where each master epoch began in this replica's log.

Why it exists: after a failover two replicas may hold different bytes past some offset (the
old master wrote a tail nobody confirmed). Comparing epoch histories finds the last offset both
logs agree on without reading the logs: the newest epoch both know, begun at the same offset,
is shared up to the smaller of its two ends. A replica truncates to that point before it
replicates from a new master (RocketMQ's AutoSwitchHAService handshake).

A master appends its epoch when elected; a slave copies its master's history at the handshake.
Entries are valid up to this log's end: one that begins past it is ignored and dropped before
this replica appends its own. Written atomically (``.bak`` kept), read back with the backup.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from kernel.errors import ConfigError
from kernel.persist import read_json_with_backup, write_json_atomic

FILE_NAME = "epochFileCheckpoint"


@attrs.frozen
class EpochEntry:
    """Epoch ``epoch`` covers log bytes ``[start_offset, end_offset)`` (RocketMQ's EpochEntry)."""

    epoch: int
    start_offset: int
    end_offset: int

    def to_json(self) -> dict[str, int]:
        return {"epoch": self.epoch, "startOffset": self.start_offset, "endOffset": self.end_offset}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> EpochEntry:
        return cls(int(raw["epoch"]), int(raw["startOffset"]), int(raw["endOffset"]))


def with_ends(starts: Sequence[tuple[int, int]], log_end: int) -> list[EpochEntry]:
    """(epoch, start) pairs to entries: each ends where the next begins, the last at
    ``log_end``; entries beginning past ``log_end`` are left out."""
    valid = [(e, s) for e, s in starts if s <= log_end]
    if not valid:
        return []
    ends = [s for _, s in valid[1:]] + [log_end]
    return [EpochEntry(e, s, end) for (e, s), end in zip(valid, ends, strict=True)]


def consistent_point(local: Sequence[EpochEntry], remote: Sequence[EpochEntry]) -> int:
    """The last offset both histories agree on, or -1 when they share no epoch.

    The newest local epoch that the remote history has too, begun at the same offset, is
    shared up to the smaller end; an epoch both know but begun elsewhere is not shared.
    """
    by_epoch = {entry.epoch: entry for entry in remote}
    for mine in reversed(local):
        theirs = by_epoch.get(mine.epoch)
        if theirs is not None and theirs.start_offset == mine.start_offset:
            return min(mine.end_offset, theirs.end_offset)
    return -1


@attrs.define(eq=False)
class EpochFile:
    """See the module docstring."""

    path: Path
    starts: list[tuple[int, int]] = attrs.field(factory=list)
    """(epoch, start offset), epochs and offsets ascending."""

    @classmethod
    def load(cls, directory: Path) -> EpochFile:
        """:raises ConfigError: naming the file, when it and its backup are unreadable."""
        path = directory / FILE_NAME
        try:
            raw = read_json_with_backup(path)
        except ConfigError:
            raise
        except (OSError, ValueError) as error:
            raise ConfigError(path, "epochs", f"unreadable epoch file: {error}") from error
        if raw is None:
            return cls(path)
        try:
            starts = [(int(e["epoch"]), int(e["startOffset"])) for e in raw["epochs"]]
        except (KeyError, TypeError, ValueError) as error:
            raise ConfigError(
                path, "epochs", f"expected a list of {{epoch, startOffset}}: {error}"
            ) from error
        for (e1, s1), (e2, s2) in zip(starts, starts[1:], strict=False):
            if e2 <= e1 or s2 < s1:
                raise ConfigError(path, "epochs", f"epoch {e2} at {s2} does not follow epoch {e1} at {s1}")
        return cls(path, starts)

    @property
    def last_epoch(self) -> int:
        return self.starts[-1][0] if self.starts else 0

    def entries(self, log_end: int) -> list[EpochEntry]:
        return with_ends(self.starts, log_end)

    def _save(self) -> None:
        write_json_atomic(self.path, {"epochs": [{"epoch": e, "startOffset": s} for e, s in self.starts]})

    def append(self, epoch: int, start: int) -> None:
        """This replica became master of ``epoch`` with its log ending at ``start``."""
        self.starts = [(e, s) for e, s in self.starts if s <= start and e < epoch]
        self.starts.append((epoch, start))
        self._save()

    def truncate_from(self, offset: int) -> None:
        """The log was cut at ``offset``: epochs that began past it are dropped (one that began
        exactly there keeps no bytes but is kept, as its start is still right)."""
        kept = [(e, s) for e, s in self.starts if s <= offset]
        if kept != self.starts:
            self.starts = kept
            self._save()

    def copy_from(self, remote: Sequence[EpochEntry], upto: int) -> None:
        """A slave takes its master's history (its log will be the master's copy): local epochs
        up to the consistent point ``upto`` are shared, the master's later ones follow."""
        kept = [(e, s) for e, s in self.starts if s <= upto]
        last = kept[-1][0] if kept else 0
        kept += [(r.epoch, r.start_offset) for r in remote if r.epoch > last]
        if kept != self.starts:
            self.starts = kept
            self._save()
