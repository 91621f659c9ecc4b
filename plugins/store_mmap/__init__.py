"""store_mmap: RocketMQ's commit log and consume queues as a Trocket store plugin.

Registers the ``"mmap"`` store (``[broker] store = "mmap"``) and the ``[store_mmap]`` table.
"""

from __future__ import annotations

from kernel import BrokerContext, ConfigSection, Phase, ServiceSpec, StoreProvider, hookimpl
from kernel.context import BrokerRuntime
from plugins.store_mmap.config import StoreMmapConfig
from plugins.store_mmap.retention import RetentionService
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


@hookimpl
def trocket_register_services(ctx: BrokerContext) -> list[ServiceSpec]:
    if ctx.broker.store != "mmap":
        return []
    config = ctx.plugin_config(StoreMmapConfig)

    def make(runtime: BrokerRuntime) -> RetentionService:
        return RetentionService(runtime.store, config)

    return [ServiceSpec("store_mmap.retention", Phase.DERIVED, make)]
