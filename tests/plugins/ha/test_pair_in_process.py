"""A master and a slave in one trio run, over real loopback TCP: the slave's log is the
master's, byte for byte, and a SYNC_MASTER acknowledges only what a slave holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from kernel.model import Message, MessageBatch, PutStatus
from tests.network.conftest import free_port

FILE_SIZE = 64 * 1024


def member(broker_factory, data_dir: Path, role: str, broker_id: int, **ha: Any):
    """One broker of the pair, through the shared fixture (its own data dir, the ha plugin)."""
    return broker_factory(
        plugins=["store_mmap", "ha"],
        store="mmap",
        broker={"data_dir": str(data_dir), "broker_role": role, "broker_id": broker_id, "replicator": "ha"},
        store_mmap={"commit_log_file_size": FILE_SIZE},
        ha={"heartbeat_interval": "200ms", "reconnect_interval": "100ms", **ha},
    )


def _log_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((root / "commitlog").iterdir()))


async def _wait_until(condition, timeout: float = 10) -> None:
    """Poll a figure of a running broker (there is no event for "the slave caught up")."""
    with trio.fail_after(timeout):
        while not condition():  # noqa: ASYNC110
            await trio.sleep(0.02)


async def test_slave_log_is_byte_identical_across_file_rolls(broker_factory, tmp_path):
    ha_port = free_port()
    async with (
        member(broker_factory, tmp_path / "m", "SYNC_MASTER", 0, listen_port=ha_port) as master,
        member(broker_factory, tmp_path / "s", "SLAVE", 1, master_address=f"127.0.0.1:{ha_port}") as slave,
    ):
        await _wait_until(lambda: master.replicator.statistics().slaves)
        for i in range(300):
            batch = [
                Message("T", f"body-{i}-{j}".encode() * (1 + (i + j) % 7), queue_id=j % 3) for j in range(5)
            ]
            result = await master.put(MessageBatch(batch))
            assert result.status is PutStatus.PUT_OK, result.remark
        end = master.store.positions.wrote.value
        assert end > 2 * FILE_SIZE  # several file rolls
        await _wait_until(lambda: slave.store.positions.wrote.value == end)
        await slave.wait_dispatched()
        await master.wait_dispatched()
        for queue in range(3):
            assert slave.store.max_queue_offset("T", queue) == master.store.max_queue_offset("T", queue)
        refused = await slave.put(MessageBatch([Message("T", b"no")]))
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE and "SLAVE" in refused.remark
    assert _log_bytes(tmp_path / "s")[:end] == _log_bytes(tmp_path / "m")[:end]
    names = sorted(p.name for p in (tmp_path / "s" / "commitlog").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "m" / "commitlog").iterdir())[: len(names)]


async def test_sync_master_without_a_slave_answers_slave_not_available(broker_factory, tmp_path):
    async with member(broker_factory, tmp_path / "m", "SYNC_MASTER", 0, listen_port=0) as master:
        result = await master.put(MessageBatch([Message("T", b"alone")]))
        assert result.status is PutStatus.SLAVE_NOT_AVAILABLE
        assert result.append is not None  # stored on the master all the same
