"""Recovery: find the valid end of the commit log, repair the consume queues, and decide where
the dispatch loop resumes.

* Normal (clean stop): scan the last three files (and from the dispatch checkpoint if that is
  earlier), validating magic, lengths and CRC.
* Abnormal (abort marker present): scan from the file holding the checkpoint's dispatch
  offset; a missing or zeroed checkpoint means a full scan from the first file.
* Either way: the log is truncated at the first invalid record (a torn tail is never served),
  consume-queue entries beyond the log end are dropped, queue offsets for new appends are
  rebuilt, and missing consume-queue entries are re-dispatched by the kernel's dispatch loop
  (deleted queues trigger a rebuild from the first log file).
"""

from __future__ import annotations

import logging
import mmap
import time
from collections.abc import Callable

import attrs

from kernel.model import RecoveryReport
from plugins.store_mmap.checkpoint import Checkpoint
from plugins.store_mmap.commit_log import END_FILE_MIN_BLANK_LENGTH, CommitLog
from plugins.store_mmap.consume_queue import ConsumeQueues
from plugins.store_mmap.index_file import IndexService
from wire import record
from wire.record_run import RecordRun, check_run

log = logging.getLogger(__name__)

PROGRESS_EVERY = 256 * 1024 * 1024


@attrs.define
class ScanResult:
    end: int
    records: int = 0
    max_queue_offsets: dict[tuple[str, int], int] = attrs.field(factory=dict)
    first_queue_offsets: dict[tuple[str, int], int] = attrs.field(factory=dict)
    invalid: str = ""
    truncated_bytes: int = 0


RUN_BYTES = 32 << 20
"""Log bytes validated per :func:`wire.record_run.check_run` call (bounds the scan's memory
and paces progress)."""


def scan_log(
    commit_log: CommitLog, start: int, *, check_crc: bool, progress: Callable[[int, int], None]
) -> ScanResult:
    """Validate records from ``start`` (a file start) to the first invalid one.

    Records are validated in runs by :func:`wire.record_run.check_run` (the checks of
    :func:`wire.record.check_header`, vectorized), file by file, without per-record file
    lookups; the queue bookkeeping is done per run with numpy too.
    """
    files = commit_log.files
    result = ScanResult(end=start)
    if not files.files:
        return result
    last_end = files.files[-1].end
    next_progress = start + PROGRESS_EVERY
    at = start
    while at < last_end:
        mapped = files.find(at)
        position = at - mapped.start
        stop = False
        # Ask the kernel to read the file ahead: faulting 4 KiB pages in one by one costs more
        # than checking the records on them.
        mapped.buffer.madvise(mmap.MADV_WILLNEED, position - position % mmap.PAGESIZE)
        while position + END_FILE_MIN_BLANK_LENGTH <= mapped.size:
            run = check_run(
                mapped.buffer,
                position,
                mapped.size,
                base=mapped.start,
                check_crc=check_crc,
                max_bytes=RUN_BYTES,
                follows=result.max_queue_offsets,
            )
            _note_queue_offsets(run, result)
            position = run.end
            if run.error is not None:
                size, magic = record.read_size_magic(mapped.buffer, position)
                if magic == record.MAGIC_BLANK or (size == 0 and magic == 0):
                    # The file's BLANK filler, or never-written zeros: the end of the log.
                    stop = magic != record.MAGIC_BLANK
                    break
                result.invalid = f"{mapped.path.name} offset {mapped.start + position}: {run.error.reason}"
                tail = bytes(mapped.buffer[position : min(mapped.size, position + (1 << 20))]).rstrip(b"\0")
                result.truncated_bytes = len(tail)
                stop = True
                break
            if run.end + END_FILE_MIN_BLANK_LENGTH > mapped.size:
                break
            if mapped.start + position >= next_progress:
                progress(mapped.start + position - start, last_end - start)
                next_progress = mapped.start + position + PROGRESS_EVERY
        at = mapped.start + position
        if stop:
            break
        at = mapped.end
        if at >= next_progress:
            progress(at - start, last_end - start)
            next_progress = at + PROGRESS_EVERY
    result.end = min(at, last_end)
    return result


def _note_queue_offsets(run: RecordRun, result: ScanResult) -> None:
    result.records += run.count
    for queue, span in run.queues.items():
        result.first_queue_offsets.setdefault(queue, span.first_offset)
        result.max_queue_offsets[queue] = span.last_offset


