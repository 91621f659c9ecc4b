"""A real broker and NameServer inside the test process, on free loopback ports: the kernel and
the plugins a deployment lists, in a temporary data directory, reached over TCP like any other.

Two ways to host one:

* :func:`open_broker`, an async context manager for trio code (the broker runs in the caller's
  event loop, so a plugin's test can look at ``broker.ctx`` between requests);
* :class:`BrokerThread`, which runs it in a thread with its own event loop, for synchronous
  tests (the official 4.x client, a web framework's test client) and trio tests alike; it can
  be stopped, crashed (no clean shutdown: the next start recovers as after ``kill -9``) and
  restarted on the same data directory and ports.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from kernel import Broker
from kernel.testing import make_config

BASE_PLUGINS = ("store_mmap", "flush_async", "remoting", "namesrv", "retry_dlq")
"""What every embedded broker loads: the mmap store, async flush, the broker's network service,
a NameServer and retries (a broker as ``trocket up`` runs it, minus the operator extras)."""
TEST_FILE_SIZE = "16MiB"
"""Commit-log files of an embedded broker: RocketMQ's 1 GiB is allocated up front, and a suite
of brokers at 1 GiB each fills a disk."""


_port_cursor = itertools.count(random.randrange(1 << 16))
"""Where :func:`free_port` looks next in its slice; a random start so that two processes
sharing a slice (a test's own subprocess) do not walk it in step."""


def free_port() -> int:
    """A TCP port free now on every address, below the kernel's ephemeral range.

    Why not the port the kernel gives a socket bound to port 0: that one comes from the
    ephemeral range, which every outgoing connection of the machine draws from too, so between
    this call and the server's bind another process's connection could take it (a suite
    running brokers and clients in parallel met it: "Address already in use"). A port below the
    range is never handed out that way; it is checked free on the wildcard address.

    Why a slice per pytest-xdist worker, walked in order: a port is checked free here but bound
    only when the server starts, seconds later for a broker process. Two workers drawing at
    random from one range met in that gap (CI: a master's port taken by the other worker's
    broker); with disjoint slices no other worker can draw it, and walking the slice in order
    means this process hands a port out again only after the whole slice."""
    low = _ephemeral_low()
    if low is not None:
        spare = _worker_slice(range(max(1024, low - 12_000), low))
        for _ in range(64):
            port = spare[next(_port_cursor) % len(spare)]
            with socket.socket() as sock:
                try:
                    sock.bind(("0.0.0.0", port))
                except OSError:
                    continue
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _worker_slice(ports: range) -> range:
    """This pytest-xdist worker's share of ``ports`` (all of them outside xdist)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    try:
        index = int(worker.removeprefix("gw"))
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    except ValueError:
        return ports
    size = len(ports) // count if count > 0 else 0
    if not 0 <= index < count or size == 0:
        return ports
    return ports[index * size : (index + 1) * size]


def _ephemeral_low() -> int | None:
    """The first port of the kernel's ephemeral range (Linux), None when unknown."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return low if low > 2048 else None


@attrs.frozen
class BrokerSettings:
    """What an embedded broker runs: the plugins beyond :data:`BASE_PLUGINS` and the config
    tables (``{"broker": {...}, "retry_dlq": {...}, "my_plugin": {...}}``), as a config file
    would give them."""

    plugins: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    tables: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    namesrv: bool = True
    """Host a NameServer in the same broker (``roles = ["broker", "namesrv"]``); without it the
    broker registers with ``namesrv_addr`` (another embedded broker's NameServer)."""
    namesrv_addr: str | None = None


@attrs.define(eq=False)
class EmbeddedBroker:
    """A running embedded broker: where clients reach it, and the broker itself."""

    broker: Broker
    namesrv_addr: str
    broker_addr: str
    data_dir: Path

    @property
    def broker_name(self) -> str:
        return self.broker.config.broker.broker_name


@attrs.frozen
class _Ports:
    broker: int
    namesrv: int


def _config(data_dir: Path, settings: BrokerSettings, ports: _Ports) -> Any:
    tables = {name: dict(values) for name, values in settings.tables.items()}
    broker_table = tables.pop("broker", {})
    plugins = list(dict.fromkeys([*BASE_PLUGINS, *settings.plugins, *broker_table.pop("plugins", [])]))
    if not settings.namesrv:
        plugins.remove("namesrv")
    namesrv_addr = settings.namesrv_addr or f"127.0.0.1:{ports.namesrv}"
    tables["store_mmap"] = {"commit_log_file_size": TEST_FILE_SIZE, **tables.get("store_mmap", {})}
    if settings.namesrv:
        tables["namesrv"] = {"listen_port": ports.namesrv, **tables.get("namesrv", {})}
    return make_config(
        broker={
            "roles": ["broker", "namesrv"] if settings.namesrv else ["broker"],
            "plugins": plugins,
            "data_dir": str(data_dir),
            "listen_port": ports.broker,
            "namesrv_addr": [namesrv_addr],
            "graceful_timeout": "5s",
            **broker_table,
        },
        **tables,
    )


@asynccontextmanager
async def open_broker(
    data_dir: Path,
    settings: BrokerSettings | None = None,
    *,
    plugin_objects: tuple[tuple[str, object], ...] = (),
    _ports: _Ports | None = None,
) -> AsyncIterator[EmbeddedBroker]:
    """Run a broker (and its NameServer) in this event loop until the block ends, then stop it
    cleanly. ``plugin_objects``: (name, module or object) pairs registered besides the
    configured plugins, for a plugin under test that is not installed.

    :raises kernel.errors.ConfigError: a table or key the plugins do not accept.
    """
    settings = settings or BrokerSettings()
    ports = _ports or _Ports(free_port(), free_port())
    broker = Broker.assemble(_config(data_dir, settings, ports), plugin_objects=plugin_objects)
    namesrv_addr = settings.namesrv_addr or f"127.0.0.1:{ports.namesrv}"
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        try:
            yield EmbeddedBroker(broker, namesrv_addr, f"127.0.0.1:{ports.broker}", data_dir)
        finally:
            broker.request_stop("test finished")
            await broker.wait_stopped()


class BrokerThread:
    """An embedded broker in a thread of its own (see the module docstring)."""

    def __init__(
        self,
        data_dir: Path,
        settings: BrokerSettings | None = None,
        *,
        plugin_objects: tuple[tuple[str, object], ...] = (),
    ) -> None:
        self.data_dir = data_dir
        self.settings = settings or BrokerSettings()
        self.plugin_objects = plugin_objects
        self._ports = _Ports(free_port(), free_port())
        self._thread: threading.Thread | None = None
        self._running: EmbeddedBroker | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def running(self) -> EmbeddedBroker:
        """The running broker (:class:`RuntimeError` when it is not running)."""
        if self._running is None:
            raise RuntimeError("the embedded broker is not running; start() it first")
        return self._running

    @property
    def namesrv_addr(self) -> str:
        return self.settings.namesrv_addr or f"127.0.0.1:{self._ports.namesrv}"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self._ports.broker}"

    def start(self, timeout: float = 30.0) -> EmbeddedBroker:
        """Start the broker and wait until it serves.

        :raises RuntimeError: it is running already, or did not start in ``timeout`` seconds.
        :raises Exception: what the broker raised while starting (a bad config, a port in use).
        """
        if self._thread is not None:
            raise RuntimeError("the embedded broker is running already")
        self._ready.clear()
        self._error = None
        self._thread = threading.Thread(
            target=self._host, name=f"trocket-broker-{self._ports.broker}", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError(f"the embedded broker did not start within {timeout}s")
        if self._error is not None:
            self._thread.join()
            self._thread = None
            raise self._error
        return self.running

    def stop(self) -> None:
        """A clean stop (what SIGTERM does): flushed, checkpointed, the abort marker removed."""
        self._end(clean=True)

    def crash(self) -> None:
        """Stop without a clean shutdown: nothing is flushed or checkpointed and the abort
        marker stays, so the next start recovers as after ``kill -9`` (the page cache, like the
        operating system's after a killed process, keeps what was written)."""
        self._end(clean=False)

    def restart(self, *, crash: bool = False) -> EmbeddedBroker:
        """Stop (or :meth:`crash`) and start again on the same data directory and ports."""
        self._end(clean=not crash)
        return self.start()

    def _end(self, *, clean: bool) -> None:
        thread, token = self._thread, self._token
        if thread is None or token is None:
            return
        broker, scope = self.running.broker, self._scope
        if clean:
            trio.from_thread.run_sync(broker.request_stop, "test finished", trio_token=token)
        elif scope is not None:
            trio.from_thread.run_sync(scope.cancel, trio_token=token)
        thread.join()
        self._thread = self._token = self._scope = self._running = None

    def _host(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as error:  # noqa: BLE001 - handed to the thread that called start()
            if not self._ready.is_set():
                self._error = error
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            self._scope = scope
            async with open_broker(
                self.data_dir, self.settings, plugin_objects=self.plugin_objects, _ports=self._ports
            ) as running:
                self._running = running
                self._ready.set()
                await running.broker.wait_stopped()
