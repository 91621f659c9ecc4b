"""Shared fixtures: every test builds its own brokers (no module-global state anywhere)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from kernel import Broker
from kernel.testing import make_config
from plugins.store_mmap.retention import disk_used_ratio

TESTS_DIR = Path(__file__).parent
# The worked third-party plugin lives in tests/example_plugin and is imported by dotted path.
sys.path.insert(0, str(TESTS_DIR / "example_plugin"))

MEMORY_STORE = "kernel.testing.memory_store"
DISK_REFUSAL_PERCENT = 90
"""The store refuses writes at ``disk_space_warning_level_ratio`` (RocketMQ's 90 %)."""
DISK_MARGIN_PERCENT = 3
"""Room the suite needs below that limit: brokers allocate their files for real."""

BrokerFactory = Callable[..., Any]


def pytest_sessionstart(session: pytest.Session) -> None:
    """A disk near the store's write limit makes brokers refuse every put, and then tests fail
    far from the cause (a writer with no acks, a replica that never catches up); say so first."""
    temp_root = Path(tempfile.gettempdir())
    percent = disk_used_ratio(temp_root) * 100
    if percent >= DISK_REFUSAL_PERCENT - DISK_MARGIN_PERCENT:
        pytest.exit(
            f"the disk holding {temp_root} is {percent:.1f}% used; brokers refuse writes at "
            f"{DISK_REFUSAL_PERCENT}% (disk_space_warning_level_ratio), so the suite cannot run. "
            "Free some space (old pytest-of-* directories under the temp dir are the usual cause).",
            returncode=4,
        )


SHARED_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Fault and failover runs: many processes each, with election and lease timeouts. Two of
    # them at once on CI's two cores would test the machine's load, not the product.
    ("clusters", ("tests/chaos/", "tests/plugins/controller/", "tests/plugins/ha/",
                  "tests/interop/test_official_client_failover.py")),
    # ``trocket up`` with its default ports (NameServer 9876, broker 10911, gRPC 8081, etcd 2379).
    ("default_ports", ("tests/cli/test_up.py", "tests/cli/test_up_auto.py", "tests/console/")),
    # One local Spark (a JVM per worker that runs these) is enough.
    ("spark", ("tests/spark/",)),
)  # fmt: skip
"""Tests that must not run beside each other under ``pytest -n`` (pytest-xdist): each group
runs on one worker, in order. Every other module is a group of its own, so a module's fixtures
are built once."""


def xdist_group_of(nodeid: str) -> str:
    """The group a test runs in under pytest-xdist: its shared group, or its module."""
    path = nodeid.split("::", 1)[0]
    for group, prefixes in SHARED_GROUPS:
        if path.startswith(prefixes):
            return group
    return path


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity, lowered by a cgroup CPU quota (a
    container limited to two CPUs on a larger host sees every host CPU in its affinity)."""
    cores = len(os.sched_getaffinity(0))
    for quota_file, period_file in (
        ("/sys/fs/cgroup/cpu.max", None),  # cgroup v2: "QUOTA PERIOD" or "max PERIOD"
        ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us"),  # v1
    ):
        try:
            fields = Path(quota_file).read_text().split()
            if period_file is not None:
                fields.append(Path(period_file).read_text().strip())
        except OSError:
            continue
        if len(fields) == 2 and fields[0] not in ("max", "-1"):
            cores = min(cores, max(1, int(fields[0]) // int(fields[1])))
        break
    return cores


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: one worker per usable core (:func:`usable_cores`); ``addopts`` caps it at
    four. pytest-xdist's own count asks for physical cores (psutil, when installed), which a
    VM's two hyperthreads can report as one. ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still wins."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist's own hook reads it
    return usable_cores()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Workers take whole groups (:func:`xdist_group_of`) in collection order. pytest-xdist's
    own ``--dist loadgroup`` marks node ids, which pytest 9.2's node ids no longer carry."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group_of(nodeid)

    return GroupScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, the shared groups first: they are the longest, and one started last
    would be the suite's tail on one worker while the other waits."""
    if not hasattr(config, "workerinput"):
        return
    shared = [group for group, _ in SHARED_GROUPS]

    def rank(item: pytest.Item) -> int:
        group = xdist_group_of(item.nodeid)
        return shared.index(group) if group in shared else len(shared)

    items.sort(key=rank)


def pytest_report_header(config: pytest.Config) -> str:
    temp_root = Path(tempfile.gettempdir())
    return f"disk holding {temp_root}: {disk_used_ratio(temp_root) * 100:.1f}% used"


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


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 signed by it, a client certificate, and a
    second CA nobody uses (to show verification fails against the wrong one)."""
    import trustme  # a test dependency only these tests need

    ca, stranger = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client@example.com")
    paths = {name: tmp_path / f"{name}.pem" for name in ("ca", "stranger", "server", "client")}
    ca.cert_pem.write_to_path(paths["ca"])
    stranger.cert_pem.write_to_path(paths["stranger"])
    server.private_key_and_cert_chain_pem.write_to_path(paths["server"])
    client.private_key_and_cert_chain_pem.write_to_path(paths["client"])
    return paths