def recover_store(
    commit_log: CommitLog,
    queues: ConsumeQueues,
    checkpoint: Checkpoint,
    *,
    clean_shutdown: bool,
    check_crc: bool,
    index: IndexService | None = None,
) -> RecoveryReport:
    started = time.monotonic()
    files = commit_log.files
    notes: list[str] = []

    def progress(done: int, total: int) -> None:
        log.info("recovery: scanned %d of %d MiB", done >> 20, total >> 20)

    if not files.files:
        if queues.queues:
            notes.append(f"no commit-log files: destroyed {len(queues.queues)} consume queues")
            queues.destroy_all()
        queues.set_dispatched(0)
        if index is not None:
            index.drop_beyond(0)
            index.set_dispatched(0)
        return RecoveryReport(clean_shutdown, 0, 0, notes=tuple(notes))

    log_min = files.min_offset
    last_end = files.files[-1].end

    def file_start(offset: int) -> int:
        offset = min(max(offset, log_min), last_end - 1)
        return files.find(offset).start

    if clean_shutdown:
        start = files.files[max(0, len(files.files) - 3)].start
        if not checkpoint.is_zero:
            start = min(start, file_start(checkpoint.dispatched_offset))
    elif checkpoint.is_zero:
        start = log_min
        notes.append("checkpoint missing or zeroed: scanning the whole log")
    else:
        start = file_start(checkpoint.dispatched_offset)

    scan = scan_log(commit_log, start, check_crc=check_crc, progress=progress)
    gap = _queues_missing_entries(queues, scan)
    if (gap or not queues.queues) and start > log_min and scan.records:
        notes.append(
            f"consume queues missing entries ({gap or 'none on disk'}): rebuilding from the first file"
        )
        start = log_min
        scan = scan_log(commit_log, start, check_crc=check_crc, progress=progress)
        gap = gap or "rebuild"
    if scan.invalid:
        notes.append(f"invalid record at {scan.invalid}; log truncated there")

    end = scan.end
    files.truncate(end)
    commit_log.reset_end(end)

    dropped = queues.truncate_beyond(end)
    for queue in queues.queues.values():
        queue.correct_min_offset(log_min)
    if dropped:
        notes.append(f"dropped {dropped} consume-queue entries beyond the log end")

    table = {key: queue.max_queue_offset for key, queue in queues.queues.items()}
    for key, last in scan.max_queue_offsets.items():
        table[key] = max(table.get(key, 0), last + 1)
    commit_log.queue_offsets = table

    # After a clean stop the checkpoint's dispatch offset is exact (written by the final, thorough
    # persist after the last dispatch): resume there and re-dispatch nothing, unless a queue
    # directory was deleted or cut while the broker was down. After a crash,
    # re-dispatch from the scan start at the latest: entries that exist are skipped, and queues
    # deleted while the broker was down are rebuilt (dispatching is idempotent).
    trusted = clean_shutdown and not checkpoint.is_zero and not _queues_behind(queues, scan)
    checkpointed = min(max(checkpoint.dispatched_offset, log_min), end)
    if gap:
        dispatch_from = log_min
    elif trusted:
        dispatch_from = checkpointed
    else:
        dispatch_from = min(checkpointed, start)
    queues.set_dispatched(dispatch_from)
    if index is not None:
        if not clean_shutdown:
            dropped_files = index.drop_newer_than(checkpoint.index_timestamp)
            if dropped_files:
                notes.append(f"dropped {dropped_files} index files newer than the checkpoint; rebuilding")
        index.drop_beyond(end)
        resume = index.resume_offset(log_min)
        # The index is persisted before the queues write the checkpoint, so after a clean stop
        # it covers everything the checkpoint claims, keyed records or not.
        index.set_dispatched(max(resume, dispatch_from) if trusted else resume)
    elapsed = time.monotonic() - started
    notes.append(f"scanned {scan.records} records from offset {start} in {elapsed:.3f}s")
    return RecoveryReport(
        clean_shutdown=clean_shutdown,
        log_min_offset=log_min,
        log_max_offset=end,
        records_scanned=scan.records,
        truncated_bytes=scan.truncated_bytes,
        redispatch_from=dispatch_from,
        notes=tuple(notes),
    )


def _queues_behind(queues: ConsumeQueues, scan: ScanResult) -> bool:
    """Whether a queue holds fewer entries than the scanned log has for it (deleted or cut)."""
    for key, last in scan.max_queue_offsets.items():
        queue = queues.queues.get(key)
        if queue is None or queue.max_queue_offset <= last:
            return True
    return False


def _queues_missing_entries(queues: ConsumeQueues, scan: ScanResult) -> str:
    """Queues that lost entries: a queue whose first record in the scanned range lies beyond its
    end (files deleted at the tail), or before its first entry (files deleted at the head).
    Head-damaged queues are destroyed so the dispatch loop rebuilds them from the log."""
    problems = []
    for key, first in scan.first_queue_offsets.items():
        queue = queues.queues.get(key)
        if queue is None:
            if first > 0:
                problems.append(f"{key[0]}/{key[1]} is missing, the log continues at {first}")
            continue
        if queue.max_queue_offset < first:
            problems.append(
                f"{key[0]}/{key[1]} has {queue.max_queue_offset} entries, the log continues at {first}"
            )
        elif queue.min_queue_offset > first:
            problems.append(f"{key[0]}/{key[1]} starts at {queue.min_queue_offset}, the log has {first}")
            queues.destroy(key)
    return "; ".join(problems)
