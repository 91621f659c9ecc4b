"""Zeros written into commit-log files ahead of the appends (RocketMQ's ``warmMapedFileEnable``).

Why: a file is allocated with ``posix_fallocate``, whose extents are *unwritten*: the first
write into each block has to turn it into a written one, and a flush then commits that change
to the file system's journal besides writing the data. On this project's machines that made a
sync flush of three pages take 230 µs where the same flush into blocks written before took
140 µs, and a batch of 32 messages under sync flush 0.67 ms where it took 0.55 ms (1 KiB
bodies: 43-46k against 55-60k messages a second; docs/performance.md, eleventh step). A
flush of one page gains nothing. The price is each byte of the log written twice, once as
zeros, which is why RocketMQ leaves it off by default and so does Trocket
(``[store_mmap] warm_mapped_file``).

How: at a restart, before the broker serves, the active file is warmed from a chunk past its
end (0.9 s for 512 MiB here). Otherwise one daemon thread warms every file the log creates (a
new store's first one from a chunk in; the log keeps one file ready after the one appends go
to, :attr:`~plugins.store_mmap.mapped_file_queue.MappedFileQueue.prepare_ahead`: made with
the first append's file or at the restart, and at each roll the one after, so the warmer has
a whole file's life for it; a file made only when appends reached it was appended to unwarmed,
and one send in flight with sync flush ran 10-20 % slower through all of it,
docs/performance.md, twenty-eighth step), a chunk at a time, each made durable at once and
followed by a pause: a sync flush that meets a chunk waits for it (its fsync shares the
file system's journal), so the thread keeps to a twentieth of the disk's time while the appends
are more than half a file behind the job (the file ahead of a log that is filling slowly: one
send in flight with sync flush ran 4 % slower meanwhile, its p90 unchanged), and to a quarter
once they come closer (a new store's first file, a log filling fast: 18-25 % slower meanwhile,
its p90 twice as long; docs/performance.md, twenty-eighth step), at 0.3 ms a chunk; a GiB
takes about 5 s at the quick pace. Appends never wait for it, and it never
writes where an append has begun: :meth:`WarmJob.halt` (called by
:class:`~plugins.store_mmap.mapped_file.MappedFile` before any write that would reach the
range not yet warmed) stops the job once the chunk being written is in the page cache, never
waiting for the disk, and what was not warmed is simply flushed the slower way. Zeros are what
an allocated file holds anyway, so a crash while warming changes nothing recovery sees. Files
written through the mapping (``write_path = "mmap"``) are not warmed: there the flush of a
warmed file measured slower, not faster.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from kernel.context import StashKey

if TYPE_CHECKING:
    from plugins.store_mmap.mapped_file import MappedFile

log = logging.getLogger(__name__)

CHUNK = 256 << 10
"""Bytes of zeros written and made durable at a time (a sync flush's worst extra wait: 0.3 ms
here)."""
PAUSE = 3.0
"""After each chunk the background thread pauses this many times the chunk's duration while
the appends are near (see :data:`GENTLE_PAUSE`)."""
GENTLE_PAUSE = 19.0
"""... and this many times while they are more than half a file behind the job's position."""
MARGIN = CHUNK
"""At start, warming of the active file begins this far past its end (rounded to a chunk)."""
_ZEROS = bytes(CHUNK)


class WarmJob:
    """Zeros for one file from ``position`` on. ``position`` only grows: it is the lowest
    offset in the file the warmer may still write, so a write ending at or below it never
    meets the warmer.

    Two locks: one around each chunk's ``pwrite`` (page cache only, so an append that halts
    the job waits for at most that, never for the disk: a stalled disk must not stall the
    event loop, as :mod:`plugins.store_mmap.flush_thread` promises), one around each
    ``fdatasync``, which only closing the file waits for (its descriptor must outlive the call).
    """

    __slots__ = ("_lock", "_stopped", "_sync_lock", "mapped", "position")

    def __init__(self, mapped: MappedFile, position: int) -> None:
        self.mapped = mapped
        self.position = position
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._stopped = False

    @property
    def stopped(self) -> bool:
        return self._stopped

    def halt(self, *, closing: bool = False) -> None:
        """Stop the job; returns once the warmer wrote its last zeros (at most the chunk in
        progress), and with ``closing`` also once its last ``fdatasync`` returned (the file is
        about to be closed). Any thread; idempotent."""
        self._stopped = True
        with self._lock:
            pass
        if closing:
            with self._sync_lock:
                pass

    def run(
        self, closing: threading.Event, pause: float = 0.0, appends_at: Callable[[], int] | None = None
    ) -> int:
        """Warm until the file's end, a halt or ``closing``, pausing ``pause`` times each
        chunk's duration after it, or :data:`GENTLE_PAUSE` times while ``appends_at()`` (the
        log's end, a global offset) is more than half a file behind; the bytes warmed (a thread
        other than the event loop).

        :raises OSError: from the writes (the caller logs it; appends are not affected).
        """
        mapped = self.mapped
        warmed = 0
        while True:
            started = time.monotonic()
            with self._lock:
                if self._stopped or closing.is_set() or self.position >= mapped.size:
                    break
                size = min(CHUNK, mapped.size - self.position)
                if not mapped.write_zeros(self.position, _ZEROS[:size]):
                    break  # closed meanwhile
                self.position += size
            warmed += size
            with self._sync_lock:
                if self._stopped:
                    break  # halted: its last chunk need not be durable, and the file may close
                mapped.datasync()
            if pause:
                factor = pause if appends_at is None or self.near(appends_at()) else GENTLE_PAUSE
                closing.wait((time.monotonic() - started) * factor)
        return warmed

    def near(self, appends_at: int) -> bool:
        """Whether the appends (the log's end ``appends_at``, a global offset) are within half
        a file of what this job has still to warm."""
        mapped = self.mapped
        return mapped.start + self.position - appends_at <= mapped.size // 2


