"""Shared fixtures: every test builds its own brokers (no module-global state anywhere)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from kernel import Broker
from kernel.testing import make_config

TESTS_DIR = Path(__file__).parent
# The worked third-party plugin lives in tests/example_plugin and is imported by dotted path.
sys.path.insert(0, str(TESTS_DIR / "example_plugin"))

MEMORY_STORE = "kernel.testing.memory_store"

BrokerFactory = Callable[..., Any]


@pytest.fixture
def broker_factory(tmp_path: Path) -> BrokerFactory:
    """``async with broker_factory(plugins=[...], flush="sync", **tables) as broker``: a running
    broker on the in-memory store with data under ``tmp_path``; stopped gracefully on exit."""

    @asynccontextmanager
    async def factory(
        *,
        plugins: list[str] | None = None,
        store: str = "memory",
        flush: str = "async",
        broker: dict[str, Any] | None = None,
        plugin_objects: list[tuple[str, object]] | None = None,
        **tables: dict[str, Any],
    ) -> AsyncIterator[Broker]:
        names = [MEMORY_STORE, "flush_async", "flush_sync", *(plugins or [])]
        broker_table = {
            "plugins": names,
            "store": store,
            "flush": flush,
            "data_dir": str(tmp_path / "data"),
            "graceful_timeout": "5s",
            **(broker or {}),
        }
        config = make_config(broker=broker_table, **tables)
        instance = Broker.assemble(config, plugin_objects=plugin_objects or [])
        async with trio.open_nursery() as nursery:
            await nursery.start(instance.run)
            try:
                yield instance
            finally:
                instance.request_stop("test finished")
                await instance.wait_stopped()

    return factory
