"""store_mmap: RocketMQ's commit log and consume queues as a Trocket store plugin.

Registers the ``"mmap"`` store (``[broker] store = "mmap"``) and the ``[store_mmap]`` table.
"""

from __future__ import annotations

from kernel import ConfigSection, StoreProvider, hookimpl
from plugins.store_mmap.config import StoreMmapConfig
from plugins.store_mmap.store import open_mmap_store


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("store_mmap", StoreMmapConfig)]


@hookimpl
def trocket_register_stores() -> list[StoreProvider]:
    return [
        StoreProvider(
            "mmap",
            open_mmap_store,
            "RocketMQ 4.x commit log + consume queues on memory-mapped files",
        )
    ]
