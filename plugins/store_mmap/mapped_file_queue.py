"""A directory of equally sized :class:`MappedFile` s forming one logical byte sequence.

Used for the commit log (1 GiB files) and for each consume queue (6 000 000-byte files).
Offsets are global; a file's name is the offset of its first byte.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path

import attrs

from kernel.errors import OffsetOutOfRange, StoreError
from plugins.store_mmap.mapped_file import MappedFile, file_name
from plugins.store_mmap.open_files import OpenFileBudget

log = logging.getLogger(__name__)

_NAME = re.compile(r"^\d{20}$")


@attrs.define(eq=False)
class MappedFileQueue:
    directory: Path
    file_size: int
    use_mmap_writes: bool = False
    stage_writes: bool = False
    files: list[MappedFile] = attrs.field(factory=list)
    sparse: bool = False
    """Files are sized, not allocated (see :meth:`MappedFile.open`); writers allocate ranges."""
    budget: OpenFileBudget | None = None
    """The bound on open files these count against (None: always open)."""
    on_created: Callable[[MappedFile, bool], object] | None = None
    """Called with each file the queue creates (not those it loads), and whether appends go
    into it right away (the commit log's warmer starts such a file a margin in)."""
    prepare_ahead: bool = False
    """Keep a file ready after the one appends go to, from the first append on (a roll always
    pre-allocates the next one): the commit log's warmer then has a whole file's life to warm
    it, where a file created when appends reach it is appended to unwarmed (see
    :mod:`plugins.store_mmap.warm`)."""

    @classmethod
    def load(
        cls,
        directory: Path,
        file_size: int,
        *,
        use_mmap_writes: bool = False,
        stage_writes: bool = False,
        sparse: bool = False,
        budget: OpenFileBudget | None = None,
    ) -> MappedFileQueue:
        """Open every file of ``directory`` (created if missing), marked fully written; with a
        ``budget`` the files are only named (parked) and open on first use.

        Recovery then sets the real positions with :meth:`truncate`.

        :raises StoreError: a file of the wrong size or a gap between files, naming the files.
        """
        directory.mkdir(parents=True, exist_ok=True)
        queue = cls(directory, file_size, use_mmap_writes, stage_writes, sparse=sparse, budget=budget)
        paths = sorted(p for p in directory.iterdir() if _NAME.match(p.name))
        for position, path in enumerate(paths):
            actual = path.stat().st_size
            if actual < file_size and position == len(paths) - 1 and _all_zero(path):
                # A crash between creating the newest file and allocating it: it never held data.
                log.warning("removing %s: a %d-byte file left by an interrupted pre-allocation", path, actual)
                path.unlink()
                continue
            if actual != file_size:
                queue.close()
                raise StoreError(
                    f"{path} is {actual} bytes but files in {directory} are configured as "
                    f"{file_size} bytes; was the file size setting changed?"
                )
            if budget is not None:  # opened on first use: a start with 100,000 queues opens none
                mapped = MappedFile.parked(path, file_size, sparse=sparse, budget=budget)
            else:
                mapped = MappedFile.open(
                    path,
                    file_size,
                    create=False,
                    use_mmap_writes=use_mmap_writes,
                    stage_writes=stage_writes,
                    sparse=sparse,
                )
            mapped.set_positions(file_size)
            if queue.files and queue.files[-1].end != mapped.start:
                queue.close()
                mapped.close()
                raise StoreError(
                    f"gap in {directory}: {queue.files[-1].path.name} is followed by {path.name}"
                )
            queue.files.append(mapped)
        return queue

    @property
    def min_offset(self) -> int:
        return self.files[0].start if self.files else 0

    @property
    def max_offset(self) -> int:
        """Offset just past the last written byte."""
        for mapped in reversed(self.files):
            if mapped.wrote:
                return mapped.start + mapped.wrote
        return self.files[0].start if self.files else 0

    def find(self, offset: int) -> MappedFile:
        """The file holding ``offset``.

        :raises OffsetOutOfRange: below the first file or beyond the last.
        """
        if not self.files or offset < self.files[0].start or offset >= self.files[-1].end:
            raise OffsetOutOfRange(
                f"offset {offset} is outside [{self.min_offset}, "
                f"{self.files[-1].end if self.files else 0}) in {self.directory}"
            )
        index = (offset - self.files[0].start) // self.file_size
        return self.files[index]

    def writable_file(self, start_if_empty: int = 0) -> MappedFile:
        """The file appends go to: the first file that is not full (files are created on
        demand, with the next one pre-allocated). Full files come first, so the walk starts at
        the end: a few steps per append however many files the log keeps."""
        files = self.files
        index = len(files)
        while index and files[index - 1].wrote < files[index - 1].size:
            index -= 1
        if index < len(files):
            return files[index]
        start = self.files[-1].end if self.files else start_if_empty
        mapped = self._create(start, appends_now=True)
        if self.prepare_ahead:
            self.prepare_after(mapped)
        return mapped

    def extend_to(self, end: int, start_if_empty: int = 0) -> None:
        """Create files until the last one ends at or past ``end`` (the first at
        ``start_if_empty``); nothing when they already do.

        :raises OSError: a file could not be created.
        """
        if not self.files:
            self._create(start_if_empty)
        while self.files[-1].end < end:
            self._create(self.files[-1].end)

    def roll(self, full: MappedFile) -> MappedFile:
        """The file after ``full`` (created if needed); then pre-allocates the one after, best
        effort: a failure there (disk full) is logged and retried at the next roll."""
        index = self.files.index(full)
        nxt = self.files[index + 1] if index + 1 < len(self.files) else self._create(full.end)
        self.prepare_after(nxt)
        return nxt

    def prepare_after(self, active: MappedFile) -> None:
        """Pre-allocate the file after ``active`` when it is the last one, best effort: a
        failure (disk full) is logged, and the file is created when appends reach it."""
        if active is not self.files[-1]:
            return
        try:
            self._create(active.end)
        except OSError as error:
            log.warning("could not pre-allocate the file after %s: %s", active.path, error)

    def ensure_room(self, active: MappedFile, incoming: int, records: int, largest: int) -> None:
        """Create the files a write of ``records`` records (``incoming`` bytes, the largest
        ``largest``) starting in ``active`` can roll into, before anything is written, so a full
        disk fails the write cleanly. Each roll may leave up to ``largest + 8`` bytes unused.

        :raises OSError: a file could not be created (ENOSPC ...); nothing was written.
        """
        needed = max(0, incoming - active.free + largest + 8)
        usable = max(1, self.file_size - largest - 8)
        files_after = min(records, -(-needed // usable)) if incoming > active.free - largest - 8 else 0
        if not files_after:
            return
        index = self.files.index(active)
        while len(self.files) - 1 - index < files_after:
            self._create(self.files[-1].end)

    def _create(self, start: int, *, appends_now: bool = False) -> MappedFile:
        path = self.directory / file_name(start)
        mapped = MappedFile.open(
            path,
            self.file_size,
            create=True,
            use_mmap_writes=self.use_mmap_writes,
            stage_writes=self.stage_writes,
            sparse=self.sparse,
            budget=self.budget,
        )
        self.files.append(mapped)
        log.info("created %s", path)
        if self.on_created is not None:
            self.on_created(mapped, appends_now)
        return mapped

    def truncate(self, offset: int) -> None:
        """Set positions so that ``offset`` is the end: later files are deleted, the file holding
        ``offset`` is written up to it, earlier ones are full."""
        keep = []
        for mapped in self.files:
            if mapped.start > offset or (mapped.start == offset and mapped is not self.files[0]):
                mapped.destroy()
                continue
            position = min(offset - mapped.start, mapped.size)
            mapped.set_positions(position)
            keep.append(mapped)
        self.files = keep

    def destroy_all(self) -> None:
        """Delete every file (the queue is rebuilt or restarted elsewhere)."""
        for mapped in self.files:
            mapped.destroy()
        self.files = []

    def delete_leading(self, count: int) -> list[MappedFile]:
        """Delete the first ``count`` files (retention); returns them."""
        gone, self.files = self.files[:count], self.files[count:]
        for mapped in gone:
            mapped.destroy()
        return gone

    def close(self) -> None:
        for mapped in self.files:
            mapped.close()


def _all_zero(path: Path) -> bool:
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            if chunk.count(0) != len(chunk):
                return False
    return True
