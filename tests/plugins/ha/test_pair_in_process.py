"""A master and a slave in one trio run, over real loopback TCP: the slave's log is the
master's, byte for byte, and a SYNC_MASTER acknowledges only what a slave holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from kernel.model import Message, MessageBatch, PutStatus
from tests.network.conftest import free_port

FILE_SIZE = 64 * 1024


def member(
    broker_factory, data_dir: Path, role: str, broker_id: int, broker: dict[str, Any] | None = None, **ha: Any
):
    """One broker of the pair, through the shared fixture (its own data dir, the ha plugin;
    ``broker``: more ``[broker]`` keys)."""
    return broker_factory(
        plugins=["store_mmap", "ha"],
        store="mmap",
        broker={
            "data_dir": str(data_dir),
            "broker_role": role,
            "broker_id": broker_id,
            "replicator": "ha",
            **(broker or {}),
        },
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
        # Connected is not enough: a SYNC_MASTER counts a slave once it reported what it holds.
        await _wait_until(lambda: any(s.in_sync for s in master.replicator.statistics().slaves))
        for i in range(300):
            batch = [
                Message("T", f"body-{i}-{j}".encode() * (1 + (i + j) % 7), queue_id=j % 3) for j in range(5)
            ]
            result = await master.put(MessageBatch(batch))
            assert result.status is PutStatus.PUT_OK, result.remark
        end = master.store.positions.wrote.value
        assert end > 2 * FILE_SIZE  # several file rolls
        waited = master.replicator.statistics().replication_latency
        assert waited.count == 300 and waited.total_seconds > 0  # each put waited for the slave once
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


async def test_replication_over_tls_and_a_plain_slave_refused_by_an_enforcing_master(
    broker_factory, tmp_path, pki
):
    ha_port = free_port()
    enforcing = {
        "tls_server_mode": "enforcing",
        "tls_server_cert_path": str(pki["server"]),
        "tls_server_key_path": str(pki["server"]),
    }
    secure_slave = {
        "tls_enable": True,
        "tls_client_auth_server": True,
        "tls_client_trust_cert_path": str(pki["ca"]),
    }
    master_address = f"127.0.0.1:{ha_port}"
    async with member(
        broker_factory, tmp_path / "m", "SYNC_MASTER", 0, enforcing, listen_port=ha_port
    ) as master:
        async with member(
            broker_factory, tmp_path / "plain", "SLAVE", 1, master_address=master_address
        ) as plain:
            await _wait_until(
                lambda: plain.replicator.client.connects >= 1 and plain.replicator.client.last_error
            )
            assert not master.replicator.statistics().slaves
        async with member(
            broker_factory, tmp_path / "s", "SLAVE", 1, secure_slave, master_address=master_address
        ) as slave:
            await _wait_until(lambda: any(s.in_sync for s in master.replicator.statistics().slaves))
            for i in range(20):
                result = await master.put(MessageBatch([Message("T", f"secret-{i}".encode())]))
                assert result.status is PutStatus.PUT_OK, result.remark
            end = master.store.positions.wrote.value
            await _wait_until(lambda: slave.store.positions.wrote.value == end)
    assert _log_bytes(tmp_path / "s")[:end] == _log_bytes(tmp_path / "m")[:end]
