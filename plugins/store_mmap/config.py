"""``[store_mmap]``: file sizes, paths, write path and retention settings of the mmap store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from kernel.config import fields
from kernel.config import property_aliases as rocketmq

CQ_ENTRY_SIZE = 20


def _multiple_of_entry(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value % CQ_ENTRY_SIZE:
        raise ValueError(
            f"expected a multiple of {CQ_ENTRY_SIZE} bytes (one consume-queue entry), got {value}"
        )


@attrs.frozen(kw_only=True)
class StoreMmapConfig:
    commit_log_dir: Path | None = fields.path(None)
    """``storePathCommitLog``; default ``<data_dir>/commitlog``."""
    commit_log_file_size: int = fields.size("1GiB", minimum=4096)
    """``mapedFileSizeCommitLog``: bytes per commit-log file."""
    consume_queue_file_size: int = attrs.field(
        default=300_000 * CQ_ENTRY_SIZE,
        converter=fields.size(0, minimum=CQ_ENTRY_SIZE).converter,  # type: ignore[misc]
        validator=_multiple_of_entry,
    )
    """``mapedFileSizeConsumeQueue``: bytes per consume-queue file (300 000 entries by default)."""
    write_path: str = fields.choice("pwrite", ("pwrite", "mmap", "buffered"))
    """``pwrite``: each batch is encoded into a buffer and written with one ``pwrite``, flushed
    with ``fdatasync``. ``mmap``: bytes are copied into the mapping and flushed with ``msync``.
    ``buffered`` (``transientStorePoolEnable``): batches are staged in memory and written by a
    commit (the flush policy's commit loop, or any flush); they become visible to consumers
    only then, and a process crash loses staged bytes even if acknowledged under async flush.
    All are read through the mapping. See bench/store_append.py for the measured choice."""
    sync_with: str = fields.choice("auto", ("auto", "io_uring", "thread"))
    """How the commit log's ``fdatasync`` is waited for (``write_path`` ``pwrite`` and
    ``buffered``; ``mmap``'s ``msync`` always uses the thread). ``io_uring``: submitted to the
    kernel's io_uring and waited for in the same system call, no thread of ours woken (a lone
    sync put's flush 35-45 µs sooner here; :mod:`plugins.store_mmap.ring_sync`); start fails
    where the kernel refuses it. ``thread``: the store's flush thread. ``auto``: io_uring where
    it is available (x86-64, Linux 5.11 or later, not refused by a seccomp policy or
    ``kernel.io_uring_disabled``), else the thread; the start-up summary says which."""
    sync_wait: str = fields.choice("spin", ("spin", "sleep"))
    """How the event loop blocks for an io_uring sync (up to the 1 ms block limit either
    way): ``spin`` looks at the ring's completion queue, yielding its CPU between looks, for
    a put its front end marks alone (a lone sync put 8 % faster here, p99 18 % lower, for
    7-14 % more broker CPU), and sleeps for other puts, whose connections' work wants the CPU;
    ``sleep`` always sleeps in ``io_uring_enter`` (:mod:`plugins.store_mmap.ring_sync`)."""
    warm_mapped_file: bool = fields.boolean(False)
    """``warmMapedFileEnable``: write zeros into each commit-log file ahead of the appends
    (a background thread), so a flush writes data into blocks written before instead of
    converting fresh ones: sync-flush batches 20-30 % faster here, at the price of writing the
    log twice (``plugins.store_mmap.warm``). Not with ``write_path = "mmap"``."""
    max_open_queue_files: int = fields.integer(0, minimum=0)
    """Consume-queue files open at once at most (each holds one file descriptor); the least
    recently used are closed and reopened on their next use. 0: 1,024, or a quarter of the
    process's open-files limit (which the broker raises to the hard limit at start) if that is
    smaller."""
    pooled_queue_entries: int = fields.integer(204, minimum=0, maximum=100_000)
    """A queue's first entries (up to this many) are held in memory and journaled together
    with every other small queue's in ``consumequeue_pool/``, so a queue with a few messages
    costs no file, no descriptor and no 4 KiB block; past it the queue gets its own files in
    RocketMQ's layout. 204 entries fill one 4 KiB page. 0: every queue has its own files from
    its first message, as in RocketMQ."""
    queue_pool_memory: int = fields.size("64MiB", minimum=0)
    """Entry bytes the pool holds at most (20 per message); beyond it the queues holding the
    most get their own files."""
    flush_consume_queue_least_pages: int = fields.integer(2, minimum=0)
    """``flushConsumeQueueLeastPages``: a periodic persist flushes a consume-queue file once this
    many 4 KiB pages are dirty (a thorough persist flushes all; see ``[broker]``
    ``view_persist_interval`` and ``view_persist_thorough_interval``)."""
    message_index_enable: bool = fields.boolean(True)
    """``messageIndexEnable``: build the key index (queries by key and unique key)."""
    index_hash_slots: int = fields.integer(5_000_000, minimum=1)
    """``maxHashSlotNum``: hash slots per index file."""
    index_max_entries: int = fields.integer(20_000_000, minimum=2)
    """``maxIndexNum``: entries per index file; a full file is followed by a new one."""
    check_crc_on_recover: bool = fields.boolean(True)
    """``checkCRCOnRecover``: verify body CRCs while scanning the log at recovery."""
    delete_when: str = fields.string("04")
    """``deleteWhen``: hours (``04`` or ``04;16``) at which expired files are deleted."""
    file_reserved_time: float = fields.duration("72h")
    """``fileReservedTime``: commit-log files older than this are expired."""
    disk_max_used_space_ratio: int = fields.ratio_percent(75, minimum=10, maximum=95)
    """``diskMaxUsedSpaceRatio``: above this disk use, expired files are deleted at any hour."""
    disk_space_clean_forcibly_ratio: int = fields.ratio_percent(85, minimum=10, maximum=100)
    """Above this disk use, files are deleted even before they expire (never the active one)."""
    clean_file_forcibly_enable: bool = fields.boolean(True)
    """``cleanFileForciblyEnable``."""
    disk_space_warning_level_ratio: int = fields.ratio_percent(90, minimum=1, maximum=100)
    """Above this disk use, writes are refused ("disk full") until space is freed; reads go on."""
    clean_interval: float = fields.duration("10s")
    """``cleanResourceInterval``: how often retention and the disk checks run."""
    delete_files_per_run: int = fields.integer(10, minimum=1)
    """Commit-log files deleted per retention run at most."""


def _write_path(value: str) -> str:
    return "buffered" if rocketmq.boolean(value) else "pwrite"


_QUEUE_FILE_SIZE = "bytes (a multiple of 20)"
PROPERTIES = {
    "storePathCommitLog": rocketmq.PropertyAlias("commit_log_dir", rocketmq.text, "a directory"),
    "mapedFileSizeCommitLog": rocketmq.integer_alias("commit_log_file_size", "bytes"),
    "mappedFileSizeCommitLog": rocketmq.integer_alias("commit_log_file_size", "bytes"),
    "mapedFileSizeConsumeQueue": rocketmq.integer_alias("consume_queue_file_size", _QUEUE_FILE_SIZE),
    "mappedFileSizeConsumeQueue": rocketmq.integer_alias("consume_queue_file_size", _QUEUE_FILE_SIZE),
    "deleteWhen": rocketmq.PropertyAlias("delete_when", rocketmq.text, "hours such as 04 or 04;16"),
    "fileReservedTime": rocketmq.PropertyAlias("file_reserved_time", rocketmq.hours, "hours"),
    "diskMaxUsedSpaceRatio": rocketmq.integer_alias("disk_max_used_space_ratio", "a percentage"),
    "transientStorePoolEnable": rocketmq.PropertyAlias(
        "write_path", _write_path, "true (buffered writes) or false"
    ),
    "flushConsumeQueueLeastPages": rocketmq.integer_alias("flush_consume_queue_least_pages", "pages"),
    "warmMapedFileEnable": rocketmq.boolean_alias("warm_mapped_file"),
    "warmMappedFileEnable": rocketmq.boolean_alias("warm_mapped_file"),
}
"""The RocketMQ ``broker.properties`` keys of ``[store_mmap]``."""


def small_image_table(**overrides: Any) -> dict[str, Any]:
    """A ``[store_mmap]`` table for a store that must fit an image of a few hundred MiB (the
    power-cut runs of ``kernel.testing.power_cut``): 1 MiB commit-log files, a small index,
    forced cleaning off; ``overrides`` win."""
    return {
        "commit_log_file_size": "1MiB",
        "consume_queue_file_size": 200_000,
        "index_hash_slots": 10_000,
        "index_max_entries": 100_000,
        "clean_file_forcibly_enable": False,
        **overrides,
    }
