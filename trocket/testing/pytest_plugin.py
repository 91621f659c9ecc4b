"""The ``trocket`` pytest plugin (entry point ``pytest11``): a real broker for anyone's tests.

Fixtures (docs/testing.md):

* ``trocket_broker``: a broker and NameServer on free loopback ports, in a thread, for plain
  and trio tests alike; its ``namesrv_addr`` is what clients are given, ``restart(crash=True)``
  recovers it as after ``kill -9``.
* ``trocket_cluster``: a SYNC_MASTER and its slave (plugin ``ha``) sharing a NameServer.
* ``trocket_producer`` and ``trocket_consumer`` (trio tests, with pytest-trio): a started SDK
  producer, and a helper that reads what a topic holds.

Choose plugins and config with the marker, per test or per module::

    @pytest.mark.trocket(plugins=["acme_guard"], config={"acme_guard": {"deny": ["Secret"]}})
    def test_refuses(trocket_broker): ...

or by overriding the ``trocket_settings`` fixture.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import attrs
import pytest
import trio

from trocket.testing.embedded import BrokerSettings, BrokerThread, free_port


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "trocket(plugins=[...], config={table: {key: value}}): the plugins and config tables of "
        "the test's embedded broker (trocket_broker, trocket_cluster)",
    )


@pytest.fixture
def trocket_settings(request: pytest.FixtureRequest) -> BrokerSettings:
    """The embedded broker's plugins and tables: from the closest ``trocket`` marker, else the
    defaults. Override this fixture to set them for a whole module or package."""
    marker = request.node.get_closest_marker("trocket")
    if marker is None:
        return BrokerSettings()
    unknown = set(marker.kwargs) - {"plugins", "config"}
    if marker.args or unknown:
        raise pytest.UsageError(
            f"@pytest.mark.trocket takes plugins=[...] and config={{...}} only, got "
            f"{list(marker.args) + sorted(unknown)}"
        )
    return BrokerSettings(tuple(marker.kwargs.get("plugins", ())), dict(marker.kwargs.get("config", {})))


@pytest.fixture
def trocket_broker(
    tmp_path_factory: pytest.TempPathFactory, trocket_settings: BrokerSettings
) -> Iterator[BrokerThread]:
    """A started embedded broker (stopped cleanly after the test)."""
    host = BrokerThread(tmp_path_factory.mktemp("trocket"), trocket_settings)
    host.start()
    try:
        yield host
    finally:
        host.stop()


@attrs.frozen
class Cluster:
    """A master and its slave, both :class:`BrokerThread`; clients use ``namesrv_addr``."""

    master: BrokerThread
    slave: BrokerThread

    @property
    def namesrv_addr(self) -> str:
        return self.master.namesrv_addr


@pytest.fixture
def trocket_cluster(
    tmp_path_factory: pytest.TempPathFactory, trocket_settings: BrokerSettings
) -> Iterator[Cluster]:
    """A SYNC_MASTER (hosting the NameServer) and a SLAVE replicating it; a send is answered
    once the slave holds it."""
    root = tmp_path_factory.mktemp("trocket-cluster")
    ha_port = free_port()
    tables = {name: dict(values) for name, values in trocket_settings.tables.items()}
    plugins = (*trocket_settings.plugins, "ha")

    def member(role: str, broker_id: int, **more: Any) -> BrokerSettings:
        return BrokerSettings(
            plugins,
            {
                **tables,
                "broker": {
                    **tables.get("broker", {}),
                    "replicator": "ha",
                    "broker_role": role,
                    "broker_id": broker_id,
                },
                "ha": {
                    "heartbeat_interval": "1s",
                    "reconnect_interval": "200ms",
                    **tables.get("ha", {}),
                    **more,
                },
            },
            **({} if broker_id == 0 else {"namesrv": False}),
        )

    master = BrokerThread(root / "master", member("SYNC_MASTER", 0, listen_port=ha_port))
    master.start()
    slave_settings = attrs.evolve(
        member("SLAVE", 1, listen_port=free_port()), namesrv_addr=master.namesrv_addr
    )
    slave = BrokerThread(root / "slave", slave_settings)
    try:
        slave.start()
        yield Cluster(master, slave)
    finally:
        slave.stop()
        master.stop()


@pytest.fixture
async def trocket_producer(
    trocket_broker: BrokerThread, request: pytest.FixtureRequest
) -> AsyncIterator[Any]:
    """A started :class:`trocket.Producer` of group ``PG_<test name>`` (trio tests)."""
    from trocket import Producer

    async with Producer(f"PG_{_safe(request.node.name)}", trocket_broker.namesrv_addr) as producer:
        yield producer


@attrs.define
class TopicReader:
    """Reads what a topic holds, as a consumer group of its own (``CG_<test name>``), from the
    first message on."""

    namesrv_addr: str
    group: str

    async def receive(self, topic: str, count: int, timeout: float = 30.0) -> list[Any]:
        """The first ``count`` messages of ``topic`` in the order they arrive.

        :raises trio.TooSlowError: fewer arrived within ``timeout`` seconds.
        """
        from trocket import ConsumeFromWhere, LitePullConsumer

        received: list[Any] = []
        consumer = LitePullConsumer(
            self.group, self.namesrv_addr, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
        )
        consumer.subscribe(topic)
        async with consumer:
            with trio.fail_after(timeout):
                while len(received) < count:
                    received += await consumer.poll(timeout=1.0)
        return received[:count]


@pytest.fixture
def trocket_consumer(trocket_broker: BrokerThread, request: pytest.FixtureRequest) -> TopicReader:
    """A :class:`TopicReader` for the test's broker (``await trocket_consumer.receive(topic, n)``)."""
    return TopicReader(trocket_broker.namesrv_addr, f"CG_{_safe(request.node.name)}")


def _safe(name: str) -> str:
    """A test name as a group name (RocketMQ allows letters, digits, ``-``, ``_``, ``%`` and ``|``)."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:100]
