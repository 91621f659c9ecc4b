"""Small helpers for tests of the kernel and of plugins."""

from __future__ import annotations

from typing import Any

from kernel.config import Config, config_from_tables
from kernel.context import BrokerContext
from kernel.host import PluginHost
from kernel.protocols import BufferedStore, MessageStore


async def dispatch_all(store: MessageStore) -> None:
    """Feed the store's own dispatchers with everything written (no dispatch service needed);
    a store staging its writes commits them first."""
    if isinstance(store, BufferedStore) and store.stages_writes:
        await store.commit()
    dispatchers = list(store.dispatchers())
    offset = min((d.dispatched_offset() for d in dispatchers), default=0)
    end = store.positions.wrote.value
    while offset < end:
        records, next_offset = await store.read_log(offset, end=end, max_bytes=1 << 20)
        for d in dispatchers:
            reached = d.dispatched_offset()
            if reached < next_offset:
                d.dispatch([r for r in records if r.physical_offset >= reached], next_offset)
        offset = next_offset


def make_config(source: str = "<test>", **tables: Any) -> Config:
    """A :class:`Config` from python dicts, as if read from TOML (``broker={...}, x={...}``)."""
    return config_from_tables({k: dict(v) for k, v in tables.items()}, source=source)


def make_context(config: Config | None = None, *, plugins: tuple[str, ...] = ()) -> BrokerContext:
    """A context for calling hookimpls directly in unit tests."""
    config = config or make_config(broker={"plugins": list(plugins)})
    host = PluginHost.load(config.broker.plugins)
    return BrokerContext.assemble(config, host)
