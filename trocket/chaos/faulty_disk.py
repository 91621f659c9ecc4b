"""faulty_disk: a test plugin that makes a store's fsync slow or fail on demand, for fault runs.

List ``"trocket.chaos.faulty_disk"`` beside the store's own plugin and select its store with
``[broker] store = "faulty_mmap"``: it opens the ``"mmap"`` store as usual and hands the
broker the same object behind a wrapper whose ``flush`` first reads a control file next to the
data directory (``<data_dir>.disk-fault``, re-read when it changes):

* missing or empty: flushes as the store does;
* ``delay SECONDS``: every flush waits that long before it starts (a disk whose cache
  flushes take seconds, beyond ``syncFlushTimeout``);
* ``fail``: every flush raises :class:`~kernel.errors.FlushError` (the device reports an I/O
  error on fsync); the flushed position does not move.

Everything else goes to the real store unchanged, so what the broker stores, serves and
replicates is the mmap store's own behaviour.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from kernel import StoreProvider, hookimpl
from kernel.context import BrokerContext
from kernel.errors import ConfigError, FlushError
from kernel.protocols import MessageStore

BASE_STORE = "mmap"


@attrs.frozen
class DiskFault:
    delay: float = 0.0
    fail: bool = False

    @classmethod
    def parse(cls, text: str, path: Path) -> DiskFault:
        words = text.split()
        if not words:
            return cls()
        if words == ["fail"]:
            return cls(fail=True)
        if len(words) == 2 and words[0] == "delay":
            try:
                return cls(delay=float(words[1]))
            except ValueError:
                pass
        raise ConfigError(str(path), None, f"expected 'delay SECONDS' or 'fail', got {text.strip()!r}")


def control_file(data_dir: Path) -> Path:
    return data_dir.parent / f"{data_dir.name}.disk-fault"


class FaultyStore:
    """The real store with a ``flush`` that obeys the control file."""

    def __init__(self, store: MessageStore, control: Path) -> None:
        object.__setattr__(self, "_store", store)
        object.__setattr__(self, "_control", control)
        object.__setattr__(self, "_seen", (None, DiskFault()))
        object.__setattr__(self, "injected", 0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._store, name, value)

    def fault(self) -> DiskFault:
        try:
            stamp: tuple[int, int] | None = (
                os.stat(self._control).st_mtime_ns,
                os.stat(self._control).st_size,
            )
        except FileNotFoundError:
            stamp = None
        if stamp != self._seen[0]:
            fault = DiskFault.parse(self._control.read_text(), self._control) if stamp else DiskFault()
            object.__setattr__(self, "_seen", (stamp, fault))
        return self._seen[1]  # type: ignore[no-any-return]

    async def flush(self, **options: Any) -> int:
        fault = self.fault()
        if fault.delay or fault.fail:
            object.__setattr__(self, "injected", self.injected + 1)
        if fault.delay:
            await trio.sleep(fault.delay)
        if fault.fail:
            raise FlushError(f"injected fsync failure ({self._control})")
        return await self._store.flush(**options)  # type: ignore[no-any-return]


@asynccontextmanager
async def _open(ctx: BrokerContext) -> AsyncIterator[MessageStore]:
    providers = [p for group in ctx.hook.trocket_register_stores() for p in group if p.name == BASE_STORE]
    if not providers:
        raise ConfigError(
            "[broker] plugins",
            None,
            f"faulty_disk wraps the {BASE_STORE!r} store: list its plugin (store_mmap) too",
        )
    async with providers[0].open(ctx) as store:
        yield FaultyStore(store, control_file(Path(ctx.broker.data_dir)))  # type: ignore[misc]


@hookimpl
def trocket_register_stores() -> list[StoreProvider]:
    return [
        StoreProvider("faulty_mmap", _open, "the mmap store with fsync made slow or failing (fault runs)")
    ]
