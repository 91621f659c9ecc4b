"""A NameServer + broker in the test process on free loopback ports, and a remoting client."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from kernel import Broker
from kernel.testing import make_config
from plugins.remoting import NETWORK, BrokerNetwork
from tests.network.wire import pull_request
from trocket.testing.embedded import free_port
from wire import record
from wire.remoting import RemotingClient, RemotingCommand

MEMORY_STORE = "kernel.testing.memory_store"


@attrs.define
class Cluster:
    broker: Broker
    client: RemotingClient
    namesrv_addr: str
    broker_addr: str

    @property
    def network(self) -> BrokerNetwork:
        return self.broker.ctx.stash[NETWORK]

    async def call(
        self, code: int, ext: dict[str, Any] | None = None, body: bytes = b"", *, timeout: float = 5
    ):
        return await self.client.invoke(self.broker_addr, RemotingCommand.request(code, ext, body), timeout)

    async def call_raw(self, request: RemotingCommand, *, timeout: float = 5):
        return await self.client.invoke(self.broker_addr, request, timeout)

    async def call_namesrv(self, code: int, ext: dict[str, Any] | None = None, body: bytes = b""):
        return await self.client.invoke(self.namesrv_addr, RemotingCommand.request(code, ext, body), 5)


ClusterFactory = Callable[..., Any]


async def pulled(cluster: Cluster, topic: str, queue_id: int) -> list[record.StoredMessage]:
    """Everything in the queue now, pulled as a consumer would (a pull returns at most 32)."""
    await cluster.broker.wait_dispatched()
    out: list[record.StoredMessage] = []
    while True:
        response = await cluster.call_raw(pull_request(topic, queue_id, len(out), max_msgs=32))
        if response.code != 0:
            return out
        out += record.decode_records(response.body)


@pytest.fixture
def cluster_factory(tmp_path: Path) -> ClusterFactory:
    """``async with cluster_factory(store="memory", plugins=[...], **tables) as cluster``
    (``client_tls``: the context ``cluster.client`` connects with)."""

    @asynccontextmanager
    async def factory(
        *,
        store: str = "memory",
        plugins: list[str] | None = None,
        broker: dict[str, Any] | None = None,
        plugin_objects: list[tuple[str, object]] | None = None,
        data_dir: Path | None = None,
        extra_namesrvs: list[str] | None = None,
        client_tls: ssl.SSLContext | None = None,
        **tables: dict[str, Any],
    ) -> AsyncIterator[Cluster]:
        namesrv_port, broker_port = free_port(), free_port()
        if store == "mmap":
            # 16 MiB files instead of the 1 GiB default: every file is really allocated, and a
            # suite of brokers at 1 GiB each fills a CI disk past the store's write limit.
            tables["store_mmap"] = {"commit_log_file_size": "16MiB", **tables.get("store_mmap", {})}
        names = ["store_mmap" if store == "mmap" else MEMORY_STORE, "flush_async", "remoting", "namesrv"]
        config = make_config(
            broker={
                "roles": ["broker", "namesrv"],
                "plugins": names + list(plugins or []),
                "store": store,
                "flush": "async",
                "data_dir": str(data_dir or tmp_path / "data"),
                "listen_port": broker_port,
                "namesrv_addr": [f"127.0.0.1:{namesrv_port}", *(extra_namesrvs or [])],
                "graceful_timeout": "5s",
                **(broker or {}),
            },
            namesrv={"listen_port": namesrv_port, **tables.pop("namesrv", {})},
            **tables,
        )
        instance = Broker.assemble(config, plugin_objects=plugin_objects or [])
        async with trio.open_nursery() as nursery:
            await nursery.start(instance.run)
            try:
                async with RemotingClient.open(tls=client_tls) as client:
                    yield Cluster(instance, client, f"127.0.0.1:{namesrv_port}", f"127.0.0.1:{broker_port}")
            finally:
                instance.request_stop("test finished")
                await instance.wait_stopped()

    return factory