WARMER = StashKey["FileWarmer"]("store_mmap.warmer")
"""The store's warmer, for its runtime figures (set while ``warm_mapped_file`` is on)."""


@attrs.frozen
class WarmStatistics:
    files: int
    """Files warmed to their end."""
    halted: int
    """Jobs stopped early because appends reached them (or the store closed)."""
    bytes: int
    """Bytes of zeros written."""
    pending: int
    """Jobs waiting or in progress."""
    near: int = 0
    """Of those, jobs the appends are within half a file of: warmed at the quick pace
    (:data:`PAUSE`), which a sync flush feels (the rest go at :data:`GENTLE_PAUSE`)."""

    def figures(self) -> dict[str, str]:
        """The broker runtime figures (``brokerStatus``) of warming."""
        return {
            "warmMappedFiles": str(self.files),
            "warmMappedHalted": str(self.halted),
            "warmMappedBytes": str(self.bytes),
            "warmMappedPending": str(self.pending),
            "warmMappedNear": str(self.near),
        }


class FileWarmer:
    """The warming thread (see the module docstring); started on the first :meth:`warm`."""

    def __init__(self, name: str = "trocket-warm", appends_at: Callable[[], int] | None = None) -> None:
        self._name = name
        self._appends_at = appends_at
        """The log's end (a global offset; read from the warming thread): the pace follows how
        far the appends are behind a job (see :data:`GENTLE_PAUSE`). None: always :data:`PAUSE`."""
        self._jobs: queue.SimpleQueue[WarmJob | None] = queue.SimpleQueue()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._counts = threading.Lock()
        """Guards the counts below (the event loop, the background thread and a ``warm_now``
        thread)."""
        self._pending: list[WarmJob] = []
        """The background thread's jobs queued and not finished yet."""
        self._files = 0
        self._halted = 0
        self._bytes = 0

    def warm_now(self, mapped: MappedFile, start: int = 0) -> int:
        """Warm ``mapped`` from ``start`` (rounded up to a chunk) at full speed, in the calling
        thread (at start, before the broker serves: never the event loop); the bytes warmed.

        :raises OSError: from the writes.
        """
        job = self._job(mapped, start)
        if job is None:
            return 0
        warmed = 0
        try:
            warmed = job.run(self._closing)
        finally:
            self._done(job, warmed)
        return warmed

    def warm(self, mapped: MappedFile, start: int = 0) -> WarmJob | None:
        """Queue zeros for ``mapped`` from ``start`` (rounded up to a chunk) to its end for the
        background thread; None when there is nothing to do (a mapped write path, a sparse
        file, nothing left)."""
        job = self._job(mapped, start)
        if job is None:
            return None
        with self._counts:
            self._pending.append(job)
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
            self._thread.start()
        self._jobs.put(job)
        return job

    def _job(self, mapped: MappedFile, start: int) -> WarmJob | None:
        position = -(-start // CHUNK) * CHUNK
        if mapped.use_mmap_writes or mapped.sparse or position >= mapped.size or self._closing.is_set():
            return None
        job = WarmJob(mapped, position)
        mapped.warming = job
        return job

    def close(self) -> None:
        """Stop warming (the chunk in progress ends first) and the thread."""
        self._closing.set()
        self._jobs.put(None)
        if self._thread is not None:
            self._thread.join(timeout=30)

    def statistics(self) -> WarmStatistics:
        with self._counts:
            pending = list(self._pending)
        appends_at = self._appends_at
        near = len(pending) if appends_at is None else sum(job.near(appends_at()) for job in pending)
        return WarmStatistics(self._files, self._halted, self._bytes, len(pending), near)

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            warmed = 0
            try:
                warmed = job.run(self._closing, PAUSE, self._appends_at)
            except Exception:  # noqa: BLE001 (a file left unwarmed is only slower; appends go on)
                log.exception("warming %s stopped", job.mapped.path)
            self._done(job, warmed)
            with self._counts:
                self._pending.remove(job)

    def _done(self, job: WarmJob, warmed: int) -> None:
        """Count a finished job and detach it from its file."""
        complete = job.position >= job.mapped.size
        with self._counts:
            self._bytes += warmed
            self._files += complete
            self._halted += not complete
        if complete:
            log.info("warmed %s", job.mapped.path)
        if job.mapped.warming is job:
            job.mapped.warming = None


__all__ = ["CHUNK", "GENTLE_PAUSE", "MARGIN", "PAUSE", "WARMER", "FileWarmer", "WarmJob", "WarmStatistics"]
