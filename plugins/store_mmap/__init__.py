"""store_mmap: RocketMQ's commit log and consume queues as a Trocket store plugin.

Registers the ``"mmap"`` store (``[broker] store = "mmap"``) and the ``[store_mmap]`` table.
"""

from __future__ import annotations

from kernel import ConfigSection, StoreProvider, hookimpl
from kernel.context import BrokerContext
from plugins.store_mmap.config import PROPERTIES, StoreMmapConfig
from plugins.store_mmap.index_file import IndexFile
from plugins.store_mmap.ring_sync import SYNC_RING, Ring
from plugins.store_mmap.store import open_mmap_store
from plugins.store_mmap.warm import WARMER


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("store_mmap", StoreMmapConfig, PROPERTIES)]


@hookimpl
def trocket_register_stores() -> list[StoreProvider]:
    return [
        StoreProvider(
            "mmap",
            open_mmap_store,
            "RocketMQ 4.x commit log + consume queues on memory-mapped files",
            disk_reservation,
        )
    ]


@hookimpl
def trocket_runtime_figures(ctx: BrokerContext) -> dict[str, str]:
    warmer = ctx.stash.get(WARMER, None)
    figures = warmer.statistics().figures() if warmer is not None else {}
    ring = ctx.stash.get(SYNC_RING, False)  # False: no mmap store was opened
    if isinstance(ring, Ring):
        figures["commitLogSyncWith"] = "io_uring"
        figures.update(ring.figures())
    elif ring is None:
        figures["commitLogSyncWith"] = "thread"
    return figures


def disk_reservation(ctx: BrokerContext) -> dict[str, str]:
    """What the store allocates on disk (files are allocated in full when created, never
    sparse), so a newcomer knows what ``trocket up`` takes before writing anything."""
    config = ctx.plugin_config(StoreMmapConfig)
    index = IndexFile.size_for(config.index_hash_slots, config.index_max_entries)
    figures = {
        "commit log file": _mib(config.commit_log_file_size),
        "consume queue file": _mib(config.consume_queue_file_size) + " per queue",
    }
    if config.message_index_enable:
        figures["index file"] = _mib(index)
    first = config.commit_log_file_size + (index if config.message_index_enable else 0)
    figures["reserved at start"] = _mib(first) + " + one consume queue file per queue written"
    if config.warm_mapped_file:
        figures["log files warmed with zeros ahead of the appends"] = "(warm_mapped_file: written twice)"
    return figures


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"
