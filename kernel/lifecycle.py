"""Process-level lifecycle helpers: the abort marker and signal-driven graceful shutdown.

The abort marker is RocketMQ's crash detector: created once the store has recovered, removed
only after a clean stop (everything flushed and dispatched). Finding it at start means the
previous run died, and the store runs abnormal recovery.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import trio

if TYPE_CHECKING:
    from kernel.broker import Broker

log = logging.getLogger(__name__)


@attrs.define
class AbortMarker:
    """The ``abort`` file in a broker's data directory."""

    path: Path

    def exists(self) -> bool:
        return self.path.exists()

    def create(self) -> None:
        """Write the marker durably (file and directory entry fsynced)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        _fsync_dir(self.path.parent)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        _fsync_dir(self.path.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def run_until_signalled(
    brokers: Sequence[Broker],
    *,
    signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM),
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``brokers`` until SIGINT/SIGTERM; the first signal stops them gracefully, a second
    one exits at once (leaving the abort marker, so the next start recovers abnormally)."""
    with trio.open_signal_receiver(*signals) as receiver:
        async with trio.open_nursery() as nursery:
            for broker in brokers:
                await nursery.start(broker.run)
            task_status.started()

            async def watch_signals() -> None:
                count = 0
                async for signum in receiver:
                    count += 1
                    name = signal.Signals(signum).name
                    if count == 1:
                        log.info("%s received: stopping gracefully (again to force)", name)
                        for broker in brokers:
                            broker.request_stop(name)
                    else:
                        log.warning("%s received again: exiting now", name)
                        os._exit(128 + signum)

            nursery.start_soon(watch_signals)
            async with trio.open_nursery() as waiters:
                for broker in brokers:
                    waiters.start_soon(broker.wait_stopped)
            nursery.cancel_scope.cancel()
