"""An in-process NameServer + broker on store_mmap with the transaction plugin, over real TCP,
with check-back timings short enough for tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from tests.network.conftest import Cluster, cluster_factory, pulled  # noqa: F401
from tests.support import until as until  # re-exported for this package's tests
from wire import record

FAST_CHECKS = {"check_interval": "300ms", "timeout": "200ms", "op_batch_interval": "100ms"}


@pytest.fixture
def tx_cluster(cluster_factory) -> Callable[..., Any]:  # noqa: F811
    """``async with tx_cluster(**transaction_table) as cluster``."""

    @asynccontextmanager
    async def factory(*, flush: str = "async", **transaction: Any) -> AsyncIterator[Cluster]:
        plugins = ["transaction", "retry_dlq"] + (["flush_sync"] if flush == "sync" else [])
        async with cluster_factory(
            store="mmap",
            plugins=plugins,
            broker={"flush": flush},
            transaction={**FAST_CHECKS, **transaction},
        ) as cluster:
            yield cluster

    return factory


async def stored(cluster: Cluster, topic: str, queue_id: int = 0) -> list[record.StoredMessage]:
    """A system topic's queue as the store holds it (clients may not pull system topics)."""
    await cluster.broker.wait_dispatched()
    store = cluster.broker.store
    entries = store.lookup(topic, queue_id, 0, 100_000)
    return [record.decode_record(raw) for raw in await store.read_records(entries)]


async def visible(cluster: Cluster, topic: str, queues: int = 4) -> list[record.StoredMessage]:
    out = []
    for queue in range(queues):
        out += await pulled(cluster, topic, queue)
    return out
