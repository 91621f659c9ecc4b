"""One fixed-size store file, named by the 20-digit offset of its first byte.

Positions inside the file: ``wrote`` (bytes appended), ``committed`` (bytes in the file, so
visible to readers), ``flushed`` (bytes known durable). Readers copy bytes out of a
read-only-in-spirit ``mmap`` of the file (``pread`` for a sparse one, which is never mapped);
writers use ``pwrite`` or the mapping, or stage bytes
in memory until a commit writes them (RocketMQ's transient store pool; see
:class:`~plugins.store_mmap.config.StoreMmapConfig.write_path`). Without staging ``committed``
is ``wrote``.

Reference counting (RocketMQ's ``hold``/``release``): a flush running in a worker thread holds
the file, and :meth:`destroy` defers unmapping until the last holder releases, so a file is
never unmapped under a reader or a flush.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Callable
from pathlib import Path

import attrs

from plugins.store_mmap.open_files import OpenFileBudget
from plugins.store_mmap.ring_sync import Ring, RingOp
from plugins.store_mmap.warm import WarmJob

log = logging.getLogger(__name__)

PAGE_SIZE = mmap.PAGESIZE


def file_name(offset: int) -> str:
    return f"{offset:020d}"


@attrs.define(eq=False)
class MappedFile:
    """See the module docstring."""

    path: Path
    start: int
    """Global offset of the first byte (the file's name)."""
    size: int
    use_mmap_writes: bool = False
    stage_writes: bool = False
    wrote: int = 0
    flushed: int = 0
    allocated: int = 0
    """Bytes from the file's start known to have disk space (all of it unless sparse)."""
    budget: OpenFileBudget | None = None
    """The open-file bound this file counts against (None: always open)."""
    sparse: bool = False
    """Sized, not allocated (consume queues): written with ``pwrite`` and read with ``pread``,
    never mapped, so an open one holds one descriptor, not two (Python's ``mmap`` keeps a
    duplicate of the file's descriptor)."""
    warming: WarmJob | None = attrs.field(default=None, init=False)
    """Zeros being written ahead of the appends (``plugins.store_mmap.warm``): a write that
    would reach them halts the job first; the warmer detaches the job when it is done."""
    _committed: int = attrs.field(default=0, init=False)
    _staged: bytearray = attrs.field(factory=bytearray, init=False)
    _staged_at: int = attrs.field(default=0, init=False)
    _fd: int = attrs.field(default=-1, init=False)
    _map: mmap.mmap | None = attrs.field(default=None, init=False)
    _refs: int = attrs.field(default=0, init=False)
    _destroy_pending: bool = attrs.field(default=False, init=False)
    _parked: bool = attrs.field(default=False, init=False)
    _early_sync: tuple[int, int] | None = attrs.field(default=None, init=False)
    """A sync :meth:`start_sync` started: the ring's token and the ``committed`` it covers."""

    @classmethod
    def open(
        cls,
        path: Path,
        size: int,
        *,
        create: bool,
        use_mmap_writes: bool = False,
        stage_writes: bool = False,
        start: int | None = None,
        sparse: bool = False,
        budget: OpenFileBudget | None = None,
    ) -> MappedFile:
        """Open (or create, allocating ``size`` bytes) and map the file.

        Space is really allocated (``posix_fallocate``): writing into a hole of a mapped file on
        a full disk kills the process with SIGBUS, allocation fails with ENOSPC instead. A
        ``sparse`` file (consume queues: thousands of queues must not each reserve megabytes) is
        only sized; its writer allocates each range with :meth:`allocate_to` before writing, and
        writes with ``pwrite`` (never through the mapping), so a full disk is still an ENOSPC,
        never a SIGBUS. ``start`` defaults to the offset in the file's 20-digit name. With a
        ``budget`` the file may be parked (closed) while unused and is reopened on demand. A
        sparse file is not mapped at all: it is read with ``pread``.

        :raises OSError: with the path in the message, e.g. ENOSPC while allocating.
        """
        start = int(path.name) if start is None else start
        if sparse and (use_mmap_writes or stage_writes):
            raise ValueError(f"{path}: a sparse file is written with pwrite only")
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        fd = os.open(path, flags, 0o644)
        try:
            current = os.fstat(fd).st_size
            if current < size:
                if not create:
                    log.warning("%s is %d bytes, shorter than %d; extending", path, current, size)
                if sparse:
                    os.ftruncate(fd, size)
                else:
                    os.posix_fallocate(fd, 0, size)
            mapping = (
                None if sparse else mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            )
        except BaseException:
            os.close(fd)
            if create:
                # Never leave a half-created file behind: the next start would refuse it.
                path.unlink(missing_ok=True)
            raise
        mapped = cls(
            path=path, start=start, size=size, use_mmap_writes=use_mmap_writes, stage_writes=stage_writes
        )
        mapped.allocated = 0 if sparse else size
        mapped.sparse = sparse
        mapped._fd = fd
        mapped._map = mapping
        mapped.budget = budget
        if budget is not None:
            budget.opened(mapped)
        return mapped

    @classmethod
    def parked(cls, path: Path, size: int, *, sparse: bool, budget: OpenFileBudget) -> MappedFile:
        """An existing sparse file of ``size`` bytes, not opened until its first use."""
        if not sparse:
            raise ValueError(f"{path}: only sparse (consume-queue) files are parked")
        mapped = cls(path=path, start=int(path.name), size=size, sparse=True)
        mapped.budget = budget
        mapped._parked = True
        return mapped

    def park(self) -> bool:
        """Close the descriptor until the next use (see :mod:`.open_files`); whether it was
        parked (not while held by a flush; only sparse files, which are never mapped)."""
        if self._refs or self._fd < 0 or not self.sparse:
            return False
        os.close(self._fd)
        self._fd = -1
        self._parked = True
        return True

    def _in_use(self) -> None:
        """Reopen a parked file (only consume-queue files are parked, and they are never
        mapped: reopening is one ``open``); tell the budget it is the most recent."""
        if self._parked:
            self._fd = os.open(self.path, os.O_RDWR)
            self._parked = False
            assert self.budget is not None
            self.budget.opened(self)
        elif self.budget is not None:
            self.budget.touched(self)

    @property
    def end(self) -> int:
        """Global offset just past the file."""
        return self.start + self.size

    @property
    def free(self) -> int:
        return self.size - self.wrote

    @property
    def buffer(self) -> mmap.mmap:
        if self.sparse:
            raise ValueError(f"{self.path} is not mapped (a sparse file): read it with read()")
        if self._map is None:
            raise ValueError(f"{self.path} is closed")
        return self._map

    @property
    def committed(self) -> int:
        """Bytes in the file (readable through the mapping); ``wrote`` unless writes are staged."""
        return self._committed if self.stage_writes else self.wrote

    def set_positions(self, position: int) -> None:
        """Everything up to ``position`` is written, committed and flushed (load, recovery)."""
        self._stop_warming(closing=False)
        self.wrote = self.flushed = self._committed = position
        self._staged = bytearray()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Append ``data`` at ``wrote``; the caller checked it fits."""
        job = self.warming
        if job is not None and self.wrote + len(data) > job.position and not job.stopped:
            job.halt()
        if self.stage_writes:
            if not self._staged:
                self._staged_at = self.wrote
            self._staged += data
        elif self.use_mmap_writes:
            self.buffer[self.wrote : self.wrote + len(data)] = data
        else:
            self._in_use()
            written = os.pwrite(self._fd, data, self.wrote)
            if written != len(data):
                raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")
        self.wrote += len(data)

    def allocate_to(self, position: int) -> None:
        """Give ``[allocated, position)`` disk space (rounded up to a page), so that writing it
        cannot fail for want of space.

        :raises OSError: ENOSPC (nothing is allocated then) and the like.
        """
        if position <= self.allocated:
            return
        end = min(self.size, -(-position // PAGE_SIZE) * PAGE_SIZE)
        self._in_use()
        os.posix_fallocate(self._fd, self.allocated, end - self.allocated)
        self.allocated = end

    def write_zeros(self, position: int, zeros: bytes) -> bool:
        """Write ``zeros`` at ``position`` (the warmer's thread, under its job's write lock);
        False when the file is closed.

        :raises OSError: as ``pwrite``.
        """
        fd = self._fd
        if fd < 0 or self._destroy_pending:
            return False
        written = os.pwrite(fd, zeros, position)
        if written != len(zeros):
            raise OSError(f"short write of zeros to {self.path}: {written} of {len(zeros)} bytes")
        return True

    def datasync(self) -> None:
        """``fdatasync`` the file if open (the warmer's thread, under its job's sync lock)."""
        if self._fd >= 0:
            os.fdatasync(self._fd)

    def _stop_warming(self, *, closing: bool = True) -> None:
        """Halt the warming job, if any: it ends after the chunk in progress and never writes
        into the file again; ``closing``: nor calls anything on its descriptor (waits for the
        warmer's ``fdatasync`` in progress: the file is about to be closed)."""
        job = self.warming
        if job is not None:
            job.halt(closing=closing)

    def fill_to_end(self) -> None:
        """Mark the file full after its end-of-file record (the rest is allocated zeros)."""
        self.wrote = self.size

    def take_staged(self) -> tuple[int, bytearray, int] | None:
        """Hand the staged bytes to a commit: (file position, bytes, position after them).

        Runs on the event loop; appends that follow go to a fresh staging buffer, so the commit
        can write in a worker thread while appends continue.
        """
        if self.committed >= self.wrote or not self._staged:
            return None
        taken, self._staged = self._staged, bytearray()
        return self._staged_at, taken, self.wrote

    def commit_blocking(self, position: int, data: bytearray) -> None:
        """Write staged bytes into the file (worker thread); :meth:`end_commit` follows on the
        event loop once this returned.

        :raises OSError: naming the file; nothing counts as committed.
        """
        job = self.warming
        if job is not None and position + len(data) > job.position and not job.stopped:
            job.halt()
        view = memoryview(data)
        while view:
            written = os.pwrite(self._fd, view, position)
            if written <= 0:
                raise OSError(f"short write to {self.path} at {position}")
            view = view[written:]
            position += written

    def end_commit(self, end: int) -> None:
        self._committed = max(self._committed, end)

    def read(self, position: int, size: int) -> bytes:
        if not self.sparse:
            return self.buffer[position : position + size]
        self._in_use()
        if self._fd < 0:
            raise ValueError(f"{self.path} is closed")
        data = os.pread(self._fd, size, position)
        if len(data) != size:
            raise OSError(f"short read of {self.path} at {position}: {len(data)} of {size} bytes")
        return data

    def flush_blocking(self) -> int:
        """Make ``[flushed, wrote)`` durable; runs in a worker thread. Returns the new ``flushed``.

        The position moves only when the OS reported success.
        """
        target = self.committed
        if target <= self.flushed:
            return self.flushed
        if self.use_mmap_writes:
            begin = (self.flushed // PAGE_SIZE) * PAGE_SIZE
            assert self._map is not None, "flushed while closed"  # held: never parked meanwhile
            self._map.flush(begin, target - begin)
        else:
            os.fdatasync(self._fd)
        self.flushed = target
        return target

    def start_sync(self, ring: Ring) -> bool:
        """Start the ``fdatasync`` of ``[flushed, committed)`` on ``ring`` without waiting;
        :meth:`flush_through` waits for it. The file is held (its descriptor stays open) until
        then. False, with nothing started, when there is nothing to sync, the file is written
        through its mapping (``msync``), a sync is already started, or the ring is busy."""
        target = self.committed
        if target <= self.flushed or self.use_mmap_writes or self._early_sync is not None:
            return False
        if not self.hold():
            return False
        token = ring.start(RingOp.datasync(self._fd))
        if token is None:
            self.release()
            return False
        self._early_sync = (token, target)
        return True

    async def flush_through(self, ring: Ring, meanwhile: Callable[[], object] | None = None) -> int:
        """:meth:`flush_blocking` for a file written with ``pwrite``, its ``fdatasync``
        submitted to ``ring`` on the event loop (held by the caller meanwhile); ``meanwhile``
        runs while the sync does (:meth:`Ring.run`). A sync :meth:`start_sync` started is
        waited for first (``meanwhile`` runs during it); bytes written after it began get a
        sync of their own.

        :raises OSError: the sync's error; ``flushed`` stays.
        """
        early = self._early_sync
        if early is not None:
            self._early_sync = None
            try:
                await ring.finish(early[0], meanwhile)
            finally:
                self.release()
            self.flushed = max(self.flushed, early[1])
            meanwhile = None
        target = self.committed
        if target <= self.flushed:
            return self.flushed
        if self.use_mmap_writes:
            raise ValueError(f"{self.path} is written through its mapping: msync, not fdatasync")
        await ring.datasync(self._fd, meanwhile)
        self.flushed = max(self.flushed, target)
        return self.flushed

    def hold(self) -> bool:
        """Keep the file open (and never parked) until :meth:`release`: a flush in a worker
        thread uses it. False when it is closed for good or being deleted."""
        if self._destroy_pending or (self._fd < 0 and not self._parked):
            return False
        self._in_use()
        self._refs += 1
        return True

    def release(self) -> None:
        self._refs -= 1
        if self._refs == 0 and self._destroy_pending:
            self._close()
            self.path.unlink(missing_ok=True)

    def close(self) -> None:
        """Unmap and close (shutdown). Unwritten space stays allocated, as in RocketMQ."""
        self._stop_warming()
        if self._refs:
            self._destroy_pending = False
            log.warning("%s closed while held %d times", self.path, self._refs)
        self._close()

    def destroy(self) -> None:
        """Delete the file once nobody holds it (immediately if nobody does)."""
        self._stop_warming()
        self._destroy_pending = True
        if self._refs == 0:
            self._close()
            self.path.unlink(missing_ok=True)

    def _close(self) -> None:
        self._parked = False
        if self.budget is not None:
            self.budget.forget(self)
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
